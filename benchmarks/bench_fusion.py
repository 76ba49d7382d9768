"""Elementwise fusion: composite ops written from primitives, fused against unfused.

Workloads (float32): burn's ``custom_gelu`` on [32, 512, 2048], gelu written
from primitives as ``x * 0.5 * (1 + erf(x / sqrt(2)))``; softmax and
layer_norm written from primitives (max / sum / mean reductions and
elementwise ops) on [32, 512, 4096], burn's shapes.
Forward reads the result; forward+backward seeds the output with a fixed
gradient and reads every input gradient.

Columns: ember with fusion (this process: fused groups compiled to C where their
ops allow, over every core); ember fused with ``EMBER_CPU_COMPILE=0`` (blocked
NumPy kernels on one thread) and ember with ``EMBER_FUSION=0`` (child processes,
since the settings are read at import); NumPy written naively (every temporary
materialized; backward by hand, same formulas); PyTorch eager (autograd for
backward, all cores), composed from the same primitives and through its own ops
(``F.gelu``, ``torch.softmax``, ``F.layer_norm``: what a user would call). A second
table gives each workload's first step in a fresh process with an empty kernel cache
(it compiles) and with this run's cache on disk.
Targets: custom_gelu at least 3× NumPy's speed, and at least PyTorch's.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from scipy import special

import ember as em
from benchmarks.common import median_seconds, table, torch
from ember.kernels.numpy import compiled

WORKLOADS = {  # name: (shape, repeats)
    "custom_gelu": ((32, 512, 2048), 5),
    "softmax": ((32, 512, 4096), 3),
    "layer_norm": ((32, 512, 4096), 3),
}
EPS = 1e-5
_SQRT_2 = math.sqrt(2.0)


def _data(shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal(shape, dtype=np.float32),
            "g": rng.standard_normal(shape, dtype=np.float32),  # the seed of backward
            "w": rng.standard_normal(shape[-1], dtype=np.float32),
            "b": rng.standard_normal(shape[-1], dtype=np.float32)}


# ----- the workloads, once for ember and PyTorch (same operator syntax) ----------------

def _gelu(x, erf):
    return x * 0.5 * (1.0 + erf(x / _SQRT_2))


def _softmax(x, detach):
    shifted = x - detach(x.max(dim=-1, keepdim=True))  # the shift carries no gradient
    e = shifted.exp()
    return e / e.sum(dim=-1, keepdim=True)


def _layer_norm(x, w, b, rsqrt):
    centered = x - x.mean(dim=-1, keepdim=True)
    var = (centered * centered).mean(dim=-1, keepdim=True)
    return centered * rsqrt(var + EPS) * w + b


def _ember_fn(name: str):
    if name == "custom_gelu":
        return lambda x, w, b: _gelu(x, lambda t: t.erf())
    if name == "softmax":
        return lambda x, w, b: _softmax(x, lambda t: t.detach())
    return lambda x, w, b: _layer_norm(x, w, b, lambda t: t.rsqrt())


def _torch_fn(name: str):
    if name == "custom_gelu":
        return lambda x, w, b: _gelu(x, torch.erf)
    if name == "softmax":
        return lambda x, w, b: _softmax(x, lambda t: t.values.detach())  # (values, indices)
    return lambda x, w, b: _layer_norm(x, w, b, torch.rsqrt)


def _torch_builtin_fn(name: str):
    """PyTorch's own op for the workload: what a user would call instead of composing it."""
    functional = torch.nn.functional
    if name == "custom_gelu":
        return lambda x, w, b: functional.gelu(x)  # the erf form, as _gelu writes it
    if name == "softmax":
        return lambda x, w, b: torch.softmax(x, -1)
    return lambda x, w, b: functional.layer_norm(x, (x.shape[-1],), w, b, EPS)


# ----- ember ----------------------------------------------------------------------------

def ember_workload(name: str, shape: tuple[int, ...], base: em.Device, backward: bool):
    """(step, forward, device): ``step`` runs workload ``name`` on ``base`` (its autodiff
    twin with ``backward``) and reads the results; ``forward`` only builds its output."""
    data = _data(shape)
    device = base.autodiff() if backward else base
    x, g, w, b = (em.tensor(data[k], device=device) for k in ("x", "g", "w", "b"))
    fn = _ember_fn(name)
    tracked = [x] + ([w, b] if name == "layer_norm" else [])
    if backward:
        for t in tracked:
            t.require_grad()

    def step() -> None:
        y = fn(x, w, b)
        if backward:
            grads = y.backward(g)
            for t in tracked:
                t.grad(grads).numpy()
        else:
            y.numpy()

    return step, (lambda: fn(x, w, b)), device


def ember_seconds(name: str, backward: bool) -> tuple[float, int, float]:
    """Median seconds of one step, the kernels one step launches, and the seconds of the
    process's first step (which compiles what the kernel cache lacks)."""
    shape, repeats = WORKLOADS[name]
    step, _, device = ember_workload(name, shape, em.cpu(), backward)
    start = time.perf_counter()
    step()
    em.sync()
    first = time.perf_counter() - start
    before = em.stats(device).kernels_launched
    step()
    em.sync()
    kernels = em.stats(device).kernels_launched - before
    return median_seconds(step, repeats=repeats, warmup=1), kernels, first


def _ember_all() -> dict[str, list]:
    return {f"{name}/{int(backward)}": list(ember_seconds(name, backward))
            for name in WORKLOADS for backward in (False, True)}


