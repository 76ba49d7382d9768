"""``empty`` and ``normal``, PyTorch's names over ember's creation ops."""

from __future__ import annotations

from typing import Any

from ember.ops.creation import randn, zeros
from ember.tensor import Tensor


def empty(*shape: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """A tensor whose values are unspecified (zeros here: a fill costs nothing next to the
    read that would find garbage).

    Example:
        >>> em.empty(2, 3).shape
        (2, 3)
    """
    return zeros(*shape, dtype=dtype, device=device)


def normal(mean: float = 0.0, std: float = 1.0, size: Any = None, *, dtype: Any = None,
           device: Any = None) -> Tensor:
    """Samples of N(mean, std²); ``mean`` and ``std`` may be tensors of one shape (then
    ``size`` defaults to it), as ``torch.normal``.

    Raises:
        ValueError: no ``size`` and neither ``mean`` nor ``std`` a tensor.

    Example:
        >>> em.normal(0.0, 2.0, (1000,)).shape
        (1000,)
        >>> em.normal(em.zeros(3), em.ones(3)).shape
        (3,)
    """
    like = mean if isinstance(mean, Tensor) else std if isinstance(std, Tensor) else None
    if size is None:
        if like is None:
            raise ValueError("normal: needs size= when mean and std are numbers")
        size = like.shape
    if like is not None:
        dtype = dtype or like.dtype
        device = device or like.device.inner
    return randn(size, dtype=dtype, device=device) * std + mean
