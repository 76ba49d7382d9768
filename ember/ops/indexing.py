"""Indexing: ``t[key]``, ``index_put``, gather, scatter_add, index_select and masked_fill.

A key is checked and turned into plain data on the caller's thread: one
entry per key item, ``("i", n)`` an int, ``("s", start, stop, step)`` a
slice (bounds already clipped), ``("n",)`` a None and ``("t", k)`` the one
index tensor, consuming ``k`` dims. The ``index`` kernel rebuilds the NumPy
key from that, applies it (a view), then takes the index tensor's entries.

As in PyTorch, ints and slices index first and the index tensor after, so
``t[0, :, idx]`` keeps the slice's dim in front (NumPy would move the index
dims first). A bool mask selects the positions where it is true; the result's
size along it depends on the data, so ``t[mask]`` reads the mask (a blocking
read, the only sync in this module) and indexes with its true positions.
``index_put`` needs no read: its result has the shape of ``t``.

The backward rules sit at the end. Gradients flow back through ``t[key]``
and ``index_select`` by an internal ``index_add`` op (a scatter that
accumulates repeated indices, as ``np.add.at``), through ``gather`` by
``scatter_add`` and through ``scatter_add`` by ``gather``.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from ember import dtype as _dtype
from ember.ops.gradient_rules import differentiable
from ember.errors import DimError, DTypeError, ShapeError
from ember.op_kinds import OTHER, declare
from ember.ops import dtype_rules as rules
from ember.ops.advanced_indexing import (INDEX_DTYPES, check_key_tensor, getitem_multi,
                                        index_put_multi, is_multi_index)
from ember.ops._core import broadcast_shapes, call, normalize_dim, same_device
from ember.ops.creation import tensor as _tensor
from ember.ops.creation import zeros
from ember.ops.elementwise import where
from ember.ops.shape import reshape, sum_to
from ember.tensor import Tensor

declare(OTHER, "index", "index_put", "index_add", "index_select", "gather", "scatter_add",
        "masked_fill", dtype_rule=rules.keep)

_SCALARS = (bool, int, float, np.bool_, np.integer, np.floating)


def _check_tensor(op: str, x: Any, what: str = "input") -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: expected a tensor as {what}, got {type(x).__name__}")


def _check_index_dtype(op: str, index: Any) -> None:
    _check_tensor(op, index, "index")
    if index.dtype not in INDEX_DTYPES:
        raise DTypeError(f"{op}: the index must be an int32 or int64 tensor, got "
                         f"{index.dtype.name}; help: convert with .to(em.int64)")


def _scalar(op: str, value: Any) -> bool | int | float:
    if isinstance(value, _SCALARS):
        return value.item() if isinstance(value, np.generic) else value
    raise TypeError(f"{op}: the value must be a tensor or a Python scalar, got "
                    f"{type(value).__name__}")


# ----- keys ----------------------------------------------------------------------------------


def _is_mask(item: Any) -> bool:
    if isinstance(item, Tensor):
        return item.dtype.kind == "b"
    return isinstance(item, np.ndarray) and item.dtype.kind == "b"


def _host_index(op: str, x: Tensor, item: list | np.ndarray) -> Tensor | np.ndarray:
    """A list or NumPy array in a key: a host bool mask stays on the host, ints go to x's device."""
    if isinstance(item, list):
        array = np.asarray(item) if item else np.zeros(0, np.int64)
        if array.ndim != 1:
            raise IndexError(f"{op}: nested lists are not supported as an index (PyTorch "
                             f"reads them as several indices); help: pass em.tensor(...) for "
                             f"a multi-dim index")
        if array.dtype.kind in "iu":
            array = array.astype(np.int64)
    else:
        array = item
        if array.dtype.kind in "iu" and array.dtype.itemsize < 4:
            array = array.astype(np.int64)  # NumPy's small ints index as ints, never as masks
    if array.dtype.kind == "b":
        return array
    if array.dtype.kind not in "iu":
        raise DTypeError(f"{op}: an index array must hold ints or bools, got {array.dtype}")
    return _tensor(array, device=x.device)


