"""Running (prefix) ops along one dim: cumprod, cummax, cummin, logcumsumexp.

(``cumsum`` lives with the reductions.) Each is one primitive with a kernel per backend;
the gradients are compositions of primitives, so they fuse and have gradients of their own.
PyTorch's semantics: ``cumprod`` of integers and bools is int64; ``cummax`` / ``cummin``
give the index of the *last* of equal values and let NaN win (once a NaN is met, it and
its index, that of the latest NaN, carry on); ``logcumsumexp`` needs a floating tensor.
"""

from __future__ import annotations

from typing import Any

from ember import dtype as _dtype
from ember import mixed_precision as _mixed
from ember.op_kinds import OTHER, declare
from ember.ops import dtype_rules as rules
from ember.ops._core import call, multi_call, normalize_dim
from ember.ops.elementwise import where
from ember.ops.gradient_rules import differentiable
from ember.tensor import Tensor

declare(OTHER, "cumprod", dtype_rule=rules.widen_integers)
declare(OTHER, "logcumsumexp", dtype_rule=rules.floating_only)
declare(OTHER, "cummax", "cummin")


def _check(op: str, x: Any, dim: Any) -> int:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: expected a tensor, got {type(x).__name__}")
    return normalize_dim(op, dim, x.shape)


def cumprod(x: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    """Running product along ``dim``: ``out[..., i, ...] = Π_{j ≤ i} x[..., j, ...]``.

    Args:
        x: the input tensor.
        dim: the dim to run along (a 0-d tensor accepts 0 and -1).
        dtype: compute in this dtype (``x`` is converted first), as PyTorch's ``dtype=``.

    Returns:
        A tensor of ``x.shape``: int64 for bool or integer ``x``, else ``x.dtype``. Its
        gradient is exact where ``x`` has zeros too (PyTorch's rule).

    Raises:
        TypeError: ``dim`` is not an int.
        IndexError: ``dim`` out of range for ``x.ndim``.

    Example:
        >>> em.tensor([1, 2, 3, 4]).cumprod(0).tolist()
        [1, 2, 6, 24]
    """
    axis = _check("cumprod", x, dim)
    if dtype is not None:
        x = x.astype(dtype)
    elif _mixed.entered:  # torch.autocast's float32 list, where no dtype is asked for
        (x,) = _mixed.to_float32(x)
    return call("cumprod", (x,), x.shape, rules.widen_integers("cumprod", x.dtype), (axis,))


def logcumsumexp(x: Tensor, dim: int) -> Tensor:
    """``log(cumsum(exp(x), dim))`` computed without overflow or underflow.

    Args:
        x: a floating tensor.
        dim: the dim to run along.

    Returns:
        A tensor of ``x``'s shape and dtype.

    Raises:
        DTypeError: an integer or bool tensor (as in PyTorch).
        IndexError: ``dim`` out of range.

    Example:
        >>> em.tensor([0.0, 0.0]).logcumsumexp(0).tolist()
        [0.0, 0.6931471824645996]
    """
    axis = _check("logcumsumexp", x, dim)
    return call("logcumsumexp", (x,), x.shape, rules.floating_only("logcumsumexp", x.dtype),
                (axis,))


def _running_extreme(op: str, x: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    axis = _check(op, x, dim)
    return multi_call(op, (x,), (x.shape, x.shape), (x.dtype, _dtype.int64), (axis,))


def cummax(x: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """Running maximum along ``dim`` and where it was found.

    Args:
        x: the input tensor (any dtype).
        dim: the dim to run along.

    Returns:
        ``(values, indices)``: values of ``x.dtype`` and int64 indices into ``dim``, both of
        ``x.shape``. Of equal values the latest index is given; NaN propagates.

    Raises:
        IndexError: ``dim`` out of range.

    Example:
        >>> values, indices = em.tensor([1, 3, 2, 3]).cummax(0)
        >>> values.tolist(), indices.tolist()
        ([1, 3, 3, 3], [0, 1, 1, 3])
    """
    return _running_extreme("cummax", x, dim)


def cummin(x: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """Running minimum along ``dim`` and where it was found (see ``cummax``).

    Example:
        >>> values, indices = em.tensor([3, 1, 2, 1]).cummin(0)
        >>> values.tolist(), indices.tolist()
        ([3, 1, 1, 1], [0, 1, 1, 3])
    """
    return _running_extreme("cummin", x, dim)


# ----- gradients --------------------------------------------------------------------------


def _reverse(t: Tensor, axis: int) -> Tensor:
    from ember.ops.creation import arange

    size = t.shape[axis]
    return t.index_select(axis, arange(size - 1, -1, -1, device=t.device))


def _reverse_cumsum(t: Tensor, axis: int) -> Tensor:
    """``Σ_{j ≥ i} t_j`` along ``axis``."""
    return _reverse(_reverse(t, axis).cumsum(axis), axis)


@differentiable("cumprod", output=True, compute_bound=True)
def _cumprod_backward(ctx: Any, grad: Tensor) -> tuple:
    """``∂L/∂x_k = Σ_{j ≥ k} g_j · Π_{i ≤ j, i ≠ k} x_i``, exact with zeros in ``x``.

    Before a line's first zero that is ``Σ_{j ≥ k} g_j y_j / x_k``; at the first zero it is
    the same sum over the products with that zero taken as 1; after it, 0 (each product
    holds the first zero).
    """
    (x,) = ctx.inputs
    (axis,) = ctx.attrs
    if not x.ndim or x.shape[axis] <= 1:
        return (grad,)
    y = ctx.output
    zero = x == 0
    zeros_so_far = zero.astype(_dtype.int32).cumsum(axis)
    before = zeros_so_far == 0
    first_zero = zero & (zeros_so_far == 1)
    grad_before = _reverse_cumsum(grad * y, axis) / where(before, x, 1)
    grad_at_zero = _reverse_cumsum(grad * where(first_zero, 1, x).cumprod(axis), axis)
    return (where(before, grad_before, where(first_zero, grad_at_zero, 0)),)


@differentiable("logcumsumexp", output=True, compute_bound=True)
def _logcumsumexp_backward(ctx: Any, grad: Tensor) -> tuple:
    """``∂L/∂x_k = Σ_{j ≥ k} g_j exp(x_k - y_j)``: the positive and negative parts of ``g``
    summed in log space (a reversed logcumsumexp), so nothing overflows."""
    (x,) = ctx.inputs
    (axis,) = ctx.attrs
    if not x.ndim or x.shape[axis] <= 1:
        return (grad,)
    y = ctx.output
    minus_inf = float("-inf")
    total = None
    for sign, part in ((1.0, grad > 0), (-1.0, grad < 0)):
        log_part = where(part, (grad * sign).log(), minus_inf) - y
        summed = _reverse(_reverse(log_part, axis).logcumsumexp(axis), axis)
        term = (summed + x).exp() * sign
        total = term if total is None else total + term
    return (total,)


@differentiable("cummax", "cummin", inputs=False, output=True, compute_bound=True)
def _running_extreme_backward(ctx: Any, grads: tuple) -> tuple:
    """Each output's gradient goes to the input it came from (its index), summed."""
    grad = grads[0]
    if grad is None:
        return (None,)
    (axis,) = ctx.attrs
    if not ctx.input_shapes[0]:
        return (grad,)
    from ember.ops.creation import zeros

    base = zeros(ctx.input_shapes[0], dtype=grad.dtype, device=grad.device)
    return (base.scatter_add(axis, ctx.output[1], grad),)
