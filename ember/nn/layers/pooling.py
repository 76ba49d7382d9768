"""Pooling layers, 1-D, 2-D and 3-D, plain and adaptive (no parameters)."""

from __future__ import annotations

from typing import Any

from ember.nn.functional import conv as F
from ember.nn.functional import pooling as P
from ember.nn.module import Module
from ember.tensor import Tensor


class _MaxPoolNd(Module):
    """What the max pools of every rank keep: the window's geometry."""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 dilation: Any = 1, return_indices: bool = False,
                 ceil_mode: bool = False) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool2d(_MaxPoolNd):
    """The maximum over each window, as ``torch.nn.MaxPool2d``.

    Args:
        kernel_size: an int or an (h, w) pair.
        stride: default (None) the kernel size.
        padding: implicit -inf cells on both sides, at most half the kernel. Default 0.
        dilation: spacing of a window's cells. Default 1.
        return_indices: also return the flat index (h · W + w) of each chosen cell.
        ceil_mode: round the output size up instead of down.

    Shape:
        (N, C, H, W) or (C, H, W) → (..., H_out, W_out),
        H_out = floor_or_ceil((H + 2·p - d·(k - 1) - 1) / s) + 1.

    Example:
        >>> nn.MaxPool2d(2)(em.randn(8, 16, 32, 32)).shape
        (8, 16, 16, 16)
    """

    def forward(self, x: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode, self.return_indices)


class AvgPool2d(Module):
    """The mean over each window, as ``torch.nn.AvgPool2d``.

    Args:
        kernel_size: an int or an (h, w) pair.
        stride: default (None) the kernel size.
        padding: implicit zero cells on both sides, at most half the kernel. Default 0.
        ceil_mode: round the output size up instead of down.
        count_include_pad: count the zero padding in each window's divisor. Default True.
        divisor_override: divide every window's sum by this instead. Default None.

    Shape:
        (N, C, H, W) or (C, H, W) → (..., H_out, W_out),
        H_out = floor_or_ceil((H + 2·p - k) / s) + 1.

    Example:
        >>> nn.AvgPool2d(2)(em.randn(1, 3, 8, 8)).shape
        (1, 3, 4, 4)
    """

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override: int | None = None) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class _AdaptivePool(Module):
    """What the adaptive pools keep: the output size (and, for the max pools, whether to
    return the chosen cells' indices)."""

    def __init__(self, output_size: Any, return_indices: bool = False) -> None:
        super().__init__()
        self.output_size = output_size
        self.return_indices = return_indices

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool2d(_AdaptivePool):
    """The mean over adaptive windows that give a fixed output size, as PyTorch's.

    Output cell ``i`` of ``O`` along an input dim of size ``S`` averages cells
    ``floor(i·S/O)`` to ``ceil((i+1)·S/O) - 1``. ``AdaptiveAvgPool2d(1)`` is global
    average pooling.

    Args:
        output_size: an int or an (h, w) pair; None in the pair keeps that input size.

    Shape:
        (N, C, H, W) or (C, H, W) → (..., h, w).

    Example:
        >>> nn.AdaptiveAvgPool2d(1)(em.randn(2, 3, 7, 7)).shape   # global average pooling
        (2, 3, 1, 1)
    """

    def forward(self, x: Tensor) -> Tensor:
        return F.adaptive_avg_pool2d(x, self.output_size)


class MaxPool1d(_MaxPoolNd):
    """The maximum over each window of (N, C, L) or (C, L), as ``torch.nn.MaxPool1d``.

    Args: as ``MaxPool2d``'s, each an int (or a 1-tuple).

    Shape: (..., L) → (..., L_out), L_out = floor_or_ceil((L + 2·p - d·(k - 1) - 1) / s) + 1.

    Example:
        >>> nn.MaxPool1d(3, stride=2)(em.randn(4, 16, 50)).shape
        (4, 16, 24)
    """

    def forward(self, x: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        return P.max_pool1d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode, self.return_indices)