def _key_items(op: str, x: Tensor, key: Any) -> list:
    """The key as a list of ints, slices, None, Ellipsis, int tensors and bool masks."""
    items = []
    for item in key if isinstance(key, tuple) else (key,):
        if item is None or item is Ellipsis or isinstance(item, slice):
            items.append(item)
        elif isinstance(item, Tensor):
            check_key_tensor(op, item)
            items.append(item)
        elif isinstance(item, (bool, np.bool_)):
            items.append(np.array(bool(item)))  # a 0-d mask, as in PyTorch: t[True] adds a dim
        elif isinstance(item, (list, np.ndarray)):
            items.append(_host_index(op, x, item))
        elif hasattr(item, "__index__"):
            items.append(operator.index(item))
        else:
            raise TypeError(f"{op}: cannot index with {type(item).__name__}; expected ints, "
                            f"slices, None, ..., or an int/bool tensor")
    if sum(isinstance(i, (Tensor, np.ndarray)) for i in items) > 1:
        raise IndexError(f"{op}: only one tensor (or list) index is supported per key; help: "
                         f"index in two steps")
    if sum(i is Ellipsis for i in items) > 1:
        raise IndexError(f"{op}: an index can only have a single ellipsis (...)")
    return items


def _counts(op: str, x: Tensor, items: list) -> list[int]:
    """How many dims of ``x`` each key item consumes."""
    counts = [0 if i is None else i.ndim if _is_mask(i) else 1 for i in items]
    fill = x.ndim - sum(c for c, i in zip(counts, items) if i is not Ellipsis)
    if fill < 0:
        raise IndexError(f"{op}: too many indices for a tensor of shape {x.shape}")
    return [fill if i is Ellipsis else c for c, i in zip(counts, items)]


def _slice(op: str, item: slice, size: int) -> tuple[int, int, int]:
    bounds = []
    for value in (item.start, item.stop, item.step):
        if value is not None and (isinstance(value, Tensor) or not hasattr(value, "__index__")):
            raise TypeError(f"{op}: slice bounds must be ints or None, got {value!r}")
        bounds.append(None if value is None else operator.index(value))
    step = bounds[2]
    if step is not None and step <= 0:
        raise ValueError(f"{op}: slice step must be greater than zero, got {step} (as in "
                         f"PyTorch); help: reverse with an index tensor, "
                         f"t[em.arange(n - 1, -1, -1)]")
    return slice(*bounds).indices(size)


def _walk(op: str, x: Tensor, items: list, counts: list[int]) -> tuple[tuple, tuple, Any, Any]:
    """(entries, result shape, output axis of the index tensor, the index tensor).

    A mask's dim in the shape is -1: how many positions it selects is unknown.
    """
    entries: list[tuple] = []
    shape: list[int] = []
    axis = index = None
    d = 0
    for item, n in zip(items, counts):
        if item is None:
            entries.append(("n",))
            shape.append(1)
        elif item is Ellipsis:
            entries.extend(("s", 0, size, 1) for size in x.shape[d:d + n])
            shape.extend(x.shape[d:d + n])
        elif isinstance(item, slice):
            start, stop, step = _slice(op, item, x.shape[d])
            entries.append(("s", start, stop, step))
            shape.append(len(range(start, stop, step)))
        elif isinstance(item, int):
            size = x.shape[d]
            if not -size <= item < size:
                raise IndexError(f"{op}: index {item} is out of range for dim {d} of size {size} "
                                 f"(shape {x.shape})")
            entries.append(("i", item + size if item < 0 else item))
        else:
            entries.append(("t", n))
            axis, index = len(shape), item
            shape.extend((-1,) if _is_mask(item) else item.shape)
        d += n
    shape.extend(x.shape[d:])
    return tuple(entries), tuple(shape), axis, index


def _mask_positions(op: str, x: Tensor, mask: Tensor | np.ndarray,
                    start: int) -> tuple[Tensor, Tensor]:
    """``x`` with the masked dims merged into one, and the flat positions where the mask is true.

    Reads a tensor mask: a blocking read, since the result's size depends on it.
    """
    k = mask.ndim
    if x.shape[start:start + k] != tuple(mask.shape):
        raise IndexError(f"{op}: a mask of shape {tuple(mask.shape)} does not match dims "
                         f"{start}..{start + k - 1} of the indexed tensor of shape {x.shape}")
    host = mask if isinstance(mask, np.ndarray) else mask.numpy()
    positions = _tensor(np.flatnonzero(host), device=x.device)
    if k != 1:
        x = reshape(x, (x.shape[:start] + (math.prod(mask.shape),) + x.shape[start + k:],))
    return x, positions


