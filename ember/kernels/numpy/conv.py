"""NumPy kernels of convolution: im2col, then BLAS; the transpose multiplies, then col2im.

A convolution gathers every receptive field of the input into one column
matrix (im2col) and contracts it with the weight by ``np.matmul``: per sample
and group for the forward (written straight into the NCHW result), per group
over the whole batch for the weight gradient. Its transpose multiplies first
and then scatters the columns back (col2im). On NumPy arrays, im2col and
col2im are compiled C loops (``windows``) into pooled scratch buffers, the
padding a bounds test; elsewhere (no C compiler, a GPU array module) im2col
is a strided view of the padded input copied once, and col2im a loop over
the *kernel offsets* (9 for a 3×3 kernel), each a vectorized add over every
output position at once (a ``bincount`` or ``np.add.at`` over every column
entry is much slower).
Depthwise layers (one input channel per group) use multiply-adds per kernel
offset instead of single-row matmuls.

Layouts are PyTorch's: inputs (N, C, *spatial) or unbatched (C, *spatial);
convolution weights (O, C / groups, *kernel); transposed-convolution
weights (C_in, C_out / groups, *kernel). The number of spatial dims comes
from the weight (or the message's output shape), so one kernel serves 1-D
and 2-D. float16 and bfloat16 compute in float32 and round once, as
PyTorch's CPU kernels do.

Attributes, as ``ember/ops/conv.py`` builds them: ``(stride, padding,
dilation, groups)`` with ``padding`` a ``(low, high)`` pair per spatial dim.
Pooling kernels are in ``pooling``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ember.dtype import LOW_PRECISION as _LOW_PRECISION
from ember.kernels.numpy import blas_threads, windows
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


def _im2col(pool, x: np.ndarray, padding, out_spatial, kernel, stride, dilation, groups: int,
            batch_major: bool) -> np.ndarray:
    """``_columns`` of ``x`` padded by ``padding``: compiled C into a pooled buffer where
    it can be (the caller releases it), else NumPy's strided copy."""
    n, c = x.shape[:2]
    rows = (c // groups) * math.prod(kernel)
    positions = math.prod(out_spatial)
    shape = (n, groups, rows, positions) if batch_major else (groups, rows, n * positions)
    if type(x) is np.ndarray:
        cols = pool.empty(shape, x.dtype)
        if windows.run_im2col(x, cols, out_spatial, kernel, stride, [lo for lo, _ in padding],
                              dilation, batch_major):
            return cols
    return _columns(_pad(x, padding), out_spatial, kernel, stride, dilation, groups,
                    batch_major)


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
        cols = _im2col(pool, x, padding, out_spatial, w.shape[2:], stride, dilation, groups,
                       batch_major=True)
        weight = _as(w, compute).reshape(groups, w.shape[0] // groups, math.prod(w.shape[1:]))
        # One matmul per sample and group, written straight into the NCHW result.
        blas_threads.matmul(module, weight, cols,
                            out=result.reshape(n, groups, w.shape[0] // groups,
                                               math.prod(out_spatial)))
        if type(cols) is np.ndarray:  # scratch: the pool takes it back if nothing holds it
            pool.release(cols)
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
    cols = _im2col(pool, x, padding, grad.shape[2:], msg.shape[2:], stride, dilation, groups,
                   batch_major=False)
    # One matmul per group over (batch · positions): channels first, batch next to positions.
    # Columns on the left keep both operands' rows contiguous along the contraction, the
    # layout BLAS runs fastest here; the small (taps, O) result is transposed on the copy out.
    positions = math.prod(grad.shape[2:])
    module = namespace(x)
    g = module.ascontiguousarray(module.swapaxes(grad.reshape(n, o, positions), 0, 1))
    result = module.swapaxes(blas_threads.matmul(
        module, cols, module.swapaxes(g.reshape(groups, o // groups, n * positions), 1, 2)), 1, 2)
    if type(cols) is np.ndarray:  # scratch: the pool takes it back if nothing holds it
        pool.release(cols)
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
        product = (module.swapaxes(weight, 1, 2),
                   x.reshape(n, groups, c_in // groups, math.prod(in_spatial)))
        if type(x) is np.ndarray:
            cols = pool.empty((n, groups, math.prod(w.shape[1:]), math.prod(in_spatial)),
                              compute)
            blas_threads.matmul(module, *product, out=cols)
            result = out_b if compute == out.dtype else np.empty(out_b.shape, compute)
            if windows.run_col2im(cols, result, in_spatial, kernel_size, stride,
                                  [lo for lo, _ in padding], dilation, batch_major=True):
                pool.release(cols)  # scratch: the pool takes it back if nothing holds it
                _add_bias(result, b)
                if result is not out_b:
                    out_b[...] = result
                return out
        else:
            cols = blas_threads.matmul(module, *product)
        cols = cols.reshape((n, c_out) + tuple(kernel_size) + tuple(in_spatial))

        def pieces(offset):
            return cols[(slice(None), slice(None)) + offset]
    acc = _col2im(namespace(x), pieces, (n, c_out), compute, in_spatial, out_spatial,
                  kernel_size, stride, dilation, [lo for lo, _ in padding])
    if b is not None:
        acc += _as(b, compute).reshape((-1,) + (1,) * spatial)
    for cells, block in _phases(acc, 2, out_spatial, stride):
        out_b[(slice(None), slice(None)) + cells] = block
    return out
