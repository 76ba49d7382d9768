"""NumPy kernels of the reductions and cumsum.

float16 and bfloat16 accumulate in float32 and round once on output, as
PyTorch's CPU kernels do; bool and integer sums and products accumulate in
their int64 output. Every result is written into a buffer of exactly the
message's shape (with ``keepdims`` the NumPy shape already is), so a
reduction to a 0-d tensor still yields an array, never a NumPy scalar.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember.dtype import LOW_PRECISION as _LOW_PRECISION
from ember.kernels.numpy import compiled
from ember.kernels.numpy.table import NP, kernel, namespace

_F32 = np.dtype(np.float32)


def _accumulator(out_dtype: np.dtype) -> np.dtype:
    return _F32 if out_dtype in _LOW_PRECISION else out_dtype


def _count(shape: tuple[int, ...], dims: tuple[int, ...]) -> int:
    return math.prod(shape[d] for d in dims)


def _kept(shape: tuple[int, ...], dims: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of a reduction over ``dims`` with ``keepdims=True``."""
    return tuple(1 if i in dims else s for i, s in enumerate(shape))


@kernel("sum", "prod")
def _accumulate(msg, pool, x):
    dims, keepdim = msg.attrs
    xp = namespace(x)
    if xp is np:  # the ufunc's own reduce: NumPy's sum() wrapper costs more than 16 adds
        total = np.add.reduce if msg.op == "sum" else np.multiply.reduce
    else:
        total = xp.sum if msg.op == "sum" else xp.prod
    out_dtype = NP[msg.dtype]
    acc = _accumulator(out_dtype)
    out = total(x, axis=tuple(dims), dtype=acc, keepdims=keepdim,
                out=pool.empty(msg.shape, acc))
    return out.astype(out_dtype, copy=False)


@kernel("mean")
def _mean(msg, pool, x):
    dims, keepdim = msg.attrs
    out_dtype = NP[msg.dtype]
    acc = _accumulator(out_dtype)
    xp = namespace(x)
    total = xp.sum(x, axis=tuple(dims), dtype=acc, keepdims=keepdim,
                   out=pool.empty(msg.shape, acc))
    with np.errstate(invalid="ignore"):  # 0 / 0: the mean of no elements is nan
        xp.divide(total, _count(x.shape, dims), out=total)
    return total.astype(out_dtype, copy=False)


@kernel("max", "min")
def _extreme(msg, pool, x):
    # Exact in every dtype, so no float32 detour; NumPy's maximum propagates NaN
    # as PyTorch does, and warns about it, which is not news here.
    dims, keepdim = msg.attrs
    xp = namespace(x)
    extreme = xp.max if msg.op == "max" else xp.min
    # No out=: CuPy's CUB min rejects it; a NumPy scalar result is wrapped by the backend.
    with np.errstate(invalid="ignore"):
        out = extreme(x, axis=tuple(dims), keepdims=keepdim)
    if xp is np and x.dtype.kind == "f":
        out = _signed_zeros(msg.op, x, out, tuple(dims), keepdim)
    return out


def _signed_zeros(op: str, x: np.ndarray, out: Any, dims: tuple[int, ...],
                  keepdim: bool) -> Any:
    """``out`` with each zero extreme of ``x`` signed as if -0 < +0: +0 for a max where
    the slice holds a +0, -0 for a min where it holds a -0. NumPy's SIMD lanes decide
    between equal ±0 by position; the compiled row kernels (``crows``) need a rule that
    no visiting order changes, and this one gives both paths the same bits."""
    zero = out == 0
    if not zero.any():
        return out
    wanted = (x == 0) & (np.signbit(x) == (op == "min"))
    found = wanted.any(axis=dims, keepdims=keepdim)
    first, other = (0.0, -0.0) if op == "max" else (-0.0, 0.0)
    fixed = np.array(out, copy=True)
    np.copyto(fixed, np.where(found, first, other).astype(out.dtype), where=zero)
    return fixed


@kernel("any", "all")
def _logical(msg, pool, x):
    # NumPy tests numbers for being non-zero (NaN is true), as PyTorch does.
    dims, keepdim = msg.attrs
    xp = namespace(x)
    test = xp.any if msg.op == "any" else xp.all
    return test(x, axis=tuple(dims), keepdims=keepdim,
                out=pool.empty(msg.shape, np.dtype(np.bool_)))


