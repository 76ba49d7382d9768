"""3-D convolution and pooling, composed from their 2-D primitives (gradients and every
backend come with them).

The depth axis is folded away: ``conv3d`` stacks, for each output depth, the ``K_d`` input
depth slices its kernel reads into the channels and runs *one* ``conv2d`` over the batch of
output depths (the weight's depth taps become input channels, group by group);
``max_pool3d`` / ``avg_pool3d`` pool every depth slice with the 2-D op, then combine the
``K_d`` slices of each depth window (maximum; sum over the window's cell count).

Layouts are PyTorch's: (N, C, D, H, W) or unbatched (C, D, H, W); weights
(out_channels, in_channels / groups, K_d, K_h, K_w). Where several cells of a max-pooling
window tie across depth, the gradient is shared among them (PyTorch's picks one).
"""

from __future__ import annotations

from typing import Any

from ember.errors import ShapeError
from ember.ops import conv as _conv
from ember.ops import shape as _shape
from ember.ops.creation import full
from ember.tensor import Tensor


def _unbatched(op: str, x: Any) -> tuple[Tensor, bool]:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: expected a tensor, got {type(x).__name__}")
    if x.ndim not in (4, 5):
        raise ShapeError(f"{op}: expected a 4-D (C, D, H, W) or 5-D (N, C, D, H, W) input, got "
                         f"input of shape {x.shape}")
    return (x.unsqueeze(0), True) if x.ndim == 4 else (x, False)


def _pad_depth(x: Tensor, low: int, high: int, value: float) -> Tensor:
    """``x`` (N, C, D, H, W) with ``low`` / ``high`` slices of ``value`` around its depth."""
    if not low and not high:
        return x
    n, c, _, h, w = x.shape
    parts = [full((n, c, p, h, w), value, dtype=x.dtype, device=x.device)
             for p in (low,) if p] + [x] + [
             full((n, c, p, h, w), value, dtype=x.dtype, device=x.device) for p in (high,) if p]
    return _shape.cat(parts, 2)


def _depth_taps(x: Tensor, kernel: int, stride: int, dilation: int, count: int) -> list[Tensor]:
    """For each tap ``k``, the depth slices ``k·dilation + i·stride`` for i < count."""
    return [x[:, :, k * dilation: k * dilation + stride * (count - 1) + 1: stride]
            for k in range(kernel)]


def _fold(t: Tensor) -> Tensor:
    """(N, C, D, H, W) → (N·D, C, H, W)."""
    n, c, d, h, w = t.shape
    return t.permute(0, 2, 1, 3, 4).reshape(n * d, c, h, w)


