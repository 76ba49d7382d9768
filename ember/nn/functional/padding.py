"""``pad``: constant padding by concatenation, reflect / replicate / circular by an index
along each padded dim (host-computed positions; gradients through ``cat`` and
``index_select``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ember.errors import ShapeError
from ember.ops.creation import full, tensor
from ember.ops.shape import cat
from ember.tensor import Tensor

_MODES = ("constant", "reflect", "replicate", "circular")


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant",
        value: float | None = None) -> Tensor:
    """Pad the last ``len(pad) // 2`` dims: ``pad`` is (left, right) of the last dim,
    then (left, right) of the one before, and so on, as PyTorch's. Negative amounts crop.

    Modes: "constant" (``value``, default 0), "reflect" (mirror without repeating the
    edge), "replicate" (repeat the edge), "circular" (wrap around). The non-constant
    modes pad 1 to 3 trailing dims of an input with one or two leading (batch,
    channel) dims, as in PyTorch.

    Shape: (*, S) → (*, S + left + right) in each padded dim.

    Raises:
        ValueError: an odd-length ``pad``, an unknown mode, or ``value`` with a
            non-constant mode.
        ShapeError: more padded dims than the input has, a negative output size, or
            reflect / circular amounts larger than the dim allows.

    Example:
        >>> F.pad(em.ones(2, 3), (1, 2)).shape
        (2, 6)
        >>> F.pad(em.arange(4.0).reshape(1, 1, 4), (2, 1), mode="reflect").tolist()
        [[[2.0, 1.0, 0.0, 1.0, 2.0, 3.0, 2.0]]]
    """
    op = "pad"
    if not isinstance(input, Tensor):
        raise TypeError(f"{op}: expected a tensor, got {type(input).__name__}")
    amounts = [int(p) for p in pad]
    if len(amounts) % 2:
        raise ValueError(f"{op}: padding length must be even, got {len(amounts)} ({tuple(pad)})")
    if mode not in _MODES:
        raise ValueError(f"{op}: mode must be one of {', '.join(_MODES)}; got {mode!r}")
    dims = len(amounts) // 2
    if dims > input.ndim:
        raise ShapeError(f"{op}: padding {tuple(pad)} covers {dims} dims but the input has "
                         f"shape {input.shape}")
    if mode != "constant":
        if value is not None and value != 0:
            raise ValueError(f"{op}: padding mode {mode!r} does not take a value")
        if dims > 3 or input.ndim not in (dims + 1, dims + 2):
            raise ShapeError(f"{op}: mode {mode!r} pads the last 1 to 3 dims of an input with 1 "
                             f"or 2 more leading dims; got padding {tuple(pad)} for shape "
                             f"{input.shape}")
    x = input
    for i in range(dims):
        d = x.ndim - 1 - i
        left, right = amounts[2 * i], amounts[2 * i + 1]
        size = x.shape[d]
        if size + left + right < 0:
            raise ShapeError(f"{op}: padding ({left}, {right}) of dim {d} gives a negative size "
                             f"for an input of shape {input.shape}")
        if left == 0 and right == 0:
            continue
        if mode == "constant":
            x = _constant(x, d, left, right, 0.0 if value is None else value)
        else:
            x = x.index_select(d, tensor(_positions(op, mode, size, left, right, d),
                                         device=x.device.inner))
    return x


def _constant(x: Tensor, d: int, left: int, right: int, value: float) -> Tensor:
    size = x.shape[d]
    start, stop = max(-left, 0), size - max(-right, 0)
    if start or stop != size:
        x = x[(slice(None),) * d + (slice(start, max(start, stop)),)]
    parts = []
    for amount in (left, right):
        if amount > 0:
            shape = x.shape[:d] + (amount,) + x.shape[d + 1:]
            parts.append(full(shape, value, dtype=x.dtype, device=x.device.inner))
        else:
            parts.append(None)
    return cat([p for p in (parts[0], x, parts[1]) if p is not None], dim=d)


def _positions(op: str, mode: str, size: int, left: int, right: int, d: int) -> np.ndarray:
    """Which input cell each output cell of a padded dim copies."""
    j = np.arange(-left, size + right, dtype=np.int64)
    if mode == "reflect":
        if max(left, right) >= size:
            raise ShapeError(f"{op}: reflect padding ({left}, {right}) must be smaller than dim "
                             f"{d}'s size {size}")
        return np.abs(size - 1 - np.abs(j - (size - 1)))
    if mode == "replicate":
        if size == 0:
            raise ShapeError(f"{op}: replicate padding of dim {d}, which is empty")
        return np.clip(j, 0, size - 1)
    if max(left, right) > size:
        raise ShapeError(f"{op}: circular padding ({left}, {right}) must not exceed dim {d}'s "
                         f"size {size}")
    return j % size
