"""NumPy kernels of pooling: max, average and adaptive average, forward and backward.

Windows are read as ``conv``'s strided views of the padded input; the max pool and its
gradient run as compiled C (``windows``) where a C compiler is found, and as running
maxima over the kernel offsets otherwise. Layouts and attributes are ``conv``'s:
``(kernel, stride, padding, dilation, ceil_mode)`` for ``max_pool2d`` and ``(kernel,
stride, padding, ceil_mode, count_include_pad, divisor_override)`` for ``avg_pool2d``;
the output's spatial size is always the message's.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ember.kernels.numpy import windows
from ember.kernels.numpy.conv import (_F32, _LOW_PRECISION, _as, _batched, _col2im,
                                      _compute_dtype, _cover, _output, _phases, _windows)
from ember.kernels.numpy.table import kernel, namespace

def _fill_lowest(dtype: np.dtype) -> float | int:
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _max_windows(msg, x, out_spatial):
    """The input padded with the lowest value (past the padding too, for ceil_mode) and its
    windows, a strided view (N, C, *out, k_h, k_w)."""
    kernel_size, stride, padding, dilation, _ = msg.attrs
    if x.dtype in _LOW_PRECISION:  # exact either way; NumPy is much faster on float32
        x = x.astype(_F32)
    pads = tuple((p, p) for p in padding)
    xp = _cover(x, out_spatial, kernel_size, stride, dilation, pads, _fill_lowest(x.dtype))
    win = _windows(xp, out_spatial, kernel_size, stride, dilation)
    return xp, win


def _window_max(win: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The max of each window of ``win`` (N, C, *out, k_h, k_w), NaN-propagating.

    A running maximum over the kernel offsets: one vectorized pass per offset beats NumPy's
    reduction over the two tiny trailing axes of the strided window view by 5-15x
    (measured: 2x2 and 3x3 windows, batch 64).
    """
    module = namespace(win)
    best = module.empty(win.shape[:4], win.dtype) if out is None else out
    best[...] = win[..., 0, 0]
    with np.errstate(invalid="ignore"):
        for i, j in itertools.product(range(win.shape[4]), range(win.shape[5])):
            if i or j:
                module.maximum(best, win[..., i, j], out=best)
    return best


def _window_argmax(win: np.ndarray) -> np.ndarray:
    """Per window, the offset (row-major in the kernel) of the cell PyTorch's CPU kernel picks.

    That is the first max; with NaNs, the *last* NaN (its loop keeps ``val > max ||
    isnan(val)``, so each later NaN replaces the one before). Every offset is compared
    with the window's max and ranks its matches in a small unsigned running maximum:
    plain ufunc passes, several times faster than ``np.argmax`` over a flattened copy
    of the windows or than masked assignments (measured, 2x2 windows, batch 64).
    """
    best = _window_max(win)
    offsets = list(itertools.product(range(win.shape[4]), range(win.shape[5])))
    count = len(offsets)
    small = np.uint8 if count < 255 else np.uint16 if count < 65535 else np.uint32
    module = namespace(win)
    hit = module.empty(best.shape, np.bool_)
    rank = module.zeros(best.shape, small)  # count - (the first matching offset), 0: none
    for k, offset in enumerate(offsets):
        module.equal(win[(Ellipsis,) + offset], best, out=hit)
        module.maximum(rank, hit.view(np.uint8) * small(count - k), out=rank)
    # Kept small: fresh int64 temporaries of this size cost more (page faults) than the math.
    index = module.subtract(small(count), rank, out=rank)
    if best.dtype.kind == "f" and module.isnan(best).any():
        last = module.zeros(best.shape, small)  # 1 + the last NaN's offset, 0: none
        for k, offset in enumerate(offsets):
            module.isnan(win[(Ellipsis,) + offset], out=hit)
            module.maximum(last, hit.view(np.uint8) * small(k + 1), out=last)
        index = module.where(last > 0, last - small(1), index)
    return index


def _argmax_cells(msg, x, out_spatial):
    """The padded input's shape and, per output, the flat index in its padded plane of the
    window's chosen max."""
    kernel_size, stride, _, dilation, _ = msg.attrs
    xp, win = _max_windows(msg, x, out_spatial)
    width = xp.shape[3]
    module = namespace(x)
    # Window offset k -> its cell's distance from the window's first cell, in the plane.
    offset = (module.arange(kernel_size[0]).reshape(-1, 1) * dilation[0] * width
              + module.arange(kernel_size[1]) * dilation[1]).reshape(-1)
    first = (module.arange(out_spatial[0]).reshape(-1, 1) * stride[0] * width
             + module.arange(out_spatial[1]) * stride[1])
    cells = offset[_window_argmax(win)]
    return xp.shape, module.add(cells, first, out=cells)


def _compiled_max_pool(msg, x, values, indices) -> bool:
    """``windows.run_max_pool`` on the message's windows; False: nothing written."""
    kernel_size, stride, padding, dilation, _ = msg.attrs
    if values is not None and values.dtype != x.dtype:
        return False
    return windows.run_max_pool(x, values, indices, kernel_size, stride, padding, dilation)