def getitem(x: Tensor, key: Any) -> Tensor:
    """``x[key]``: ints, slices with positive steps, None, ``...`` and one int or bool tensor.

    An int removes its dim; a slice keeps it; None inserts a size-1 dim. An
    int tensor (or list of ints) of shape S along dim d puts S in place of d
    (negative entries count from the end). A bool mask (tensor, list or
    Python bool) of shape equal to the k dims it covers replaces them with
    one dim, the number of true entries; a mask *tensor* is read to find it,
    which waits for the device (and so cannot be called inside a trio task).

    Raises:
        IndexError: an int out of range (naming the dim and its size), too
            many indices, two tensor indices or two ellipses, or a mask whose
            shape does not match the dims it covers.
        ValueError: a slice step that is zero or negative (as in PyTorch).
        DTypeError: a float index tensor.

    Index tensor *values* out of range surface at the read as ``KernelError``.

    Example:
        >>> em.arange(12).reshape(3, 4)[1:, em.tensor([0, 3])].tolist()
        [[4, 7], [8, 11]]
    """
    if is_multi_index(key):
        return getitem_multi(x, key)
    items = _key_items("getitem", x, key)
    counts = _counts("getitem", x, items)
    for pos, item in enumerate(items):
        if _is_mask(item):
            if isinstance(item, Tensor):
                same_device("getitem", (x, item))
            x, items[pos] = _mask_positions("getitem", x, item, sum(counts[:pos]))
            counts[pos] = 1
    entries, shape, axis, index = _walk("getitem", x, items, counts)
    if index is None:
        return call("index", (x,), shape, x.dtype, (entries, axis))
    same_device("getitem", (x, index))
    return call("index", (x, index), shape, x.dtype, (entries, axis))


def _region(shape: tuple[int, ...]) -> str:
    """A region's shape for messages, with N for a mask's unknown count."""
    sizes = ", ".join("N" if s < 0 else str(s) for s in shape)
    return f"({sizes},)" if len(shape) == 1 else f"({sizes})"


def _fits(value_shape: tuple[int, ...], region: tuple[int, ...]) -> bool:
    """Whether ``value_shape`` broadcasts to ``region`` (-1 there: any size); leading 1s drop."""
    v = value_shape
    while len(v) > len(region) and v[0] == 1:
        v = v[1:]
    if len(v) > len(region):
        return False
    return all(a == 1 or a == b or b < 0 for a, b in zip(reversed(v), reversed(region)))


def index_put(x: Tensor, key: Any, value: Tensor | bool | int | float) -> Tensor:
    """A copy of ``x`` with ``x[key]`` replaced by ``value`` (ember's ``x[key] = value``).

    Args:
        x: the tensor (unchanged: tensors are immutable).
        key: any key ``x[key]`` accepts; a bool mask is used as is, without a read.
        value: a tensor or scalar that broadcasts to the shape of ``x[key]``;
            converted to ``x.dtype``. Where an index tensor repeats a
            position, one of the values lands there (as in PyTorch, which
            does not say which).

    Raises:
        ShapeError: ``value`` does not broadcast to the indexed region.
        IndexError, ValueError, DTypeError: a bad key, as for ``x[key]``.

    Example:
        >>> em.zeros(3).index_put(em.tensor([0, 2]), 1.0).tolist()
        [1.0, 0.0, 1.0]
    """
    if is_multi_index(key):
        return index_put_multi(x, key, value)
    _check_tensor("index_put", x)
    items = _key_items("index_put", x, key)
    items = [_tensor(i, device=x.device) if isinstance(i, np.ndarray) else i for i in items]
    entries, region, axis, index = _walk("index_put", x, items, _counts("index_put", x, items))
    inputs = (x,) if index is None else (x, index)
    if isinstance(value, Tensor):
        if not _fits(value.shape, region):
            raise ShapeError(f"index_put: a value of shape {value.shape} does not broadcast to "
                             f"the indexed region of shape {_region(region)} (indexing a tensor "
                             f"of shape {x.shape})")
        inputs += (value,)
        scalar = None
    else:
        scalar = _scalar("index_put", value)
    same_device("index_put", inputs)
    return call("index_put", inputs, x.shape, x.dtype, (entries, axis, scalar))


# ----- gather, scatter_add, index_select, masked_fill ----------------------------------------


def _dims(shape: tuple[int, ...]) -> tuple[int, ...]:
    """PyTorch's gather/scatter view of a 0-d tensor: one dim of size 1."""
    return shape or (1,)


