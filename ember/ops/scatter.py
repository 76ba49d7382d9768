"""``scatter`` (write ``src`` at ``index`` along ``dim``) and ``scatter_reduce`` (combine it:
sum, prod, mean, amax, amin), PyTorch's semantics and gradients.

For ``dim=0`` both visit every position ``(i, j)`` of ``index``: ``out[index[i][j]][j]``
receives ``src[i][j]``. ``index`` has as many dims as the input and ``src``, is no larger
than ``src`` in any dim and no larger than the input in the dims other than ``dim``; its
values lie in ``[0, input.shape[dim])`` (out of range fails at the read, as ``gather``).
Where ``scatter`` meets one position twice, one of the values wins (PyTorch leaves which
unspecified; the CPU keeps the last).

IR: ``scatter`` and ``scatter_reduce`` take (input, index, src); attrs ``(dim,)`` and
``(dim, reduce, include_self)``.
"""

from __future__ import annotations

from typing import Any

from ember.errors import DTypeError
from ember.op_kinds import OTHER, declare
from ember.ops import dtype_rules as rules
from ember.ops._core import call
from ember.ops.elementwise import where
from ember.ops.gradient_rules import differentiable
from ember.ops.indexing import check_scatter_operands
from ember.tensor import Tensor

declare(OTHER, "scatter", "scatter_reduce", dtype_rule=rules.keep)

REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")
_LEGACY = {"add": "sum", "multiply": "prod"}  # scatter(..., reduce=) names


