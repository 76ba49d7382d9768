"""``Linear``: y = x Wᵀ + b."""

from __future__ import annotations

import math
from typing import Any

from ember.nn import init
from ember.nn.functional.linear import linear
from ember.nn.module import Module
from ember.nn.param import Param
from ember.ops._core import resolve_device
from ember.ops.creation import zeros
from ember.tensor import Tensor


class Linear(Module):
    """An affine layer, initialized like PyTorch's.

    y = x Wᵀ + b, W ~ U(-1/√in, 1/√in) (kaiming_uniform with a=√5), b ~ U(-1/√in, 1/√in).

    Args:
        in_features, out_features: sizes of the last input and output dims.
        bias: whether to add a learned bias. Default True.
        device: where the parameters live (an autodiff device trains them).
        dtype: parameter dtype. Default float32.

    Shape: (..., in_features) → (..., out_features).

    Example:
        >>> layer = nn.Linear(4, 2)
        >>> layer(em.randn(8, 4)).shape
        (8, 2)
        >>> layer.weight.shape, layer.bias.shape
        ((2, 4), (2,))
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        device = resolve_device(device)
        self.weight = Param(zeros((out_features, in_features), dtype=dtype, device=device))
        init.kaiming_uniform(self.weight, a=math.sqrt(5))
        if bias:
            bound = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
            self.bias = Param(zeros((out_features,), dtype=dtype, device=device))
            init.uniform(self.bias, -bound, bound)
        else:
            self.bias = None

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight.value, None if self.bias is None else self.bias.value)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")
