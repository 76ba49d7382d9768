"""Keys with several int tensors (``x[i, j]``, ``x[:, i, j]``, ``x[i, :, j]``): NumPy's and
PyTorch's advanced indexing, composed from basic indexing, ``permute``, ``reshape`` and one
``index_select`` (gradients and every backend come from those).

The index tensors (and ints beside them) broadcast together to a shape B. B takes the
place of the indexed dims when those are adjacent in the key, and goes first otherwise.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from ember import dtype as _dtype
from ember.errors import DTypeError
from ember.ops._core import broadcast_shapes, same_device
from ember.ops.creation import arange, tensor
from ember.ops.elementwise import where
from ember.ops.shape import expand, permute, reshape
from ember.tensor import Tensor


# PyTorch indexes with int64 / int32 tensors (and bool masks) only: it refuses int8 / int16
# index tensors and reads uint8 ones as masks (deprecated), so ember refuses all three.
INDEX_DTYPES = frozenset({_dtype.int32, _dtype.int64})


def check_key_tensor(op: str, item: Tensor) -> None:
    """Raise ``DTypeError`` for a key tensor that is neither int32 / int64 nor a bool mask."""
    if item.dtype.kind == "b" or item.dtype in INDEX_DTYPES:
        return
    help_ = (" help: for a mask use .bool() (PyTorch's deprecated uint8 masks are not "
             "supported); for indices use .long()" if item.dtype is _dtype.uint8
             else " help: convert with .long()")
    raise DTypeError(f"{op}: an index tensor must be int32, int64 or bool, got "
                     f"{item.dtype.name};{help_}")


def is_multi_index(key: Any) -> bool:
    """Whether ``key`` holds more than one int tensor, list or array (a mask excluded)."""
    if not isinstance(key, tuple):
        return False
    count = 0
    for item in key:
        if isinstance(item, Tensor) and item.dtype.kind in "iu":
            count += 1
        elif isinstance(item, (list, np.ndarray)) and np.asarray(item).dtype.kind in "iu":
            count += 1
    return count > 1


def _as_index(x: Tensor, item: Any) -> Tensor:
    if isinstance(item, Tensor):
        if item.dtype.kind != "i":
            raise DTypeError(f"getitem: with several index tensors, each must hold ints, got "
                             f"{item.dtype.name}")
        check_key_tensor("getitem", item)
        same_device("getitem", (x, item))
        return item
    return tensor(np.asarray(item, dtype=np.int64), device=x.device.inner)


def getitem_multi(x: Tensor, key: tuple) -> Tensor:
    """``x[key]`` for a key with several int tensors (see the module docstring).

    Raises:
        IndexError: too many indices, or an int out of range.
        ShapeError: index tensors that do not broadcast together.
    """
    items = list(key)
    dots = [n for n, i in enumerate(items) if i is Ellipsis]
    if dots:
        at = dots[0]
        used = sum(1 for i in items if i is not None and i is not Ellipsis)
        items[at:at + 1] = [slice(None)] * (x.ndim - used)
    if sum(1 for i in items if i is not None) > x.ndim:
        raise IndexError(f"getitem: too many indices for a tensor of shape {x.shape}")
    # Basic indexing first, every advanced item read as a full slice (a None as a new dim).
    basic, advanced, out_dim = [], [], 0  # advanced: (output dim of the basic result, item)
    for item in items:
        if item is None:
            basic.append(None)
            out_dim += 1
        elif isinstance(item, slice):
            basic.append(item)
            out_dim += 1
        else:
            basic.append(slice(None))
            advanced.append((out_dim, item))
            out_dim += 1
    y = x[tuple(basic)] if basic else x
    dims = [d for d, _ in advanced]
    indices = []
    for d, item in advanced:
        size = y.shape[d]
        if isinstance(item, Tensor) or isinstance(item, (list, np.ndarray)):
            index = _as_index(x, item)
        else:
            value = operator.index(item)
            if not -size <= value < size:
                raise IndexError(f"getitem: index {value} is out of range for a dim of size "
                                 f"{size} (shape {x.shape})")
            index = tensor(value % size if size else value, device=x.device.inner)
        indices.append(where(index < 0, index + size, index))
    shape = broadcast_shapes("getitem", *(i.shape for i in indices))
    rest = [d for d in range(y.ndim) if d not in dims]
    moved = permute(y, dims + rest) if dims + rest != list(range(y.ndim)) else y
    sizes = [y.shape[d] for d in dims]
    flat = reshape(moved, (math.prod(sizes),) + tuple(y.shape[d] for d in rest))
    linear = None
    for index, size, stride in zip(indices, sizes, _strides(sizes)):
        term = expand(index, shape) * stride
        linear = term if linear is None else linear + term
    picked = flat.index_select(0, reshape(linear, (-1,)))
    out = reshape(picked, shape + flat.shape[1:])
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    if adjacent and dims[0] > 0:
        b, first = len(shape), dims[0]
        order = list(range(b, b + first)) + list(range(b)) + list(range(b + first, out.ndim))
        out = permute(out, order)
    return out


def _strides(sizes: list[int]) -> list[int]:
    strides, step = [], 1
    for size in reversed(sizes):
        strides.append(step)
        step *= size
    return strides[::-1]


def index_put_multi(x: Tensor, key: tuple, value: Any) -> Tensor:
    """``x`` with ``x[key]`` replaced by ``value`` (broadcast to its shape), for a key with
    several int tensors: the positions come from indexing ``arange(x.numel())`` with the
    same key, then one single-index ``index_put`` on the flattened tensor."""
    positions = getitem_multi(reshape(arange(math.prod(x.shape), device=x.device.inner),
                                      x.shape), key)
    flat = reshape(x, (-1,))
    if isinstance(value, Tensor) and value.shape != positions.shape:
        value = expand(value, positions.shape)
    if isinstance(value, Tensor):
        value = reshape(value, (-1,))
    return reshape(flat.index_put(reshape(positions, (-1,)), value), x.shape)
