"""Linear algebra: ``matmul`` (the ``@`` operator), batched with broadcast batch dims."""

from __future__ import annotations

from typing import Any

from ember import dtype as _dtype
from ember import mixed_precision as _mixed
from ember import precision
from ember.ops.gradient_rules import differentiable
from ember.errors import DTypeError, ShapeError
from ember.op_kinds import OTHER, declare
from ember.ops._core import broadcast_shapes, call, same_device
from ember.ops.shape import reshape
from ember.tensor import Tensor

declare(OTHER, "matmul")


def _transposed_name(name: str, ndim: int) -> str:
    return f"{name}.T" if ndim == 2 else f"{name}.transpose(-2, -1)"


def _inner_mismatch(a: Tensor, b: Tensor) -> ShapeError:
    """The inner-dimension error, with a hint when transposing one operand would fit."""
    message = f"matmul: inner dimensions differ: lhs {a.shape} vs rhs {b.shape}"
    rhs_inner = b.shape[-2] if b.ndim >= 2 else b.shape[0]
    if b.ndim >= 2 and b.shape[-1] == a.shape[-1]:
        message += f"\nhelp: did you mean {_transposed_name('rhs', b.ndim)}?"
    elif a.ndim >= 2 and a.shape[-2] == rhs_inner:
        message += f"\nhelp: did you mean {_transposed_name('lhs', a.ndim)}?"
    return ShapeError(message)


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """The matrix product ``a @ b``, as ``torch.matmul``.

    ``out[..., i, j] = sum_k a[..., i, k] * b[..., k, j]``. Leading (batch)
    dims broadcast. A 1-D ``a`` acts as a row vector and a 1-D ``b`` as a
    column vector, and that dim is dropped from the result (1-D @ 1-D is the
    dot product, a 0-d tensor). Integer dtypes are allowed; mixed dtypes
    promote (``int32 @ float32`` is float32; PyTorch would raise). float16 and
    bfloat16 accumulate in float32 and round once, as PyTorch's CPU kernels do.

    Args:
        a: the left operand, at least 1-D.
        b: the right operand, at least 1-D.

    Shape:
        ``(*B1, n, k) @ (*B2, k, m) -> (*broadcast(B1, B2), n, m)``.

    Raises:
        ShapeError: a 0-d operand, inner dims that differ (with a ``help:``
            line when ``rhs.T`` or ``lhs.T`` would fit), or batch dims that do
            not broadcast.
        DTypeError: a bool operand, or an operand that is not a tensor.
        DeviceError: the operands are on different devices.

    Example:
        >>> (em.ones(8, 32, 64) @ em.ones(64, 10)).shape
        (8, 32, 10)
    """
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise DTypeError(f"matmul: expected two tensors, got {type(a).__name__} and "
                         f"{type(b).__name__}; help: wrap arrays with em.tensor(...)")
    device = same_device("matmul", (a, b))
    if a.dtype.kind == "b" or b.dtype.kind == "b":
        raise DTypeError(f"matmul: not defined for bool tensors, got {a.dtype.name} and "
                         f"{b.dtype.name}; help: convert with .to(em.int64) or .to(em.float32)")
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul: both operands need at least 1 dim, got lhs {a.shape} vs rhs "
                         f"{b.shape}; help: use * to multiply by a scalar")
    rhs_inner = b.shape[-2] if b.ndim >= 2 else b.shape[0]
    if a.shape[-1] != rhs_inner:
        raise _inner_mismatch(a, b)
    try:
        batch = broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2])
    except ShapeError:
        raise ShapeError(f"matmul: batch dimensions do not broadcast: lhs {a.shape} vs rhs "
                         f"{b.shape}") from None
    if _mixed.entered:
        a, b = _mixed.to_low(a, b)
    rows = a.shape[-2:-1]  # () for a 1-D lhs
    cols = b.shape[-1:] if b.ndim >= 2 else ()
    out_dtype = _dtype.promote(a.dtype, b.dtype)
    return call("matmul", (a, b), batch + rows + cols, out_dtype,
                precision.matmul_attrs(out_dtype is _dtype.float32), device)


