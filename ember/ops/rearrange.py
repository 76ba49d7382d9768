"""Ops that move or pick elements, composed from existing primitives (views, ``index_select``,
``cat``, ``where``): ``flip roll clone tril triu diagonal diag repeat_interleave meshgrid``.

Composites: their gradients, fusion and every backend come from the primitives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.errors import ShapeError
from ember.ops._core import call, normalize_dim, normalize_dims
from ember.ops.creation import arange, full, tensor, zeros
from ember.ops.elementwise import where
from ember.ops.indexing import index_select
from ember.ops.shape import cat, expand, permute, reshape
from ember.tensor import Tensor


def _check_tensor(op: str, x: Any) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: expected a tensor, got {type(x).__name__}")


def _narrow(x: Tensor, dim: int, start: int, stop: int) -> Tensor:
    return x[(slice(None),) * dim + (slice(start, stop),)]


def _int_list(op: str, value: Any, what: str) -> tuple[int, ...]:
    items = (value,) if isinstance(value, int) else tuple(value)
    for v in items:
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{op}: {what} must be ints, got {v!r}")
    return items


def flip(x: Tensor, dims: int | Sequence[int]) -> Tensor:
    """The elements of ``x`` in reverse order along each of ``dims``, as ``torch.flip``.

    Raises:
        IndexError: a dim out of range (naming the shape).
        ShapeError: a dim given twice.
    """
    _check_tensor("flip", x)
    for d in normalize_dims("flip", _int_list("flip", dims, "dims"), x.shape):
        n = x.shape[d]
        if n > 1:
            x = index_select(x, d, arange(n - 1, -1, -1, device=x.device))
    return x


def roll(x: Tensor, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
    """Elements shifted by ``shifts`` along ``dims``, wrapping around, as ``torch.roll``.

    With ``dims=None`` the tensor is rolled as if flattened, then reshaped back.

    Raises:
        ShapeError: ``shifts`` and ``dims`` of different lengths.
    """
    _check_tensor("roll", x)
    shift_list = _int_list("roll", shifts, "shifts")
    if dims is None:
        if len(shift_list) != 1:
            raise ShapeError(f"roll: without dims, shifts must be one int, got {shifts}")
        return reshape(roll(reshape(x, (-1,)), shift_list[0], 0), x.shape)
    dim_list = _int_list("roll", dims, "dims")
    if len(shift_list) != len(dim_list):
        raise ShapeError(f"roll: shifts {shifts} and dims {dims} need the same length")
    for shift, dim in zip(shift_list, dim_list):
        d = normalize_dim("roll", dim, x.shape)
        n = x.shape[d]
        if n and shift % n:
            s = shift % n
            x = cat([_narrow(x, d, n - s, n), _narrow(x, d, 0, n - s)], d)
    return x


def clone(x: Tensor) -> Tensor:
    """A new handle to the same value (tensors are immutable values, so nothing is copied);
    gradients flow through it."""
    _check_tensor("clone", x)
    return call("alias", (x,), x.shape, x.dtype)


def filled(x: Tensor, value: Any) -> Tensor:
    """A tensor of ``x``'s shape, dtype and device holding ``value`` (a scalar, or a tensor
    broadcast to the shape and moved to the device): ``fill_`` and ``copy_``'s new value."""
    if not isinstance(value, Tensor):
        return full(x.shape, value, dtype=x.dtype, device=x.device.inner)
    if value.device.name != x.device.name:
        value = value.to(x.device.inner)
    if value.dtype != x.dtype:
        value = value.astype(x.dtype)
    return value if value.shape == x.shape else expand(value, x.shape)


def _band(op: str, x: Tensor, diagonal: int, lower: bool) -> Tensor:
    _check_tensor(op, x)
    if x.ndim < 2:
        raise ShapeError(f"{op}: needs a tensor of at least 2 dims, got shape {x.shape}")
    n, m = x.shape[-2:]
    offset = arange(m, device=x.device) - reshape(arange(n, device=x.device), (n, 1))
    keep = offset <= diagonal if lower else offset >= diagonal
    return where(keep, x, 0)


