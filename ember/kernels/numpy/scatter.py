"""Kernels of ``scatter`` and ``scatter_reduce`` (any NumPy-like module).

Both address the output through ``index``'s own grid: ``index`` in dim ``dim`` and
broadcastable aranges elsewhere (as ``scatter_add``). ``scatter_reduce`` combines with the
ufunc's unbuffered ``at``, so repeated positions all take part; float16 and bfloat16
compute in float32 and round once. CuPy has ``at`` for add, maximum and minimum only (and no
bool), and its maximum/minimum ``at`` round 8-byte values: products, and those, run there
in rounds, each taking one not-yet-used entry per position.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.dtype import LOW_PRECISION as _LOW_PRECISION
from ember.kernels.numpy.indexing import check_range
from ember.kernels.numpy.table import kernel, namespace

_F32 = np.dtype(np.float32)
_UFUNCS = {"sum": "add", "mean": "add", "prod": "multiply", "amax": "maximum",
           "amin": "minimum"}
# CuPy's maximum.at and minimum.at round 8-byte values (float64 through float32 atomics):
# those run in rounds too.
_ROUNDED = ("amax", "amin")


def _operands(op: str, pool: Any, x: Any, index: Any, src: Any, dim: int,
              compute: np.dtype) -> tuple[Any, tuple, Any]:
    """(a copy of ``x`` in ``compute``, the key of ``index``'s positions, src's part)."""
    xp = namespace(x)
    out = x.astype(compute).reshape(x.shape or (1,))  # a copy: x is never written
    index = index.reshape(index.shape or (1,))
    src = src.reshape(src.shape or (1,))
    check_range(pool, op, index, 0, out.shape[dim], dim)
    ndim = index.ndim
    key = tuple(index if d == dim else xp.arange(n).reshape((n,) + (1,) * (ndim - 1 - d))
                for d, n in enumerate(index.shape))
    part = src[tuple(slice(0, n) for n in index.shape)].astype(compute, copy=False)
    return out, key, part


@kernel("scatter")
def _scatter(msg, pool, x, index, src):
    (dim,) = msg.attrs
    out, key, part = _operands("scatter", pool, x, index, src, dim, x.dtype)
    out[key] = part
    return out.reshape(msg.shape)


def _identity(reduce: str, dtype: np.dtype) -> Any:
    """The value that leaves ``reduce`` unchanged (for include_self=False)."""
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if dtype.kind == "f":
        return -np.inf if reduce == "amax" else np.inf
    if dtype.kind == "b":
        return reduce == "amin"
    info = np.iinfo(dtype)
    return info.min if reduce == "amax" else info.max


@kernel("scatter_reduce")
def _scatter_reduce(msg, pool, x, index, src):
    dim, reduce, include_self = msg.attrs
    xp = namespace(x)
    compute = _F32 if x.dtype in _LOW_PRECISION else x.dtype
    if xp is not np and compute == np.bool_:
        compute = np.dtype(np.int32)
    out, key, part = _operands("scatter_reduce", pool, x, index, src, dim, compute)
    if not include_self:
        out[key] = _identity(reduce, compute)
    if xp is not np and (reduce == "prod" or compute.itemsize == 8 and reduce in _ROUNDED):
        _reduce_in_rounds(xp, getattr(xp, _UFUNCS[reduce]), out, key, part)
    else:
        getattr(xp, _UFUNCS[reduce]).at(out, key, part)
    if reduce == "mean":
        count = xp.full(out.shape, 1 if include_self else 0, dtype=np.int64)
        xp.add.at(count, key, 1)
        # Positions nothing reached (count 0) hold x's value: dividing them by 1 keeps it.
        count = xp.maximum(count, 1)
        out = (out // count if compute.kind == "i" else out / count).astype(compute, copy=False)
    return out.astype(x.dtype, copy=False).reshape(msg.shape)


def _reduce_in_rounds(xp: Any, ufunc: Any, out: Any, key: tuple, part: Any) -> None:
    """``ufunc.at(out, key, part)`` from plain fancy-index updates: entries sorted by
    target, round r combines each target's r-th entry (no target twice in a round)."""
    targets = xp.ravel_multi_index(xp.broadcast_arrays(*key), out.shape).reshape(-1)
    values = part.reshape(-1)
    if not targets.size:
        return
    order = xp.argsort(targets, kind="stable")
    targets, values = targets[order], values[order]
    starts = xp.concatenate([xp.ones(1, dtype=bool), targets[1:] != targets[:-1]])
    positions = xp.arange(targets.size)
    rank = positions - _running_max(xp, xp.where(starts, positions, 0))
    flat = out.reshape(-1)
    for r in range(int(rank.max()) + 1):
        chosen = rank == r
        at = targets[chosen]
        flat[at] = ufunc(flat[at], values[chosen])


def _running_max(xp: Any, values: Any) -> Any:
    """A running maximum by whole-array steps (no ``ufunc.accumulate`` in CuPy)."""
    out = values.copy()
    shift = 1
    while shift < out.size:
        out[shift:] = xp.maximum(out[:-shift], out[shift:])
        shift *= 2
    return out
