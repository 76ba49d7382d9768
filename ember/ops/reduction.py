"""Reductions: sum, mean, prod, max, min, var, std, any, all, logsumexp, argmax, argmin; cumsum.

Dtype rules are PyTorch's: sums, products and running sums of bool or
integer tensors are int64; mean, var and std need a floating-point tensor;
logsumexp computes integers and bools in the default float; any and all
give bool; argmax and argmin give int64. A reduction over no elements gives
its identity (sum 0, prod 1, any False, all True, logsumexp -inf; mean, var
and std nan), except max, min, argmax and argmin, which have none and raise.

Gradients are PyTorch's (rules at the end): prod's needs no division by zero,
and max / min split a slice's gradient evenly among its tied extremes, as
``torch.amax`` does (ember's ``max(dim)`` returns no indices to pick one by).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from ember import dtype as _dtype
from ember import mixed_precision as _mixed
from ember.ops.gradient_rules import differentiable, not_differentiable
from ember.errors import ShapeError
from ember.op_kinds import OTHER, REDUCTION, declare, declare_rules
from ember.ops import dtype_rules as rules
from ember.ops._core import call, normalize_dim, normalize_dims
from ember.tensor import Tensor

Dims = int | tuple[int, ...] | list[int] | None

# torch.autocast's float32 list among the reductions (cumsum too, below).
_FLOAT32_UNDER_AUTOCAST = frozenset({"sum", "prod"})

# ----- dtype rules: input dtype -> output dtype, or a DTypeError ---------------------------


_RULES = {
    "sum": rules.widen_integers, "prod": rules.widen_integers, "mean": rules.floating_only,
    "max": rules.keep, "min": rules.keep, "any": rules.to_bool, "all": rules.to_bool,
    "logsumexp": rules.floating,
    "var": rules.floating_only, "std": rules.floating_only,
}

# Row groups hold reductions to a number; any / all (bool rows), the index reductions and
# the running sum run as their own kernels (ember/op_kinds.py).
_NOT_ROW_FUSED = frozenset({"any", "all"})
declare_rules(REDUCTION, {op: rule for op, rule in _RULES.items() if op not in _NOT_ROW_FUSED})
declare_rules(OTHER, {op: _RULES[op] for op in _NOT_ROW_FUSED})
declare(OTHER, "argmax", "argmin")
declare(OTHER, "cumsum", dtype_rule=rules.widen_integers)

# Reductions without an identity: over no elements they have no value.
_NEED_ELEMENTS = frozenset({"max", "min", "argmax", "argmin"})
# PyTorch reads an empty dim tuple as "every dim" (sum, mean, amax, var ...) except for
# any and all, where it means "no dim"; both readings are kept for compatibility.
_EMPTY_DIMS_MEAN_NONE = frozenset({"any", "all"})


# ----- shape rules ------------------------------------------------------------------------


def _reduced_dims(op: str, x: Tensor, dim: Dims) -> tuple[int, ...]:
    """The sorted non-negative dims that ``dim`` names; raises on bad or repeated dims."""
    if isinstance(dim, tuple | list):
        if not dim and op not in _EMPTY_DIMS_MEAN_NONE:
            dim = None
    elif dim is not None and not isinstance(dim, int):
        raise TypeError(f"{op}: dim must be an int, a tuple of ints or None, "
                        f"got {type(dim).__name__}")
    dims = normalize_dims(op, dim, x.shape)
    if op in _NEED_ELEMENTS:
        _check_not_empty(op, x, dims)
    return dims


def _check_not_empty(op: str, x: Tensor, dims: tuple[int, ...]) -> None:
    for d in dims:
        if x.shape[d] == 0:
            raise ShapeError(f"{op}: cannot reduce over dim {d}, of size 0 in shape {x.shape}: "
                             f"{op} of no elements has no value (PyTorch raises too); "
                             f"help: reduce over a non-empty dim, or check numel() first")


def _reduced_shape(shape: tuple[int, ...], dims: tuple[int, ...], keepdim: bool) -> tuple[int, ...]:
    # List comprehensions: inlined from Python 3.12, where a generator makes a frame.
    if keepdim:
        return tuple([1 if i in dims else s for i, s in enumerate(shape)])
    return tuple([s for i, s in enumerate(shape) if i not in dims])


# ----- ops --------------------------------------------------------------------------------


def reduce(op: str, x: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:
    """Reduce ``x`` over ``dim`` with ``op``: sum, mean, prod, max, min, any, all or logsumexp.

    ``logsumexp(x) = m + log(Σ exp(x - m))`` with ``m = max(x)`` (0 where that
    max is infinite), so large inputs do not overflow and an all ``-inf`` slice
    gives ``-inf``. ``max`` and ``min`` propagate NaN and return values only
    (indices come from ``argmax`` / ``argmin``).

    Args:
        op: the reduction's name.
        x: the input tensor.
        dim: None for every dim, an int, or a tuple of ints (negative ints count
            from the end; a 0-d tensor accepts 0 and -1). An empty tuple means
            every dim, except for any/all where it means none (PyTorch's rules).
        keepdim: keep each reduced dim with size 1.

    Returns:
        The reduced tensor: int64 for sum/prod of bool or integer tensors, the
        default float for logsumexp of them, bool for any/all, else ``x.dtype``.

    Raises:
        DTypeError: mean of a bool or integer tensor.
        IndexError: a dim out of range for ``x.ndim``.
        ShapeError: a dim named twice; max/min over a dim of size 0.

    Example:
        >>> em.tensor([[1, 2], [3, 4]]).sum(dim=1).tolist()
        [3, 7]
    """
    if _mixed.entered and op in _FLOAT32_UNDER_AUTOCAST:
        (x,) = _mixed.to_float32(x)
    # The common dims (all, or one) key the rules' answer: a loop's reductions repeat.
    key = ((op, x.shape, x.dtype, dim, keepdim)
           if (dim is None or type(dim) is int) and type(keepdim) is bool else None)
    found = _reductions.get(key) if key is not None else None
    if found is None:
        dtype = _RULES[op](op, x.dtype)
        dims = _reduced_dims(op, x, dim)
        keepdim = bool(keepdim)
        found = (_reduced_shape(x.shape, dims, keepdim), dtype, (dims, keepdim))
        if key is not None and len(_reductions) < _MAX_REMEMBERED:
            _reductions[key] = found
    shape, dtype, attrs = found
    return call(op, (x,), shape, dtype, attrs)


# (op, shape, dtype, dim, keepdim) -> (output shape, output dtype, attrs) of reductions
# the rules accepted, for dim None or an int (a refusal raises again each time).
_reductions: dict[tuple, tuple] = {}
_MAX_REMEMBERED = 4096


def var(op: str, x: Tensor, dim: Dims = None, keepdim: bool = False,
        correction: float = 1) -> Tensor:
    """Variance (``op="var"``) or standard deviation (``op="std"``) over ``dim``.

    ``var = Σ (x - mean)² / max(N - correction, 0)`` over the ``N`` reduced
    elements; ``std = sqrt(var)``. A divisor of 0 gives inf (nan where every
    deviation is 0), and no elements give nan, as in PyTorch.

    Args:
        op: "var" or "std".
        x: a floating-point tensor.
        dim: None, an int or a tuple of ints, as for ``reduce``.
        keepdim: keep each reduced dim with size 1.
        correction: subtracted from ``N`` in the divisor; 1 is Bessel's correction,
            0 the population variance.

    Raises:
        DTypeError: ``x`` is not floating point.
        TypeError: ``correction`` is not a real number.
        IndexError: a dim out of range for ``x.ndim``.
        ShapeError: a dim named twice.

    Example:
        >>> em.tensor([1.0, 2.0, 4.0]).var(correction=0).item()
        1.5555...
    """
    dtype = rules.floating_only(op, x.dtype)
    if isinstance(correction, bool) or not isinstance(correction, numbers.Real):
        raise TypeError(f"{op}: correction must be an int or a float, "
                        f"got {type(correction).__name__}")
    correction = int(correction) if isinstance(correction, numbers.Integral) else float(correction)
    dims = _reduced_dims(op, x, dim)
    keepdim = bool(keepdim)
    return call(op, (x,), _reduced_shape(x.shape, dims, keepdim), dtype,
                (dims, keepdim, correction))


def arg_reduce(op: str, x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """Index of the largest (``argmax``) or smallest (``argmin``) element along ``dim``.

    Ties give the first occurrence; NaN counts as both the largest and the
    smallest value, so the first NaN wins, as in PyTorch.

    Args:
        op: "argmax" or "argmin".
        x: the input tensor.
        dim: an int, or None for the index into the flattened tensor.
        keepdim: keep the reduced dim (every dim when ``dim`` is None) with size 1.

    Returns:
        An int64 tensor of indices.

    Raises:
        TypeError: ``dim`` is neither an int nor None (a tuple, say).
        IndexError: ``dim`` out of range for ``x.ndim``.
        ShapeError: the reduced dim (or the whole tensor, for None) is empty.

    Example:
        >>> em.tensor([[1, 5], [7, 2]]).argmax(dim=1).tolist()
        [1, 0]
    """
    keepdim = bool(keepdim)
    if dim is None:
        dims = tuple(range(x.ndim))
        axis = None
    else:
        d = normalize_dim(op, dim, x.shape)
        # A 0-d tensor's one element is index 0 of its flattening.
        dims, axis = ((d,), d) if x.ndim else ((), None)
    _check_not_empty(op, x, dims)
    return call(op, (x,), _reduced_shape(x.shape, dims, keepdim), _dtype.int64, (axis, keepdim))


def cumsum(x: Tensor, dim: int) -> Tensor:
    """Running sum along ``dim``: ``out[..., i, ...] = Σ_{j ≤ i} x[..., j, ...]``.

    Args:
        x: the input tensor.
        dim: the dim to accumulate along (a 0-d tensor accepts 0 and -1).

    Returns:
        A tensor of ``x.shape``: int64 for bool or integer ``x``, else ``x.dtype``.

    Raises:
        TypeError: ``dim`` is not an int.
        IndexError: ``dim`` out of range for ``x.ndim``.

    Example:
        >>> em.tensor([1, 2, 3]).cumsum(0).tolist()
        [1, 3, 6]
    """
    axis = normalize_dim("cumsum", dim, x.shape)
    if _mixed.entered:
        (x,) = _mixed.to_float32(x)
    return call("cumsum", (x,), x.shape, rules.widen_integers("cumsum", x.dtype), (axis,))


# ----- gradients --------------------------------------------------------------------------
#
# Every rule first gives the output's gradient back the reduced dims (size 1), so that it
# broadcasts against the input; ``_spread`` then stretches it over the input's shape where
# the rule needs the full shape. The engine casts each gradient to its input's dtype.

not_differentiable("any", "all", "argmax", "argmin")


def _restore_dims(ctx: Any, t: Tensor) -> Tensor:
    """``t`` (of the reduced shape) with the reduced dims back as size 1 (keepdim's shape)."""
    dims, keepdim = ctx.attrs[0], ctx.attrs[1]
    shape = _reduced_shape(ctx.input_shapes[0], dims, True)
    return t if keepdim or t.shape == shape else t.reshape(shape)


def _spread(ctx: Any, grad: Tensor) -> Tensor:
    return _restore_dims(ctx, grad).expand(*ctx.input_shapes[0])


def _count(ctx: Any) -> int:
    """The number of input elements reduced into each output element."""
    shape = ctx.input_shapes[0]
    return math.prod(shape[d] for d in ctx.attrs[0])


@differentiable("sum", inputs=False, compute_bound=True)
def _sum_backward(ctx: Any, grad: Tensor) -> tuple:
    return (_spread(ctx, grad),)


@differentiable("mean", inputs=False, compute_bound=True)
def _mean_backward(ctx: Any, grad: Tensor) -> tuple:
    # No elements: the input's gradient is empty, so the count of 0 is never divided by.
    return (_spread(ctx, grad) / max(_count(ctx), 1),)


@differentiable("prod", compute_bound=True)
def _prod_backward(ctx: Any, grad: Tensor) -> tuple:
    """∂prod/∂x_i = the product of the slice's other elements, computed without dividing by 0.

    With ``p`` the product of a slice's nonzero elements and ``z`` its count of
    zeros: a nonzero ``x_i`` gets ``p / x_i`` when ``z == 0`` (else 0), a zero
    gets ``p`` when it is the only one (``z == 1``, else 0). Both read
    ``p / where(x == 0, 1, x)`` kept where ``z`` equals ``x_i``'s own zero count.
    PyTorch's values; where it divides the product by ``x_i`` this divides the
    product of the nonzero elements, the same number.
    """
    (x,) = ctx.inputs
    dims = ctx.attrs[0]
    zero = x == 0
    nonzero = x.masked_fill(zero, 1)
    product = nonzero.prod(dims, keepdim=True)
    zeros = zero.sum(dims, keepdim=True)
    others = (product / nonzero).masked_fill(zeros != zero.astype(_dtype.int64), 0)
    return (_restore_dims(ctx, grad) * others,)


@differentiable("max", "min", output=True, compute_bound=True)
def _extreme_backward(ctx: Any, grad: Tensor) -> tuple:
    """The gradient splits evenly among the elements equal to the slice's max (min).

    This is ``torch.amax`` / ``amin`` (and full ``torch.max()``); ``torch.max(x, dim)``
    instead sends it all to the one index it returns. ember's ``max(dim)`` returns
    values only, so it follows amax: ties are symmetric, as the values are.
    A NaN slice gives NaN gradients (no element equals it), as in PyTorch.
    """
    (x,) = ctx.inputs
    dims = ctx.attrs[0]
    hit = (x == _restore_dims(ctx, ctx.output)).astype(x.dtype)
    count = hit.sum(dims, keepdim=True)
    return ((_restore_dims(ctx, grad) / count) * hit,)


def _var_backward(ctx: Any, grad: Tensor, x: Tensor) -> Tensor:
    """``2 (x - mean) / (N - correction)`` times the (dims-restored) gradient.

    With ``N - correction <= 0`` the forward is ``inf`` (``nan`` for a constant
    slice), constant in ``x``: the gradient is ``inf`` times the gradient, or
    ``nan`` where ``x`` equals the mean. This is PyTorch's full-reduction rule,
    kept for every ``dim`` (PyTorch's per-dim rule divides by the negative count).
    """
    dims = ctx.attrs[0]
    centered = x - x.mean(dims, keepdim=True)
    dof = _count(ctx) - ctx.attrs[2]
    if dof <= 0:
        from ember.ops.elementwise import where

        return _restore_dims(ctx, grad) * where(centered == 0, math.nan, math.inf)
    return (2.0 / dof) * _restore_dims(ctx, grad) * centered


@differentiable("var", compute_bound=True)
def _variance_backward(ctx: Any, grad: Tensor) -> tuple:
    return (_var_backward(ctx, grad, ctx.inputs[0]),)


@differentiable("std", output=True, compute_bound=True)
def _std_backward(ctx: Any, grad: Tensor) -> tuple:
    # d std = d var / (2 std); a zero std (a constant slice) gives 0, as in PyTorch.
    std = ctx.output
    return (_var_backward(ctx, (grad / (2 * std)).masked_fill(std == 0, 0), ctx.inputs[0]),)


@differentiable("logsumexp", output=True, compute_bound=True)
def _logsumexp_backward(ctx: Any, grad: Tensor) -> tuple:
    # softmax(x) = exp(x - logsumexp(x)): never overflows, since x <= logsumexp(x).
    (x,) = ctx.inputs
    return (_restore_dims(ctx, grad) * (x - _restore_dims(ctx, ctx.output)).exp(),)


@differentiable("cumsum", inputs=False, compute_bound=True)
def _cumsum_backward(ctx: Any, grad: Tensor) -> tuple:
    """The reversed running sum: ``∂L/∂x_j = Σ_{i ≥ j} ∂L/∂out_i``."""
    (axis,) = ctx.attrs
    size = grad.shape[axis] if grad.ndim else 1
    if size <= 1:
        return (grad,)
    from ember.ops.creation import arange

    reverse = arange(size - 1, -1, -1, device=grad.device)
    return (grad.index_select(axis, reverse).cumsum(axis).index_select(axis, reverse),)