def tril(x: Tensor, diagonal: int = 0) -> Tensor:
    """The lower triangle of the last two dims (``j - i <= diagonal``); zeros elsewhere."""
    return _band("tril", x, diagonal, True)


def triu(x: Tensor, diagonal: int = 0) -> Tensor:
    """The upper triangle of the last two dims (``j - i >= diagonal``); zeros elsewhere."""
    return _band("triu", x, diagonal, False)


def diagonal(x: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal ``x[..., i, i + offset]`` of dims ``dim1``, ``dim2``, as a last dim.

    A view through a strided slice of the flattened matrices (one slice, no gather).

    Shape:
        The two dims removed, ``L = max(0, min(n, m - offset))`` (for ``offset >= 0``) appended.

    Raises:
        ShapeError: a tensor under 2 dims, or ``dim1 == dim2``.

    Example:
        >>> em.arange(9).reshape(3, 3).diagonal(offset=1).tolist()
        [1, 5]
    """
    _check_tensor("diagonal", x)
    return _diagonal(x, offset, dim1, dim2)


def _diagonal(x: Tensor, offset: int, dim1: int, dim2: int) -> Tensor:
    if x.ndim < 2:
        raise ShapeError(f"diagonal: needs a tensor of at least 2 dims, got shape {x.shape}")
    a = normalize_dim("diagonal", dim1, x.shape)
    b = normalize_dim("diagonal", dim2, x.shape)
    if a == b:
        raise ShapeError(f"diagonal: dim1 and dim2 are the same dim ({a}) of shape {x.shape}")
    rest = [d for d in range(x.ndim) if d not in (a, b)]
    if rest + [a, b] != list(range(x.ndim)):
        x = permute(x, rest + [a, b])
    n, m = x.shape[-2:]
    length = max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))
    flat = reshape(x, x.shape[:-2] + (n * m,))
    if length == 0:
        return _narrow(flat, flat.ndim - 1, 0, 0)
    start = offset if offset >= 0 else -offset * m
    stop = start + (length - 1) * (m + 1) + 1
    return flat[(slice(None),) * (flat.ndim - 1) + (slice(start, stop, m + 1),)]


def diag(x: Tensor, diagonal: int = 0) -> Tensor:
    """A 1-D ``x``: the square matrix with ``x`` on its ``diagonal``-th diagonal; a 2-D ``x``:
    that diagonal, as ``torch.diag``.

    Raises:
        ShapeError: ``x`` is neither 1-D nor 2-D.
    """
    _check_tensor("diag", x)
    if x.ndim == 2:
        return _diagonal(x, diagonal, 0, 1)
    if x.ndim != 1:
        raise ShapeError(f"diag: needs a 1-D or 2-D tensor, got shape {x.shape}")
    n, k = x.shape[0], abs(diagonal)
    size = n + k

    def blank(*shape: int) -> Tensor:
        return zeros(shape, dtype=x.dtype, device=x.device)

    # v's entries each followed by n zeros, cut to n*n: v lands on the diagonal.
    spread = cat([reshape(x, (n, 1)), blank(n, n)], 1)
    square = reshape(_narrow(reshape(spread, (-1,)), 0, 0, n * n), (n, n))
    if k == 0:
        return square
    if diagonal > 0:
        return cat([cat([blank(n, k), square], 1), blank(k, size)], 0)
    return cat([blank(k, size), cat([square, blank(n, k)], 1)], 0)


def repeat_interleave(x: Tensor, repeats: int | Tensor, dim: int | None = None) -> Tensor:
    """Each element repeated ``repeats`` times along ``dim`` (flattened first when None).

    A tensor ``repeats`` (one count per element along ``dim``) is read first: the result's
    size depends on its values.

    Raises:
        ShapeError: a tensor ``repeats`` whose length does not match the dim, or a negative count.
    """
    _check_tensor("repeat_interleave", x)
    if dim is None:
        x, d = reshape(x, (-1,)), 0
    else:
        d = normalize_dim("repeat_interleave", dim, x.shape)
    n = x.shape[d] if x.ndim else 1
    if isinstance(repeats, Tensor):
        counts = np.asarray(repeats.numpy()).reshape(-1)
        if counts.size == 1:
            counts = np.full(n, counts[0])
        if counts.size != n or (counts < 0).any():
            raise ShapeError(f"repeat_interleave: repeats of shape {repeats.shape} must be one "
                             f"non-negative count per element of dim {d} (size {n})")
        picks = tensor(np.repeat(np.arange(n), counts), device=x.device)
        return index_select(x, d, picks)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 0:
        raise ShapeError(f"repeat_interleave: repeats must be a non-negative int or a tensor, "
                         f"got {repeats!r}")
    if x.ndim == 0:
        x, d = reshape(x, (1,)), 0
    spread = x.shape[:d + 1] + (repeats,) + x.shape[d + 1:]
    grown = expand(reshape(x, x.shape[:d + 1] + (1,) + x.shape[d + 1:]), spread)
    return reshape(grown, x.shape[:d] + (x.shape[d] * repeats,) + x.shape[d + 1:])


def meshgrid(*tensors: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids from 1-D tensors, as ``torch.meshgrid`` (``indexing="ij"`` or ``"xy"``).

    Raises:
        ShapeError: an input that is not 0-D or 1-D.
        ValueError: an unknown ``indexing``.

    Example:
        >>> ys, xs = em.meshgrid(em.arange(2), em.arange(3), indexing="ij")
        >>> ys.tolist(), xs.tolist()
        ([[0, 0, 0], [1, 1, 1]], [[0, 1, 2], [0, 1, 2]])
    """
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    for t in tensors:
        _check_tensor("meshgrid", t)
        if t.ndim > 1:
            raise ShapeError(f"meshgrid: every input must be 0-D or 1-D, got shape {t.shape}")
    flat = [reshape(t, (-1,)) for t in tensors]
    swap = indexing == "xy" and len(flat) >= 2
    order = [1, 0] + list(range(2, len(flat))) if swap else list(range(len(flat)))
    sizes = tuple(flat[i].shape[0] for i in order)
    grids = []
    for i, t in enumerate(flat):
        view = [1] * len(sizes)
        view[order.index(i)] = t.shape[0]
        grids.append(expand(reshape(t, tuple(view)), sizes))
    return tuple(grids)


def unfold(x: Tensor, dimension: int, size: int, step: int) -> Tensor:
    """Every slice of length ``size`` along ``dimension``, ``step`` apart, as a new last dim.

    As ``Tensor.unfold``: ``dimension`` shrinks to ``(n - size) // step + 1`` windows and a
    last dim of ``size`` holds each window (a 0-d tensor gives shape ``(size,)``, size 1).
    A gather of the windows' elements, so its gradient sums over overlapping windows.

    Raises:
        IndexError: ``dimension`` out of range.
        ShapeError: ``size`` larger than the dim; ValueError: ``step`` < 1 or ``size`` < 0.

    Example:
        >>> em.arange(5).unfold(0, 2, 2).tolist()
        [[0, 1], [2, 3]]
    """
    _check_tensor("unfold", x)
    d = normalize_dim("unfold", dimension, x.shape)
    n = x.shape[d] if x.ndim else 1
    if step < 1:
        raise ValueError(f"unfold: step is {step} but must be > 0")
    if size < 0 or size > n:
        raise ShapeError(f"unfold: size {size} does not fit dimension {d} of size {n} "
                         f"(shape {x.shape}); it must be in [0, {n}]")
    count = (n - size) // step + 1
    positions = (np.arange(count)[:, None] * step + np.arange(size)[None, :]).reshape(-1)
    flat = index_select(x.reshape(1) if not x.ndim else x, d,
                        tensor(positions, dtype="int64", device=x.device))
    shape = x.shape[:d] + (count, size) + x.shape[d + 1:] if x.ndim else (size,)
    windows = reshape(flat, shape)
    if not x.ndim:
        return windows
    order = list(range(len(shape)))
    order.append(order.pop(d + 1))
    return permute(windows, order)
