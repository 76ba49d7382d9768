"""Shape ops: reshape and its relatives, permutations, expand, repeat, split, cat and stack.

Four IR ops carry the whole family: ``reshape`` (``view``, ``flatten``,
``squeeze`` and ``unsqueeze`` are reshapes with a computed shape), ``permute``
(``transpose`` and ``.T``), ``expand``, ``repeat``, plus the multi-output
``split`` (``chunk``) and ``cat`` (``stack``). Each one's backward rule
follows its op at the end of the file: it moves the gradient back the
other way (reshape back, inverse permutation, sum over stretched or tiled
dims, join the pieces, cut the joined gradient). Their NumPy kernels return views
where NumPy can, so data movement costs nothing until a later op reads it.

ember has no strides, so ``view`` is ``reshape``: it never fails on a
non-contiguous tensor the way ``torch.Tensor.view`` can.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ember import dtype as _dtype
from ember.ops.gradient_rules import differentiable
from ember.errors import ShapeError
from ember.op_kinds import OTHER, VIEW, declare
from ember.ops import dtype_rules as rules
from ember.ops._core import call, multi_call, normalize_dim, normalize_dims, same_device
from ember.tensor import Tensor

# reshape / permute / expand are index maps the planner folds into groups (ember/op_kinds.py).
declare(VIEW, "reshape", "permute", "expand", dtype_rule=rules.keep)
declare(OTHER, "repeat", "split", dtype_rule=rules.keep)
declare(OTHER, "cat")


_JUST_INT = {int}


def _int_args(op: str, args: Sequence[Any], what: str = "sizes") -> tuple[int, ...]:
    """``f(2, 3)``, ``f((2, 3))`` and ``f([2, 3])`` as the ints (2, 3); any sign."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    if set(map(type, args)) == _JUST_INT:  # the common case, checked without a Python loop
        return tuple(args)
    out = []
    for s in args:
        if isinstance(s, bool) or not hasattr(s, "__index__") or isinstance(s, Tensor):
            raise TypeError(f"{op}: {what} must be ints, got {s!r}")
        out.append(int(s.__index__()))
    return tuple(out)


def _check_tensor(op: str, x: Any) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: expected a tensor, got {type(x).__name__}")


# ----- reshape and the ops that are reshapes ------------------------------------------------


