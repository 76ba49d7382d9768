"""``em.linalg``: PyTorch's ``torch.linalg`` names over ember's linear-algebra ops."""

from __future__ import annotations

from typing import Any

from ember.ops.decompositions import (cholesky, det, eigh, eigvalsh, inv, qr, solve, svd,
                                      svdvals)
from ember.ops.linalg import matmul
from ember.ops.more_math import norm as _vector_norm
from ember.tensor import Tensor

__all__ = ["cholesky", "det", "eigh", "eigvalsh", "inv", "matmul", "matrix_norm", "norm", "qr",
           "solve", "svd", "svdvals", "vector_norm"]


def vector_norm(x: Tensor, ord: float = 2, dim: Any = None,  # noqa: A002  (torch's name)
                keepdim: bool = False) -> Tensor:
    """The vector ``ord``-norm over ``dim`` (every element when None).

    Example:
        >>> em.linalg.vector_norm(em.tensor([3.0, -4.0]), ord=1).item()
        7.0
    """
    return _vector_norm(x, ord, dim, keepdim)


def matrix_norm(a: Tensor, ord: float | str = "fro", dim: tuple[int, int] = (-2, -1),
                keepdim: bool = False) -> Tensor:
    """A matrix norm over the two dims ``dim``: ``"fro"``, ``"nuc"`` (sum of singular values),
    ``2`` / ``-2`` (largest / smallest singular value), ``1`` / ``-1`` (max / min column
    abs sum), ``inf`` / ``-inf`` (max / min row abs sum).

    Raises:
        ValueError: another ``ord``.

    Example:
        >>> em.linalg.matrix_norm(em.tensor([[1.0, -2.0], [3.0, 4.0]]), ord=1).item()
        6.0
    """
    from ember.ops.shape import permute

    if ord == "fro":
        return _vector_norm(a, 2, dim, keepdim)
    d0, d1 = (d % a.ndim for d in dim)
    rest = [d for d in range(a.ndim) if d not in (d0, d1)]
    m = permute(a, rest + [d0, d1])
    if ord in ("nuc", 2, -2):
        s = svdvals(m)
        out = s.sum(-1) if ord == "nuc" else s[..., 0] if ord == 2 else s[..., -1]
    elif ord in (1, -1, float("inf"), float("-inf")):
        sums = m.abs().sum(-2 if ord in (1, -1) else -1)
        out = sums.max(-1) if ord in (1, float("inf")) else sums.min(-1)
    else:
        raise ValueError(f"linalg.matrix_norm: ord must be 'fro', 'nuc', 1, -1, 2, -2, inf or "
                         f"-inf, got {ord!r}")
    if keepdim:
        for d in sorted((d0, d1)):
            out = out.unsqueeze(d)
    return out


def norm(x: Tensor, ord: float | str | None = None, dim: Any = None,  # noqa: A002
         keepdim: bool = False) -> Tensor:
    """``torch.linalg.norm``: with ``ord=None``, the 2-norm of the flattened input (or over
    ``dim``); a string ``ord`` or a 2-tuple ``dim`` means a matrix norm (a 2-D input with
    ``dim=None`` and a numeric ``ord`` too); otherwise a vector norm.

    Example:
        >>> em.linalg.norm(em.tensor([[3.0, 0.0], [0.0, 4.0]])).item()
        5.0
    """
    if ord is None:
        return _vector_norm(x, 2, dim, keepdim)
    matrix = isinstance(ord, str) or (isinstance(dim, (tuple, list)) and len(dim) == 2) or (
        dim is None and x.ndim == 2)
    if matrix:
        return matrix_norm(x, ord, tuple(dim) if dim is not None else (-2, -1), keepdim)
    return _vector_norm(x, ord, dim, keepdim)