def _check(op: str, x: Any, dim: Any, index: Any, src: Any) -> tuple[int, Tensor]:
    """The normalized dim and ``src`` as a tensor (a scalar fills index's shape)."""
    for what, t in (("input", x), ("index", index)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{op}: expected a tensor as {what}, got {type(t).__name__}")
    if index.dtype.kind != "i":
        raise DTypeError(f"{op}: the index must be an int32 or int64 tensor, got "
                         f"{index.dtype.name}; help: convert with .to(em.int64)")
    if not isinstance(src, Tensor):
        from ember.ops.creation import full

        if isinstance(src, (list, tuple)) or not isinstance(src, (bool, int, float)):
            raise TypeError(f"{op}: src must be a tensor or a Python scalar, got "
                            f"{type(src).__name__}")
        src = full(index.shape, src, dtype=x.dtype, device=x.device)
    return check_scatter_operands(op, x, dim, index, src), src


def scatter(x: Tensor, dim: int, index: Tensor, src: Any = None, *, value: Any = None,
            reduce: str | None = None) -> Tensor:
    """A copy of ``x`` with ``src`` written at ``index`` along ``dim``.

    Args:
        x: the input tensor.
        dim: the dim ``index`` addresses.
        index: an int tensor (see the module's shape rule).
        src: a tensor of ``x.dtype``, or a Python scalar written everywhere ``index`` points.
        value: ``src`` by PyTorch's other keyword (a scalar).
        reduce: None, or PyTorch's older ``"add"`` / ``"multiply"`` (``scatter_reduce``'s
            ``"sum"`` / ``"prod"``).

    Returns:
        A tensor of ``x``'s shape and dtype. Gradients: to ``x`` where nothing was written,
        to ``src`` at the positions ``index`` reads.

    Raises:
        ShapeError, DTypeError: see the module; ValueError: an unknown ``reduce``.

    Example:
        >>> em.zeros(3).scatter(0, em.tensor([2, 0]), em.tensor([5.0, 7.0])).tolist()
        [7.0, 0.0, 5.0]
    """
    if src is None:
        src = value
    if src is None:
        raise TypeError("scatter: needs src (a tensor or a scalar) or value=")
    if reduce is not None:
        if reduce not in _LEGACY:
            raise ValueError(f"scatter: reduce must be None, 'add' or 'multiply', got "
                             f"{reduce!r}")
        return scatter_reduce(x, dim, index, src, _LEGACY[reduce])
    d, src = _check("scatter", x, dim, index, src)
    return call("scatter", (x, index, src), x.shape, x.dtype, (d,))


def scatter_reduce(x: Tensor, dim: int, index: Tensor, src: Any, reduce: str, *,
                   include_self: bool = True) -> Tensor:
    """A copy of ``x`` where each position ``index`` points to combines its value(s) of ``src``
    by ``reduce`` (and with ``x``'s own value when ``include_self``), as PyTorch's.

    Args:
        x: the input tensor.
        dim: the dim ``index`` addresses.
        index: an int tensor (see the module's shape rule).
        src: a tensor of ``x.dtype`` (or a Python scalar).
        reduce: ``"sum"``, ``"prod"``, ``"mean"``, ``"amax"`` or ``"amin"``. ``"mean"`` of
            integers rounds down.
        include_self: whether ``x``'s values at the positions written take part; positions
            nothing points to keep ``x``'s value either way.

    Returns:
        A tensor of ``x``'s shape and dtype, with PyTorch's gradients (``amax`` / ``amin``
        share the gradient evenly among tied values; ``prod`` is exact with zeros).

    Raises:
        ValueError: an unknown ``reduce``; ShapeError, DTypeError: see the module.

    Example:
        >>> em.ones(2).scatter_reduce(0, em.tensor([0, 0, 1]), em.tensor([2.0, 3.0, 4.0]),
        ...                           "amax", include_self=False).tolist()
        [3.0, 4.0]
    """
    if reduce not in REDUCTIONS:
        raise ValueError(f"scatter_reduce: reduce must be one of {REDUCTIONS}, got {reduce!r}")
    d, src = _check("scatter_reduce", x, dim, index, src)
    if x.dtype.kind == "b" and reduce in ("sum", "prod", "mean"):
        raise DTypeError(f"scatter_reduce: reduce={reduce!r} is not defined for bool tensors; "
                         f"help: convert with .to(em.int64)")
    return call("scatter_reduce", (x, index, src), x.shape, x.dtype,
                (d, reduce, bool(include_self)))


# ----- gradients --------------------------------------------------------------------------


def _zeros_like(t: Tensor) -> Tensor:
    from ember.ops.creation import zeros_like

    return zeros_like(t)


def _src_grad(grad_src: Tensor, src_shape: tuple[int, ...]) -> Tensor:
    """``grad_src`` (index's shape) placed in a zero gradient of ``src``'s shape."""
    if grad_src.shape == src_shape:
        return grad_src
    from ember.ops.creation import zeros

    base = zeros(src_shape, dtype=grad_src.dtype, device=grad_src.device)
    corner = tuple(slice(0, n) for n in grad_src.shape)
    base[corner] = grad_src
    return base


@differentiable("scatter", inputs=(1,))
def _scatter_backward(ctx: Any, grad: Tensor) -> tuple:
    (dim,) = ctx.attrs
    index = ctx.inputs[1]
    grad_x = scatter(grad, dim, index, 0.0) if ctx.needs_input_grad[0] else None
    grad_src = None
    if ctx.needs_input_grad[2]:
        grad_src = _src_grad(grad.gather(dim, index), ctx.input_shapes[2])
    return grad_x, None, grad_src


@differentiable("scatter_reduce", output=True)
def _scatter_reduce_backward(ctx: Any, grad: Tensor) -> tuple:
    """PyTorch's ``scatter_reduce_backward``, reduce by reduce."""
    x, index, src = ctx.inputs
    dim, reduce, include_self = ctx.attrs
    src = src[tuple(slice(0, n) for n in index.shape)] if src.shape != index.shape else src
    result = ctx.output
    if reduce == "sum":
        grad_x, grad_src = grad, grad.gather(dim, index)
    elif reduce == "mean":
        count = (_zeros_like(grad) + (1.0 if include_self else 0.0)).scatter_add(
            dim, index, _zeros_like(src) + 1.0)
        count = where(count == 0, 1.0, count)
        grad_x = grad / count
        grad_src = grad.gather(dim, index) / count.gather(dim, index)
    elif reduce == "prod":
        grad_x, grad_src = _prod_grads(grad, x, index, src, result, dim, include_self)
    else:
        value = result.gather(dim, index)
        x_is_result = (x == result).astype(grad.dtype)
        src_is_result = (src == value).astype(grad.dtype)
        shared = grad / x_is_result.scatter_add(dim, index, src_is_result)
        grad_x = x_is_result * shared
        grad_src = src_is_result * shared.gather(dim, index)
    if not include_self:
        grad_x = scatter(grad_x, dim, index, 0.0)
    return grad_x, None, _src_grad(grad_src, ctx.input_shapes[2])


def _prod_grads(grad: Tensor, x: Tensor, index: Tensor, src: Tensor, result: Tensor, dim: int,
                include_self: bool) -> tuple[Tensor, Tensor]:
    """The product of the others at each factor, without dividing by a zero factor."""
    x_safe = where(x == 0, 1.0, x)
    grad_x = grad * x_safe.scatter_reduce(dim, index, src, "prod",
                                          include_self=include_self) / x_safe
    src_zero = src == 0
    zeros_at = _zeros_like(grad).scatter_add(dim, index, src_zero.astype(grad.dtype))
    single_zero = src_zero & (zeros_at.gather(dim, index) == 1)
    without_zero = x.scatter_reduce(dim, index, where(single_zero, 1.0, src), "prod",
                                    include_self=include_self)
    grad_src = where(single_zero, (grad * without_zero).gather(dim, index),
                     (grad * result).gather(dim, index) / where(src_zero, 1.0, src))
    return grad_x, grad_src
