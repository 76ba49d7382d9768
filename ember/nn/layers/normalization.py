"""Normalization layers: LayerNorm, RMSNorm, BatchNorm1d, BatchNorm2d, GroupNorm,
InstanceNorm1d, InstanceNorm2d.

Parameters, buffers, names and defaults are PyTorch's, so its state dicts load
unchanged. Each layer delegates to its form in ``nn.functional``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.errors import ShapeError
from ember.nn.functional import normalization as F
from ember.nn.module import Module
from ember.nn.param import Buffer, Param
from ember.ops._core import resolve_device
from ember.ops.creation import full, ones, ones_like, zeros, zeros_like
from ember.tensor import Tensor


def _affine(shape: tuple[int, ...], affine: bool, dtype: Any,
            device: Any) -> tuple[Param | None, Param | None]:
    """A norm layer's (weight, bias): ones and zeros, as PyTorch initializes them."""
    if not affine:
        return None, None
    return (Param(ones(shape, dtype=dtype, device=device)),
            Param(zeros(shape, dtype=dtype, device=device)))


def _value(slot: Param | None) -> Tensor | None:
    return None if slot is None else slot.value


class LayerNorm(Module):
    """Layer normalization (Ba et al., 2016) over the trailing ``normalized_shape`` dims.

    y = (x - E[x]) / sqrt(Var[x] + eps) · γ + β, with mean and biased variance
    over the last ``len(normalized_shape)`` dims of each sample; γ starts at 1
    and β at 0.

    Args:
        normalized_shape: an int or a tuple: the trailing dims to normalize.
        eps: added to the variance. Default 1e-5.
        elementwise_affine: learn γ (``weight``) and β (``bias``). Default True.
        bias: learn β as well (with ``elementwise_affine``). Default True.
        device, dtype: where and in what type the parameters live.

    Shape: (*, *normalized_shape) → the same.

    Example:
        >>> ln = nn.LayerNorm(16)
        >>> ln(em.randn(4, 10, 16)).shape
        (4, 10, 16)
    """

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True, *, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        self.normalized_shape = F._as_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        device = resolve_device(device)
        shape = self.normalized_shape
        self.weight = Param(ones(shape, dtype=dtype, device=device)) if elementwise_affine else None
        self.bias = (Param(zeros(shape, dtype=dtype, device=device))
                     if elementwise_affine and bias else None)

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, _value(self.weight), _value(self.bias),
                            self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class RMSNorm(Module):
    """Root-mean-square normalization (Zhang & Sennrich, 2019).

    y = x / sqrt(mean(x²) + eps) · γ over the trailing ``normalized_shape``
    dims; γ starts at 1.

    Args:
        normalized_shape: an int or a tuple: the trailing dims to normalize.
        eps: added to the mean square. Default None: the machine epsilon of
            the input's dtype, as PyTorch.
        elementwise_affine: learn γ (``weight``). Default True.
        device, dtype: where and in what type the parameters live.

    Shape: (*, *normalized_shape) → the same.

    Example:
        >>> nn.RMSNorm(16)(em.randn(4, 16)).shape
        (4, 16)
    """

    def __init__(self, normalized_shape: int | Sequence[int], eps: float | None = None,
                 elementwise_affine: bool = True, *, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        self.normalized_shape = F._as_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        device = resolve_device(device)
        self.weight = (Param(ones(self.normalized_shape, dtype=dtype, device=device))
                       if elementwise_affine else None)

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, _value(self.weight), self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


def _init_running_norm(module: Module, num_features: int, eps: float, momentum: float | None,
                       affine: bool, track_running_stats: bool, device: Any, dtype: Any) -> None:
    """What batch and instance norms hold: their settings, ``weight`` and ``bias`` when
    affine, and the running statistics when tracked (instance norm keeps
    ``num_batches_tracked`` as PyTorch does, for its state dicts, but never counts)."""
    module.num_features = num_features
    module.eps = eps
    module.momentum = momentum
    module.affine = affine
    module.track_running_stats = track_running_stats
    device = resolve_device(device)
    c = (num_features,)
    module.weight, module.bias = _affine(c, affine, dtype, device)
    if track_running_stats:
        module.running_mean = Buffer(zeros(c, dtype=dtype, device=device))
        module.running_var = Buffer(ones(c, dtype=dtype, device=device))
        module.num_batches_tracked = Buffer(full((), 0, dtype="int64", device=device))
    else:
        module.running_mean = module.running_var = module.num_batches_tracked = None


class _BatchNorm(Module):
    """Shared by ``BatchNorm1d`` and ``BatchNorm2d``; subclasses name the input ranks."""

    _ranks: tuple[int, ...] = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, *, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        _init_running_norm(self, num_features, eps, momentum, affine, track_running_stats,
                           device, dtype)

    def reset_running_stats(self) -> None:
        """Running mean 0, running variance 1, no batches seen."""
        if self.track_running_stats:
            self.running_mean.value = zeros_like(self.running_mean.value)
            self.running_var.value = ones_like(self.running_var.value)
            self.num_batches_tracked.value = zeros_like(self.num_batches_tracked.value)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in self._ranks:
            ranks = " or ".join(f"{r}D" for r in self._ranks)
            raise ShapeError(f"{type(self).__name__}: expected {ranks} input, got shape {x.shape}")
        if x.shape[1] != self.num_features:
            raise ShapeError(f"{type(self).__name__}: expected {self.num_features} channels "
                             f"(dim 1), got input of shape {x.shape}")
        momentum: Any = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            count = self.num_batches_tracked.value + 1
            self.num_batches_tracked.value = count
            if self.momentum is None:  # a cumulative average: 1 / batches seen, kept on device
                momentum = 1.0 / count.astype(self.running_mean.dtype)
        use_batch = self.training or self.running_mean is None
        track = not self.training or self.track_running_stats
        return F.batch_norm(x, self.running_mean if track else None,
                            self.running_var if track else None, _value(self.weight),
                            _value(self.bias), use_batch, momentum, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalization (Ioffe & Szegedy, 2015) of (N, C) or (N, C, L) inputs.

    As ``BatchNorm2d``, with statistics per channel over N (and L).

    Shape: (N, C) or (N, C, L) → the same.

    Example:
        >>> bn = nn.BatchNorm1d(16)
        >>> bn(em.randn(32, 16)).shape, bn.running_mean.shape
        ((32, 16), (16,))
    """

    _ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalization (Ioffe & Szegedy, 2015) of (N, C, H, W) inputs.

    y = (x - E[x]) / sqrt(Var[x] + eps) · γ + β per channel. In training the
    batch's mean and biased variance normalize, and the running statistics
    move towards the batch's — running = (1 - momentum) · running +
    momentum · batch, with the unbiased variance for ``running_var`` — while
    ``num_batches_tracked`` counts the batches. In eval the running statistics
    normalize. The buffers are updated by swapping in new values.

    Args:
        num_features: C, the number of channels.
        eps: added to the variance. Default 1e-5.
        momentum: the running-average factor; None for a cumulative average
            (1 / batches seen). Default 0.1.
        affine: learn γ (``weight``, starts at 1) and β (``bias``, starts at 0).
            Default True.
        track_running_stats: keep ``running_mean``, ``running_var`` and
            ``num_batches_tracked`` buffers; without them batch statistics are
            used in eval too. Default True.
        device, dtype: where and in what type the parameters and buffers live.

    Shape: (N, C, H, W) → the same.

    Example:
        >>> bn = nn.BatchNorm2d(8)
        >>> y = bn(em.randn(4, 8, 5, 5))     # training: batch statistics, buffers updated
        >>> y = bn.eval()(em.randn(1, 8, 5, 5))  # eval: running statistics
    """

    _ranks = (4,)


class GroupNorm(Module):
    """Group normalization (Wu & He, 2018).

    The C channels split into ``num_groups`` groups; each sample's group is
    normalized with its mean and biased variance, then scaled and shifted per
    channel by γ (starts at 1) and β (starts at 0).

    Args:
        num_groups: the number of groups; must divide ``num_channels``.
        num_channels: C.
        eps: added to the variance. Default 1e-5.
        affine: learn γ (``weight``) and β (``bias``). Default True.
        device, dtype: where and in what type the parameters live.

    Shape: (N, C, *) → the same.

    Raises:
        ValueError: ``num_channels`` not divisible by ``num_groups``.

    Example:
        >>> nn.GroupNorm(2, 6)(em.randn(3, 6, 4, 4)).shape
        (3, 6, 4, 4)
    """

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, *, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if num_groups <= 0 or num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels ({num_channels}) must be divisible by "
                             f"num_groups ({num_groups})")
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        device = resolve_device(device)
        self.weight, self.bias = _affine((num_channels,), affine, dtype, device)

    def forward(self, x: Tensor) -> Tensor:
        return F.group_norm(x, self.num_groups, _value(self.weight), _value(self.bias), self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class _InstanceNorm(Module):
    """Shared by ``InstanceNorm1d`` and ``InstanceNorm2d``; subclasses name the spatial rank."""

    _spatial = 0

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = False, track_running_stats: bool = False, *, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        _init_running_norm(self, num_features, eps, momentum, affine, track_running_stats,
                           device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        name = type(self).__name__
        s = self._spatial
        if x.ndim not in (s + 1, s + 2):
            raise ShapeError(f"{name}: expected {s + 1}D (unbatched) or {s + 2}D input, got "
                             f"shape {x.shape}")
        batched = x.ndim == s + 2
        h = x if batched else x.unsqueeze(0)
        if h.shape[1] != self.num_features and (self.affine or self.track_running_stats):
            raise ShapeError(f"{name}: expected {self.num_features} channels, got input of "
                             f"shape {x.shape}")
        use_input_stats = self.training or not self.track_running_stats
        momentum = 0.0 if self.momentum is None else self.momentum
        y = F.instance_norm(h, self.running_mean, self.running_var, _value(self.weight),
                            _value(self.bias), use_input_stats, momentum, self.eps)
        return y if batched else y.squeeze(0)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class InstanceNorm1d(_InstanceNorm):
    """Instance normalization of (N, C, L) or (C, L) inputs: as ``InstanceNorm2d``, over L.

    Shape: (N, C, L) or (C, L) → the same.

    Example:
        >>> nn.InstanceNorm1d(4)(em.randn(2, 4, 50)).shape
        (2, 4, 50)
    """

    _spatial = 1


class InstanceNorm2d(_InstanceNorm):
    """Instance normalization (Ulyanov et al., 2016) of (N, C, H, W) or (C, H, W) inputs.

    y = (x - E[x]) / sqrt(Var[x] + eps) · γ + β, with mean and biased variance over
    H and W of each sample's channel. PyTorch's defaults: no affine parameters and no
    running statistics. With ``track_running_stats`` the running statistics move
    towards the batch average of the per-sample ones in training and normalize in
    eval.

    Args:
        num_features: C, the number of channels.
        eps: added to the variance. Default 1e-5.
        momentum: the running-average factor (None counts as 0). Default 0.1.
        affine: learn γ (``weight``, starts at 1) and β (``bias``, starts at 0).
            Default False.
        track_running_stats: keep ``running_mean`` and ``running_var``. Default False.
        device, dtype: where and in what type the parameters and buffers live.

    Shape: (N, C, H, W) or (C, H, W) → the same.

    Example:
        >>> nn.InstanceNorm2d(3, affine=True)(em.randn(2, 3, 8, 8)).shape
        (2, 3, 8, 8)
    """

    _spatial = 2