class AvgPool1d(Module):
    """The mean over each window of (N, C, L) or (C, L), as ``torch.nn.AvgPool1d``.

    Args: kernel_size, stride (default the kernel size), padding (0), ceil_mode (False),
    count_include_pad (True), as ``AvgPool2d``'s.

    Shape: (..., L) → (..., L_out), L_out = floor_or_ceil((L + 2·p - k) / s) + 1.

    Example:
        >>> nn.AvgPool1d(2)(em.tensor([[[1.0, 3.0, 5.0, 7.0]]])).tolist()
        [[[2.0, 6.0]]]
    """

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 ceil_mode: bool = False, count_include_pad: bool = True) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad

    def forward(self, x: Tensor) -> Tensor:
        return P.avg_pool1d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool1d(_AdaptivePool):
    """The mean over adaptive windows that give ``output_size`` cells along L.

    Shape: (N, C, L) or (C, L) → (..., output_size).

    Example:
        >>> nn.AdaptiveAvgPool1d(4)(em.randn(2, 3, 10)).shape
        (2, 3, 4)
    """

    def forward(self, x: Tensor) -> Tensor:
        return P.adaptive_avg_pool1d(x, self.output_size)


class AdaptiveMaxPool1d(_AdaptivePool):
    """The max over adaptive windows that give ``output_size`` cells along L.

    Shape: (N, C, L) or (C, L) → (..., output_size).

    Example:
        >>> nn.AdaptiveMaxPool1d(2)(em.tensor([[[1.0, 5.0, 2.0, 0.0]]])).tolist()
        [[[5.0, 2.0]]]
    """

    def forward(self, x: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        return P.adaptive_max_pool1d(x, self.output_size, self.return_indices)


class AdaptiveMaxPool2d(_AdaptivePool):
    """The max over adaptive windows that give a fixed output size, as PyTorch's.

    Output cell ``i`` of ``O`` along an input dim of size ``S`` covers cells
    ``floor(i·S/O)`` to ``ceil((i+1)·S/O) - 1``.

    Args:
        output_size: an int or an (h, w) pair; None in the pair keeps that input size.
        return_indices: also return the flat index (h · W + w) of each chosen cell.

    Shape:
        (N, C, H, W) or (C, H, W) → (..., h, w).

    Example:
        >>> nn.AdaptiveMaxPool2d((5, 7))(em.randn(1, 64, 8, 9)).shape
        (1, 64, 5, 7)
    """

    def forward(self, x: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        return P.adaptive_max_pool2d(x, self.output_size, self.return_indices)


class MaxPool3d(_MaxPoolNd):
    """The maximum over each 3-D window, as ``torch.nn.MaxPool3d`` (no ``return_indices``).

    Args:
        kernel_size: an int or 3 ints.
        stride: an int or 3 ints; default (None) the kernel size.
        padding: an int or 3 ints of -inf cells on both sides, at most half the kernel.
        dilation: an int or 3 ints. Default 1.
        return_indices: only False.
        ceil_mode: round the output size up instead of down.

    Shape:
        (N, C, D, H, W) or (C, D, H, W) → (..., D_out, H_out, W_out), each as ``MaxPool2d``.

    Example:
        >>> nn.MaxPool3d(2)(em.randn(2, 4, 8, 8, 8)).shape
        (2, 4, 4, 4, 4)
    """

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 dilation: Any = 1, return_indices: bool = False,
                 ceil_mode: bool = False) -> None:
        if return_indices:
            raise NotImplementedError("MaxPool3d: return_indices=True is not supported yet")
        super().__init__(kernel_size, stride, padding, dilation, False, ceil_mode)

    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool3d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode)


class AvgPool3d(AvgPool2d):
    """The mean over each 3-D window, as ``torch.nn.AvgPool3d`` (arguments as ``AvgPool2d``,
    each an int or 3 ints).

    Example:
        >>> nn.AvgPool3d(2)(em.randn(2, 4, 8, 8, 8)).shape
        (2, 4, 4, 4, 4)
    """

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool3d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)
