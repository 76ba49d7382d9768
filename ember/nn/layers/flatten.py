"""``Flatten`` and ``Unflatten``: reshapes as layers, for ``Sequential``."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ember.errors import ShapeError
from ember.nn.module import Module
from ember.ops._core import normalize_dim
from ember.tensor import Tensor


class Flatten(Module):
    """Merge dims ``start_dim`` through ``end_dim`` (inclusive) into one.

    Args:
        start_dim: the first dim merged. Default 1 (the batch dim stays).
        end_dim: the last dim merged. Default -1.

    Shape: (N, *dims) → (N, ∏ dims) with the defaults.

    Example:
        >>> nn.Flatten()(em.zeros(32, 1, 5, 5)).shape
        (32, 25)
    """

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Split dim ``dim`` into ``unflattened_size`` (whose product must be its size; one
    entry may be -1, inferred).

    Shape: (*, S, *) → (*, *unflattened_size, *).

    Raises:
        ShapeError: the sizes do not multiply to the dim's size.

    Example:
        >>> nn.Unflatten(1, (2, 5, 5))(em.zeros(2, 50)).shape
        (2, 2, 5, 5)
    """

    def __init__(self, dim: int, unflattened_size: Sequence[int]) -> None:
        super().__init__()
        if isinstance(unflattened_size, int) or not all(
                isinstance(s, int) for s in unflattened_size):
            raise TypeError(f"Unflatten: unflattened_size must be a tuple of ints, got "
                            f"{unflattened_size!r}")
        self.dim = dim
        self.unflattened_size = tuple(unflattened_size)

    def forward(self, x: Tensor) -> Tensor:
        dim = normalize_dim("Unflatten", self.dim, x.ndim)
        sizes = self.unflattened_size
        known = math.prod(s for s in sizes if s != -1)
        size = x.shape[dim]
        fits = (sizes.count(-1) == 0 and known == size) or (
            sizes.count(-1) == 1 and known > 0 and size % known == 0)
        if not fits:
            raise ShapeError(f"Unflatten: sizes {sizes} do not split dim {self.dim} of size "
                             f"{size} (input shape {x.shape})")
        return x.reshape(*x.shape[:dim], *sizes, *x.shape[dim + 1:])

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
