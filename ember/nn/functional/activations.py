"""Activations, and softmax / log_softmax written stably from primitives (softmax's
gradient in closed form: one recorded node, autodiff/graph.record_composite)."""

from __future__ import annotations

from typing import Any

from ember.autodiff.graph import no_record, record_composite
from ember.autodiff.rules import differentiable
from ember.ops.elementwise import where
from ember.tensor import Tensor


def relu(x: Tensor) -> Tensor:
    """max(x, 0)."""
    return x.relu()


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """x·Φ(x) (exact, with erf), or its tanh approximation with ``approximate="tanh"``."""
    return x.gelu(approximate)


def silu(x: Tensor) -> Tensor:
    """x·sigmoid(x)."""
    return x.silu()


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) along ``dim``: stable for large inputs."""
    with no_record():
        e = (x - x.max(dim=dim, keepdim=True)).exp()
        y = e / e.sum(dim=dim, keepdim=True)
    record_composite("softmax", (x,), (dim,), y)
    return y


def safe_softmax(scores: Tensor) -> Tensor:
    """Softmax over the last dim in which a row of only -inf gives zeros, not NaN (its
    gradient: softmax's rule, which gives such a row zeros)."""
    with no_record():
        top = scores.max(dim=-1, keepdim=True)
        e = (scores - where(top == float("-inf"), 0.0, top)).exp()
        total = e.sum(dim=-1, keepdim=True)
        y = e / where(total == 0.0, 1.0, total)
    record_composite("softmax", (scores,), (-1,), y)
    return y


@differentiable("softmax", inputs=False, output=True, compute_bound=True)
def _softmax_backward(ctx: Any, grad: Tensor) -> tuple:
    """∂L/∂x = y · (g − Σ g · y) along the dim: four ops, from the output alone (a row
    of zeros, safe_softmax's fully masked row, gets a zero gradient)."""
    y = ctx.output
    weighted = grad * y
    return (weighted - y * weighted.sum(dim=ctx.attrs[0], keepdim=True),)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """x - logsumexp(x) along ``dim``."""
    return x - x.logsumexp(dim=dim, keepdim=True)