@kernel("logsumexp")
def _logsumexp(msg, pool, x):
    dims, keepdim = msg.attrs
    dims = tuple(dims)
    out_dtype = NP[msg.dtype]
    acc = _accumulator(out_dtype)
    # Shift by the max so exp cannot overflow; an infinite max (all -inf, or a
    # +inf) shifts by 0 instead, since inf - inf would turn the answer into nan.
    # The log-sum of no elements is log(0) = -inf.
    xp = namespace(x)
    if _count(x.shape, dims) == 0:
        return xp.full(msg.shape, -np.inf, out_dtype)
    shifted = x.astype(acc)  # a private copy, worked on in place below
    shift = xp.max(shifted, axis=dims, keepdims=True, out=xp.empty(_kept(x.shape, dims), acc))
    shift[~xp.isfinite(shift)] = 0.0
    # float32 on the host: ember's own exp and log, which the compiled row kernels
    # (``crows``) compute logsumexp with too.
    own = xp is np and acc == _F32
    with np.errstate(invalid="ignore", divide="ignore"):  # NaN in, log(0) = -inf
        xp.subtract(shifted, shift, out=shifted)
        if not (own and compiled.apply_math("exp", shifted, shifted)):
            xp.exp(shifted, out=shifted)
        out = xp.sum(shifted, axis=dims, keepdims=keepdim, out=pool.empty(msg.shape, acc))
        if not (own and compiled.apply_math("log", out, out)):
            xp.log(out, out=out)
    out += shift.reshape(msg.shape)
    return out.astype(out_dtype, copy=False)


@kernel("var", "std")
def _variance(msg, pool, x):
    # Two passes (mean, then squared deviations), as numpy.var: accurate where
    # the one-pass E[x²] - E[x]² cancels catastrophically.
    dims, keepdim, correction = msg.attrs
    dims = tuple(dims)
    out_dtype = NP[msg.dtype]
    acc = _accumulator(out_dtype)
    count = _count(x.shape, dims)
    xp = namespace(x)
    with np.errstate(invalid="ignore", divide="ignore"):  # nan or inf, as in PyTorch
        mean = xp.sum(x, axis=dims, dtype=acc, keepdims=True,
                      out=xp.empty(_kept(x.shape, dims), acc))
        xp.divide(mean, count, out=mean)
        deviation = xp.subtract(x, mean, dtype=acc, out=xp.empty(x.shape, acc))
        xp.multiply(deviation, deviation, out=deviation)
        out = xp.sum(deviation, axis=dims, keepdims=keepdim, out=pool.empty(msg.shape, acc))
        xp.divide(out, max(count - correction, 0), out=out)
        if msg.op == "std":
            xp.sqrt(out, out=out)
    return out.astype(out_dtype, copy=False)


@kernel("argmax", "argmin")
def _arg_extreme(msg, pool, x):
    # np.argmax / np.argmin give the first of equal values and the first NaN,
    # PyTorch's answer. axis None means the flattened tensor (0-d ones too).
    axis, keepdim = msg.attrs
    xp = namespace(x)
    find = xp.argmax if msg.op == "argmax" else xp.argmin
    out = pool.empty(msg.shape, np.dtype(np.int64))
    if axis is None:
        x = x.reshape(-1)
    if xp is not np and x.dtype.kind == "f" and x.size:
        # CuPy's float16 / float64 argmax does not stop at the first NaN: find it apart.
        nan = xp.isnan(x)
        found = find(x, axis=axis, keepdims=keepdim)
        first_nan = xp.argmax(nan, axis=axis, keepdims=keepdim)
        out[...] = xp.where(nan.any(axis=axis, keepdims=keepdim), first_nan, found)
        return out
    if axis is None:
        out[...] = find(x)
        return out
    return find(x, axis=axis, keepdims=keepdim, out=out)


@kernel("cumsum")
def _cumsum(msg, pool, x):
    (axis,) = msg.attrs
    out_dtype = NP[msg.dtype]
    acc = _accumulator(out_dtype)
    out = pool.empty(msg.shape, acc)
    # A 0-d tensor is its own running sum; NumPy wants an axis to run along.
    source = x.reshape(1) if x.ndim == 0 else x
    namespace(x).cumsum(source, axis=axis, dtype=acc, out=out.reshape(source.shape))
    return out.astype(out_dtype, copy=False)
