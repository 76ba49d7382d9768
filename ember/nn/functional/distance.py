"""Vector norms along a dim: ``normalize`` and ``cosine_similarity``, from reductions."""

from __future__ import annotations

import math

from ember.errors import DTypeError
from ember.mixed_precision import float32_op
from ember.ops._core import broadcast_shapes
from ember.ops.elementwise import where
from ember.tensor import Tensor


def _check(op: str, x: Tensor) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: expected a tensor, got {type(x).__name__}")
    if not x.dtype.is_floating_point:
        raise DTypeError(f"{op}: needs a floating input, got {x.dtype.name}; help: "
                         f"x.to(em.float32)")


def vector_norm(x: Tensor, p: float, dim: int) -> Tensor:
    """‖x‖_p along ``dim`` (kept, size 1). A zero vector has norm 0 and gradient 0, as
    PyTorch's: the root is taken of a sum that cannot be 0 where the result is used."""
    if p == math.inf:
        return x.abs().max(dim=dim, keepdim=True)
    if p == -math.inf:
        return x.abs().min(dim=dim, keepdim=True)
    if p == 1:
        return x.abs().sum(dim=dim, keepdim=True)
    total = (x * x if p == 2 else x.abs() ** p).sum(dim=dim, keepdim=True)
    nonzero = total > 0
    safe = where(nonzero, total, 1.0)
    root = safe.sqrt() if p == 2 else safe ** (1.0 / p)
    return where(nonzero, root, 0.0)


@float32_op
def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """x / max(‖x‖_p, eps) along ``dim``: unit vectors (zero vectors stay zero).

    Args:
        input: a floating tensor.
        p: the norm's exponent (``math.inf`` for the max norm). Default 2.
        dim: the dim the vectors lie along. Default 1.
        eps: the smallest divisor. Default 1e-12.

    Shape: any → the same.

    Example:
        >>> F.normalize(em.tensor([[3.0, 4.0]], dtype=em.float64)).tolist()
        [[0.6, 0.8]]
    """
    _check("normalize", input)
    if p == 0:
        raise ValueError("normalize: p = 0 is not a norm (it counts nonzeros)")
    return input / vector_norm(input, p, dim).clamp(min=eps)


@float32_op
def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """x1 · x2 / (max(‖x1‖, eps) · max(‖x2‖, eps)) along ``dim``.

    ``x1`` and ``x2`` broadcast together; ``dim`` is a dim of the broadcast shape and
    is removed from the result.

    Shape: (*, D, *) and (*, D, *) → (*, *).

    Example:
        >>> F.cosine_similarity(em.tensor([[1.0, 0.0]]), em.tensor([[1.0, 1.0]])).tolist()
        [0.7071067690849304]
    """
    op = "cosine_similarity"
    _check(op, x1)
    _check(op, x2)
    shape = broadcast_shapes(op, x1.shape, x2.shape)
    x1, x2 = (x if x.shape == shape else x.expand(*shape) for x in (x1, x2))
    product = (x1 * x2).sum(dim=dim)
    n1 = vector_norm(x1, 2, dim).clamp(min=eps).squeeze(dim)
    n2 = vector_norm(x2, 2, dim).clamp(min=eps).squeeze(dim)
    return product / (n1 * n2)