@kernel("max_pool2d")
def _max_pool2d(msg, pool, x):
    out, out_b = _output(pool, msg, 2)
    x = _batched(x, 2)
    if _compiled_max_pool(msg, x, out_b, None):
        return out
    _, win = _max_windows(msg, x, out_b.shape[2:])
    if out.dtype == win.dtype:
        _window_max(win, out_b)
    else:
        out_b[...] = _window_max(win)
    return out


@kernel("max_pool2d_indices")
def _max_pool2d_indices(msg, pool, x):
    """PyTorch's ``return_indices``: the flat index ``h · W + w`` in each input plane."""
    out, out_b = _output(pool, msg, 2)
    x = _batched(x, 2)
    if _compiled_max_pool(msg, _as(x, _compute_dtype(x.dtype)), None, out_b):
        return out
    padding = msg.attrs[2]
    padded, cells = _argmax_cells(msg, x, out_b.shape[2:])
    rows, cols = namespace(x).divmod(cells, padded[3])
    out_b[...] = (rows - padding[0]) * x.shape[3] + (cols - padding[1])
    return out


@kernel("max_pool2d_backward")
def _max_pool2d_backward(msg, pool, x, grad):
    """Each output's gradient goes to the cell its window's max came from, summed."""
    out, out_b = _output(pool, msg, 2)
    x = _batched(x, 2)
    compute = _compute_dtype(grad.dtype)
    grad = _as(_batched(grad, 2), compute)
    n, c, h, w = x.shape
    kernel_size, stride, padding, dilation, _ = msg.attrs
    result = out_b if out_b.dtype == compute else namespace(x).empty(out_b.shape, compute)
    if windows.run_max_pool_backward(_as(x, compute), grad, result, kernel_size, stride,
                                     padding, dilation):
        if result is not out_b:
            out_b[...] = result
        return out
    padded, cells = _argmax_cells(msg, x, grad.shape[2:])
    plane = padded[2] * padded[3]
    module = namespace(x)
    cells += module.arange(n * c).reshape(n, c, 1, 1) * plane
    if all(s >= d * (k - 1) + 1 for k, s, d in zip(kernel_size, stride, dilation)):
        # Disjoint windows: no cell is chosen twice, so a plain scatter is enough.
        total = module.zeros(n * c * plane, grad.dtype)
        total[cells.reshape(-1)] = grad.reshape(-1)
    else:
        # Overlapping windows may choose the same cell: bincount sums them, in one pass.
        total = module.bincount(cells.reshape(-1), weights=grad.reshape(-1),
                                minlength=n * c * plane)
    total = total.reshape(n, c, padded[2], padded[3])
    out_b[...] = total[:, :, padding[0]:padding[0] + h, padding[1]:padding[1] + w]
    return out


def _avg_divisor(msg, in_spatial, out_spatial) -> np.ndarray | float:
    """What each window's sum is divided by, exactly as PyTorch's CPU kernel counts it."""
    kernel_size, stride, padding, _, count_include_pad, divisor_override = msg.attrs
    if divisor_override is not None:
        return float(divisor_override)
    sizes = []
    for size, o, k, s, p in zip(in_spatial, out_spatial, kernel_size, stride, padding):
        start = np.arange(o) * s - p
        end = np.minimum(start + k, size + p)  # padding counts; cells past it (ceil_mode) do not
        if not count_include_pad:
            start, end = np.maximum(start, 0), np.minimum(end, size)
        sizes.append(end - start)
    return (sizes[0][:, None] * sizes[1][None, :]).astype(np.float64)


@kernel("avg_pool2d")
def _avg_pool2d(msg, pool, x):
    out, out_b = _output(pool, msg, 2)
    compute = _compute_dtype(out.dtype)
    x = _as(_batched(x, 2), compute)
    kernel_size, stride, padding = msg.attrs[:3]
    out_spatial = out_b.shape[2:]
    xp = _cover(x, out_spatial, kernel_size, stride, (1, 1), tuple((p, p) for p in padding))
    win = _windows(xp, out_spatial, kernel_size, stride, (1, 1))
    # A running sum over the kernel offsets, as in max_pool2d (3-15x faster than np.sum's
    # reduction over the strided window axes, measured).
    total = win[..., 0, 0].copy()
    for i, j in itertools.product(range(kernel_size[0]), range(kernel_size[1])):
        if i or j:
            total += win[..., i, j]
    divisor = _avg_divisor(msg, x.shape[2:], out_spatial)
    total /= divisor if np.isscalar(divisor) else namespace(x).asarray(divisor, compute)
    out_b[...] = total
    return out


