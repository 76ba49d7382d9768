"""Sorting: sort, argsort and topk along one dim.

Every order is stable, so ties keep their original order (descending too,
like ``torch.sort(stable=True, descending=True)``), and NaN sorts as the
largest value, as in PyTorch. Indices are int64.
"""

from __future__ import annotations

import operator
from typing import Any

from ember import dtype as _dtype
from ember.ops.gradient_rules import differentiable, not_differentiable
from ember.errors import ShapeError
from ember.op_kinds import OTHER, declare
from ember.ops._core import call, multi_call, normalize_dim
from ember.tensor import Tensor

declare(OTHER, "sort", "argsort", "topk")


def sort(x: Tensor, dim: int = -1, descending: bool = False) -> tuple[Tensor, Tensor]:
    """Sort ``x`` along ``dim``: ``values = x.gather(dim, indices)``.

    Args:
        x: the input tensor.
        dim: the dim to sort along (a 0-d tensor accepts 0 and -1).
        descending: largest first; ties still keep their original order.

    Returns:
        ``(values, indices)``: values of ``x.dtype`` and int64 indices into ``dim``,
        both of ``x.shape``.

    Raises:
        TypeError: ``dim`` is not an int.
        IndexError: ``dim`` out of range for ``x.ndim``.

    Example:
        >>> values, indices = em.tensor([3, 1, 2]).sort()
        >>> values.tolist(), indices.tolist()
        ([1, 2, 3], [1, 2, 0])
    """
    axis = normalize_dim("sort", dim, x.shape)
    return multi_call("sort", (x,), (x.shape, x.shape), (x.dtype, _dtype.int64),
                      (axis, bool(descending)))


def argsort(x: Tensor, dim: int = -1, descending: bool = False) -> Tensor:
    """The int64 indices that sort ``x`` along ``dim`` (``sort``'s second output).

    Args:
        x: the input tensor.
        dim: the dim to sort along (a 0-d tensor accepts 0 and -1).
        descending: largest first; ties still keep their original order.

    Raises:
        TypeError: ``dim`` is not an int.
        IndexError: ``dim`` out of range for ``x.ndim``.

    Example:
        >>> em.tensor([3, 1, 2]).argsort(descending=True).tolist()
        [0, 2, 1]
    """
    axis = normalize_dim("argsort", dim, x.shape)
    return call("argsort", (x,), x.shape, _dtype.int64, (axis, bool(descending)))


def topk(x: Tensor, k: int, dim: int = -1, largest: bool = True,
         sorted: bool = True) -> tuple[Tensor, Tensor]:
    """The ``k`` largest (or smallest) elements of ``x`` along ``dim``, and their indices.

    Values come out sorted, largest first (smallest first with
    ``largest=False``); among equal values the earliest index comes first, and
    NaN counts as the largest value. ``sorted=False`` is accepted for PyTorch
    compatibility; the order PyTorch leaves unspecified is then this same one.

    Args:
        x: the input tensor.
        k: how many elements to keep, ``0 <= k <= x.shape[dim]``.
        dim: the dim to select along (a 0-d tensor accepts 0 and -1, and k 0 or 1).
        largest: keep the largest elements; False keeps the smallest.
        sorted: ignored (the result is always sorted).

    Returns:
        ``(values, indices)``: ``x.shape`` with ``dim`` of size ``k``; int64 indices.

    Raises:
        TypeError: ``k`` or ``dim`` is not an int.
        IndexError: ``dim`` out of range for ``x.ndim``.
        ShapeError: ``k`` outside ``[0, x.shape[dim]]``.

    Example:
        >>> values, indices = em.tensor([1, 5, 3, 5]).topk(2)
        >>> values.tolist(), indices.tolist()
        ([5, 5], [1, 3])
    """
    axis = normalize_dim("topk", dim, x.shape)
    if isinstance(k, bool) or not hasattr(k, "__index__"):
        raise TypeError(f"topk: k must be an int, got {type(k).__name__}")
    k = operator.index(k)
    # A 0-d tensor is one element along its one pseudo-dim, and stays 0-d (as in PyTorch).
    size = x.shape[axis] if x.ndim else 1
    if not 0 <= k <= size:
        raise ShapeError(f"topk: k={k} is out of range for dim {dim} of size {size} in shape "
                         f"{x.shape} (expected 0 <= k <= {size})")
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1:] if x.ndim else ()
    return multi_call("topk", (x,), (shape, shape), (x.dtype, _dtype.int64),
                      (k, axis, bool(largest)))


# ----- gradients --------------------------------------------------------------------------

not_differentiable("argsort")


def _scatter_back(ctx: Any, grads: tuple, axis: int) -> tuple:
    """The values' gradient goes back to the positions the indices name; the indices have none.

    Each lane's indices are distinct, so scattering them into zeros puts every
    gradient back where its value came from (elsewhere, for topk, 0), as
    PyTorch's ``value_selecting_reduction_backward`` does.
    """
    grad = grads[0]
    if grad is None:
        return (None,)
    if not ctx.input_shapes[0]:
        # A 0-d tensor: sort and topk are its identity (topk with k=0 too: it stays 0-d).
        return (grad,)
    from ember.ops.creation import zeros

    base = zeros(ctx.input_shapes[0], dtype=grad.dtype, device=grad.device)
    return (base.scatter_add(axis, ctx.output[1], grad),)


@differentiable("sort", inputs=False, output=True, compute_bound=True)
def _sort_backward(ctx: Any, grads: tuple) -> tuple:
    return _scatter_back(ctx, grads, ctx.attrs[0])


@differentiable("topk", inputs=False, output=True, compute_bound=True)
def _topk_backward(ctx: Any, grads: tuple) -> tuple:
    return _scatter_back(ctx, grads, ctx.attrs[1])
