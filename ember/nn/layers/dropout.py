"""``Dropout``: random zeroing in training, identity in eval."""

from __future__ import annotations

from ember.nn.functional.dropout import dropout
from ember.nn.module import Module
from ember.tensor import Tensor


class Dropout(Module):
    """Zero each element with probability ``p`` in training, scaling the rest by 1 / (1 - p).

    In eval (``module.eval()``) it is the identity. The mask comes from
    ``em.rand``, so ``em.manual_seed`` reproduces it.

    Args:
        p: the probability of zeroing an element. Default 0.5.
        inplace: accepted for PyTorch compatibility; tensors are immutable, so
            it changes nothing.

    Shape: any → the same.

    Example:
        >>> drop = nn.Dropout(0.1)
        >>> y = drop(em.randn(8, 32))        # training
        >>> y = drop.eval()(em.randn(8, 32))  # identity
    """

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
