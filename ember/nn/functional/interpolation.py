"""``interpolate``: resampling of the spatial dims, one dim at a time.

Each output cell's source positions and weights are computed on the host from the
sizes alone (as PyTorch's kernels compute them), so a resize is an ``index_select``
per dim (nearest), or two and a weighted sum (linear), and gradients come from those
ops. Linear interpolation is separable: bilinear is linear along H, then along W.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.errors import ShapeError
from ember.nn.functional.pooling import adaptive_avg_pool1d
from ember.ops import conv as _conv
from ember.ops.creation import tensor as make_tensor
from ember.tensor import Tensor

_LINEAR = {"linear": 1, "bilinear": 2, "trilinear": 3}
_MODES = ("nearest", "nearest-exact", "area", *_LINEAR)


def _per_dim(op: str, name: str, value: Any, n: int) -> tuple:
    if isinstance(value, Sequence):
        if len(value) != n:
            raise ValueError(f"{op}: {name} must be a number or a sequence of {n} (one per "
                             f"spatial dim), got {tuple(value)}")
        return tuple(value)
    return (value,) * n


def _output_sizes(op: str, input: Tensor, size: Any, scale_factor: Any,
                  recompute: bool | None) -> tuple[tuple[int, ...], tuple[float | None, ...]]:
    """The output sizes, and the scale each dim's source positions use (None: from sizes)."""
    n = input.ndim - 2
    spatial = input.shape[2:]
    if (size is None) == (scale_factor is None):
        raise ValueError(f"{op}: give exactly one of size and scale_factor")
    if size is not None:
        sizes = tuple(int(s) for s in _per_dim(op, "size", size, n))
        scales: tuple = (None,) * n
    else:
        factors = tuple(float(s) for s in _per_dim(op, "scale_factor", scale_factor, n))
        if any(f <= 0 or not math.isfinite(f) for f in factors):
            raise ValueError(f"{op}: scale_factor must be positive, got {scale_factor!r}")
        sizes = tuple(math.floor(s * f) for s, f in zip(spatial, factors))
        scales = (None,) * n if recompute else factors
    if any(s <= 0 for s in sizes):
        raise ShapeError(f"{op}: output sizes {sizes} must be positive (input shape "
                         f"{input.shape})")
    return sizes, scales


def _scale(size: int, out: int, factor: float | None, align_corners: bool) -> float:
    """PyTorch's area_pixel_compute_scale: input cells per output cell."""
    if align_corners:
        return (size - 1) / (out - 1) if out > 1 else 0.0
    return 1.0 / factor if factor is not None else size / out


def _nearest_positions(size: int, out: int, factor: float | None, exact: bool) -> np.ndarray:
    # In float32, as PyTorch's nearest kernels compute them (the floors match its rounding).
    scale = np.float32(1.0 / factor if factor is not None else size / out)
    dst = np.arange(out, dtype=np.float32) + (np.float32(0.5) if exact else np.float32(0.0))
    return np.minimum(np.floor(dst * scale).astype(np.int64), size - 1)


