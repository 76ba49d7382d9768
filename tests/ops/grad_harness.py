"""The backward half of the op harness.

Each family declares ``GRAD_CASES`` (in its ``cases_<family>.py``): small
float64 problems. ``test_gradients.py`` runs each one on an autodiff device,
with and without "balanced" checkpointing, and checks the vector-Jacobian
product that ``backward`` computes against central finite differences of the
ember forward itself, and against ``torch.autograd`` where a torch twin is
given and torch is installed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import ember as em


@dataclass
class GradCase:
    """``fn(*inputs)`` returns one float tensor; its gradient w.r.t. ``wrt`` is checked.

    Args:
        id: readable test id.
        fn: the ember computation; array inputs arrive as tensors, others as they are.
        inputs: float64 arrays (differentiated unless excluded by ``wrt``), int/bool
            arrays (indices, masks: never differentiated) and Python values.
        wrt: positions of the inputs to differentiate; default: every float array.
        torch_fn: the same computation on torch tensors, for a cross-check.
        eps, rtol, atol: finite-difference step and tolerances.
    """

    id: str
    fn: Callable[..., Any]
    inputs: Sequence[Any]
    wrt: Sequence[int] | None = None
    torch_fn: Callable[..., Any] | None = None
    eps: float = 1e-6
    rtol: float = 1e-5
    atol: float = 1e-7


def positions(case: GradCase) -> list[int]:
    if case.wrt is not None:
        return list(case.wrt)
    return [i for i, v in enumerate(case.inputs)
            if isinstance(v, np.ndarray) and v.dtype.kind == "f"]


def _tensors(case: GradCase, device: em.Device, wrt: list[int], values: Sequence[Any]) -> list:
    args = []
    for i, v in enumerate(values):
        if isinstance(v, np.ndarray):
            t = em.tensor(v, device=device)
            args.append(t.require_grad() if i in wrt else t)
        else:
            args.append(v)
    return args


def ember_vjp(case: GradCase, device: em.Device, cotangent_seed: int = 0) -> tuple:
    wrt = positions(case)
    args = _tensors(case, device, wrt, case.inputs)
    out = case.fn(*args)
    cot = np.random.default_rng(cotangent_seed).standard_normal(out.shape)
    grads = out.backward(em.tensor(cot.astype(out.dtype.np), device=device))
    result = []
    for i in wrt:
        g = args[i].grad(grads)
        result.append(np.zeros(args[i].shape) if g is None else g.numpy().astype(np.float64))
    return out.numpy().astype(np.float64), cot, result


def finite_differences(case: GradCase, device: em.Device, cot: np.ndarray) -> list[np.ndarray]:
    """Central differences of ``sum(fn(x) * cot)`` w.r.t. each differentiated input."""
    inner = device.inner

    def objective(values: list) -> float:
        args = [em.tensor(v, device=inner) if isinstance(v, np.ndarray) else v for v in values]
        return float((case.fn(*args).numpy().astype(np.float64) * cot).sum())

    grads = []
    for i in positions(case):
        base = list(case.inputs)
        x = np.array(base[i], dtype=np.float64)
        g = np.zeros_like(x)
        flat = x.reshape(-1)
        for j in range(flat.size):
            saved = flat[j]
            flat[j] = saved + case.eps
            plus = objective([*base[:i], x.copy(), *base[i + 1:]])
            flat[j] = saved - case.eps
            minus = objective([*base[:i], x.copy(), *base[i + 1:]])
            flat[j] = saved
            g.reshape(-1)[j] = (plus - minus) / (2 * case.eps)
        grads.append(g)
    return grads


def torch_vjp(case: GradCase, cot: np.ndarray) -> list[np.ndarray]:
    import torch

    wrt = positions(case)
    args = []
    for i, v in enumerate(case.inputs):
        if isinstance(v, np.ndarray):
            t = torch.from_numpy(np.array(v))
            if i in wrt:
                t.requires_grad_(True)
            args.append(t)
        else:
            args.append(v)
    out = case.torch_fn(*args)
    grads = torch.autograd.grad(out, [args[i] for i in wrt], torch.from_numpy(cot).to(out.dtype),
                                allow_unused=True)
    return [np.zeros(args[i].shape) if g is None else g.detach().numpy().astype(np.float64)
            for i, g in zip(wrt, grads)]
