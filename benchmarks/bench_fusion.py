"""Elementwise fusion: composite ops written from primitives, fused against unfused.

Workloads (float32): burn's ``custom_gelu`` on [32, 512, 2048], gelu written
from primitives as ``x * 0.5 * (1 + erf(x / sqrt(2)))``; softmax and
layer_norm written from primitives (max / sum / mean reductions and
elementwise ops) on [32, 512, 4096], burn's shapes.
Forward reads the result; forward+backward seeds the output with a fixed
gradient and reads every input gradient.

Columns: ember with fusion (this process); ember with ``EMBER_FUSION=0`` (a
child process, since the setting is read at import); NumPy written naively
(every temporary materialized; backward by hand, same formulas); PyTorch
eager (autograd for backward; it uses all cores, ember's CPU worker one).
Targets: custom_gelu at least 3× NumPy's speed, and at least PyTorch's.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
from scipy import special

import ember as em
from benchmarks.common import median_seconds, table, torch

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


def ember_seconds(name: str, backward: bool) -> tuple[float, int]:
    """Median seconds of one step and the kernels one step launches."""
    shape, repeats = WORKLOADS[name]
    step, _, device = ember_workload(name, shape, em.cpu(), backward)
    step()
    em.sync()
    before = em.stats(device).kernels_launched
    step()
    em.sync()
    kernels = em.stats(device).kernels_launched - before
    return median_seconds(step, repeats=repeats, warmup=1), kernels


def _ember_all() -> dict[str, list]:
    return {f"{name}/{int(backward)}": list(ember_seconds(name, backward))
            for name in WORKLOADS for backward in (False, True)}


def _ember_unfused_all() -> dict[str, list]:
    """The ember figures again, in a child process with EMBER_FUSION=0."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench_fusion", "--ember-json"],
                          cwd=root, env=dict(os.environ, EMBER_FUSION="0"),
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

def torch_seconds(name: str, backward: bool) -> float:
    shape, repeats = WORKLOADS[name]
    data = {k: torch.from_numpy(v) for k, v in _data(shape).items()}
    x, g, w, b = data["x"], data["g"], data["w"], data["b"]
    fn = _torch_fn(name)
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

def run() -> str:
    fused = _ember_all()
    unfused = _ember_unfused_all()
    rows = []
    for name in WORKLOADS:
        shape = WORKLOADS[name][0]
        for backward in (False, True):
            key = f"{name}/{int(backward)}"
            (fused_s, fused_k), (unfused_s, unfused_k) = fused[key], unfused[key]
            numpy_s = numpy_seconds(name, backward)
            row = [f"{name} {list(shape)} {'fwd+bwd' if backward else 'fwd'}",
                   f"{fused_s * 1e3:.1f}", f"{unfused_s * 1e3:.1f}", f"{numpy_s * 1e3:.1f}"]
            speedups = [f"{unfused_s / fused_s:.2f}×", f"{numpy_s / fused_s:.2f}×"]
            if torch is not None:
                torch_s = torch_seconds(name, backward)
                row.append(f"{torch_s * 1e3:.1f}")
                speedups.append(f"{torch_s / fused_s:.2f}×")
            rows.append(row + speedups + [f"{fused_k} / {unfused_k}"])
    header = ["workload (float32)", "ember fused ms", "ember unfused ms", "NumPy naive ms"]
    if torch is not None:
        header.append(f"PyTorch ms ({torch.get_num_threads()} threads)")
    header += ["unfused ÷ fused", "NumPy ÷ fused"]
    if torch is not None:
        header.append("PyTorch ÷ fused")
    header.append("kernels fused / unfused")
    return table("Elementwise fusion on cpu:0 (median ms, read included; "
                 "X ÷ fused > 1: fused ember is faster)", header, rows)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if "--ember-json" in sys.argv:
        print(json.dumps(_ember_all()))
    else:
        print(run())