def _take(x: Tensor, d: int, positions: np.ndarray) -> Tensor:
    """x's cells ``positions`` along dim d: a broadcast and a reshape when each input cell
    is repeated k times in order (integer upscaling), else an ``index_select``."""
    size = x.shape[d]
    out = len(positions)
    if out % size == 0 and np.array_equal(positions, np.arange(out) // (out // size)):
        k = out // size
        if k == 1:
            return x
        tall = x.unsqueeze(d + 1)
        tall = tall.expand(*tall.shape[:d + 1], k, *tall.shape[d + 2:])
        return tall.reshape(*x.shape[:d], out, *x.shape[d + 1:])
    return x.index_select(d, make_tensor(positions, device=x.device.inner))


def _linear_along(x: Tensor, d: int, out: int, factor: float | None,
                  align_corners: bool) -> Tensor:
    size = x.shape[d]
    scale = _scale(size, out, factor, align_corners)
    dst = np.arange(out, dtype=np.float64)
    src = dst * scale if align_corners else np.maximum(scale * (dst + 0.5) - 0.5, 0.0)
    low = np.minimum(np.floor(src).astype(np.int64), size - 1)
    high = np.minimum(low + 1, size - 1)
    frac = src - low
    bcast = (out,) + (1,) * (x.ndim - 1 - d)
    w_high = make_tensor(frac.reshape(bcast), device=x.device.inner).astype(x.dtype)
    w_low = make_tensor((1.0 - frac).reshape(bcast), device=x.device.inner).astype(x.dtype)
    return _take(x, d, low) * w_low + _take(x, d, high) * w_high


def interpolate(input: Tensor, size: Any = None, scale_factor: Any = None,
                mode: str = "nearest", align_corners: bool | None = None,
                recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Tensor:
    """Resize the spatial dims of (N, C, *spatial) to ``size`` or by ``scale_factor``.

    Modes, with PyTorch's source positions: "nearest" (cell floor(dst · scale)),
    "nearest-exact" (floor((dst + 0.5) · scale)), "linear" / "bilinear" / "trilinear"
    (1, 2, 3 spatial dims: weights from the source position
    (dst + 0.5) · scale - 0.5, or dst · (in - 1) / (out - 1) with ``align_corners``),
    and "area" (adaptive average pooling). ``scale`` is 1 / scale_factor when one is
    given (and not ``recompute_scale_factor``), else in / out.

    Args:
        input: (N, C, L), (N, C, H, W) or (N, C, D, H, W).
        size: the output spatial size (an int or one per spatial dim).
        scale_factor: a multiplier (or one per dim); the output size is
            floor(in · scale_factor).
        mode: see above. Default "nearest".
        align_corners: linear modes only; align the corner cells' centres. Default False.
        recompute_scale_factor: take the scale from the computed output size.
        antialias: not supported (False only).

    Shape: (N, C, *spatial) → (N, C, *size).

    Raises:
        ValueError: both or neither of size / scale_factor, an unknown mode,
            ``align_corners`` with a non-linear mode, or ``antialias``.
        ShapeError: a linear mode that does not fit the input's rank.

    Example:
        >>> F.interpolate(em.randn(1, 3, 8, 8), scale_factor=2, mode="bilinear").shape
        (1, 3, 16, 16)
    """
    op = "interpolate"
    if not isinstance(input, Tensor):
        raise TypeError(f"{op}: expected a tensor, got {type(input).__name__}")
    if mode not in _MODES:
        raise ValueError(f"{op}: mode must be one of {', '.join(_MODES)}; got {mode!r}")
    if antialias:
        raise ValueError(f"{op}: antialias=True is not supported")
    if align_corners is not None and mode not in _LINEAR:
        raise ValueError(f"{op}: align_corners can only be set with the linear modes "
                         f"(linear, bilinear, trilinear), not {mode!r}")
    if input.ndim not in (3, 4, 5):
        raise ShapeError(f"{op}: expected a 3-D, 4-D or 5-D input (N, C, *spatial), got shape "
                         f"{input.shape}")
    spatial = input.ndim - 2
    if mode in _LINEAR and _LINEAR[mode] != spatial:
        raise ShapeError(f"{op}: mode {mode!r} needs {_LINEAR[mode] + 2}-D input, got shape "
                         f"{input.shape}")
    sizes, factors = _output_sizes(op, input, size, scale_factor, recompute_scale_factor)
    if any(s == 0 for s in input.shape[2:]):
        raise ShapeError(f"{op}: cannot resize an empty spatial dim (input shape {input.shape})")
    if mode == "area":
        return _area(op, input, sizes)
    x = input
    for i, (out, factor) in enumerate(zip(sizes, factors)):
        d = 2 + i
        if mode in _LINEAR:
            x = _linear_along(x, d, out, factor, bool(align_corners))
        else:
            x = _take(x, d, _nearest_positions(x.shape[d], out, factor, mode == "nearest-exact"))
    return x


def _area(op: str, input: Tensor, sizes: tuple[int, ...]) -> Tensor:
    if input.ndim == 3:
        return adaptive_avg_pool1d(input, sizes[0])
    if input.ndim == 4:
        return _conv.adaptive_avg_pool2d(input, sizes)
    raise ShapeError(f"{op}: mode 'area' takes 3-D or 4-D input, got shape {input.shape}")
