"""Convolution layers: ``Conv1d``, ``Conv2d``, ``ConvTranspose1d``, ``ConvTranspose2d``.

Parameter names, layouts and default initialization are PyTorch's, so a
PyTorch state dict loads unchanged.
"""

from __future__ import annotations

import math
from typing import Any

from ember.errors import ShapeError
from ember.nn import init
from ember.nn.functional import conv as F
from ember.nn.module import Module
from ember.nn.param import Param
from ember.ops._core import resolve_device
from ember.ops.creation import zeros
from ember.tensor import Tensor

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _tuple(value: Any, n: int) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * n


class _ConvNd(Module):
    """What every convolution layer shares: checks, parameters, init, repr."""

    _spatial = 2
    _transposed = False

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any,
                 padding: Any, dilation: Any, groups: int, bias: bool, padding_mode: str,
                 output_padding: Any, device: Any, dtype: Any) -> None:
        super().__init__()
        name = type(self).__name__
        n = self._spatial
        if groups <= 0:
            raise ShapeError(f"{name}: groups must be a positive integer, got {groups}")
        if in_channels % groups:
            raise ShapeError(f"{name}: in_channels={in_channels} must be divisible by "
                             f"groups={groups}")
        if out_channels % groups:
            raise ShapeError(f"{name}: out_channels={out_channels} must be divisible by "
                             f"groups={groups}")
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"{name}: padding_mode must be one of {_PADDING_MODES}, got "
                             f"{padding_mode!r}")
        if padding_mode != "zeros":
            raise NotImplementedError(f"{name}: padding_mode={padding_mode!r} is not supported "
                                      f"yet; only 'zeros'")
        if isinstance(padding, str):
            if self._transposed or padding not in ("same", "valid"):
                raise ValueError(f"{name}: invalid padding string {padding!r}")
            if padding == "same" and any(s != 1 for s in _tuple(stride, n)):
                raise ValueError(f"{name}: padding='same' is not supported for strided "
                                 f"convolutions")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = _tuple(kernel_size, n)
        self.stride = _tuple(stride, n)
        self.padding = padding if isinstance(padding, str) else _tuple(padding, n)
        self.dilation = _tuple(dilation, n)
        self.output_padding = _tuple(output_padding, n)
        self.groups = groups
        self.padding_mode = padding_mode
        device = resolve_device(device)
        if self._transposed:
            shape = (in_channels, out_channels // groups) + self.kernel_size
        else:
            shape = (out_channels, in_channels // groups) + self.kernel_size
        self.weight = Param(zeros(shape, dtype=dtype, device=device))
        init.kaiming_uniform(self.weight, a=math.sqrt(5))
        if bias:
            fan_in, _ = init.fan_in_and_out(shape)
            bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
            self.bias = Param(zeros((out_channels,), dtype=dtype, device=device))
            init.uniform(self.bias, -bound, bound)
        else:
            self.bias = None

    def _bias(self) -> Tensor | None:
        return None if self.bias is None else self.bias.value

    def extra_repr(self) -> str:
        text = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}")
        if self.padding != (0,) * self._spatial:
            text += f", padding={self.padding!r}"
        if self.dilation != (1,) * self._spatial:
            text += f", dilation={self.dilation}"
        if self.output_padding != (0,) * self._spatial:
            text += f", output_padding={self.output_padding}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        if self.bias is None:
            text += ", bias=False"
        return text


class _Conv(_ConvNd):
    """A forward convolution layer: PyTorch's constructor, ``forward`` through ``_functional``."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", *, device: Any = None, dtype: Any = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, 0, device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        return self._functional(x, self.weight.value, self._bias(), self.stride, self.padding,
                        self.dilation, self.groups)


class Conv1d(_Conv):
    """A 1-D convolution layer, initialized like PyTorch's.

    out[n, o] = bias[o] + Σ_c weight[o, c] ⋆ x[n, c] (cross-correlation over the
    input channels of ``o``'s group), with weight ~ U(-√(1/fan_in), √(1/fan_in))
    (kaiming_uniform with a=√5) and bias ~ U(-1/√fan_in, 1/√fan_in), where
    fan_in = in_channels / groups · kernel_size.

    Args:
        in_channels, out_channels: channel counts, each divisible by ``groups``.
        kernel_size: an int or a 1-tuple.
        stride, dilation: Default 1. padding: an int, "valid" or "same". Default 0.
        groups: Default 1. bias: Default True.
        padding_mode: only "zeros".
        device, dtype: where and how the parameters are stored (float32 by default).

    Shape:
        (N, C_in, L) or (C_in, L) → (N, C_out, L_out),
        L_out = floor((L + 2·padding - dilation·(kernel_size - 1) - 1) / stride) + 1.

    Example:
        >>> conv = nn.Conv1d(3, 8, kernel_size=5, padding=2)
        >>> conv(em.randn(4, 3, 100)).shape, conv.weight.shape
        ((4, 8, 100), (8, 3, 5))
    """

    _spatial = 1
    _functional = staticmethod(F.conv1d)


class Conv2d(_Conv):
    """A 2-D convolution layer, initialized like PyTorch's.

    out[n, o] = bias[o] + Σ_c weight[o, c] ⋆ x[n, c] (2-D cross-correlation over the
    input channels of ``o``'s group), with weight ~ U(-√(1/fan_in), √(1/fan_in))
    (kaiming_uniform with a=√5) and bias ~ U(-1/√fan_in, 1/√fan_in), where
    fan_in = in_channels / groups · k_h · k_w.

    Args:
        in_channels, out_channels: channel counts, each divisible by ``groups``
            (groups = in_channels is a depthwise convolution).
        kernel_size: an int or an (h, w) pair.
        stride, dilation: an int or a pair. Default 1.
        padding: an int, a pair, "valid" or "same" (stride 1). Default 0.
        groups: Default 1. bias: Default True.
        padding_mode: only "zeros".
        device, dtype: where and how the parameters are stored (float32 by default).

    Shape:
        (N, C_in, H, W) or (C_in, H, W) → (N, C_out, H_out, W_out),
        H_out = floor((H + 2·p_h - d_h·(k_h - 1) - 1) / s_h) + 1, W_out alike.

    Example:
        >>> conv = nn.Conv2d(3, 32, 3, padding=1)
        >>> conv(em.randn(64, 3, 32, 32)).shape
        (64, 32, 32, 32)
    """

    _functional = staticmethod(F.conv2d)


class Conv3d(_Conv):
    """A 3-D convolution layer, initialized like PyTorch's (see ``Conv2d``; fan_in =
    in_channels / groups · k_d · k_h · k_w).

    Args:
        in_channels: input channels, divisible by ``groups``.
        out_channels: output channels, divisible by ``groups``.
        kernel_size: an int or 3 ints.
        stride: an int or 3 ints. Default 1.
        padding: an int, 3 ints, "valid" or "same" (stride 1). Default 0.
        dilation: an int or 3 ints. Default 1.
        groups: Default 1.
        bias: Default True.
        padding_mode: only "zeros".
        device: where the parameters are stored.
        dtype: how they are stored (float32 by default).

    Shape:
        (N, C_in, D, H, W) or (C_in, D, H, W) → (N, C_out, D_out, H_out, W_out),
        D_out = floor((D + 2·p_d - d_d·(k_d - 1) - 1) / s_d) + 1, H_out and W_out alike.

    Example:
        >>> nn.Conv3d(3, 8, 3, padding=1)(em.randn(2, 3, 8, 8, 8)).shape
        (2, 8, 8, 8, 8)
    """

    _spatial = 3
    _functional = staticmethod(F.conv3d)


class _ConvTransposeNd(_ConvNd):
    """A transposed convolution layer: PyTorch's constructor, ``forward`` through
    ``_functional``, and ``output_size`` turned into output padding."""

    _transposed = True

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, output_padding: Any = 0, groups: int = 1, bias: bool = True,
                 dilation: Any = 1, padding_mode: str = "zeros", *, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, output_padding, device, dtype)

    def forward(self, x: Tensor, output_size: Any = None) -> Tensor:
        return self._functional(x, self.weight.value, self._bias(), self.stride, self.padding,
                                self._output_padding(x, output_size), self.groups,
                                self.dilation)

    def _output_padding(self, x: Tensor, output_size: Any) -> tuple[int, ...]:
        """The output_padding that gives ``output_size`` (PyTorch's ``_output_padding``)."""
        if output_size is None:
            return self.output_padding
        n = self._spatial
        sizes = tuple(output_size)
        if len(sizes) not in (n, n + 1, n + 2):
            raise ShapeError(f"{type(self).__name__}: output_size must have {n}, {n + 1} or "
                             f"{n + 2} elements, got {sizes}")
        sizes = sizes[-n:]
        extra = []
        for i, want in enumerate(sizes):
            least = ((x.shape[-n + i] - 1) * self.stride[i] - 2 * self.padding[i]
                     + self.dilation[i] * (self.kernel_size[i] - 1) + 1)
            most = least + self.stride[i] - 1
            if not least <= want <= most:
                raise ShapeError(f"{type(self).__name__}: requested output size {sizes} is "
                                 f"not reachable from input {x.shape}: dim {i} must lie in "
                                 f"[{least}, {most}]")
            extra.append(want - least)
        return tuple(extra)


class ConvTranspose1d(_ConvTransposeNd):
    """A 1-D transposed convolution layer (PyTorch's init: fan_in = out_channels / groups · k).

    Shape:
        (N, C_in, L) → (N, C_out, (L - 1)·stride - 2·padding + dilation·(k - 1)
        + output_padding + 1). ``forward(x, output_size=None)`` may ask for a size instead.

    Example:
        >>> nn.ConvTranspose1d(8, 3, kernel_size=4, stride=2, padding=1)(em.randn(4, 8, 50)).shape
        (4, 3, 100)
    """

    _spatial = 1

    _functional = staticmethod(F.conv_transpose1d)


class ConvTranspose2d(_ConvTransposeNd):
    """A 2-D transposed convolution layer ("deconvolution"), initialized like PyTorch's.

    The gradient of a Conv2d w.r.t. its input, as a layer: weight (in_channels,
    out_channels / groups, k_h, k_w) ~ kaiming_uniform(a=√5) and bias ~
    U(-1/√fan_in, 1/√fan_in), with fan_in = out_channels / groups · k_h · k_w (PyTorch
    computes the fans from the weight's dims 1 and 0).

    Args:
        in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias:
            as Conv2d (padding: ints only).
        output_padding: cells added at the end of each spatial dim; smaller than the
            stride or the dilation. Default 0.
        padding_mode: only "zeros".
        device, dtype: where and how the parameters are stored.

    Shape:
        (N, C_in, H, W) → (N, C_out, H_out, W_out), H_out = (H - 1)·s_h - 2·p_h
        + d_h·(k_h - 1) + output_padding_h + 1. ``forward(x, output_size=None)`` may
        ask for an output size instead (it picks the output_padding).

    Example:
        >>> up = nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1)
        >>> up(em.randn(2, 16, 8, 8)).shape
        (2, 8, 16, 16)
    """

    _functional = staticmethod(F.conv_transpose2d)