def _transposed_product(a: Tensor, b: Tensor, transpose_a: bool, transpose_b: bool) -> Tensor:
    """``a @ b`` with the flagged operands (both at least 2-D) read transposed: one op, where
    ``transpose`` and ``matmul`` would be two (backward passes' products, ``linear``'s
    weight; every backend's kernel takes the transposed view)."""
    def matrices(x: Tensor, flipped: bool) -> tuple[int, ...]:
        return x.shape[:-2] + (x.shape[-1], x.shape[-2]) if flipped else x.shape

    a_shape, b_shape = matrices(a, transpose_a), matrices(b, transpose_b)
    if a_shape[-1] != b_shape[-2]:
        raise ShapeError(f"matmul: inner dimensions differ: lhs {a_shape} vs rhs {b_shape} "
                         f"(read transposed from {a.shape} and {b.shape})")
    batch = broadcast_shapes("matmul", a_shape[:-2], b_shape[:-2])
    out_dtype = _dtype.promote(a.dtype, b.dtype)
    attrs = precision.matmul_attrs(out_dtype is _dtype.float32, transpose_a, transpose_b)
    return call("matmul", (a, b), batch + (a_shape[-2], b_shape[-1]), out_dtype, attrs,
                same_device("matmul", (a, b)))


@differentiable("matmul", compute_bound=True)
def _matmul_backward(ctx: Any, grad: Tensor) -> tuple:
    """``da = grad @ bᵀ``, ``db = aᵀ @ grad``, with 1-D operands seen as a row / a column.

    Every product reads its operands transposed where needed (no permute ops), also for
    a product that read an operand transposed itself (``linear``'s weight): with
    ``C = op(A) @ op(B)``, ``dA = op(B) @ Gᵀ`` where A was read transposed, and
    ``dB = Gᵀ @ op(A)`` where B was. The vector's added dim is dropped again here; the
    engine then sums each gradient over the batch dims its operand was broadcast along.
    """
    a, b = ctx.inputs
    _, flip_a, flip_b = precision.read_matmul_attrs(ctx.attrs)
    a2 = a if a.ndim >= 2 else reshape(a, (1, a.shape[0]))
    b2 = b if b.ndim >= 2 else reshape(b, (b.shape[0], 1))
    rows = a2.shape[-1] if flip_a else a2.shape[-2]
    cols = b2.shape[-2] if flip_b else b2.shape[-1]
    batch = grad.shape[:grad.ndim - (a.ndim >= 2) - (b.ndim >= 2)]
    matrices = batch + (rows, cols)
    g2 = grad if grad.shape == matrices else reshape(grad, matrices)
    tracked_a, tracked_b = ctx.needs_input_grad
    grad_a = grad_b = None
    if tracked_a:
        grad_a = (_transposed_product(b2, g2, flip_b, True) if flip_a
                  else _transposed_product(g2, b2, False, not flip_b))
        if a.ndim == 1:
            grad_a = reshape(grad_a, grad_a.shape[:-2] + a.shape)
    if tracked_b and b2.ndim == 2 and a2.ndim > 2 and not flip_a:
        # A weight shared by every batch (x @ W): one product over all rows (K = rows of
        # every batch), not a batched one with a small K and then a sum over the batch.
        a_rows = reshape(a2, (-1, a2.shape[-1]))
        g_rows = reshape(g2, (-1, g2.shape[-1]))
        grad_b = (_transposed_product(g_rows, a_rows, True, False) if flip_b
                  else _transposed_product(a_rows, g_rows, True, False))
        if b.ndim == 1:
            grad_b = reshape(grad_b, b.shape)
    elif tracked_b:
        grad_b = (_transposed_product(g2, a2, True, flip_a) if flip_b
                  else _transposed_product(a2, g2, not flip_a, False))
        if b.ndim == 1:
            grad_b = reshape(grad_b, grad_b.shape[:-2] + b.shape)
    return grad_a, grad_b
