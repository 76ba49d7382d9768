"""1-D pooling and adaptive max pooling, composed from the 2-D pooling ops and reductions.

A 1-D pool is the 2-D one over (N, C, 1, L); an adaptive max is separable — the max
over a rectangle is the max over its rows of the max over its columns — so it is one
max per output row and per output column (a single reshape and max where the windows
tile the input). Gradients come from those ops' rules.
"""

from __future__ import annotations

from typing import Any

from ember.errors import ShapeError
from ember.ops import conv as _conv
from ember.ops.creation import arange
from ember.ops.shape import cat
from ember.tensor import Tensor


def _check_rank(op: str, x: Tensor, ranks: tuple[int, ...], layout: str) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: expected a tensor, got {type(x).__name__}")
    if x.ndim not in ranks:
        raise ShapeError(f"{op}: expected a {layout} input, got shape {x.shape}")


def _one(op: str, name: str, value: Any) -> int:
    """A 1-D pool's int argument, given as an int or a 1-tuple."""
    if isinstance(value, tuple | list):
        if len(value) != 1:
            raise ValueError(f"{op}: {name} must be an int or a 1-tuple, got {value!r}")
        value = value[0]
    return value


def max_pool1d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               dilation: Any = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """The max over each window of length ``kernel_size`` (``stride`` defaults to it).

    L_out = floor_or_ceil((L + 2·padding - dilation·(kernel_size - 1) - 1) / stride) + 1.
    With ``return_indices``, also each chosen cell's position along L.

    Shape: (N, C, L) or (C, L) → (..., L_out).

    Example:
        >>> F.max_pool1d(em.randn(2, 3, 8), 2).shape
        (2, 3, 4)
    """
    op = "max_pool1d"
    _check_rank(op, input, (2, 3), "(N, C, L) or (C, L)")
    k = _one(op, "kernel_size", kernel_size)
    s = k if stride is None or stride == () else _one(op, "stride", stride)
    out = _conv.max_pool2d(input.unsqueeze(-2), (1, k), (1, s), (0, _one(op, "padding", padding)),
                           (1, _one(op, "dilation", dilation)), ceil_mode, return_indices)
    if return_indices:
        return out[0].squeeze(-2), out[1].squeeze(-2)
    return out.squeeze(-2)


def avg_pool1d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
    """The mean over each window of length ``kernel_size`` (``stride`` defaults to it);
    zero padding counts in the divisor with ``count_include_pad``.

    Shape: (N, C, L) or (C, L) → (..., L_out), L_out = floor_or_ceil((L + 2·padding -
    kernel_size) / stride) + 1.

    Example:
        >>> F.avg_pool1d(em.tensor([[[1.0, 3.0, 5.0, 7.0]]]), 2).tolist()
        [[[2.0, 6.0]]]
    """
    op = "avg_pool1d"
    _check_rank(op, input, (2, 3), "(N, C, L) or (C, L)")
    k = _one(op, "kernel_size", kernel_size)
    s = k if stride is None or stride == () else _one(op, "stride", stride)
    out = _conv.avg_pool2d(input.unsqueeze(-2), (1, k), (1, s), (0, _one(op, "padding", padding)),
                           ceil_mode, count_include_pad, None)
    return out.squeeze(-2)


def adaptive_avg_pool1d(input: Tensor, output_size: Any) -> Tensor:
    """The mean over adaptive windows: output cell i of O averages input cells
    floor(i·L/O) to ceil((i+1)·L/O) - 1.

    Shape: (N, C, L) or (C, L) → (..., output_size).

    Example:
        >>> F.adaptive_avg_pool1d(em.tensor([[[1.0, 3.0, 5.0, 7.0]]]), 2).tolist()
        [[[2.0, 6.0]]]
    """
    op = "adaptive_avg_pool1d"
    _check_rank(op, input, (2, 3), "(N, C, L) or (C, L)")
    size = _one(op, "output_size", output_size)
    return _conv.adaptive_avg_pool2d(input.unsqueeze(-2), (1, size)).squeeze(-2)


