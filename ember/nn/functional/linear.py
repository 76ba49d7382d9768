"""The affine map of ``nn.Linear``."""

from __future__ import annotations

from ember.tensor import Tensor


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """y = x · weightᵀ + bias, with ``weight`` of shape (out, in) as in PyTorch.

    Shape: x (..., in) → (..., out).
    """
    y = x @ weight.T
    return y if bias is None else y + bias
