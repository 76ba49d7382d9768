"""Dropout: zero random elements in training and rescale the rest."""

from __future__ import annotations

from ember.errors import DTypeError
from ember.ops.creation import rand
from ember.tensor import Tensor


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each element with probability ``p`` and scale the kept ones by 1 / (1 - p).

    The mask comes from ``em.rand``, so ``em.manual_seed`` reproduces it (the
    numbers differ from PyTorch's generator). Outside training, or with
    ``p = 0``, ``x`` is returned unchanged; ``p = 1`` gives zeros.

    Args:
        x: a floating tensor.
        p: the probability of zeroing an element, in [0, 1]. Default 0.5.
        training: apply dropout (True) or return ``x`` (False). Default True.

    Shape: any → the same.

    Raises:
        ValueError: ``p`` outside [0, 1].

    Example:
        >>> em.manual_seed(0)
        >>> y = F.dropout(em.ones(1000), p=0.2)   # about 200 zeros, the rest 1.25
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: probability has to be between 0 and 1, but got {p}")
    if not x.dtype.is_floating_point:
        raise DTypeError(f"dropout: needs a floating input, got {x.dtype.name}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    keep = rand(x.shape, dtype=x.dtype, device=x.device.inner) >= p
    return x * keep.astype(x.dtype) * (1.0 / (1.0 - p))
