"""Kernels of the running ops: cumprod, logcumsumexp, cummax, cummin (any NumPy-like module).

NumPy runs them as ufunc accumulations; a module without ``ufunc.accumulate`` for the
combining function (CuPy's logaddexp / maximum / minimum) runs a Hillis–Steele scan of
whole-array steps instead: log2(n) passes, each a vectorized combine of shifted slices.
float16 and bfloat16 compute in float32 and round once, as PyTorch's CPU kernels do.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.dtype import LOW_PRECISION as _LOW_PRECISION
from ember.kernels.numpy.table import NP, kernel, namespace

_F32 = np.dtype(np.float32)


def _lines(x: Any, axis: int) -> Any:
    """``x`` with its scan axis last (a 0-d tensor is one line of one element)."""
    return x.reshape(1) if x.ndim == 0 else namespace(x).moveaxis(x, axis, -1)


def _back(xp: Any, out: Any, axis: int, shape: tuple[int, ...]) -> Any:
    return out.reshape(shape) if not shape else xp.ascontiguousarray(xp.moveaxis(out, -1, axis))


def _accumulate(xp: Any, ufunc_name: str, lines: Any) -> Any:
    """The running ``ufunc`` of ``lines`` along the last axis."""
    ufunc = getattr(xp, ufunc_name)
    if xp is np:
        return ufunc.accumulate(lines, axis=-1)
    out = lines.copy()
    shift = 1
    while shift < out.shape[-1]:
        # The right side is a new array, read before the slice it lands in is written.
        out[..., shift:] = ufunc(out[..., :-shift], out[..., shift:])
        shift *= 2
    return out


@kernel("cumprod")
def _cumprod(msg, pool, x):
    (axis,) = msg.attrs
    out_dtype = NP[msg.dtype]
    acc = _F32 if out_dtype in _LOW_PRECISION else out_dtype
    source = x.reshape(1) if x.ndim == 0 else x
    out = namespace(x).cumprod(source.astype(acc, copy=False), axis=axis)
    return out.astype(out_dtype, copy=False).reshape(msg.shape)


@kernel("logcumsumexp")
def _logcumsumexp(msg, pool, x):
    (axis,) = msg.attrs
    xp = namespace(x)
    out_dtype = NP[msg.dtype]
    acc = _F32 if out_dtype in _LOW_PRECISION else out_dtype
    lines = _lines(x.astype(acc, copy=False), axis)
    with np.errstate(invalid="ignore"):
        out = _accumulate(xp, "logaddexp", lines)
    return _back(xp, out, axis, x.shape).astype(out_dtype, copy=False)


@kernel("cummax", "cummin")
def _running_extreme(msg, pool, x):
    """Values by a running maximum / minimum (NaN wins); the index of each is the last
    position up to it whose value equals the running value (or is NaN where it is NaN):
    the positions where a new value took over or tied, carried forward by a running max."""
    (axis,) = msg.attrs
    xp = namespace(x)
    compute = _F32 if x.dtype in _LOW_PRECISION else x.dtype
    lines = _lines(x.astype(compute, copy=False), axis)
    values = _accumulate(xp, "maximum" if msg.op == "cummax" else "minimum", lines)
    hit = values == lines
    if compute.kind == "f":
        hit |= xp.isnan(lines)
    n = lines.shape[-1]
    positions = xp.where(hit, xp.arange(n, dtype=np.int64), 0)
    indices = _accumulate(xp, "maximum", positions)
    return (_back(xp, values, axis, x.shape).astype(x.dtype, copy=False),
            _back(xp, indices, axis, x.shape))
