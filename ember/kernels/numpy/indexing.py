"""NumPy kernels of the indexing ops.

Index values are checked here, on the worker: an out-of-range value raises
``IndexError``, which the reader sees as ``KernelError`` (a GPU pool with
``defer_range_check`` checks on the device instead, read back later: see
``ember/actors/deferred.py``). ``t[key]`` with an
int tensor wraps negative values (as PyTorch does); ``gather``,
``scatter_add`` and ``index_select`` accept only ``[0, size)``, as PyTorch.

``index_add`` is internal: the backward of ``t[key]`` and ``index_select``
(scatter with accumulation, as ``np.add.at``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.dtype import LOW_PRECISION as _LOW_PRECISION
from ember.kernels.numpy.table import kernel, namespace

_F32 = np.dtype(np.float32)


def _numpy_key(entries: tuple) -> tuple:
    """The NumPy basic key of a key's entries; the index tensor's dims become full slices.

    The trailing Ellipsis makes NumPy return a view even when every entry is an int.
    """
    key: list = []
    for entry in entries:
        tag = entry[0]
        if tag == "i":
            key.append(entry[1])
        elif tag == "s":
            key.append(slice(entry[1], entry[2], entry[3]))
        elif tag == "n":
            key.append(None)
        else:
            key.extend((slice(None),) * entry[1])
    key.append(Ellipsis)
    return tuple(key)


def range_error(op: str, bad: int, dim: int, size: int) -> IndexError:
    return IndexError(f"{op}: index {bad} is out of range for dim {dim} of size {size}")


def check_range(pool: Any, op: str, index: Any, low: int, size: int, dim: int) -> None:
    """Raise ``range_error`` unless every value of ``index`` is in ``[low, size)``, or have
    the pool check it on the device (``defer_range_check``: the GPU's, which never waits)."""
    defer = getattr(pool, "defer_range_check", None)
    if defer is not None:
        defer(op, index, low, size, dim)
    elif index.size:
        smallest, largest = int(index.min()), int(index.max())
        if smallest < low or largest >= size:
            raise range_error(op, smallest if smallest < low else largest, dim, size)


@kernel("index")
def _index(msg, pool, x, *index):
    entries, axis = msg.attrs
    view = x[_numpy_key(entries)]
    if not index:
        return view
    if index[0].dtype == np.bool_:
        # Only gradients ask this (index_put's value through a mask), with the count known.
        return view[(slice(None),) * axis + (index[0],)]
    # NumPy's take raises on a bad index; a backend whose take wraps checks first.
    return namespace(x).take(view, index[0], axis=axis, out=pool.empty(msg.shape, x.dtype))


@kernel("index_add")
def _index_add(msg, pool, x, *tensors):
    """``x`` with ``src`` (the last input) added at ``x[key]``; repeated indices accumulate."""
    entries, axis = msg.attrs
    compute = _F32 if x.dtype in _LOW_PRECISION else x.dtype
    out = x.astype(compute)  # a copy: x is never written
    region = out[_numpy_key(entries)]  # a view: adding to it writes into out
    src = tensors[-1]
    if axis is None:
        region += src  # ints, slices and None never reach a position twice
    else:
        namespace(x).add.at(region, (slice(None),) * axis + (tensors[0],), src)
    return out.astype(x.dtype, copy=False)


@kernel("index_put")
def _index_put(msg, pool, x, *tensors):
    entries, axis, scalar = msg.attrs
    out = pool.empty(msg.shape, x.dtype)
    namespace(x).copyto(out, x)
    region = out[_numpy_key(entries)]  # a view: assigning to it writes into out
    value = tensors[-1] if scalar is None else scalar
    if axis is None:
        region[...] = value
    else:
        region[(slice(None),) * axis + (tensors[0],)] = value
    return out


@kernel("gather")
def _gather(msg, pool, x, index):
    (dim,) = msg.attrs
    x = x.reshape(x.shape or (1,))
    index = index.reshape(index.shape or (1,))
    check_range(pool, "gather", index, 0, x.shape[dim], dim)
    # PyTorch reads only x[:index.shape[0], :index.shape[1], ...] outside dim.
    part = x[tuple(slice(None) if d == dim else slice(0, n) for d, n in enumerate(index.shape))]
    return namespace(x).take_along_axis(part, index, axis=dim).reshape(msg.shape)


@kernel("scatter_add")
def _scatter_add(msg, pool, x, index, src):
    (dim,) = msg.attrs
    xp = namespace(x)
    compute = _F32 if x.dtype in _LOW_PRECISION else x.dtype
    if xp is not np and x.dtype == np.bool_:
        compute = np.dtype(np.int32)  # CuPy's add.at has no bool; a count > 0 is True
    out = x.astype(compute).reshape(x.shape or (1,))  # a copy: x is never written
    index = index.reshape(index.shape or (1,))
    src = src.reshape(src.shape or (1,))
    check_range(pool, "scatter_add", index, 0, out.shape[dim], dim)
    src = src.astype(compute, copy=False)
    ndim = index.ndim
    # The positions of index's own grid in every dim but dim, as broadcastable aranges.
    key = tuple(index if d == dim else xp.arange(n).reshape((n,) + (1,) * (ndim - 1 - d))
                for d, n in enumerate(index.shape))
    xp.add.at(out, key, src[tuple(slice(0, n) for n in index.shape)])
    return out.astype(x.dtype, copy=False).reshape(msg.shape)


@kernel("index_select")
def _index_select(msg, pool, x, index):
    (dim,) = msg.attrs
    x = x.reshape(x.shape or (1,))
    index = index.reshape(-1)
    check_range(pool, "index_select", index, 0, x.shape[dim], dim)
    return namespace(x).take(x, index, axis=dim).reshape(msg.shape)


@kernel("masked_fill")
def _masked_fill(msg, pool, x, mask, *value):
    (scalar,) = msg.attrs
    out = pool.empty(msg.shape, x.dtype)
    xp = namespace(x)
    xp.copyto(out, x)
    xp.copyto(out, value[0] if value else scalar, casting="unsafe", where=mask)
    return out
