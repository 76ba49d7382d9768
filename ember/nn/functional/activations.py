"""Activations, and softmax / log_softmax written stably from primitives."""

from __future__ import annotations

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
    shifted = x - x.max(dim=dim, keepdim=True).detach()
    e = shifted.exp()
    return e / e.sum(dim=dim, keepdim=True)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """x - logsumexp(x) along ``dim``."""
    return x - x.logsumexp(dim=dim, keepdim=True)