def gather(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """``out[i][j][k] = x[index[i][j][k]][j][k]`` for ``dim=0`` (and so on for other dims).

    Args:
        x: the source tensor.
        dim: the dim along which ``index`` picks.
        index: an int tensor with as many dims as ``x``, no larger than ``x``
            in every dim but ``dim``; its values must lie in ``[0, x.shape[dim])``.

    Shape:
        The result has the shape of ``index`` and the dtype of ``x``.

    Raises:
        ShapeError: ``index`` has another number of dims, or is larger than
            ``x`` in a dim other than ``dim``.
        DTypeError: ``index`` is not int32 / int64.

    Index values out of range surface at the read as ``KernelError``.

    Example:
        >>> em.tensor([[1, 2], [3, 4]]).gather(1, em.tensor([[1], [0]])).tolist()
        [[2], [3]]
    """
    _check_tensor("gather", x)
    _check_index_dtype("gather", index)
    same_device("gather", (x, index))
    d = normalize_dim("gather", dim, x.shape)
    xs, idx = _dims(x.shape), _dims(index.shape)
    if len(idx) != len(xs):
        raise ShapeError(f"gather: index of shape {index.shape} needs as many dims as the input "
                         f"of shape {x.shape}")
    for i, (n, m) in enumerate(zip(idx, xs)):
        if i != d and n > m:
            raise ShapeError(f"gather: index of shape {index.shape} is larger than the input of "
                             f"shape {x.shape} in dim {i}")
    return call("gather", (x, index), index.shape, x.dtype, (d,))


def scatter_add(x: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """A copy of ``x`` with ``src`` added at ``index`` along ``dim``; repeated positions accumulate.

    For ``dim=0``: ``out[index[i][j]][j] += src[i][j]``, for every position of
    ``index`` (PyTorch's rule: ``index`` is no larger than ``src`` in any dim
    and no larger than ``x`` in dims other than ``dim``). float16 and
    bfloat16 accumulate in float32 and round once, as PyTorch's CPU kernels do.

    Raises:
        ShapeError: the three tensors differ in number of dims, or ``index``
            is too large.
        DTypeError: ``src`` has another dtype than ``x``, or ``index`` is not int.

    Index values out of range surface at the read as ``KernelError``.

    Example:
        >>> em.zeros(3).scatter_add(0, em.tensor([0, 0, 2]), em.ones(3)).tolist()
        [2.0, 0.0, 1.0]
    """
    _check_tensor("scatter_add", x)
    _check_index_dtype("scatter_add", index)
    _check_tensor("scatter_add", src, "src")
    d = check_scatter_operands("scatter_add", x, dim, index, src)
    return call("scatter_add", (x, index, src), x.shape, x.dtype, (d,))


def check_scatter_operands(op: str, x: Tensor, dim: int, index: Tensor, src: Tensor) -> int:
    """The normalized ``dim`` of a scatter of tensor ``src`` into ``x`` at ``index``;
    raises unless they share a device, ``src`` has ``x``'s dtype and the shapes fit."""
    same_device(op, (x, index, src))
    if src.dtype is not x.dtype:
        raise DTypeError(f"{op}: src has dtype {src.dtype.name} but the input has "
                         f"{x.dtype.name}; help: convert with src.to(em.{x.dtype.name})")
    d = normalize_dim(op, dim, x.shape)
    xs, idx, ss = _dims(x.shape), _dims(index.shape), _dims(src.shape)
    shapes = f"input {x.shape}, index {index.shape}, src {src.shape}"
    if not len(xs) == len(idx) == len(ss):
        raise ShapeError(f"{op}: input, index and src need the same number of dims, got "
                         f"{shapes}")
    for i, (n, m, s) in enumerate(zip(idx, xs, ss)):
        if n > s or (i != d and n > m):
            raise ShapeError(f"{op}: index is too large in dim {i} ({shapes}); it must be no "
                             f"larger than src in every dim and than the input in every dim "
                             f"but {d}")
    return d


def index_select(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """The entries of ``x`` at positions ``index`` (1-D, values in ``[0, size)``) along ``dim``.

    Raises:
        IndexError: ``dim`` is out of range (the message names ``x``'s shape).
        ShapeError: ``index`` has more than 1 dim.
        DTypeError: ``index`` is not int32 / int64.

    Index values out of range surface at the read as ``KernelError``.

    Example:
        >>> em.arange(6).reshape(2, 3).index_select(1, em.tensor([2, 0])).tolist()
        [[2, 0], [5, 3]]
    """
    _check_tensor("index_select", x)
    _check_index_dtype("index_select", index)
    same_device("index_select", (x, index))
    if type(dim) is int and x.ndim and not -x.ndim <= dim < x.ndim:
        raise DimError(f"index_select: dim {dim} is out of range for x of shape {x.shape} "
                         f"(expected a dim in [{-x.ndim}, {x.ndim - 1}])")
    d = normalize_dim("index_select", dim, x.shape)
    if index.ndim > 1:
        raise ShapeError(f"index_select: the index must be 1-D, got shape {index.shape}")
    count = math.prod(index.shape)
    if x.ndim == 0:
        if count != 1:
            raise ShapeError(f"index_select: indexing a 0-d tensor needs exactly one index, got "
                             f"shape {index.shape}")
        return call("index_select", (x, index), (), x.dtype, (d,))
    return call("index_select", (x, index), x.shape[:d] + (count,) + x.shape[d + 1:], x.dtype, (d,))


def masked_fill(x: Tensor, mask: Tensor, value: Tensor | bool | int | float) -> Tensor:
    """``value`` where ``mask`` is true, ``x`` elsewhere, in ``x``'s dtype.

    Args:
        x: the tensor.
        mask: a bool tensor; it broadcasts with ``x`` (the result has the
            broadcast shape, as PyTorch's out-of-place ``masked_fill``).
        value: a Python scalar or a 0-d tensor, converted to ``x.dtype``.

    Raises:
        DTypeError: ``mask`` is not bool.
        ShapeError: shapes that do not broadcast, or a value tensor that is not 0-d.

    Example:
        >>> em.zeros(3).masked_fill(em.tensor([True, False, True]), 5.0).tolist()
        [5.0, 0.0, 5.0]
    """
    _check_tensor("masked_fill", x)
    _check_tensor("masked_fill", mask, "mask")
    if mask.dtype is not _dtype.bool_:
        raise DTypeError(f"masked_fill: the mask must be a bool tensor, got {mask.dtype.name}; "
                         f"help: compare it, e.g. mask != 0")
    shape = broadcast_shapes("masked_fill", x.shape, mask.shape)
    if isinstance(value, Tensor):
        if value.ndim:
            raise ShapeError(f"masked_fill: the value must be a scalar or a 0-d tensor, got "
                             f"shape {value.shape}; help: use em.where(mask, value, x)")
        inputs = (x, mask, value)
        scalar = None
    else:
        inputs = (x, mask)
        scalar = _scalar("masked_fill", value)
    same_device("masked_fill", inputs)
    return call("masked_fill", inputs, shape, x.dtype, (scalar,))


# ----- gradients -----------------------------------------------------------------------------


def _index_add(x: Tensor, entries: tuple, axis: int | None, index: tuple, src: Tensor) -> Tensor:
    """A copy of ``x`` with ``src`` added at the key ``entries`` (repeated indices accumulate)."""
    return call("index_add", (x, *index, src), x.shape, x.dtype, (entries, axis))


def _zeros_for(grad: Tensor, shape: tuple[int, ...]) -> Tensor:
    return zeros(shape, dtype=grad.dtype, device=grad.device)


def _region_shape(entries: tuple, x_shape: tuple[int, ...],
                  index_shape: tuple[int, ...] | None) -> tuple[int, ...]:
    """The shape of ``x[key]`` from a key's entries; a bool mask's dim is -1 (its count)."""
    shape: list[int] = []
    d = 0
    for entry in entries:
        tag = entry[0]
        if tag == "i":
            d += 1
        elif tag == "s":
            shape.append(len(range(*entry[1:])))
            d += 1
        elif tag == "n":
            shape.append(1)
        else:
            shape.extend((-1,) if index_shape is None else index_shape)
            d += entry[1]
    return tuple(shape) + x_shape[d:]


@differentiable("index", inputs=(1,))
def _index_backward(ctx: Any, grad: Tensor) -> tuple:
    entries, axis = ctx.attrs
    shapes = ctx.input_shapes
    index = (ctx.inputs[1],) if len(shapes) == 2 else ()  # read inputs only for an index tensor
    base = _zeros_for(grad, shapes[0])
    return (_index_add(base, entries, axis, index, grad),) + (None,) * len(index)


@differentiable("index_put", inputs=(1,))
def _index_put_backward(ctx: Any, grad: Tensor) -> tuple:
    # x's gradient is zero where the value was written; the value's is the gradient there.
    # Where an index repeats a position, every copy of the value gets its gradient (PyTorch too).
    entries, axis, scalar = ctx.attrs
    shapes = ctx.input_shapes
    index = (ctx.inputs[1],) if axis is not None else ()
    grad_x = call("index_put", (grad, *index), grad.shape, grad.dtype, (entries, axis, 0.0))
    if scalar is not None:
        return (grad_x,) + (None,) * len(index)
    value_shape = shapes[-1]
    if index and index[0].dtype.kind == "b":
        grad_value = _masked_region_sum(grad, entries, axis, index[0], value_shape)
    else:
        region = _region_shape(entries, shapes[0], shapes[1] if index else None)
        grad_value = sum_to(call("index", (grad, *index), region, grad.dtype, (entries, axis)),
                            value_shape)
    return (grad_x,) + (None,) * len(index) + (grad_value,)


def _masked_region_sum(grad: Tensor, entries: tuple, axis: int, mask: Tensor,
                       value_shape: tuple[int, ...]) -> Tensor:
    """The gradient of an ``index_put`` value written through a bool mask, without reading it.

    The region's masked dim has an unknown count N; the value either spans it
    (its size there is N, so the gathered gradient's shape is known) or
    broadcasts along it (then the gradient is summed over the true positions).
    """
    region = _region_shape(entries, grad.shape, None)
    core = value_shape[max(len(value_shape) - len(region), 0):]
    at = axis - (len(region) - len(core))
    if at >= 0 and core[at] != 1:
        region = region[:axis] + (core[at],) + region[axis + 1:]
        gathered = call("index", (grad, mask), region, grad.dtype, (entries, axis))
        return sum_to(gathered, value_shape)
    full = region[:axis] + mask.shape + region[axis + 1:]
    view = call("index", (grad,), full, grad.dtype, (entries, None))
    selected = where(reshape(mask, (1,) * axis + mask.shape + (1,) * (len(region) - axis - 1)),
                     view, 0.0)
    dims = tuple(range(axis, axis + mask.ndim))
    if dims:
        selected = selected.sum(dim=dims)
    return sum_to(reshape(selected, region[:axis] + (1,) + region[axis + 1:]), value_shape)


@differentiable("gather", inputs=(1,))
def _gather_backward(ctx: Any, grad: Tensor) -> tuple:
    (dim,) = ctx.attrs
    shape = ctx.input_shapes[0]
    base = _zeros_for(grad, shape)
    return call("scatter_add", (base, ctx.inputs[1], grad), shape, grad.dtype, (dim,)), None


@differentiable("scatter_add", inputs=(1,))
def _scatter_add_backward(ctx: Any, grad: Tensor) -> tuple:
    (dim,) = ctx.attrs
    _, index_shape, src_shape = ctx.input_shapes
    grad_src = call("gather", (grad, ctx.inputs[1]), index_shape, grad.dtype, (dim,))
    if index_shape != src_shape:
        # src entries outside index's grid are never read: their gradient is zero. (PyTorch
        # raises here instead, returning a gradient of index's shape.)
        corner = tuple(("s", 0, n, 1) for n in index_shape)
        grad_src = _index_add(_zeros_for(grad, src_shape), corner, None, (), grad_src)
    return grad, None, grad_src


@differentiable("index_select", inputs=(1,))
def _index_select_backward(ctx: Any, grad: Tensor) -> tuple:
    (dim,) = ctx.attrs
    shape = ctx.input_shapes[0]
    if not shape:  # a 0-d input: its one element was selected
        return reshape(grad, ()), None
    index = reshape(ctx.inputs[1], (-1,))  # a 0-d index keeps its dim in the output
    entries = tuple(("s", 0, n, 1) for n in shape[:dim]) + (("t", 1),)
    return _index_add(_zeros_for(grad, shape), entries, dim, (index,), grad), None


@differentiable("masked_fill", inputs=(1,))
def _masked_fill_backward(ctx: Any, grad: Tensor) -> tuple:
    mask = ctx.inputs[1]
    grad_x = call("masked_fill", (grad, mask), grad.shape, grad.dtype, (0.0,))
    if len(ctx.input_shapes) == 2:
        return grad_x, None
    return grad_x, None, where(mask, grad, 0.0).sum()
