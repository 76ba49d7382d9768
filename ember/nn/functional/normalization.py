"""Normalizations written from primitives: layer, RMS, batch, group and instance norm.

Each is mean / variance reductions and elementwise ops, so gradients come from
the primitives' backward rules, except layer_norm's and rms_norm's: one recorded node
whose rule issues the closed-form gradient (autodiff/graph.record_composite).
float16 / bfloat16 inputs are normalized in float32 and rounded back once, as
PyTorch's CPU kernels do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ember import dtype as _dtype
from ember.ops.gradient_rules import differentiable
from ember.ops.recording import no_record, record_composite
from ember.errors import DTypeError, ShapeError
from ember.mixed_precision import float32_op
from ember.nn.param import Param
from ember.tensor import Tensor

_LOW_PRECISION = ("float16", "bfloat16")


def _as_shape(normalized_shape: int | Sequence[int]) -> tuple[int, ...]:
    if isinstance(normalized_shape, int):
        return (normalized_shape,)
    return tuple(int(s) for s in normalized_shape)


def _check_float(op: str, x: Tensor) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: expected a tensor, got {type(x).__name__}")
    if not x.dtype.is_floating_point:
        raise DTypeError(f"{op}: needs a floating input, got {x.dtype.name}; help: "
                         f"x.to(em.float32)")


def _trailing_dims(op: str, x: Tensor, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The dims ``shape`` covers at the end of ``x``; ShapeError if they do not match."""
    if not shape or x.ndim < len(shape) or tuple(x.shape[-len(shape):]) != shape:
        raise ShapeError(f"{op}: normalized_shape {shape} does not match the trailing dims of "
                         f"the input's shape {x.shape}")
    return tuple(range(x.ndim - len(shape), x.ndim))


def _check_affine(op: str, name: str, t: Tensor | None, shape: tuple[int, ...]) -> None:
    if t is not None and tuple(t.shape) != shape:
        raise ShapeError(f"{op}: {name} has shape {t.shape}, expected {shape}")


def _upcast(x: Tensor) -> Tensor:
    return x.astype("float32") if x.dtype.name in _LOW_PRECISION else x


