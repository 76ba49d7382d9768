"""A small CNN's layers, forward and forward+backward, against PyTorch CPU in the same run.

Layers (float32, batch 64, CIFAR-sized): conv 3→32 3×3 pad 1 on 32×32 (the
first layer: no input gradient), conv 32→64 3×3 stride 2 pad 1 on 32×32,
depthwise conv 64 3×3 pad 1 on 16×16, max-pool 2×2 on 64×16×16, and the
global average pool. ember's figures include submission, the worker hand-off
and reading the results back; "fwd+bwd" reads every gradient. PyTorch runs
its own (oneDNN) kernels on the same threads.
"""

from __future__ import annotations

import numpy as np

import ember as em
from benchmarks.common import median_seconds, ratio, table, torch
from ember.nn import functional as F

BATCH = 64


def _layers() -> list:
    """(name, input shape, weight shape or None, op name, kwargs, input needs grad)."""
    return [
        ("conv 3→32 3×3 pad 1, 32×32", (BATCH, 3, 32, 32), (32, 3, 3, 3), "conv2d",
         {"padding": 1}, False),
        ("conv 32→64 3×3 stride 2 pad 1, 32×32", (BATCH, 32, 32, 32), (64, 32, 3, 3),
         "conv2d", {"stride": 2, "padding": 1}, True),
        ("depthwise conv 64 3×3 pad 1, 16×16", (BATCH, 64, 16, 16), (64, 1, 3, 3), "conv2d",
         {"padding": 1, "groups": 64}, True),
        ("max_pool 2×2, 64×16×16", (BATCH, 64, 16, 16), None, "max_pool2d",
         {"kernel_size": 2}, True),
        ("adaptive_avg_pool → 1×1, 64×8×8", (BATCH, 64, 8, 8), None, "adaptive_avg_pool2d",
         {"output_size": 1}, True),
    ]


def _ember(op: str, x_np, w_np, b_np, kwargs, input_grad: bool, backward: bool) -> float:
    device = em.cpu().autodiff()
    x = em.tensor(x_np, device=device)
    if input_grad:
        x = x.require_grad()
    params = []
    if w_np is not None:
        params = [em.tensor(w_np, device=device).require_grad(),
                  em.tensor(b_np, device=device).require_grad()]
    fn = getattr(F, op)
    out_shape = fn(x, *params, **kwargs).shape
    seed = em.tensor(np.ones(out_shape, np.float32), device=device)

    def step() -> None:
        y = fn(x, *params, **kwargs)
        if not backward:
            y.numpy()
            return
        grads = y.backward(seed)
        for t in ([x] if input_grad else []) + params:
            t.grad(grads).numpy()

    return median_seconds(step, repeats=7, warmup=2)


def _torch(op: str, x_np, w_np, b_np, kwargs, input_grad: bool, backward: bool) -> float:
    x = torch.from_numpy(x_np).requires_grad_(input_grad and backward)
    params = []
    if w_np is not None:
        params = [torch.from_numpy(w_np).requires_grad_(backward),
                  torch.from_numpy(b_np).requires_grad_(backward)]
    fn = getattr(torch.nn.functional, op)
    seed = torch.ones_like(fn(x.detach(), *[p.detach() for p in params], **kwargs))

    def step() -> None:
        if not backward:
            with torch.no_grad():
                fn(x, *params, **kwargs)
            return
        y = fn(x, *params, **kwargs)
        leaves = ([x] if input_grad else []) + params
        torch.autograd.grad(y, leaves, seed)

    return median_seconds(step, repeats=7, warmup=2)


def run() -> str:
    rng = np.random.default_rng(0)
    rows = []
    for name, x_shape, w_shape, op, kwargs, input_grad in _layers():
        x_np = rng.standard_normal(x_shape, dtype=np.float32)
        w_np = b_np = None
        if w_shape is not None:
            w_np = rng.standard_normal(w_shape, dtype=np.float32) * np.float32(0.1)
            b_np = rng.standard_normal(w_shape[0], dtype=np.float32)
        for backward in (False, True):
            label = f"{name} ({'fwd+bwd' if backward else 'fwd'})"
            ember_s = _ember(op, x_np, w_np, b_np, kwargs, input_grad, backward)
            row = [label, f"{ember_s * 1e3:.2f}"]
            if torch is not None:
                torch_s = _torch(op, x_np, w_np, b_np, kwargs, input_grad, backward)
                row += [f"{torch_s * 1e3:.2f}", ratio(ember_s, torch_s)]
            rows.append(row)
    header = ["layer (float32, batch 64)", "ember ms"]
    if torch is not None:
        header += ["PyTorch ms", "ember/PyTorch"]
    return table("Convolution and pooling on cpu:0 (median ms, read included)", header, rows)


if __name__ == "__main__":
    print(run())