def _windows(size: int, out: int) -> list[tuple[int, int]]:
    """PyTorch's adaptive windows: [floor(i·S/O), ceil((i+1)·S/O))."""
    return [(i * size // out, -(-(i + 1) * size // out)) for i in range(out)]


def _adaptive_max(x: Tensor, dim: int, out: int, indices: bool) -> tuple[Tensor, Tensor | None]:
    """The max over adaptive windows along ``dim`` (negative) and, if asked, each
    window's chosen position along that dim."""
    size = x.shape[dim]
    d = x.ndim + dim
    if size % out == 0:  # the windows tile the dim: one reshape, one reduction
        k = size // out
        tiled = x.reshape(*x.shape[:d], out, k, *x.shape[d + 1:])
        values = tiled.max(dim=d + 1)
        if not indices:
            return values, None
        starts = (arange(out, device=x.device.inner) * k).reshape(out, *(1,) * (-dim - 1))
        return values, tiled.argmax(dim=d + 1) + starts
    parts, chosen = [], []
    for start, end in _windows(size, out):
        window = _slice(x, d, start, end)
        parts.append(window.max(dim=d, keepdim=True))
        if indices:
            chosen.append(window.argmax(dim=d, keepdim=True) + start)
    return cat(parts, dim=d), (cat(chosen, dim=d) if indices else None)


def _slice(x: Tensor, d: int, start: int, end: int) -> Tensor:
    return x[(slice(None),) * d + (slice(start, end),)]


def _adaptive_sizes(op: str, x: Tensor, output_size: Any, n: int) -> tuple[int, ...]:
    sizes = (output_size,) * n if isinstance(output_size, int) or output_size is None \
        else tuple(output_size)
    if len(sizes) != n:
        raise ValueError(f"{op}: output_size must be an int or a {n}-tuple, got {output_size!r}")
    spatial = x.shape[-n:]
    sizes = tuple(s if o is None else o for o, s in zip(sizes, spatial))
    for o, s in zip(sizes, spatial):
        if not isinstance(o, int) or o <= 0:
            raise ValueError(f"{op}: output sizes must be positive ints, got {output_size!r}")
        if s == 0:
            raise ShapeError(f"{op}: cannot pool an empty spatial dim (input shape {x.shape})")
    return sizes


def adaptive_max_pool1d(input: Tensor, output_size: Any,
                        return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """The max over adaptive windows (as ``adaptive_avg_pool1d``'s); with
    ``return_indices``, also each chosen cell's position along L.

    Shape: (N, C, L) or (C, L) → (..., output_size).

    Example:
        >>> F.adaptive_max_pool1d(em.tensor([[[1.0, 3.0, 5.0, 7.0]]]), 2).tolist()
        [[[3.0, 7.0]]]
    """
    op = "adaptive_max_pool1d"
    _check_rank(op, input, (2, 3), "(N, C, L) or (C, L)")
    (size,) = _adaptive_sizes(op, input, _one(op, "output_size", output_size), 1)
    values, positions = _adaptive_max(input, -1, size, return_indices)
    return (values, positions) if return_indices else values


def adaptive_max_pool2d(input: Tensor, output_size: Any,
                        return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """The max over adaptive windows giving ``output_size`` (an int or an (h, w) pair;
    None keeps that input size): output cell (i, j) covers rows floor(i·H/h) to
    ceil((i+1)·H/h) - 1 and the columns alike.

    With ``return_indices``, also the flat index (row · W + column) of each chosen cell,
    as ``max_pool2d``'s.

    Shape: (N, C, H, W) or (C, H, W) → (..., h, w).

    Example:
        >>> F.adaptive_max_pool2d(em.randn(2, 3, 10, 7), (3, 2)).shape
        (2, 3, 3, 2)
    """
    op = "adaptive_max_pool2d"
    _check_rank(op, input, (3, 4), "(N, C, H, W) or (C, H, W)")
    out_h, out_w = _adaptive_sizes(op, input, output_size, 2)
    columns, column_at = _adaptive_max(input, -1, out_w, return_indices)
    values, row_at = _adaptive_max(columns, -2, out_h, return_indices)
    if not return_indices:
        return values
    width = input.shape[-1]
    return values, row_at * width + column_at.gather(input.ndim - 2, row_at)