def _unfold(t: Tensor, n: int) -> Tensor:
    """(N·D, C, H, W) → (N, C, D, H, W)."""
    nd, c, h, w = t.shape
    return t.reshape(n, nd // n if n else 0, c, h, w).permute(0, 2, 1, 3, 4)


def conv3d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    """3-D cross-correlation, as ``torch.nn.functional.conv3d``.

    Args:
        x: (N, C_in, D, H, W) or (C_in, D, H, W), floating point.
        weight: (C_out, C_in / groups, K_d, K_h, K_w).
        bias: (C_out,) or None.
        stride: an int or 3 ints.
        padding: an int, 3 ints, "valid" or "same".
        dilation: an int or 3 ints.
        groups: split the channels into this many independent convolutions.

    Shape:
        D_out = floor((D + 2·padding - dilation·(K_d - 1) - 1) / stride) + 1; H, W alike.

    Example:
        >>> em.nn.functional.conv3d(em.ones(2, 3, 8, 8, 8), em.ones(4, 3, 3, 3, 3)).shape
        (2, 4, 6, 6, 6)
    """
    op = "conv3d"
    x5, unbatched = _unbatched(op, x)
    _conv._floating(op, {"input": x, "weight": weight, "bias": bias})
    if not isinstance(weight, Tensor) or weight.ndim != 5:
        raise ShapeError(f"{op}: expected a 5-D weight (out_channels, in_channels / groups, "
                         f"K_d, K_h, K_w), got weight of shape {getattr(weight, 'shape', None)}")
    (groups,) = _conv._ints(op, "groups", groups, 1, 1)
    strides = _conv._ints(op, "stride", stride, 3, 1)
    dilations = _conv._ints(op, "dilation", dilation, 3, 1)
    pads = _conv._conv_padding(op, padding, 3, weight.shape[2:], strides, dilations)
    n, channels, depth = x5.shape[:3]
    out_channels, per_group, k_d = weight.shape[:3]
    if out_channels % groups or channels != per_group * groups:
        raise ShapeError(f"{op}: input {x.shape} and weight {weight.shape} do not agree with "
                         f"groups={groups}: the input needs {per_group * groups} channels and "
                         f"the output channels must divide by groups")
    padded_depth = depth + pads[0][0] + pads[0][1]
    reach = dilations[0] * (k_d - 1) + 1
    if reach > padded_depth:
        raise ShapeError(f"{op}: kernel depth {reach} (dilation included) is larger than the "
                         f"padded input depth {padded_depth}: input {x.shape}, weight "
                         f"{weight.shape}")
    d_out = (padded_depth - reach) // strides[0] + 1
    x5 = _pad_depth(x5, pads[0][0], pads[0][1], 0.0)
    taps = _depth_taps(x5, k_d, strides[0], dilations[0], d_out)  # each (N, C, D_out, H, W)
    h, w = x5.shape[3:]
    # Channels ordered (group, tap, channel-in-group), so each group's conv2d sees its taps.
    stacked = _shape.stack(taps, 1)  # (N, K_d, C, D_out, H, W)
    stacked = stacked.reshape(n, k_d, groups, per_group, d_out, h, w)
    stacked = stacked.permute(0, 4, 2, 1, 3, 5, 6).reshape(n * d_out, groups * k_d * per_group,
                                                          h, w)
    flat_weight = weight.permute(0, 2, 1, 3, 4).reshape(out_channels, k_d * per_group,
                                                        *weight.shape[3:])
    (hl, hh), (wl, wh) = pads[1], pads[2]
    if hl != hh or wl != wh:  # "same" with an even kernel: pad the high side apart
        stacked = _conv_pad_hw(stacked, pads[1], pads[2])
        hw_padding: Any = 0
    else:
        hw_padding = (hl, wl)
    out = _conv.conv2d(stacked, flat_weight, bias, strides[1:], hw_padding, dilations[1:],
                       groups)
    out = _unfold(out, n)
    return out.squeeze(0) if unbatched else out


def _conv_pad_hw(t: Tensor, h_pad: tuple[int, int], w_pad: tuple[int, int]) -> Tensor:
    """(B, C, H, W) with zero rows / columns around H and W."""
    b, c, h, w = t.shape
    rows = [full((b, c, p, w), 0.0, dtype=t.dtype, device=t.device) for p in h_pad]
    t = _shape.cat([rows[0], t, rows[1]], 2)
    cols = [full((b, c, t.shape[2], p), 0.0, dtype=t.dtype, device=t.device) for p in w_pad]
    return _shape.cat([cols[0], t, cols[1]], 3)


def _pool_depth(op: str, x5: Tensor, kernel: int, stride: int, padding: int, dilation: int,
                ceil_mode: bool) -> int:
    """The number of depth windows (PyTorch's ``pooling_output_shape``)."""
    if padding > kernel // 2:
        raise ShapeError(f"{op}: padding {padding} must be at most half the kernel size "
                         f"{kernel}")
    size = x5.shape[2]
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    count = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (count - 1) * stride >= size + padding:
        count -= 1
    if count < 1 or 0 in x5.shape[1:]:
        raise ShapeError(f"{op}: input {x5.shape} with kernel depth {kernel}, stride {stride}, "
                         f"padding {padding} gives no output")
    return count


def _pool3d_args(op: str, kernel_size: Any, stride: Any, padding: Any,
                 dilation: Any) -> tuple[tuple[int, ...], ...]:
    kernel = _conv._ints(op, "kernel_size", kernel_size, 3, 1)
    strides = kernel if stride is None or stride == () or stride == [] else _conv._ints(
        op, "stride", stride, 3, 1)
    return (kernel, strides, _conv._ints(op, "padding", padding, 3, 0),
            _conv._ints(op, "dilation", dilation, 3, 1))


def max_pool3d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               dilation: Any = 1, ceil_mode: bool = False) -> Tensor:
    """The maximum over each (dilated) 3-D window, as ``torch.nn.functional.max_pool3d``.

    Args:
        x: (N, C, D, H, W) or (C, D, H, W); floating point or integer.
        kernel_size: an int or 3 ints.
        stride: an int or 3 ints; default (None) the kernel size.
        padding: an int or 3 ints, at most half the kernel.
        dilation: an int or 3 ints.
        ceil_mode: round the output size up, as ``max_pool2d``.

    Example:
        >>> em.nn.functional.max_pool3d(em.ones(1, 2, 4, 4, 4), 2).shape
        (1, 2, 2, 2, 2)
    """
    op = "max_pool3d"
    x5, unbatched = _unbatched(op, x)
    kernel, strides, pads, dilations = _pool3d_args(op, kernel_size, stride, padding, dilation)
    count = _pool_depth(op, x5, kernel[0], strides[0], pads[0], dilations[0], bool(ceil_mode))
    n = x5.shape[0]
    planes = _conv.max_pool2d(_fold(x5), kernel[1:], strides[1:], pads[1:], dilations[1:],
                              bool(ceil_mode))
    planes = _unfold(planes, n)
    low = float("-inf") if x5.dtype.kind == "f" else _lowest(x5)
    reach = dilations[0] * (kernel[0] - 1) + strides[0] * (count - 1) + 1
    high = max(reach - pads[0] - x5.shape[2], 0)
    planes = _pad_depth(planes, pads[0], high, low)
    taps = _depth_taps(planes, kernel[0], strides[0], dilations[0], count)
    out = taps[0]
    for tap in taps[1:]:
        out = out.maximum(tap)
    return out.squeeze(0) if unbatched else out


