"""The affine map of ``nn.Linear``."""

from __future__ import annotations

from ember import mixed_precision as _mixed
from ember.errors import DTypeError, ShapeError
from ember.ops.linalg import _transposed_product
from ember.tensor import Tensor


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """y = x · weightᵀ + bias, with ``weight`` of shape (out, in) as in PyTorch.

    The product reads the weight transposed (one op, where ``weight.T`` would add a
    permute forward and another backward).

    Shape: x (..., in) → (..., out).

    Raises:
        ShapeError: ``weight`` is not 2-D, or ``x``'s last dim is not its second.
        DTypeError: an operand is not a tensor, or is bool.

    Example:
        >>> F.linear(em.ones((3, 4)), em.ones((2, 4)), em.tensor([0.0, 1.0])).tolist()
        [[4.0, 5.0], [4.0, 5.0], [4.0, 5.0]]
    """
    if not isinstance(x, Tensor) or not isinstance(weight, Tensor):
        raise DTypeError(f"linear: expected tensors, got {type(x).__name__} and "
                         f"{type(weight).__name__}")
    if weight.ndim != 2 or x.ndim == 0:
        raise ShapeError(f"linear: needs a 2-D weight (out, in) and an input of at least 1 "
                         f"dim, got weight {weight.shape} and input {x.shape}")
    if x.shape[-1] != weight.shape[1]:
        raise ShapeError(f"linear: the input's last dim is {x.shape[-1]}, the weight's in "
                         f"features {weight.shape[1]} (input {x.shape}, weight {weight.shape} "
                         f"as (out, in))")
    if x.dtype.kind == "b" or weight.dtype.kind == "b":
        raise DTypeError(f"linear: not defined for bool tensors, got {x.dtype.name} and "
                         f"{weight.dtype.name}")
    if _mixed.entered:
        x, weight, bias = _mixed.to_low(x, weight, bias)
    if x.ndim == 1:  # a vector: the plain product keeps its rules for 1-D operands
        y = x @ weight.T
    else:
        y = _transposed_product(x, weight, False, True)
    return y if bias is None else y + bias