def _infer_shape(x: Tensor, sizes: tuple[int, ...]) -> tuple[int, ...]:
    """``sizes`` with its one ``-1`` filled in so that the element count is ``x``'s."""
    n = math.prod(x.shape)
    holes = [i for i, s in enumerate(sizes) if s == -1]
    if len(holes) > 1:
        raise ShapeError(f"reshape: only one dimension can be -1, got shape {sizes}")
    if any(s < -1 for s in sizes):
        raise ShapeError(f"reshape: invalid size in shape {sizes}; sizes must be >= 0 or -1")
    if not holes:
        if math.prod(sizes) != n:
            raise ShapeError(f"reshape: cannot reshape a tensor of shape {x.shape} ({n} elements) "
                             f"into shape {sizes} ({math.prod(sizes)} elements)")
        return sizes
    known = math.prod(s for s in sizes if s != -1)
    if known == 0:
        raise ShapeError(f"reshape: cannot reshape a tensor of shape {x.shape} ({n} elements) "
                         f"into shape {sizes}: the -1 is ambiguous when the other sizes "
                         f"multiply to 0")
    if n % known:
        raise ShapeError(f"reshape: cannot reshape a tensor of shape {x.shape} ({n} elements) "
                         f"into shape {sizes}: {n} is not a multiple of {known}")
    hole = holes[0]
    return sizes[:hole] + (n // known,) + sizes[hole + 1:]


def reshape(x: Tensor, shape: Sequence[Any]) -> Tensor:
    """``x`` with the same elements in row-major order and a new shape.

    Args:
        x: the tensor.
        shape: the new sizes, as ``reshape(x, (2, 3))`` or the method's
            ``x.reshape(2, 3)``; one size may be ``-1``, inferred from the rest.

    Raises:
        ShapeError: the element counts differ, or the ``-1`` is ambiguous.

    Example:
        >>> em.arange(6).reshape(2, -1).shape
        (2, 3)
    """
    _check_tensor("reshape", x)
    return call("reshape", (x,), _infer_shape(x, _int_args("reshape", shape)), x.dtype)


def flatten(x: Tensor, start: int = 0, end: int = -1) -> Tensor:
    """Merge dims ``start`` through ``end`` (inclusive) into one; a 0-d tensor becomes (1,).

    Example:
        >>> em.zeros(2, 3, 4).flatten(1).shape
        (2, 12)
    """
    _check_tensor("flatten", x)
    first = normalize_dim("flatten", start, x.shape)
    last = normalize_dim("flatten", end, x.shape)
    if first > last:
        raise ShapeError(f"flatten: start dim {start} comes after end dim {end} for a tensor of "
                         f"shape {x.shape}")
    shape = x.shape[:first] + (math.prod(x.shape[first:last + 1]),) + x.shape[last + 1:]
    return call("reshape", (x,), shape, x.dtype)


def squeeze(x: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:
    """Drop size-1 dims: all of them (``dim=None``) or those named; naming a larger dim is a no-op.

    Example:
        >>> em.zeros(1, 3, 1).squeeze(0).shape
        (3, 1)
    """
    _check_tensor("squeeze", x)
    dims = normalize_dims("squeeze", dim, x.shape)
    shape = tuple(s for d, s in enumerate(x.shape) if not (s == 1 and d in dims))
    return call("reshape", (x,), shape, x.dtype)


def unsqueeze(x: Tensor, dim: int) -> Tensor:
    """Insert a size-1 dim at ``dim`` (in ``[-ndim - 1, ndim]``).

    Example:
        >>> em.zeros(3).unsqueeze(-1).shape
        (3, 1)
    """
    _check_tensor("unsqueeze", x)
    d = normalize_dim("unsqueeze", dim, x.ndim + 1)
    return call("reshape", (x,), x.shape[:d] + (1,) + x.shape[d:], x.dtype)


# ----- permutations --------------------------------------------------------------------------


def permute(x: Tensor, dims: Sequence[Any]) -> Tensor:
    """Reorder the dims: output dim ``i`` is input dim ``dims[i]``.

    Args:
        x: the tensor.
        dims: a permutation of ``range(x.ndim)`` (negative dims allowed), as
            ``permute(x, (2, 0, 1))`` or the method's ``x.permute(2, 0, 1)``.

    Raises:
        ShapeError: ``dims`` is not a permutation of the tensor's dims.

    Example:
        >>> em.zeros(2, 3, 4).permute(2, 0, 1).shape
        (4, 2, 3)
    """
    _check_tensor("permute", x)
    raw = _int_args("permute", dims, "dims")
    if len(raw) != x.ndim:
        raise ShapeError(f"permute: got {len(raw)} dims {raw} for a tensor of shape {x.shape} "
                         f"({x.ndim} dims)")
    order = tuple(normalize_dim("permute", d, x.shape) for d in raw)
    if len(set(order)) != len(order):
        raise ShapeError(f"permute: dims {raw} repeat a dim; expected a permutation of "
                         f"{tuple(range(x.ndim))} for a tensor of shape {x.shape}")
    return _permute(x, order)


def _permute(x: Tensor, order: tuple[int, ...]) -> Tensor:
    return call("permute", (x,), tuple(x.shape[d] for d in order), x.dtype, (order,))


def transpose(x: Tensor, dim0: int, dim1: int) -> Tensor:
    """Swap dims ``dim0`` and ``dim1``.

    Example:
        >>> em.zeros(2, 3, 4).transpose(0, -1).shape
        (4, 3, 2)
    """
    _check_tensor("transpose", x)
    a = normalize_dim("transpose", dim0, x.shape)
    b = normalize_dim("transpose", dim1, x.shape)
    order = list(range(x.ndim))
    if x.ndim:
        order[a], order[b] = order[b], order[a]
    return _permute(x, tuple(order))


def t(x: Tensor) -> Tensor:
    """``x.T``: the transpose of a 2-D tensor; a 0-D or 1-D tensor is returned as is.

    PyTorch's ``.T`` on more than 2 dims (reversing them all) is deprecated
    there; ember raises instead, since it is usually a batched-matrix bug.

    Raises:
        ShapeError: ``x`` has more than 2 dims.

    Example:
        >>> em.zeros((2, 3)).T.shape
        (3, 2)
    """
    _check_tensor("T", x)
    if x.ndim < 2:
        return x
    if x.ndim > 2:
        reverse = ", ".join(str(d) for d in range(x.ndim - 1, -1, -1))
        raise ShapeError(f"T: needs a tensor of at most 2 dims, got shape {x.shape}; help: use "
                         f"x.transpose(-2, -1) to transpose the last two dims, or "
                         f"x.permute({reverse}) to reverse them all")
    return _permute(x, (1, 0))


# ----- expand and repeat ---------------------------------------------------------------------


def expand(x: Tensor, shape: Sequence[Any]) -> Tensor:
    """``x`` broadcast to ``shape`` without copying: size-1 dims stretch, new dims lead.

    Args:
        x: the tensor.
        shape: the target sizes; ``-1`` keeps the size of an existing dim.

    Raises:
        ShapeError: fewer sizes than dims, a ``-1`` for a new leading dim, or a
            non-1 dim asked to change size.

    Example:
        >>> em.zeros(3, 1).expand(2, -1, 4).shape
        (2, 3, 4)
    """
    _check_tensor("expand", x)
    sizes = _int_args("expand", shape)
    lead = len(sizes) - x.ndim
    if lead < 0:
        raise ShapeError(f"expand: got {len(sizes)} sizes {sizes} for a tensor of shape "
                         f"{x.shape}; expected at least {x.ndim}")
    out = []
    for i, size in enumerate(sizes):
        if i < lead:
            if size < 0:
                raise ShapeError(f"expand: size {size} is not allowed for the new leading "
                                 f"dim {i} (expanding {x.shape} to {sizes})")
            out.append(size)
            continue
        have = x.shape[i - lead]
        if size == -1:
            size = have
        elif size < 0:
            raise ShapeError(f"expand: invalid size {size} (expanding {x.shape} to {sizes})")
        elif have != 1 and size != have:
            raise ShapeError(f"expand: cannot expand shape {x.shape} to {sizes}: dim "
                             f"{i - lead} has size {have}, and only size-1 dims expand; "
                             f"help: use repeat to tile it")
        out.append(size)
    return call("expand", (x,), tuple(out), x.dtype)


def repeat(x: Tensor, sizes: Sequence[Any]) -> Tensor:
    """Tile ``x``: ``sizes[i]`` copies along dim ``i``; extra sizes add leading dims.

    Example:
        >>> em.tensor([1, 2]).repeat(2, 2).tolist()
        [[1, 2, 1, 2], [1, 2, 1, 2]]
    """
    _check_tensor("repeat", x)
    reps = _int_args("repeat", sizes)
    if len(reps) < x.ndim:
        raise ShapeError(f"repeat: got {len(reps)} sizes {reps} for a tensor of shape {x.shape}; "
                         f"expected at least {x.ndim}")
    if any(r < 0 for r in reps):
        raise ShapeError(f"repeat: sizes must be >= 0, got {reps}")
    padded = (1,) * (len(reps) - x.ndim) + x.shape
    return call("repeat", (x,), tuple(r * s for r, s in zip(reps, padded)), x.dtype, (reps,))


# ----- split and chunk -----------------------------------------------------------------------


def _split(x: Tensor, dim: int, sizes: list[int]) -> tuple[Tensor, ...]:
    offsets, total = [], 0
    for s in sizes[:-1]:
        total += s
        offsets.append(total)
    shapes = tuple(x.shape[:dim] + (s,) + x.shape[dim + 1:] for s in sizes)
    return multi_call("split", (x,), shapes, (x.dtype,) * len(sizes), (dim, tuple(offsets)))


def _split_dim(op: str, x: Tensor, dim: int) -> int:
    _check_tensor(op, x)
    if x.ndim == 0:
        raise ShapeError(f"{op}: needs a tensor of at least 1 dim, got shape ()")
    return normalize_dim(op, dim, x.shape)


def split(x: Tensor, split_size_or_sections: int | Sequence[int],
          dim: int = 0) -> tuple[Tensor, ...]:
    """Cut ``x`` along ``dim`` into pieces of one size (the last may be smaller) or of listed sizes.

    Args:
        x: the tensor.
        split_size_or_sections: an int piece size, or a list of sizes that sum
            to ``x.shape[dim]``.
        dim: the dim to cut. Default 0.

    Returns:
        A tuple of tensors (views of ``x`` on the CPU).

    Raises:
        ShapeError: listed sizes that do not sum to the dim's size, or a zero
            piece size for a non-empty dim.

    Example:
        >>> [p.shape for p in em.zeros(5, 2).split([2, 3])]
        [(2, 2), (3, 2)]
    """
    d = _split_dim("split", x, dim)
    n = x.shape[d]
    if isinstance(split_size_or_sections, (list, tuple)):
        sizes = list(_int_args("split", (split_size_or_sections,)))
        if any(s < 0 for s in sizes) or sum(sizes) != n:
            raise ShapeError(f"split: sizes {tuple(sizes)} must be >= 0 and sum to {n}, the size "
                             f"of dim {d} of shape {x.shape}")
        if not sizes:
            raise ShapeError(f"split: needs at least one size for dim {d} of shape {x.shape}")
        return _split(x, d, sizes)
    (size,) = _int_args("split", (split_size_or_sections,), "split_size")
    if size < 0 or (size == 0 and n):
        raise ShapeError(f"split: piece size {size} is invalid for dim {d} of size {n} "
                         f"(shape {x.shape}); it must be > 0 (or 0 for an empty dim)")
    count = max(-(-n // size), 1) if size else 1
    return _split(x, d, [size] * (count - 1) + [n - size * (count - 1)])


def chunk(x: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """Cut ``x`` along ``dim`` into at most ``chunks`` pieces of ``ceil(size / chunks)``.

    As in PyTorch, fewer pieces come back when the sizes do not divide evenly
    (``chunk(6 rows, 4)`` gives 3 pieces of 2); an empty dim gives ``chunks``
    empty pieces.

    Example:
        >>> [p.shape for p in em.zeros(5).chunk(3)]
        [(2,), (2,), (1,)]
    """
    d = _split_dim("chunk", x, dim)
    (count,) = _int_args("chunk", (chunks,), "chunks")
    if count <= 0:
        raise ValueError(f"chunk: chunks must be > 0, got {count}")
    n = x.shape[d]
    if n == 0:
        return _split(x, d, [0] * count)
    return split(x, -(-n // count), d)


# ----- cat and stack -------------------------------------------------------------------------


def _joined(op: str, tensors: Any) -> tuple[list[Tensor], _dtype.DType]:
    """The tensors as a list, checked to be tensors on one device, and their promoted dtype."""
    if isinstance(tensors, Tensor) or not isinstance(tensors, Sequence):
        raise TypeError(f"{op}: expected a sequence of tensors, got {type(tensors).__name__}")
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{op}: expected a non-empty sequence of tensors")
    for i, t_ in enumerate(tensors):
        if not isinstance(t_, Tensor):
            raise TypeError(f"{op}: expected tensors, got {type(t_).__name__} at position {i}")
    same_device(op, tuple(tensors))
    result = tensors[0].dtype
    for t_ in tensors[1:]:
        result = _dtype.promote(result, t_.dtype)
    return tensors, result


def _shapes(tensors: list[Tensor]) -> str:
    return ", ".join(str(t_.shape) for t_ in tensors)


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Join tensors along an existing dim; dtypes promote as in PyTorch.

    As in PyTorch, 1-D empty tensors (shape ``(0,)``) are skipped whatever the
    other shapes, though their dtype still takes part in the promotion.

    Args:
        tensors: a non-empty sequence of tensors on one device, of equal shapes
            except along ``dim``.
        dim: the dim to join along. Default 0.

    Raises:
        ShapeError: shapes differ outside ``dim``, or a tensor is 0-d.
        DeviceError: the tensors are on different devices.

    Example:
        >>> em.cat([em.zeros(2, 3), em.ones(1, 3)]).shape
        (3, 3)
    """
    tensors, dtype = _joined("cat", tensors)
    for i, t_ in enumerate(tensors):
        if t_.ndim == 0:
            raise ShapeError(f"cat: the 0-d tensor at position {i} cannot be joined; help: use "
                             f"em.stack, or unsqueeze it first")
    joined = [t_ for t_ in tensors if t_.shape != (0,)] or tensors[:1]
    first = joined[0].shape
    d = normalize_dim("cat", dim, len(first))
    outside = first[:d] + first[d + 1:]
    for t_ in joined:
        if len(t_.shape) != len(first) or t_.shape[:d] + t_.shape[d + 1:] != outside:
            raise ShapeError(f"cat: shapes must match except in dim {d}, got {_shapes(tensors)}")
    shape = first[:d] + (sum(t_.shape[d] for t_ in joined),) + first[d + 1:]
    return call("cat", tuple(joined), shape, dtype, (d, False))


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Join tensors of one shape along a new dim ``dim`` (in ``[-ndim - 1, ndim]``).

    Raises:
        ShapeError: the shapes differ.
        DeviceError: the tensors are on different devices.

    Example:
        >>> em.stack([em.zeros(2, 3), em.ones(2, 3)], dim=1).shape
        (2, 2, 3)
    """
    tensors, dtype = _joined("stack", tensors)
    first = tensors[0].shape
    if any(t_.shape != first for t_ in tensors):
        raise ShapeError(f"stack: all tensors must have the same shape, got {_shapes(tensors)}")
    d = normalize_dim("stack", dim, len(first) + 1)
    shape = first[:d] + (len(tensors),) + first[d:]
    return call("cat", tuple(tensors), shape, dtype, (d, True))


# ----- gradients -----------------------------------------------------------------------------


def sum_to(x: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``x`` summed back to ``shape``, a shape that broadcasts to ``x.shape``.

    Sums the dims broadcasting added in front and the size-1 dims it
    stretched. ``shape`` may also have more leading 1s than ``x`` has dims
    (an ``index_put`` value may), which a reshape restores.
    """
    core = shape[max(len(shape) - x.ndim, 0):]
    lead = x.ndim - len(core)
    dims = tuple(range(lead)) + tuple(lead + i for i, size in enumerate(core)
                                      if size == 1 and x.shape[lead + i] != 1)
    if dims:  # an empty tuple would sum every dim
        x = x.sum(dim=dims, keepdim=True)
    return x if x.shape == shape else reshape(x, shape)


@differentiable("reshape", inputs=False)
def _reshape_backward(ctx: Any, grad: Tensor) -> tuple:
    return (reshape(grad, ctx.input_shapes[0]),)


@differentiable("permute", inputs=False)
def _permute_backward(ctx: Any, grad: Tensor) -> tuple:
    (order,) = ctx.attrs
    inverse = tuple(sorted(range(len(order)), key=order.__getitem__))
    return (_permute(grad, inverse),)


@differentiable("expand", inputs=False)
def _expand_backward(ctx: Any, grad: Tensor) -> tuple:
    return (sum_to(grad, ctx.input_shapes[0]),)


@differentiable("repeat", inputs=False)
def _repeat_backward(ctx: Any, grad: Tensor) -> tuple:
    # The forward's view in reverse: the output as (reps[0], size[0], reps[1], size[1], ...),
    # summed over the copies.
    (reps,) = ctx.attrs
    shape = ctx.input_shapes[0]
    padded = (1,) * (len(reps) - len(shape)) + shape
    tiles = reshape(grad, tuple(n for pair in zip(reps, padded) for n in pair))
    copies = tuple(2 * i for i, r in enumerate(reps) if r != 1)
    if copies:
        tiles = tiles.sum(dim=copies)
    return (reshape(tiles, shape),)


@differentiable("split", inputs=False)
def _split_backward(ctx: Any, grads: tuple) -> tuple:
    # Pieces no gradient reached contribute zeros.
    from ember.ops.creation import zeros

    dim, _ = ctx.attrs
    some = next(g for g in grads if g is not None)
    pieces = tuple(zeros(shape, dtype=some.dtype, device=some.device) if g is None else g
                   for g, shape in zip(grads, ctx.shape))
    return (call("cat", pieces, ctx.input_shapes[0], some.dtype, (dim, False)),)


@differentiable("cat", inputs=False)
def _cat_backward(ctx: Any, grad: Tensor) -> tuple:
    dim, new_axis = ctx.attrs
    shapes = ctx.input_shapes
    if not new_axis:
        return _split(grad, dim, [shape[dim] for shape in shapes])
    # stack: each input is one size-1 slice along the new dim.
    pieces = _split(grad, dim, [1] * len(shapes))
    return tuple(reshape(p, shape) for p, shape in zip(pieces, shapes))