def _lowest(x: Tensor) -> int:
    import numpy as np

    return int(np.iinfo(x.dtype.np).min)


def avg_pool3d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    """The mean over each 3-D window, as ``torch.nn.functional.avg_pool3d``.

    Args:
        x: (N, C, D, H, W) or (C, D, H, W), floating point.
        kernel_size: an int or 3 ints.
        stride: an int or 3 ints; default (None) the kernel size.
        padding: an int or 3 ints, at most half the kernel.
        ceil_mode: round the output size up.
        count_include_pad: count zero padding in each window's divisor. Default True.
        divisor_override: a non-zero int to divide every window's sum by.

    Example:
        >>> em.nn.functional.avg_pool3d(em.ones(1, 2, 4, 4, 4), 2).shape
        (1, 2, 2, 2, 2)
    """
    op = "avg_pool3d"
    x5, unbatched = _unbatched(op, x)
    kernel, strides, pads, _ = _pool3d_args(op, kernel_size, stride, padding, 1)
    count = _pool_depth(op, x5, kernel[0], strides[0], pads[0], 1, bool(ceil_mode))
    if divisor_override is not None and (isinstance(divisor_override, bool)
                                         or not hasattr(divisor_override, "__index__")
                                         or int(divisor_override) == 0):
        raise ShapeError(f"{op}: divisor_override must be a non-zero int, got "
                         f"{divisor_override!r}")
    n, depth = x5.shape[0], x5.shape[2]
    # Each plane's window sum over H and W divided by its own cell count (the 2-D op's
    # rule); the depth combine then divides by the depth cells the window counts.
    plane_divisor = 1 if divisor_override is not None else None
    planes = _conv.avg_pool2d(_fold(x5), kernel[1:], strides[1:], pads[1:], bool(ceil_mode),
                              bool(count_include_pad), plane_divisor)
    planes = _unfold(planes, n)
    reach = kernel[0] + strides[0] * (count - 1)
    high = max(reach - pads[0] - depth, 0)
    planes = _pad_depth(planes, pads[0], high, 0.0)
    taps = _depth_taps(planes, kernel[0], strides[0], 1, count)
    total = taps[0]
    for tap in taps[1:]:
        total = total + tap
    if divisor_override is not None:
        out = total / int(divisor_override)
    else:
        cells = []
        for i in range(count):
            start = i * strides[0] - pads[0]
            end = start + kernel[0]
            if count_include_pad:
                cells.append(min(end, depth + pads[0]) - start)
            else:
                cells.append(min(end, depth) - max(start, 0))
        divisor = _depth_divisor(cells, x5)
        out = total / divisor
    return out.squeeze(0) if unbatched else out


def _depth_divisor(cells: list[int], like: Tensor) -> Any:
    """One divisor per output depth, shaped to broadcast over (N, C, D_out, H, W)."""
    if len(set(cells)) == 1:
        return float(cells[0])
    from ember.ops.creation import tensor

    return tensor([float(c) for c in cells], dtype=like.dtype,
                  device=like.device).reshape(len(cells), 1, 1)
