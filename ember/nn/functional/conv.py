"""Convolution and pooling, functional forms: PyTorch's signatures over ``ember/ops/conv.py``.

Each is one primitive op with its own backward rule (im2col and a matmul on
the CPU); the docstrings of ``ember.ops.conv`` give the math and the shapes.
"""

from __future__ import annotations

from typing import Any

from ember.ops import conv as _conv
from ember.ops import conv3d as _conv3d
from ember.tensor import Tensor

# The first parameter is named ``input``, as in PyTorch, so keyword calls written for torch
# work unchanged.


def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    """1-D cross-correlation over (N, C_in, L): weight (C_out, C_in / groups, K).

    ``padding`` is an int, a 1-tuple, "valid" or "same". See ``ember.ops.conv.conv1d``.

    Example:
        >>> F.conv1d(em.randn(2, 3, 10), em.randn(5, 3, 3), padding=1).shape
        (2, 5, 10)
    """
    return _conv.conv1d(input, weight, bias, stride, padding, dilation, groups)


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    """2-D cross-correlation over (N, C_in, H, W): weight (C_out, C_in / groups, K_h, K_w).

    H_out = floor((H + 2·padding - dilation·(K_h - 1) - 1) / stride) + 1, W_out alike.
    See ``ember.ops.conv.conv2d``.

    Example:
        >>> F.conv2d(em.ones(8, 3, 32, 32), em.ones(16, 3, 3, 3), stride=2, padding=1).shape
        (8, 16, 16, 16)
    """
    return _conv.conv2d(input, weight, bias, stride, padding, dilation, groups)


def conv_transpose1d(input: Tensor, weight: Tensor, bias: Tensor | None = None,
                     stride: Any = 1, padding: Any = 0, output_padding: Any = 0,
                     groups: int = 1, dilation: Any = 1) -> Tensor:
    """1-D transposed convolution: weight (C_in, C_out / groups, K).

    L_out = (L - 1)·stride - 2·padding + dilation·(K - 1) + output_padding + 1.

    Example:
        >>> F.conv_transpose1d(em.randn(2, 4, 10), em.randn(4, 3, 3), stride=2).shape
        (2, 3, 21)
    """
    return _conv.conv_transpose1d(input, weight, bias, stride, padding, output_padding, groups,
                                  dilation)


def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None,
                     stride: Any = 1, padding: Any = 0, output_padding: Any = 0,
                     groups: int = 1, dilation: Any = 1) -> Tensor:
    """2-D transposed convolution: weight (C_in, C_out / groups, K_h, K_w).

    H_out = (H - 1)·stride - 2·padding + dilation·(K_h - 1) + output_padding + 1, W_out
    alike. See ``ember.ops.conv.conv_transpose2d``.

    Example:
        >>> F.conv_transpose2d(em.randn(1, 8, 5, 5), em.randn(8, 3, 2, 2), stride=2).shape
        (1, 3, 10, 10)
    """
    return _conv.conv_transpose2d(input, weight, bias, stride, padding, output_padding, groups,
                                  dilation)


def max_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               dilation: Any = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """The max over each window; ``stride`` defaults to ``kernel_size``.

    With ``return_indices``, also the flat index (h · W + w) of each chosen cell.
    See ``ember.ops.conv.max_pool2d``.

    Example:
        >>> F.max_pool2d(em.randn(1, 3, 8, 8), 2).shape
        (1, 3, 4, 4)
    """
    return _conv.max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode,
                            return_indices)


def avg_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    """The mean over each window; ``stride`` defaults to ``kernel_size``.

    See ``ember.ops.conv.avg_pool2d`` for how the divisor counts padding.

    Example:
        >>> F.avg_pool2d(em.ones((1, 1, 4, 4)), 2).tolist()
        [[[[1.0, 1.0], [1.0, 1.0]]]]
    """
    return _conv.avg_pool2d(input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                            divisor_override)


def adaptive_avg_pool2d(input: Tensor, output_size: Any) -> Tensor:
    """The mean over adaptive windows giving ``output_size`` (an int or an (h, w) pair;
    None keeps that input size). ``adaptive_avg_pool2d(x, 1)`` is global average pooling.

    Example:
        >>> F.adaptive_avg_pool2d(em.ones((2, 3, 7, 5)), 1).tolist()[0]
        [[[1.0]], [[1.0]], [[1.0]]]
    """
    return _conv.adaptive_avg_pool2d(input, output_size)


def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    """3-D cross-correlation over (N, C_in, D, H, W): weight (C_out, C_in / groups, K_d, K_h,
    K_w). See ``ember.ops.conv3d.conv3d``.

    Example:
        >>> F.conv3d(em.ones(2, 3, 8, 8, 8), em.ones(4, 3, 3, 3, 3), padding=1).shape
        (2, 4, 8, 8, 8)
    """
    return _conv3d.conv3d(input, weight, bias, stride, padding, dilation, groups)


def max_pool3d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               dilation: Any = 1, ceil_mode: bool = False) -> Tensor:
    """The max over each 3-D window; ``stride`` defaults to ``kernel_size``.

    Example:
        >>> F.max_pool3d(em.ones(1, 2, 4, 4, 4), 2).shape
        (1, 2, 2, 2, 2)
    """
    return _conv3d.max_pool3d(input, kernel_size, stride, padding, dilation, ceil_mode)


def avg_pool3d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    """The mean over each 3-D window; ``stride`` defaults to ``kernel_size``.

    Example:
        >>> F.avg_pool3d(em.ones(1, 2, 4, 4, 4), 2).shape
        (1, 2, 2, 2, 2)
    """
    return _conv3d.avg_pool3d(input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                              divisor_override)