def _affine(y: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


@float32_op
def layer_norm(x: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalize over the trailing ``normalized_shape`` dims, then scale and shift.

    y = (x - E[x]) / sqrt(Var[x] + eps) · weight + bias, with the biased
    variance, over the last ``len(normalized_shape)`` dims.

    Args:
        x: the input; its trailing dims must equal ``normalized_shape``.
        normalized_shape: an int or a tuple of ints.
        weight, bias: optional tensors of shape ``normalized_shape``.
        eps: added to the variance. Default 1e-5.

    Shape: (*, *normalized_shape) → the same.

    Raises:
        ShapeError: trailing dims or affine shapes that differ from ``normalized_shape``.

    Example:
        >>> F.layer_norm(em.randn(2, 5, 8), 8).shape
        (2, 5, 8)
    """
    op = "layer_norm"
    _check_float(op, x)
    shape = _as_shape(normalized_shape)
    dims = _trailing_dims(op, x, shape)
    _check_affine(op, "weight", weight, shape)
    _check_affine(op, "bias", bias, shape)
    return _normalize(op, x, dims, weight, bias, eps)


def _normalize(op: str, x: Tensor, dims: tuple[int, ...], weight: Tensor | None,
               bias: Tensor | None, eps: float) -> Tensor:
    """layer_norm (x centered on its mean first) or rms_norm, over ``dims``, then the
    affine: one recorded node of ``op``, whose rule reads x̂ and rstd."""
    with no_record():
        h = _upcast(x)
        if op == "layer_norm":
            h = h - h.mean(dim=dims, keepdim=True)
        rstd = ((h * h).mean(dim=dims, keepdim=True) + eps).rsqrt()
        normalized = h * rstd
        y = _affine(normalized.astype(x.dtype), weight, bias)
    affine = tuple(t for t in (weight, bias) if t is not None)
    record_composite(op, (normalized, rstd, x, *affine),
                     (dims, weight is not None, bias is not None), y)
    return y


@differentiable("layer_norm", "rms_norm", inputs=(0, 1, 3), compute_bound=True)
def _normalize_backward(ctx: Any, grad: Tensor) -> tuple:
    """With s = ∂L/∂x̂ (grad · weight): ∂L/∂x = rstd · (s − mean(s) − x̂ · mean(s · x̂))
    (rms_norm's without the mean(s), its x not centered), the weight's gradient grad · x̂
    and the bias's grad (the engine sums both over the leading dims). The saved inputs:
    x̂ (``normalized``), rstd, then x, weight, bias (x is not kept)."""
    saved = ctx.inputs
    normalized, rstd = saved[0], saved[1]
    dims, has_weight, has_bias = ctx.attrs
    weight = saved[3] if has_weight else None
    wants = ctx.needs_input_grad
    grads: list = [None, None, None]
    if wants[2]:
        s = _upcast(grad if weight is None else grad * weight)
        if ctx.node.op == "layer_norm":
            s = s - s.mean(dim=dims, keepdim=True)
        # (s · x̂) sums the same with s centered: x̂ sums to 0 over the dims.
        grads[2] = (s - normalized * (s * normalized).mean(dim=dims, keepdim=True)) * rstd
    if has_weight:
        grads.append(grad * normalized if wants[3] else None)
    if has_bias:
        grads.append(grad if wants[-1] else None)
    return tuple(grads)


def default_rms_eps(dtype: Any) -> float:
    """PyTorch's RMSNorm eps when none is given: the machine epsilon of ``dtype``."""
    d = _dtype.as_dtype(dtype)
    if d is _dtype.bfloat16:
        import ml_dtypes  # (np.finfo knows no bfloat16)

        return float(ml_dtypes.finfo(d.np).eps)
    return float(np.finfo(d.np).eps)


@float32_op
def rms_norm(x: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
             eps: float | None = None) -> Tensor:
    """Root-mean-square normalization over the trailing ``normalized_shape`` dims.

    y = x / sqrt(mean(x²) + eps) · weight.

    Args:
        x: the input; its trailing dims must equal ``normalized_shape``.
        normalized_shape: an int or a tuple of ints.
        weight: optional tensor of shape ``normalized_shape``.
        eps: added to the mean square. Default None: the machine epsilon of
            the input's dtype, as PyTorch.

    Shape: (*, *normalized_shape) → the same.

    Example:
        >>> F.rms_norm(em.randn(2, 8), 8).shape
        (2, 8)
    """
    op = "rms_norm"
    _check_float(op, x)
    shape = _as_shape(normalized_shape)
    dims = _trailing_dims(op, x, shape)
    _check_affine(op, "weight", weight, shape)
    if eps is None:
        eps = default_rms_eps(x.dtype)
    return _normalize(op, x, dims, weight, None, eps)


def _value(t: Tensor | Param | None) -> Tensor | None:
    return t.value if isinstance(t, Param) else t


@float32_op
def batch_norm(x: Tensor, running_mean: Tensor | Param | None, running_var: Tensor | Param | None,
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
               momentum: float | Tensor = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalize each channel (dim 1) over the batch and every other dim.

    y = (x - mean) / sqrt(var + eps) · weight + bias, per channel. In training
    (or without running statistics) mean and biased var come from the batch,
    and the running statistics move towards the batch's:
    running = (1 - momentum) · running + momentum · batch, with the *unbiased*
    batch variance for ``running_var``, as PyTorch. Otherwise the running
    statistics normalize.

    Tensors are immutable values, so where PyTorch updates its running tensors
    in place, this updates ``running_mean`` / ``running_var`` when they are
    ``Buffer``s (``BatchNorm2d`` passes its own) by swapping in new values;
    plain tensors are only read.

    Args:
        x: (N, C, *) input.
        running_mean, running_var: (C,) running statistics (``Buffer`` to be
            updated in training), or None to always use batch statistics.
        weight, bias: optional (C,) affine parameters.
        training: use (and accumulate) batch statistics. Default False.
        momentum: the running-average factor (a float, or a 0-d tensor).
            Default 0.1.
        eps: added to the variance. Default 1e-5.

    Shape: (N, C, *) → the same.

    Raises:
        ShapeError: fewer than 2 dims, statistics or affine not of shape (C,),
            or a single value per channel in training.

    Example:
        >>> mean, var = nn.Buffer(em.zeros(3)), nn.Buffer(em.ones(3))
        >>> y = F.batch_norm(em.randn(4, 3, 5, 5), mean, var, training=True)
    """
    op = "batch_norm"
    _check_float(op, x)
    if x.ndim < 2:
        raise ShapeError(f"{op}: expected an input of shape (N, C, *), got {x.shape}")
    channels = x.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != (channels,):
            raise ShapeError(f"{op}: {name} has shape {tuple(t.shape)}, expected ({channels},) "
                             f"for an input of shape {x.shape}")
    dims = (0, *range(2, x.ndim))
    bcast = (1, channels) + (1,) * (x.ndim - 2)
    h = _upcast(x)
    use_batch = training or running_mean is None or running_var is None
    if use_batch:
        count = x.numel() // channels if channels else 0
        if training and count <= 1:
            raise ShapeError(f"{op}: expected more than 1 value per channel when training, got "
                             f"input of shape {x.shape}")
        mean = h.mean(dim=dims, keepdim=True)
        centered = h - mean
        var = (centered * centered).mean(dim=dims, keepdim=True)
        if training:
            _update_running(running_mean, mean, momentum, 1.0)
            _update_running(running_var, var, momentum, count / max(count - 1, 1))
    else:
        mean = _value(running_mean).astype(h.dtype).reshape(*bcast)
        var = _value(running_var).astype(h.dtype).reshape(*bcast)
        centered = h - mean
    y = (centered * (var + eps).rsqrt()).astype(x.dtype)
    w = None if weight is None else weight.reshape(*bcast)
    b = None if bias is None else bias.reshape(*bcast)
    return _affine(y, w, b)


def _update_running(slot: Tensor | Param | None, batch: Tensor, momentum: float | Tensor,
                    correction: float) -> None:
    """Swap ``(1 - momentum) · old + momentum · batch`` into a Buffer (plain tensors stay)."""
    if not isinstance(slot, Param):
        return
    old = slot.value
    stat = batch.detach().reshape(-1).to(old.device).astype(old.dtype)
    if correction != 1.0:
        stat = stat * correction
    slot.value = old * (1.0 - momentum) + stat * momentum


@float32_op
def group_norm(x: Tensor, num_groups: int, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalize each group of channels of each sample, then scale and shift per channel.

    The C channels split into ``num_groups`` groups of C / num_groups; mean and
    biased variance are taken over a group's channels and all spatial dims.

    Args:
        x: (N, C, *) input.
        num_groups: a divisor of C.
        weight, bias: optional (C,) affine parameters.
        eps: added to the variance. Default 1e-5.

    Shape: (N, C, *) → the same.

    Raises:
        ShapeError: fewer than 2 dims, C not divisible by ``num_groups``, or
            affine parameters not of shape (C,).

    Example:
        >>> F.group_norm(em.randn(2, 6, 4, 4), 3).shape
        (2, 6, 4, 4)
    """
    op = "group_norm"
    _check_float(op, x)
    if x.ndim < 2:
        raise ShapeError(f"{op}: expected an input of shape (N, C, *), got {x.shape}")
    n, channels = x.shape[0], x.shape[1]
    if num_groups <= 0 or channels % num_groups:
        raise ShapeError(f"{op}: {channels} channels do not split into {num_groups} groups "
                         f"(input shape {x.shape})")
    _check_affine(op, "weight", weight, (channels,))
    _check_affine(op, "bias", bias, (channels,))
    h = _upcast(x).reshape(n, num_groups, -1)
    mean = h.mean(dim=2, keepdim=True)
    centered = h - mean
    var = (centered * centered).mean(dim=2, keepdim=True)
    y = (centered * (var + eps).rsqrt()).reshape(*x.shape).astype(x.dtype)
    bcast = (1, channels) + (1,) * (x.ndim - 2)
    w = None if weight is None else weight.reshape(*bcast)
    b = None if bias is None else bias.reshape(*bcast)
    return _affine(y, w, b)


@float32_op
def instance_norm(input: Tensor, running_mean: Tensor | Param | None = None,
                  running_var: Tensor | Param | None = None, weight: Tensor | None = None,
                  bias: Tensor | None = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalize each channel of each sample over its spatial dims, then scale and shift.

    y = (x - E[x]) / sqrt(Var[x] + eps) · weight + bias, mean and biased variance per
    (sample, channel). With ``use_input_stats`` the running statistics (if given as
    ``Buffer``s) move towards the batch average of the per-sample ones —
    running = (1 - momentum) · running + momentum · batch, unbiased variance for
    ``running_var`` — as PyTorch; without it the running statistics normalize.

    Args:
        input: (N, C, *spatial), at least one spatial dim.
        running_mean, running_var: optional (C,) statistics.
        weight, bias: optional (C,) affine parameters.
        use_input_stats: normalize with each sample's statistics. Default True.
        momentum: the running-average factor. Default 0.1.
        eps: added to the variance. Default 1e-5.

    Shape: (N, C, *spatial) → the same.

    Raises:
        ShapeError: fewer than 3 dims, (C,) tensors of another shape, or a single
            spatial value per channel with ``use_input_stats``.

    Example:
        >>> F.instance_norm(em.randn(2, 3, 8, 8)).shape
        (2, 3, 8, 8)
    """
    op = "instance_norm"
    _check_float(op, input)
    if input.ndim < 3:
        raise ShapeError(f"{op}: expected an input of shape (N, C, *spatial), got {input.shape}")
    channels = input.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != (channels,):
            raise ShapeError(f"{op}: {name} has shape {tuple(t.shape)}, expected ({channels},) "
                             f"for an input of shape {input.shape}")
    dims = tuple(range(2, input.ndim))
    bcast = (1, channels) + (1,) * (input.ndim - 2)
    h = _upcast(input)
    if use_input_stats:
        count = int(np.prod(input.shape[2:]))
        if count <= 1:
            raise ShapeError(f"{op}: expected more than 1 spatial value per channel, got input "
                             f"of shape {input.shape}")
        mean = h.mean(dim=dims, keepdim=True)
        centered = h - mean
        var = (centered * centered).mean(dim=dims, keepdim=True)
        if input.shape[0] > 0:
            _update_running(running_mean, mean.mean(dim=0), momentum, 1.0)
            _update_running(running_var, var.mean(dim=0), momentum, count / (count - 1))
    else:
        if running_mean is None or running_var is None:
            raise ValueError(f"{op}: use_input_stats=False needs running_mean and running_var")
        mean = _value(running_mean).astype(h.dtype).reshape(*bcast)
        var = _value(running_var).astype(h.dtype).reshape(*bcast)
        centered = h - mean
    y = (centered * (var + eps).rsqrt()).astype(input.dtype)
    w = None if weight is None else weight.reshape(*bcast)
    b = None if bias is None else bias.reshape(*bcast)
    return _affine(y, w, b)
