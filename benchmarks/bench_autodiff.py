"""Backward overhead: forward+backward against forward alone, side by side with torch.autograd.

Workloads: burn's ``custom_gelu`` benchmark (gelu written from primitives on a
[32, 512, 2048] float32 tensor) and an MLP 784-1024-1024-10 with a
cross-entropy loss written from primitives (batch 256). The ratio
(forward+backward) / forward is the figure to compare: target no worse than
PyTorch's.
"""

from __future__ import annotations

import math

import numpy as np

import ember as em
from benchmarks.common import median_seconds, table, torch

GELU_SHAPE = (32, 512, 2048)


def _gelu(x):
    return x * 0.5 * ((x * (1.0 / math.sqrt(2.0))).erf() + 1.0)


def _gelu_ember(fwd_only: bool) -> float:
    device = em.cpu().autodiff()
    x_np = np.random.default_rng(0).standard_normal(GELU_SHAPE, dtype=np.float32)
    x = em.tensor(x_np, device=device).require_grad()

    def step() -> None:
        y = _gelu(x).sum()
        if fwd_only:
            y.numpy()
        else:
            x.grad(y.backward()).numpy()

    return median_seconds(step, repeats=3, warmup=1)


def _gelu_torch(fwd_only: bool) -> float:
    x = torch.from_numpy(np.random.default_rng(0).standard_normal(GELU_SHAPE, dtype=np.float32))
    x.requires_grad_(True)

    def step() -> None:
        y = _gelu(x).sum()
        if not fwd_only:
            y.backward()
            x.grad = None

    return median_seconds(step, repeats=3, warmup=1)


def _mlp_params(rng):
    sizes = [784, 1024, 1024, 10]
    return [(rng.standard_normal((i, o), dtype=np.float32) / np.float32(math.sqrt(i)),
             np.zeros(o, np.float32)) for i, o in zip(sizes, sizes[1:])]


def _mlp_loss(params, x, target_onehot):
    h = x
    for i, (w, b) in enumerate(params):
        h = h @ w + b
        if i < len(params) - 1:
            h = h.relu()
    lse = h.logsumexp(dim=1)
    return (lse - (h * target_onehot).sum(dim=1)).mean()


def _mlp_ember(fwd_only: bool) -> float:
    rng = np.random.default_rng(1)
    device = em.cpu().autodiff()
    params = [(em.tensor(w, device=device).require_grad(), em.tensor(b, device=device).require_grad())
              for w, b in _mlp_params(rng)]
    x = em.tensor(rng.standard_normal((256, 784), dtype=np.float32), device=device)
    onehot = em.tensor(np.eye(10, dtype=np.float32)[rng.integers(0, 10, 256)], device=device)

    def step() -> None:
        loss = _mlp_loss(params, x, onehot)
        if fwd_only:
            loss.numpy()
        else:
            grads = loss.backward()
            for w, b in params:
                w.grad(grads).numpy()
                b.grad(grads).numpy()

    return median_seconds(step, repeats=9, warmup=2)


def _mlp_torch(fwd_only: bool) -> float:
    rng = np.random.default_rng(1)
    params = [(torch.from_numpy(w).requires_grad_(True), torch.from_numpy(b).requires_grad_(True))
              for w, b in _mlp_params(rng)]
    x = torch.from_numpy(rng.standard_normal((256, 784), dtype=np.float32))
    onehot = torch.from_numpy(np.eye(10, dtype=np.float32)[rng.integers(0, 10, 256)])

    def step() -> None:
        h = x
        for i, (w, b) in enumerate(params):
            h = h @ w + b
            if i < len(params) - 1:
                h = h.relu()
        loss = (torch.logsumexp(h, dim=1) - (h * onehot).sum(dim=1)).mean()
        if not fwd_only:
            loss.backward()
            for w, b in params:
                w.grad = b.grad = None

    return median_seconds(step, repeats=9, warmup=2)


def run() -> str:
    rows = []
    for name, ember_fn, torch_fn in (("custom_gelu [32, 512, 2048]", _gelu_ember, _gelu_torch),
                                     ("MLP 784-1024-1024-10, batch 256", _mlp_ember, _mlp_torch)):
        fwd, both = ember_fn(True), ember_fn(False)
        row = [name, f"{fwd * 1e3:.1f}", f"{both * 1e3:.1f}", f"{both / fwd:.2f}"]
        if torch is not None:
            tf, tb = torch_fn(True), torch_fn(False)
            row += [f"{tf * 1e3:.1f}", f"{tb * 1e3:.1f}", f"{tb / tf:.2f}"]
        rows.append(row)
    header = ["workload", "ember fwd ms", "ember fwd+bwd ms", "ember ratio"]
    if torch is not None:
        header += ["torch fwd ms", "torch fwd+bwd ms", "torch ratio"]
    return table("Backward overhead on cpu:0 (median ms; ratio = fwd+bwd / fwd)", header, rows)


if __name__ == "__main__":
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    print(run())
