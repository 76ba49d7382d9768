"""``Upsample``: ``F.interpolate`` as a layer."""

from __future__ import annotations

from typing import Any

from ember.nn.functional.interpolation import interpolate
from ember.nn.module import Module
from ember.tensor import Tensor


class Upsample(Module):
    """Resize the spatial dims of (N, C, *spatial), as ``torch.nn.Upsample``.

    Args:
        size: the output spatial size (an int or one per spatial dim).
        scale_factor: a multiplier (or one per dim); exactly one of the two.
        mode: "nearest" (default), "nearest-exact", "linear", "bilinear", "trilinear"
            or "area"; see ``F.interpolate`` for the source positions.
        align_corners: linear modes only. Default None (False).
        recompute_scale_factor: take the scale from the computed output size.

    Shape: (N, C, *spatial) → (N, C, *size) or (N, C, floor(spatial · scale_factor)).

    Example:
        >>> nn.Upsample(scale_factor=2, mode="bilinear")(em.randn(1, 3, 4, 4)).shape
        (1, 3, 8, 8)
    """

    def __init__(self, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                 align_corners: bool | None = None,
                 recompute_scale_factor: bool | None = None) -> None:
        super().__init__()
        self.size = size
        self.scale_factor = float(scale_factor) if isinstance(scale_factor, int | float) \
            else scale_factor
        self.mode = mode
        self.align_corners = align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, x: Tensor) -> Tensor:
        return interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners,
                           self.recompute_scale_factor)

    def extra_repr(self) -> str:
        what = f"size={self.size}" if self.scale_factor is None else \
            f"scale_factor={self.scale_factor}"
        return f"{what}, mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    """``Upsample(size, scale_factor, mode="nearest")`` of (N, C, H, W).

    Example:
        >>> nn.UpsamplingNearest2d(scale_factor=2)(em.tensor([[[[1.0, 2.0]]]])).tolist()
        [[[[1.0, 1.0, 2.0, 2.0], [1.0, 1.0, 2.0, 2.0]]]]
    """

    def __init__(self, size: Any = None, scale_factor: Any = None) -> None:
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """``Upsample(size, scale_factor, mode="bilinear", align_corners=True)`` of (N, C, H, W).

    Example:
        >>> nn.UpsamplingBilinear2d(scale_factor=2)(em.randn(1, 3, 8, 8)).shape
        (1, 3, 16, 16)
    """

    def __init__(self, size: Any = None, scale_factor: Any = None) -> None:
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)