@kernel("avg_pool2d_backward")
def _avg_pool2d_backward(msg, pool, grad):
    """col2im of ``grad / divisor``: every cell of a window receives its share."""
    out, out_b = _output(pool, msg, 2)
    compute = _compute_dtype(out.dtype)
    grad = _as(_batched(grad, 2), compute)
    kernel_size, stride, padding = msg.attrs[:3]
    in_spatial = out_b.shape[2:]
    out_spatial = grad.shape[2:]
    divisor = _avg_divisor(msg, in_spatial, out_spatial)
    module = namespace(grad)
    share = grad / (divisor if np.isscalar(divisor) else module.asarray(divisor, compute))
    # The pooled windows read the input as a convolution does: scatter back like its transpose.
    acc = _col2im(module, lambda offset: share, grad.shape[:2], compute, out_spatial, in_spatial,
                  kernel_size, stride, (1, 1), padding)
    for cells, block in _phases(acc, 2, in_spatial, stride):
        out_b[(slice(None), slice(None)) + cells] = block
    return out


def _uniform(size: int, out: int) -> bool:
    """Whether the adaptive windows along a dim are equal and disjoint (a plain reshape)."""
    return out > 0 and size % out == 0


def _adaptive_bins(size: int, out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """PyTorch's adaptive windows along one dim: cell indices (out, widest), mask, lengths.

    Window ``i`` is ``[floor(i·size/out), ceil((i+1)·size/out))``; windows differ in
    length by at most one, so they are gathered padded to the widest and masked.
    """
    i = np.arange(out)
    start = (i * size) // out
    end = ((i + 1) * size + out - 1) // out
    length = end - start
    widest = int(length.max()) if out else 0
    offsets = np.arange(widest)
    mask = offsets[None, :] < length[:, None]
    index = np.minimum(start[:, None] + offsets[None, :], max(size - 1, 0))
    return index, mask, length


@kernel("adaptive_avg_pool2d")
def _adaptive_avg_pool2d(msg, pool, x):
    out, out_b = _output(pool, msg, 2)
    compute = _compute_dtype(out.dtype)
    x = _as(_batched(x, 2), compute)
    (oh, ow), (h, w) = out_b.shape[2:], x.shape[2:]
    if _uniform(h, oh) and _uniform(w, ow):  # equal disjoint windows (global pooling too)
        n, c = x.shape[:2]
        sums = x.reshape(n, c, oh, h // oh, ow, w // ow).sum(axis=(3, 5))
        out_b[...] = sums / ((h // oh) * (w // ow))
        return out
    module = namespace(x)
    index_h, mask_h, length_h = (module.asarray(a) for a in _adaptive_bins(h, oh))
    index_w, mask_w, length_w = (module.asarray(a) for a in _adaptive_bins(w, ow))
    # Sums are separable: gather the (masked) windows along W, sum, then along H. Masking
    # (not multiplying by 0) keeps an inf or NaN inside the windows that contain it.
    rows = module.where(mask_w, x[..., index_w], 0).sum(axis=-1)          # (N, C, H, OW)
    sums = module.where(mask_h[:, :, None], rows[:, :, index_h, :], 0).sum(axis=3)
    sums /= (length_h[:, None] * length_w[None, :]).astype(compute)      # (N, C, OH, OW)
    out_b[...] = sums
    return out


def _adaptive_spread(grad: np.ndarray, axis: int, size: int) -> np.ndarray:
    """The transpose of an adaptive window sum along ``axis`` (last or second to last)."""
    out = grad.shape[axis]
    module = namespace(grad)
    index, mask, _ = (module.asarray(a) for a in _adaptive_bins(size, out))
    moved = module.moveaxis(grad, axis, -1)
    lead = moved.shape[:-1]
    rows = math.prod(lead)
    taps = index.size  # out · widest
    cells = (module.arange(rows).reshape(-1, 1, 1) * size + index[None]).reshape(rows, taps)
    weights = module.broadcast_to(moved.reshape(rows, out, 1), (rows,) + index.shape)
    keep = module.broadcast_to(mask, (rows,) + mask.shape).reshape(rows, taps)
    # Adjacent windows may share a cell: bincount sums them, in one pass.
    total = module.bincount(cells[keep], weights=weights.reshape(rows, taps)[keep],
                            minlength=rows * size)
    return module.moveaxis(total.reshape(lead + (size,)), -1, axis)


@kernel("adaptive_avg_pool2d_backward")
def _adaptive_avg_pool2d_backward(msg, pool, grad):
    out, out_b = _output(pool, msg, 2)
    compute = _compute_dtype(out.dtype)
    grad = _as(_batched(grad, 2), compute)
    (oh, ow), (h, w) = grad.shape[2:], out_b.shape[2:]
    if _uniform(h, oh) and _uniform(w, ow):
        n, c = grad.shape[:2]
        share = grad / ((h // oh) * (w // ow))
        out_b.reshape(n, c, oh, h // oh, ow, w // ow)[...] = share[:, :, :, None, :, None]
        return out
    _, _, length_h = _adaptive_bins(h, oh)
    _, _, length_w = _adaptive_bins(w, ow)
    lengths = namespace(grad).asarray(length_h[:, None] * length_w[None, :])
    share = grad / lengths.astype(compute)
    out_b[...] = _adaptive_spread(_adaptive_spread(share, 3, w), 2, h)
    return out
