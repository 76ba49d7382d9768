"""Optimizer steps over a ~10M-parameter model against torch.optim, in the same run.

The model is three float32 Linear layers (2048→2048→2048→1024, 10.5M
parameters) on cpu:0. Each timed step gets the same fixed gradients (a
``Gradients`` over the current parameter leaves, as ``backward`` would
return), so only the update is measured. ember's "step" column is the
caller's time in ``opt.step`` (it returns once the update ops are queued);
"step + sync" waits until the device has run them, the figure comparable
with torch's eager step.
"""

from __future__ import annotations

import time

import numpy as np

import ember as em
from benchmarks.common import median_seconds, ratio, table, torch
from ember import nn, optim
from ember.autodiff.engine import Gradients

SIZES = [(2048, 2048), (2048, 2048), (1024, 2048)]


def _model(device: em.Device) -> nn.Module:
    em.manual_seed(0)
    return nn.Sequential(*[nn.Linear(i, o, device=device) for o, i in SIZES])


def _ember_step(name: str, options: dict, arrays: list[np.ndarray]) -> tuple[float, float]:
    device = em.cpu(0).autodiff()
    model = _model(device)
    params = model.parameters()
    opt = getattr(optim, name)(params, **options)
    grads = [em.tensor(a, device=device.inner) for a in arrays]

    def current() -> Gradients:
        return Gradients({p.value._node: g for p, g in zip(params, grads)})

    def step_and_sync() -> None:
        opt.step(current())
        em.sync(device.inner)

    caller = []

    def step_only() -> None:
        g = current()
        start = time.perf_counter()
        opt.step(g)
        caller.append(time.perf_counter() - start)
        em.sync(device.inner)

    full = median_seconds(step_and_sync, repeats=9, warmup=3)
    median_seconds(step_only, repeats=9, warmup=0)
    return float(np.median(caller)), full


def _torch_step(name: str, options: dict, arrays: list[np.ndarray]) -> tuple[float, float]:
    """torch.optim's step (its CPU default: a loop over single-tensor updates), with
    torch's default thread count and with one thread (ember's NumPy kernels use one)."""
    torch.manual_seed(0)
    layers = [torch.nn.Linear(i, o) for o, i in SIZES]
    params = [p for layer in layers for p in layer.parameters()]
    for p, a in zip(params, arrays):
        p.grad = torch.from_numpy(a.copy())
    opt = getattr(torch.optim, name)(params, **options)
    default = median_seconds(opt.step, repeats=9, warmup=3)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        single = median_seconds(opt.step, repeats=9, warmup=1)
    finally:
        torch.set_num_threads(threads)
    return default, single


def run() -> str:
    rng = np.random.default_rng(0)
    shapes = [s for o, i in SIZES for s in ((o, i), (o,))]
    arrays = [rng.standard_normal(s, dtype=np.float32) * 1e-3 for s in shapes]
    count = sum(a.size for a in arrays)
    cases = [("Adam", {"lr": 1e-3}), ("AdamW", {"lr": 1e-3}),
             ("SGD", {"lr": 1e-2, "momentum": 0.9})]
    # torch first, then ember: interleaved, torch's OpenMP threads (which spin a
    # while after each parallel op) and ember's worker slowed each other by up
    # to 3x on a 2-core machine.
    torch_times = [_torch_step(n, o, arrays) if torch is not None else None for n, o in cases]
    rows = []
    for (name, options), torch_s in zip(cases, torch_times):
        caller, full = _ember_step(name, options, arrays)
        row = [f"{name} {options}".replace("'", ""), f"{caller * 1e3:.2f}", f"{full * 1e3:.1f}"]
        if torch_s is not None:
            row += [f"{torch_s[0] * 1e3:.1f}", ratio(full, torch_s[0]),
                    f"{torch_s[1] * 1e3:.1f}", ratio(full, torch_s[1])]
        rows.append(row)
    header = ["optimizer", "ember step ms (caller)", "ember step + sync ms"]
    if torch is not None:
        threads = torch.get_num_threads()
        header += [f"torch.optim ms ({threads} threads)", "ember/PyTorch",
                   "torch.optim ms (1 thread)", "ember/PyTorch (1 thread)"]
    return table(f"Optimizer step, {count / 1e6:.1f}M float32 parameters on cpu:0 (median ms)",
                 header, rows)


if __name__ == "__main__":
    print(run())
