"""Hand-written CPU training loops with Adam: multi-tensor updates against the
per-parameter update ops (``opt.multi_tensor = False``) and torch, in one run.

Per step: the caller thread's CPU time (``time.thread_time()`` around the whole step:
forward, backward and ``opt.step``) and the wall time, the loss read each step. The
variants run interleaved, round after round; the table gives the median over rounds
and the min and median of the per-round ratios.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

import ember as em
from benchmarks.common import torch
from ember import nn, optim

ROUNDS = 7
STEPS = 8


def _mlp(device):
    model = nn.Sequential(nn.Linear(784, 1024, device=device), nn.ReLU(),
                          nn.Linear(1024, 1024, device=device), nn.ReLU(),
                          nn.Linear(1024, 10, device=device))
    return model, model.parameters()


def _cnn(device):
    features = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1, device=device), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1, device=device),
                             nn.ReLU(), nn.MaxPool2d(2))
    head = nn.Linear(64 * 8 * 8, 10, device=device)

    def forward(x):
        out = features(x)
        return head(out.reshape(out.shape[0], -1))

    return forward, features.parameters() + head.parameters()


def _torch_mlp():
    return torch.nn.Sequential(torch.nn.Linear(784, 1024), torch.nn.ReLU(),
                               torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                               torch.nn.Linear(1024, 10))


def _torch_cnn():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.MaxPool2d(2), torch.nn.Conv2d(32, 64, 3, padding=1),
                               torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                               torch.nn.Linear(64 * 8 * 8, 10))


def _ember_loop(make, x: np.ndarray, y: np.ndarray, multi: bool):
    device = em.cpu(0).autodiff()
    em.manual_seed(0)
    model, params = make(device)
    opt = optim.Adam(params, lr=1e-3)
    opt.multi_tensor = multi
    xs, ys = em.tensor(x, device=device.inner), em.tensor(y, device=device.inner)

    def step() -> None:
        loss = nn.functional.cross_entropy(model(xs), ys)
        grads = loss.backward()
        start = time.thread_time()
        opt.step(grads)
        in_step.append(time.thread_time() - start)
        loss.item()

    in_step: list[float] = []
    step.in_step = in_step
    return step


def _torch_loop(make, x: np.ndarray, y: np.ndarray):
    torch.manual_seed(0)
    model = make()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    xs, ys = torch.from_numpy(x), torch.from_numpy(y)

    def step() -> None:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xs), ys)
        loss.backward()
        opt.step()
        loss.item()

    return step


def _measure(step) -> tuple[float, float]:
    cpu, wall = time.thread_time(), time.perf_counter()
    for _ in range(STEPS):
        step()
    return (time.thread_time() - cpu) / STEPS, (time.perf_counter() - wall) / STEPS


def _in_step(step) -> str:
    found = getattr(step, "in_step", None)
    return f"{statistics.median(found) * 1e3:.3f}" if found else "-"


def run() -> str:
    rng = np.random.default_rng(0)
    workloads = {
        "MLP 784-1024-1024-10, batch 256": (_mlp, _torch_mlp,
                                            rng.standard_normal((256, 784), dtype=np.float32),
                                            rng.integers(0, 10, 256)),
        "CNN conv 3-32, pool, conv 32-64, pool, linear; batch 32": (
            _cnn, _torch_cnn, rng.standard_normal((32, 3, 32, 32), dtype=np.float32),
            rng.integers(0, 10, 32)),
    }
    lines = ["| workload | variant | caller CPU ms/step | wall ms/step | CPU ratio min / median "
             "| wall ratio min / median | caller CPU in opt.step, ms |",
             "|---|---|---|---|---|---|---|"]
    for name, (make, make_torch, x, y) in workloads.items():
        loops = {"per-parameter ops": _ember_loop(make, x, y, multi=False),
                 "multi-tensor": _ember_loop(make, x, y, multi=True)}
        if torch is not None:
            loops["torch"] = _torch_loop(make_torch, x, y)
        for step in loops.values():  # warm up: compiles, pools, caches
            for _ in range(3):
                step()
        samples: dict[str, list[tuple[float, float]]] = {k: [] for k in loops}
        for _ in range(ROUNDS):
            for key, step in loops.items():
                samples[key].append(_measure(step))
        base = samples["per-parameter ops"]
        for key, values in samples.items():
            cpu = [v[0] / b[0] for v, b in zip(values, base)]
            wall = [v[1] / b[1] for v, b in zip(values, base)]
            lines.append(
                f"| {name} | {key} | {statistics.median(v[0] for v in values) * 1e3:.2f} "
                f"| {statistics.median(v[1] for v in values) * 1e3:.2f} "
                f"| {min(cpu):.2f} / {statistics.median(cpu):.2f} "
                f"| {min(wall):.2f} / {statistics.median(wall):.2f} "
                f"| {_in_step(loops[key])} |")
    return "\n".join(["(ratios against the per-parameter ops, per round)", *lines])


if __name__ == "__main__":
    print(run())
