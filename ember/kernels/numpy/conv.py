"""NumPy kernels of convolution and pooling: im2col through stride tricks, then BLAS.

A convolution gathers every receptive field of the (padded) input into one
column matrix with a strided view and a single copy (im2col), and contracts
it with the weight by ``np.matmul``: per sample and group for the forward
(written straight into the NCHW result), per group over the whole batch for
the weight gradient. Its transpose multiplies first and then scatters the
columns back (col2im). Depthwise layers (one input channel per group) use
multiply-adds per kernel offset instead of single-row matmuls. The scatter is a loop
over the *kernel offsets* (9 for a 3×3 kernel), each a vectorized add over
every output position at once: the fully vectorized alternatives are clearly
worse (measured on a 3×3 stride-2 input gradient, 32 channels, batch 64:
8 ms here, 52 ms for a ``bincount`` over an int64 index per column entry,
150 ms for ``np.add.at``).

Layouts are PyTorch's: inputs (N, C, *spatial) or unbatched (C, *spatial);
convolution weights (O, C / groups, *kernel); transposed-convolution
weights (C_in, C_out / groups, *kernel). The number of spatial dims comes
from the weight (or the message's output shape), so one kernel serves 1-D
and 2-D. float16 and bfloat16 compute in float32 and round once, as
PyTorch's CPU kernels do.

Attributes, as ``ember/ops/conv.py`` builds them:

- convolutions: ``(stride, padding, dilation, groups)`` with ``padding`` a
  ``(low, high)`` pair per spatial dim;
- pooling: ``(kernel, stride, padding, dilation, ceil_mode)`` (``max_pool2d``)
  and ``(kernel, stride, padding, ceil_mode, count_include_pad,
  divisor_override)`` (``avg_pool2d``); the output's spatial size is always
  the message's.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ember.dtype import LOW_PRECISION as _LOW_PRECISION
from ember.kernels.numpy.table import NP, kernel, namespace

_F32 = np.dtype(np.float32)


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    return _F32 if dtype in _LOW_PRECISION else dtype


def _as(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return x if x.dtype == dtype else x.astype(dtype)


def _batched(x: np.ndarray, spatial: int) -> np.ndarray:
    """``x`` with a batch dim (a view): unbatched inputs are a batch of one."""
    return x if x.ndim == spatial + 2 else x[None]


def _output(pool, msg, spatial: int) -> tuple[np.ndarray, np.ndarray]:
    """The pooled result buffer and a batched view of it (both write the same memory)."""
    out = pool.empty(msg.shape, NP[msg.dtype])
    return out, out.reshape((1,) + out.shape) if len(msg.shape) == spatial + 1 else out


def _pad(x: np.ndarray, padding, value: float = 0.0) -> np.ndarray:
    """``x`` (N, C, *spatial) with ``(low, high)`` cells of ``value`` around each spatial dim."""
    if not any(lo or hi for lo, hi in padding):
        return x
    shape = x.shape[:2] + tuple(s + lo + hi for s, (lo, hi) in zip(x.shape[2:], padding))
    module = namespace(x)
    padded = module.zeros(shape, x.dtype) if value == 0 else module.full(shape, value, x.dtype)
    inner = (slice(None), slice(None)) + tuple(slice(lo, lo + s)
                                               for s, (lo, _) in zip(x.shape[2:], padding))
    padded[inner] = x
    return padded


def _reach(out: int, kernel: int, stride: int, dilation: int) -> int:
    """How many input cells the windows of ``out`` outputs span along one dim."""
    return (out - 1) * stride + dilation * (kernel - 1) + 1 if out > 0 else 0


def _cover(x: np.ndarray, out_spatial, kernel, stride, dilation, padding,
           value: float = 0.0) -> np.ndarray:
    """``x`` padded by ``padding`` and, if the windows run past it (ceil_mode), beyond."""
    pads = []
    for size, o, k, s, d, (lo, hi) in zip(x.shape[2:], out_spatial, kernel, stride, dilation,
                                          padding):
        pads.append((lo, max(hi, _reach(o, k, s, d) - size - lo)))
    return _pad(x, pads, value)


def _windows(xp: np.ndarray, out_spatial, kernel, stride, dilation) -> np.ndarray:
    """A read-only strided view (N, C, *out_spatial, *kernel) of every receptive field."""
    for size, o, k, s, d in zip(xp.shape[2:], out_spatial, kernel, stride, dilation):
        if _reach(o, k, s, d) > size:  # as_strided would read past the buffer
            raise RuntimeError(f"windows of {tuple(out_spatial)} outputs overrun the padded "
                               f"input {xp.shape}")
    strides = xp.strides
    spatial_strides = strides[2:]
    shape = xp.shape[:2] + tuple(out_spatial) + tuple(kernel)
    strides = (strides[:2] + tuple(st * s for st, s in zip(spatial_strides, stride))
               + tuple(st * d for st, d in zip(spatial_strides, dilation)))
    module = namespace(xp)
    if module is np:
        return as_strided(xp, shape=shape, strides=strides, writeable=False)
    return module.lib.stride_tricks.as_strided(xp, shape=shape, strides=strides)


def _columns(xp: np.ndarray, out_spatial, kernel, stride, dilation, groups: int,
             batch_major: bool) -> np.ndarray:
    """im2col, contiguous: every receptive field of ``xp`` as a column.

    ``batch_major``: (N, groups, C/groups · prod(kernel), prod(out_spatial)), for a matmul
    per sample that writes (N, C_out, positions) straight into NCHW. Otherwise
    (groups, C/groups · prod(kernel), N · prod(out_spatial)), for one matmul per group
    that sums over the batch too (the weight gradient).
    """
    n, c = xp.shape[:2]
    spatial = len(kernel)
    win = _windows(xp, out_spatial, kernel, stride, dilation)
    offsets = tuple(range(2 + spatial, 2 + 2 * spatial))
    positions = tuple(range(2, 2 + spatial))
    rows = (c // groups) * math.prod(kernel)
    if batch_major:  # (N, C, *out, *k) -> (N, C, *k, *out)
        cols = namespace(xp).ascontiguousarray(win.transpose((0, 1) + offsets + positions))
        return cols.reshape(n, groups, rows, math.prod(out_spatial))
    # (N, C, *out, *k) -> (C, *k, N, *out)
    cols = namespace(xp).ascontiguousarray(win.transpose((1,) + offsets + (0,) + positions))
    return cols.reshape(groups, rows, n * math.prod(out_spatial))


def _add_bias(out: np.ndarray, bias: np.ndarray | None) -> None:
    if bias is not None:
        out += _as(bias, out.dtype).reshape((1, -1) + (1,) * (out.ndim - 2))


def _depthwise(result: np.ndarray, xp: np.ndarray, w: np.ndarray, stride, dilation,
               groups: int) -> None:
    """A convolution with one input channel per group, as multiply-adds per kernel offset.

    Its matmuls would have a single row each (thousands of 1 x 9 products for a 3x3
    depthwise layer): one broadcast multiply-add per offset over the whole batch is
    faster (measured, 3x3 on 64 channels of 16x16, batch 64: 16 ms against 20 ms here,
    and 22 ms against 58 ms for the input gradient, the same way in ``_conv_transpose``).
    """
    n, spatial = xp.shape[0], w.ndim - 2
    kernel_size = w.shape[2:]
    multiplier = w.shape[0] // groups
    out = result.reshape((n, groups, multiplier) + result.shape[2:])
    win = _windows(xp, result.shape[2:], kernel_size, stride, dilation)[:, :, None]
    weight = w.reshape((groups, multiplier) + tuple(kernel_size))
    module = namespace(xp)
    scratch = module.empty(out.shape, out.dtype)
    for index, offset in enumerate(itertools.product(*(range(k) for k in kernel_size))):
        taps = weight[(slice(None), slice(None)) + offset].reshape(
            (groups, multiplier) + (1,) * spatial)
        target = out if index == 0 else scratch
        module.multiply(win[(Ellipsis,) + offset], taps, out=target)
        if index:
            out += scratch


@kernel("conv1d", "conv2d")
def _conv(msg, pool, x, w, b=None):
    stride, padding, dilation, groups = msg.attrs
    spatial = w.ndim - 2
    out, out_b = _output(pool, msg, spatial)
    compute = _compute_dtype(out.dtype)
    x = _as(_batched(x, spatial), compute)
    n = x.shape[0]
    out_spatial = out_b.shape[2:]
    module = namespace(x)
    result = out_b if compute == out.dtype else module.empty(out_b.shape, compute)
    if w.shape[1] == 1 and groups > 1:
        _depthwise(result, _pad(x, padding), _as(w, compute), stride, dilation, groups)
    else:
        cols = _columns(_pad(x, padding), out_spatial, w.shape[2:], stride, dilation, groups,
                        batch_major=True)
        weight = _as(w, compute).reshape(groups, w.shape[0] // groups, math.prod(w.shape[1:]))
        # One matmul per sample and group, written straight into the NCHW result.
        module.matmul(weight, cols, out=result.reshape(n, groups, w.shape[0] // groups,
                                                       math.prod(out_spatial)))
    _add_bias(result, b)
    if result is not out_b:
        out_b[...] = result
    return out


@kernel("conv_weight_grad")
def _conv_weight_grad(msg, pool, x, grad):
    """∂L/∂weight of a convolution: its columns contracted with the output's gradient."""
    stride, padding, dilation, groups = msg.attrs
    spatial = len(msg.shape) - 2
    compute = _compute_dtype(NP[msg.dtype])
    x = _as(_batched(x, spatial), compute)
    grad = _as(_batched(grad, spatial), compute)
    n, o = grad.shape[:2]
    cols = _columns(_pad(x, padding), grad.shape[2:], msg.shape[2:], stride, dilation, groups,
                    batch_major=False)
    # One matmul per group over (batch · positions): channels first, batch next to positions.
    positions = math.prod(grad.shape[2:])
    module = namespace(x)
    g = module.ascontiguousarray(module.swapaxes(grad.reshape(n, o, positions), 0, 1))
    result = module.matmul(g.reshape(groups, o // groups, n * positions),
                           module.swapaxes(cols, 1, 2))
    out = pool.empty(msg.shape, NP[msg.dtype])
    out[...] = result.reshape(msg.shape)
    return out


def _col2im(module, pieces, lead: tuple, dtype: np.dtype, in_spatial, out_spatial, kernel,
            stride, dilation, crop) -> np.ndarray:
    """Scatter-add each kernel offset's piece (*lead, *in_spatial) to the cells it reaches.

    Input cell ``t`` at kernel offset ``j`` lands on output cell ``t·s + j·d - crop``
    (cells outside ``[0, out)`` are dropped). The sum is kept phase-major, shape
    (*stride, *lead, *ceil(out / stride)): output cell ``y`` is at phase ``y mod s``,
    row ``y // s``, so that every add writes contiguous rows (a strided destination
    is ~3x slower); ``_phases`` interleaves the phases back.
    """
    rows = tuple(-(-o // s) for o, s in zip(out_spatial, stride))
    acc = module.zeros(tuple(stride) + tuple(lead) + rows, dtype)
    skip = (slice(None),) * len(lead)
    for offset in itertools.product(*(range(k) for k in kernel)):
        phase, target, source = [], [], []
        for j, n_in, n_out, s, d, lo in zip(offset, in_spatial, out_spatial, stride, dilation,
                                           crop):
            first = j * d - lo                   # where input cell 0 lands
            a = first % s
            q = (first - a) // s
            t_lo = max(0, -(first // s))         # first input cell landing at y >= 0
            t_hi = min(n_in, -(-(n_out - first) // s))  # past the last landing at y < out
            phase.append(a)
            target.append(slice(q + t_lo, q + max(t_hi, t_lo)))
            source.append(slice(t_lo, max(t_hi, t_lo)))
        if any(t.start == t.stop for t in source):
            continue
        acc[tuple(phase) + skip + tuple(target)] += pieces(offset)[skip + tuple(source)]
    return acc


def _phases(acc: np.ndarray, lead: int, out_spatial, stride):
    """(output slices, phase block) pairs covering every output cell of ``_col2im``'s sum."""
    for phase in itertools.product(*(range(s) for s in stride)):
        sizes = [-(-(o - a) // s) for o, a, s in zip(out_spatial, phase, stride)]
        if any(n <= 0 for n in sizes):
            continue
        block = acc[phase + (slice(None),) * lead + tuple(slice(0, n) for n in sizes)]
        yield tuple(slice(a, None, s) for a, s in zip(phase, stride)), block


@kernel("conv_transpose1d", "conv_transpose2d")
def _conv_transpose(msg, pool, x, w, b=None):
    """The transpose of a convolution (its input gradient): matmul, then col2im."""
    stride, padding, dilation, groups = msg.attrs
    spatial = w.ndim - 2
    out, out_b = _output(pool, msg, spatial)
    compute = _compute_dtype(out.dtype)
    x = _as(_batched(x, spatial), compute)
    n, c_in = x.shape[:2]
    in_spatial = x.shape[2:]
    kernel_size = w.shape[2:]
    c_out = w.shape[1] * groups
    out_spatial = out_b.shape[2:]
    if c_in == groups and groups > 1:
        # One input channel per group: each offset's piece is a broadcast product (a matmul
        # per sample and group would have a single column; see _depthwise).
        taps = _as(w, compute).reshape((1, c_out) + tuple(kernel_size) + (1,) * spatial)
        source = namespace(x).repeat(x, c_out // c_in, axis=1) if c_out != c_in else x

        def pieces(offset):
            return source * taps[(slice(None), slice(None)) + offset]
    else:
        # Per sample and group: (C_out/groups · k, C_in/groups) @ (C_in/groups, positions).
        weight = _as(w, compute).reshape(groups, c_in // groups, math.prod(w.shape[1:]))
        module = namespace(x)
        cols = module.matmul(module.swapaxes(weight, 1, 2),
                             x.reshape(n, groups, c_in // groups, math.prod(in_spatial)))
        cols = cols.reshape((n, c_out) + tuple(kernel_size) + tuple(in_spatial))

        def pieces(offset):
            return cols[(slice(None), slice(None)) + offset]
    acc = _col2im(namespace(x), pieces, (n, c_out), compute, in_spatial, out_spatial, kernel_size, stride,
                  dilation, [lo for lo, _ in padding])
    if b is not None:
        acc += _as(b, compute).reshape((-1,) + (1,) * spatial)
    for cells, block in _phases(acc, 2, out_spatial, stride):
        out_b[(slice(None), slice(None)) + cells] = block
    return out


# ----- pooling ----------------------------------------------------------------------------

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


@kernel("max_pool2d")
def _max_pool2d(msg, pool, x):
    out, out_b = _output(pool, msg, 2)
    _, win = _max_windows(msg, _batched(x, 2), out_b.shape[2:])
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
    grad = _as(_batched(grad, 2), _compute_dtype(grad.dtype))
    n, c, h, w = x.shape
    kernel_size, stride, padding, dilation, _ = msg.attrs
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