def _ember_child(**settings: str) -> dict[str, list]:
    """The ember figures again, in a child process with ``settings`` in its environment."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench_fusion", "--ember-json"],
                          cwd=root, env=dict(os.environ, **settings),
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


# ----- NumPy, naively: one temporary per operator ---------------------------------------

def _numpy_step(name: str, data: dict[str, np.ndarray], backward: bool) -> None:
    x, g, w, b = data["x"], data["g"], data["w"], data["b"]
    if name == "custom_gelu":
        if not backward:
            return x * 0.5 * (1.0 + special.erf(x / np.float32(_SQRT_2)))
        cdf = 0.5 * (1.0 + special.erf(x / np.float32(_SQRT_2)))
        pdf = np.exp(-0.5 * x * x) / np.float32(math.sqrt(2 * math.pi))
        return g * (cdf + x * pdf)
    if name == "softmax":
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        y = e / e.sum(axis=-1, keepdims=True)
        if not backward:
            return y
        return y * (g - (g * y).sum(axis=-1, keepdims=True))
    centered = x - x.mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt((centered * centered).mean(axis=-1, keepdims=True) + np.float32(EPS))
    xhat = centered * rstd
    if not backward:
        return xhat * w + b
    dxhat = g * w
    dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True)
                 - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
    rows = g.reshape(-1, g.shape[-1])
    return dx, (rows * xhat.reshape(rows.shape)).sum(axis=0), rows.sum(axis=0)


def numpy_seconds(name: str, backward: bool) -> float:
    shape, repeats = WORKLOADS[name]
    data = _data(shape)
    return median_seconds(lambda: _numpy_step(name, data, backward), repeats=repeats, warmup=1)


# ----- PyTorch eager --------------------------------------------------------------------

def torch_seconds(name: str, backward: bool, builtin: bool = False) -> float:
    """Median seconds of the workload in PyTorch eager: composed from primitives as ember's
    is, or (``builtin``) through PyTorch's own op."""
    shape, repeats = WORKLOADS[name]
    data = {k: torch.from_numpy(v) for k, v in _data(shape).items()}
    x, g, w, b = data["x"], data["g"], data["w"], data["b"]
    fn = (_torch_builtin_fn if builtin else _torch_fn)(name)
    tracked = [x] + ([w, b] if name == "layer_norm" else [])

    def step() -> None:
        if not backward:
            with torch.no_grad():
                fn(x, w, b)
            return
        for t in tracked:
            t.requires_grad_(True)
            t.grad = None
        fn(x, w, b).backward(g)

    return median_seconds(step, repeats=repeats, warmup=1)


# ----- the table ------------------------------------------------------------------------

def _label(name: str, backward: bool) -> str:
    return f"{name} {list(WORKLOADS[name][0])} {'fwd+bwd' if backward else 'fwd'}"


def run() -> str:
    # The first child compiles into an empty cache; this process then finds it on disk.
    found = os.environ.get("XDG_CACHE_HOME")
    with tempfile.TemporaryDirectory() as cache:
        cold = _ember_child(XDG_CACHE_HOME=cache)
        os.environ["XDG_CACHE_HOME"] = cache
        try:
            fused = _ember_all()
        finally:
            if found is None:
                del os.environ["XDG_CACHE_HOME"]
            else:
                os.environ["XDG_CACHE_HOME"] = found
    uncompiled = _ember_child(EMBER_CPU_COMPILE="0")
    unfused = _ember_child(EMBER_FUSION="0")
    rows = []
    for name in WORKLOADS:
        for backward in (False, True):
            key = f"{name}/{int(backward)}"
            fused_s, fused_k, _ = fused[key]
            uncompiled_s, unfused_s, unfused_k = uncompiled[key][0], *unfused[key][:2]
            numpy_s = numpy_seconds(name, backward)
            row = [_label(name, backward), f"{fused_s * 1e3:.1f}", f"{uncompiled_s * 1e3:.1f}",
                   f"{unfused_s * 1e3:.1f}", f"{numpy_s * 1e3:.1f}"]
            speedups = [f"{unfused_s / fused_s:.2f}×", f"{numpy_s / fused_s:.2f}×"]
            if torch is not None:
                torch_s = torch_seconds(name, backward)
                builtin_s = torch_seconds(name, backward, builtin=True)
                row += [f"{torch_s * 1e3:.1f}", f"{builtin_s * 1e3:.1f}"]
                speedups += [f"{torch_s / fused_s:.2f}×", f"{builtin_s / fused_s:.2f}×"]
            rows.append(row + speedups + [f"{fused_k} / {unfused_k}"])
    header = ["workload (float32)", "ember fused ms", "fused, C off ms", "ember unfused ms",
              "NumPy naive ms"]
    if torch is not None:
        header += [f"PyTorch composed ms ({torch.get_num_threads()} threads)",
                   "PyTorch built-in ms"]
    header += ["unfused ÷ fused", "NumPy ÷ fused"]
    if torch is not None:
        header += ["PyTorch composed ÷ fused", "PyTorch built-in ÷ fused"]
    header.append("kernels fused / unfused")
    first_steps = [[_label(name, backward), f"{cold[key][2] * 1e3:.0f}",
                    f"{uncompiled[key][2] * 1e3:.0f}", f"{fused[key][2] * 1e3:.0f}",
                    f"{fused[key][0] * 1e3:.1f}"]
                   for name in WORKLOADS for backward in (False, True)
                   for key in [f"{name}/{int(backward)}"]]
    return "\n".join([
        table(f"Elementwise fusion on cpu:0, compiled groups {compiled.status()} (median ms, "
              "read included; X ÷ fused > 1: fused ember is faster)", header, rows),
        table("First step of a process (ms): empty kernel cache (compiles), compiling off, "
              "cache on disk; then the steady step",
              ["workload (float32)", "empty cache", "C off", "cache on disk", "steady"],
              first_steps)])


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if "--ember-json" in sys.argv:
        print(json.dumps(_ember_all()))
    else:
        print(run())
