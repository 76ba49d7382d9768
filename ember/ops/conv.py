"""Convolution and pooling: conv1d, conv2d, their transposes, max / average / adaptive pooling.

Each op checks its shapes and arguments on the caller's thread, computes the
output's shape with PyTorch's formula, posts one IR message, and declares
its backward rule right below. The rules emit the helper ops that only the
backward needs (``conv_weight_grad``, ``max_pool2d_backward``,
``avg_pool2d_backward``, ``adaptive_avg_pool2d_backward``); a convolution's
input gradient is the transposed convolution of its output's gradient, and
the other way round.

Layouts are PyTorch's: inputs (N, C, *spatial), or unbatched (C, *spatial);
convolution weights (out_channels, in_channels / groups, *kernel);
transposed-convolution weights (in_channels, out_channels / groups, *kernel).
"""

from __future__ import annotations

from typing import Any

from ember import dtype as _dtype
from ember import mixed_precision as _mixed
from ember.ops.gradient_rules import differentiable, not_differentiable
from ember.errors import DTypeError, ShapeError
from ember.op_kinds import OTHER, declare
from ember.ops import dtype_rules as rules
from ember.ops._core import call, same_device
from ember.tensor import Tensor

declare(OTHER, "conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "conv_weight_grad",
        "max_pool2d", "max_pool2d_indices", "max_pool2d_backward", "avg_pool2d",
        "avg_pool2d_backward", "adaptive_avg_pool2d", "adaptive_avg_pool2d_backward",
        dtype_rule=rules.keep)

# ----- arguments ----------------------------------------------------------------------------


def _ints(op: str, name: str, value: Any, n: int, minimum: int) -> tuple[int, ...]:
    """An int or a sequence of ``n`` ints, each at least ``minimum``, as an ``n``-tuple."""
    # What layers pass every call, checked without building anything: a plain int, or a
    # tuple of n plain ints (bools, whose type is not int, take the long way).
    kind = type(value)
    if kind is int:
        if value >= minimum:
            return (value,) * n
    elif kind is tuple and len(value) == n:
        for item in value:
            if type(item) is not int or item < minimum:
                break
        else:
            return value
    items = tuple(value) if isinstance(value, (tuple, list)) else (value,) * n
    if len(items) != n:
        raise ShapeError(f"{op}: {name} must be an int or {n} ints, got {value!r}")
    for item in items:
        if isinstance(item, bool) or not hasattr(item, "__index__"):
            raise TypeError(f"{op}: {name} must be an int or {n} ints, got {value!r}")
    items = tuple(int(item.__index__()) for item in items)
    if any(item < minimum for item in items):
        bound = "positive" if minimum == 1 else "non-negative"
        raise ShapeError(f"{op}: {name} must be {bound}, got {value!r}")
    return items


def _input_rank(op: str, x: Tensor, spatial: int, layout: str) -> None:
    if x.ndim not in (spatial + 1, spatial + 2):
        raise ShapeError(f"{op}: expected a {spatial + 1}-D (unbatched) or {spatial + 2}-D "
                         f"(batched) input ({layout}), got input of shape {x.shape}")


def _floating(op: str, named: dict[str, Tensor | None], allow_int: bool = False) -> None:
    """Tensors of one floating dtype (or one integer dtype where ``allow_int``)."""
    dtype = None
    for t in named.values():  # the common case, checked without building anything
        if t is None:
            continue
        if type(t) is not Tensor or t.dtype.kind != "f" or (dtype is not None
                                                           and t.dtype is not dtype):
            break
        dtype = t.dtype
    else:
        return
    present = {k: t for k, t in named.items() if t is not None}
    for name, t in present.items():
        if not isinstance(t, Tensor):
            raise DTypeError(f"{op}: {name} must be a tensor, got {type(t).__name__}; "
                             f"help: wrap arrays with em.tensor(...)")
        if t.dtype.kind != "f" and not (allow_int and t.dtype.kind == "i"):
            raise DTypeError(f"{op}: expected floating-point tensors, got {name} of dtype "
                             f"{t.dtype.name}; help: convert with .to(em.float32)")
    dtypes = {t.dtype for t in present.values()}
    if len(dtypes) > 1:
        listed = ", ".join(f"{k} {t.dtype.name}" for k, t in present.items())
        raise DTypeError(f"{op}: dtypes differ: {listed}; help: convert them to one dtype "
                         f"with .to(dtype)")


def _batch_dims(x_ndim: int, spatial: int) -> tuple[int, ...]:
    """The dims a bias gradient sums over: batch (if any) and spatial."""
    batch = (0,) if x_ndim == spatial + 2 else ()
    return batch + tuple(range(x_ndim - spatial, x_ndim))


# ----- convolution --------------------------------------------------------------------------


def _conv_padding(op: str, padding: Any, spatial: int, kernel: tuple, stride: tuple,
                  dilation: tuple) -> tuple[tuple[int, int], ...]:
    """Per-dim (low, high) padding; "same" puts an odd extra cell on the high side."""
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * spatial
        if padding == "same":
            if any(s != 1 for s in stride):
                raise ShapeError(f"{op}: padding='same' is not supported for strided "
                                 f"convolutions (stride {stride})")
            totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
            return tuple((t // 2, t - t // 2) for t in totals)
        raise ShapeError(f"{op}: padding must be an int, {spatial} ints, 'same' or 'valid', "
                         f"got {padding!r}")
    return tuple((p, p) for p in _ints(op, "padding", padding, spatial, 0))


def _convolution(op: str, spatial: int, x: Tensor, weight: Tensor, bias: Tensor | None,
                 stride: Any, padding: Any, dilation: Any, groups: int) -> Tensor:
    if _mixed.entered:
        x, weight, bias = _mixed.to_low(x, weight, bias)
    _floating(op, {"input": x, "weight": weight, "bias": bias})
    device = same_device(op, (x, weight) if bias is None else (x, weight, bias))
    _input_rank(op, x, spatial, "C, L" if spatial == 1 else "C, H, W")
    if weight.ndim != spatial + 2:
        raise ShapeError(f"{op}: expected a {spatial + 2}-D weight (out_channels, "
                         f"in_channels / groups, *kernel), got weight of shape {weight.shape}")
    (groups,) = _ints(op, "groups", groups, 1, 1)
    stride = _ints(op, "stride", stride, spatial, 1)
    dilation = _ints(op, "dilation", dilation, spatial, 1)
    kernel = weight.shape[2:]
    pads = _conv_padding(op, padding, spatial, kernel, stride, dilation)
    out_channels = weight.shape[0]
    channels = x.shape[-spatial - 1]
    if out_channels % groups:
        raise ShapeError(f"{op}: weight {weight.shape} has {out_channels} output channels, "
                         f"not divisible by groups={groups}")
    if channels != weight.shape[1] * groups:
        raise ShapeError(f"{op}: input {x.shape} has {channels} channels, but weight "
                         f"{weight.shape} with groups={groups} expects "
                         f"{weight.shape[1] * groups}")
    if bias is not None and bias.shape != (out_channels,):
        raise ShapeError(f"{op}: bias {bias.shape} does not match weight {weight.shape}: "
                         f"expected ({out_channels},)")
    padded = tuple(s + lo + hi for s, (lo, hi) in zip(x.shape[-spatial:], pads))
    reach = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation))
    if any(r > p for r, p in zip(reach, padded)):
        raise ShapeError(f"{op}: kernel {reach} (dilation included) is larger than the padded "
                         f"input {padded}: input {x.shape}, weight {weight.shape}, padding "
                         f"{tuple(lo for lo, _ in pads)}")
    out = tuple((p - r) // s + 1 for p, r, s in zip(padded, reach, stride))
    shape = x.shape[:-spatial - 1] + (out_channels,) + out
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return call(op, inputs, shape, x.dtype, (stride, pads, dilation, groups), device)


def conv1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    """1-D cross-correlation, as ``torch.nn.functional.conv1d``.

    ``out[n, o, l] = bias[o] + Σ_{c, k} x[n, g·C/G + c, l·s - p + k·d] · weight[o, c, k]``
    over the input channels ``c`` of output channel ``o``'s group ``g``.

    Args:
        x: (N, C_in, L) or unbatched (C_in, L), floating point.
        weight: (C_out, C_in / groups, K), the same dtype.
        bias: (C_out,) or None.
        stride, dilation: an int or a 1-tuple, positive. Default 1.
        padding: zeros on both sides: an int, a 1-tuple, "valid" (0) or "same" (the
            output as long as the input; stride 1 only). Default 0.
        groups: input and output channels split into this many independent groups.

    Shape:
        L_out = floor((L + 2·padding - dilation·(K - 1) - 1) / stride) + 1.

    Raises:
        ShapeError: ranks, channel counts, groups or bias that do not fit, or a kernel
            larger than the padded input. DTypeError: non-float or mixed dtypes.
    """
    return _convolution("conv1d", 1, x, weight, bias, stride, padding, dilation, groups)


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    """2-D cross-correlation, as ``torch.nn.functional.conv2d``.

    ``out[n, o, i, j] = bias[o] + Σ_{c, a, b} x[n, g·C/G + c, i·s_h - p_h + a·d_h,
    j·s_w - p_w + b·d_w] · weight[o, c, a, b]`` (zero outside the input).

    Args:
        x: (N, C_in, H, W) or unbatched (C_in, H, W), floating point.
        weight: (C_out, C_in / groups, K_h, K_w), the same dtype.
        bias: (C_out,) or None.
        stride, dilation: an int or an (h, w) pair, positive. Default 1.
        padding: zeros on both sides: an int, a pair, "valid" or "same" (stride 1 only;
            an odd total puts the extra cell at the end, as PyTorch does). Default 0.
        groups: C_in and C_out split into this many groups; groups = C_in is depthwise.

    Shape:
        H_out = floor((H + 2·p_h - d_h·(K_h - 1) - 1) / s_h) + 1, and W_out alike.

    Raises:
        ShapeError: ranks, channel counts, groups or bias that do not fit, or a kernel
            larger than the padded input. DTypeError: non-float or mixed dtypes.

    Example:
        >>> conv2d(em.ones(64, 3, 32, 32), em.ones(32, 3, 3, 3), padding=1).shape
        (64, 32, 32, 32)
    """
    return _convolution("conv2d", 2, x, weight, bias, stride, padding, dilation, groups)


def _transposed(op: str, spatial: int, x: Tensor, weight: Tensor, bias: Tensor | None,
                stride: Any, padding: Any, output_padding: Any, groups: int,
                dilation: Any) -> Tensor:
    if _mixed.entered:
        x, weight, bias = _mixed.to_low(x, weight, bias)
    _floating(op, {"input": x, "weight": weight, "bias": bias})
    device = same_device(op, (x, weight) if bias is None else (x, weight, bias))
    _input_rank(op, x, spatial, "C, L" if spatial == 1 else "C, H, W")
    if weight.ndim != spatial + 2:
        raise ShapeError(f"{op}: expected a {spatial + 2}-D weight (in_channels, "
                         f"out_channels / groups, *kernel), got weight of shape {weight.shape}")
    (groups,) = _ints(op, "groups", groups, 1, 1)
    stride = _ints(op, "stride", stride, spatial, 1)
    dilation = _ints(op, "dilation", dilation, spatial, 1)
    pads = _ints(op, "padding", padding, spatial, 0)
    extra = _ints(op, "output_padding", output_padding, spatial, 0)
    if any(e >= max(s, d) for e, s, d in zip(extra, stride, dilation)):
        raise ShapeError(f"{op}: output_padding {extra} must be smaller than either stride "
                         f"{stride} or dilation {dilation}")
    in_channels = weight.shape[0]
    channels = x.shape[-spatial - 1]
    if in_channels % groups:
        raise ShapeError(f"{op}: weight {weight.shape} has {in_channels} input channels, "
                         f"not divisible by groups={groups}")
    if channels != in_channels:
        raise ShapeError(f"{op}: input {x.shape} has {channels} channels, but weight "
                         f"{weight.shape} expects {in_channels}")
    out_channels = weight.shape[1] * groups
    if bias is not None and bias.shape != (out_channels,):
        raise ShapeError(f"{op}: bias {bias.shape} does not match weight {weight.shape} with "
                         f"groups={groups}: expected ({out_channels},)")
    out = tuple((s_in - 1) * s - 2 * p + d * (k - 1) + e + 1 for s_in, s, p, d, k, e in
                zip(x.shape[-spatial:], stride, pads, dilation, weight.shape[2:], extra))
    if any(o <= 0 for o in out) or any(s_in <= 0 for s_in in x.shape[-spatial:]):
        raise ShapeError(f"{op}: input {x.shape} with weight {weight.shape}, stride {stride}, "
                         f"padding {pads}, dilation {dilation} gives output size {out}, "
                         f"which is too small")
    shape = x.shape[:-spatial - 1] + (out_channels,) + out
    inputs = (x, weight) if bias is None else (x, weight, bias)
    attrs = (stride, tuple((p, p) for p in pads), dilation, groups)
    return call(op, inputs, shape, x.dtype, attrs, device)


def conv_transpose1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
                     padding: Any = 0, output_padding: Any = 0, groups: int = 1,
                     dilation: Any = 1) -> Tensor:
    """1-D transposed convolution (the gradient of ``conv1d`` w.r.t. its input), as PyTorch's.

    Args:
        x: (N, C_in, L) or (C_in, L). weight: (C_in, C_out / groups, K). bias: (C_out,).
        stride, padding, output_padding, groups, dilation: as ``conv_transpose2d``.

    Shape:
        L_out = (L - 1)·stride - 2·padding + dilation·(K - 1) + output_padding + 1.
    """
    return _transposed("conv_transpose1d", 1, x, weight, bias, stride, padding,
                       output_padding, groups, dilation)


def conv_transpose2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
                     padding: Any = 0, output_padding: Any = 0, groups: int = 1,
                     dilation: Any = 1) -> Tensor:
    """2-D transposed convolution ("deconvolution"), as ``torch.nn.functional.conv_transpose2d``.

    Every input cell scatters ``x[n, c, i, j] · weight[c, o, a, b]`` to output cell
    ``(i·s_h - p_h + a·d_h, j·s_w - p_w + b·d_w)``: the gradient of ``conv2d`` w.r.t.
    its input, for the same stride, padding, dilation and groups.

    Args:
        x: (N, C_in, H, W) or unbatched (C_in, H, W), floating point.
        weight: (C_in, C_out / groups, K_h, K_w), the same dtype.
        bias: (C_out,) or None.
        stride, dilation: an int or a pair, positive. Default 1.
        padding: cells cropped from both sides of the full output. Default 0.
        output_padding: cells added to the end of each spatial dim (to pick one of the
            input sizes a strided conv2d maps to the same output); smaller than the
            stride or the dilation. Default 0.
        groups: as conv2d.

    Shape:
        H_out = (H - 1)·s_h - 2·p_h + d_h·(K_h - 1) + output_padding_h + 1, W_out alike.

    Raises:
        ShapeError: ranks, channels, groups, bias or output_padding that do not fit, or an
            empty output. DTypeError: non-float or mixed dtypes.
    """
    return _transposed("conv_transpose2d", 2, x, weight, bias, stride, padding,
                       output_padding, groups, dilation)


def _needs_grad(ctx: Any, index: int) -> bool:
    """Whether input ``index`` is tracked: skip the (costly) gradients nobody reads."""
    needs = ctx.needs_input_grad
    return index < len(needs) and needs[index]


def _bias_grad(ctx: Any, grad: Tensor, spatial: int) -> Tensor | None:
    if len(ctx.input_shapes) < 3 or not _needs_grad(ctx, 2):
        return None
    return grad.sum(_batch_dims(grad.ndim, spatial))


@differentiable("conv1d", "conv2d", compute_bound=True)
def _conv_backward(ctx: Any, grad: Tensor) -> tuple:
    """x̄ = conv_transpose(ḡ, w) (cropped to x's size); w̄ = the columns of x times ḡ."""
    return _convolution_grads(ctx, grad, "conv_transpose", transposed=False)


@differentiable("conv_transpose1d", "conv_transpose2d", compute_bound=True)
def _conv_transpose_backward(ctx: Any, grad: Tensor) -> tuple:
    """x̄ = conv(ḡ, w), the forward convolution; w̄ = the columns of ḡ times x."""
    return _convolution_grads(ctx, grad, "conv", transposed=True)


def _convolution_grads(ctx: Any, grad: Tensor, input_op: str, transposed: bool) -> tuple:
    """The three gradients of a convolution or a transposed one: each is the other's
    input gradient, and the weight gradient correlates input and output gradient."""
    x, weight = ctx.inputs[:2]
    spatial = weight.ndim - 2
    grad_x = grad_w = None
    if _needs_grad(ctx, 0):
        grad_x = call(f"{input_op}{spatial}d", (grad, weight), x.shape, x.dtype, ctx.attrs)
    if _needs_grad(ctx, 1):
        columns = (grad, x) if transposed else (x, grad)
        grad_w = call("conv_weight_grad", columns, weight.shape, weight.dtype, ctx.attrs)
    return grad_x, grad_w, _bias_grad(ctx, grad, spatial)


# ----- pooling ------------------------------------------------------------------------------


def _pool_input(op: str, x: Tensor, allow_int: bool) -> None:
    _floating(op, {"input": x}, allow_int=allow_int)
    if x.ndim not in (3, 4) or 0 in x.shape[-3:]:
        raise ShapeError(f"{op}: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input with "
                         f"non-zero channels and spatial sizes, got input of shape {x.shape}")


def _pool_output(op: str, x: Tensor, kernel: tuple, stride: tuple, padding: tuple,
                 dilation: tuple, ceil_mode: bool) -> tuple[int, ...]:
    """PyTorch's ``pooling_output_shape``: floor or ceil, the last window starting inside."""
    for k, p in zip(kernel, padding):
        if p > k // 2:
            raise ShapeError(f"{op}: padding {padding} must be at most half the kernel size "
                             f"{kernel}")
    out = []
    for size, k, s, p, d in zip(x.shape[-2:], kernel, stride, padding, dilation):
        span = size + 2 * p - d * (k - 1) - 1
        n = (span + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (n - 1) * s >= size + p:
            n -= 1  # the last window would start in the padding: PyTorch drops it
        out.append(n)
    if any(n < 1 for n in out):
        raise ShapeError(f"{op}: input {x.shape} with kernel {kernel}, stride {stride}, "
                         f"padding {padding}, dilation {dilation} gives output size "
                         f"{tuple(out)}, which is too small")
    return tuple(out)


def _pool_args(op: str, kernel_size: Any, stride: Any, padding: Any) -> tuple:
    kernel = _ints(op, "kernel_size", kernel_size, 2, 1)
    stride = kernel if stride is None or stride == () or stride == [] else _ints(
        op, "stride", stride, 2, 1)
    return kernel, stride, _ints(op, "padding", padding, 2, 0)


def max_pool2d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               dilation: Any = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """The maximum over each (dilated) window, as ``torch.nn.functional.max_pool2d``.

    Padding cells are -inf (never chosen). NaN propagates. The gradient goes to the
    position of the window's first maximum (with NaNs, to the last NaN), as PyTorch's
    CPU kernel chooses; overlapping windows add up.

    Args:
        x: (N, C, H, W) or (C, H, W); floating point or integer.
        kernel_size: an int or an (h, w) pair.
        stride: default (None) the kernel size.
        padding: at most half the kernel size. Default 0.
        dilation: spacing of the window's cells. Default 1.
        ceil_mode: round the output size up (the last window must start inside the
            input or its left padding).
        return_indices: also return, per output, the flat index ``h · W + w`` of the
            chosen cell in its input plane (int64).

    Shape:
        H_out = floor_or_ceil((H + 2·p - d·(k - 1) - 1) / s) + 1, W_out alike.
    """
    op = "max_pool2d"
    _pool_input(op, x, allow_int=True)
    kernel, stride, padding = _pool_args(op, kernel_size, stride, padding)
    dilation = _ints(op, "dilation", dilation, 2, 1)
    out = _pool_output(op, x, kernel, stride, padding, dilation, bool(ceil_mode))
    shape = x.shape[:-2] + out
    attrs = (kernel, stride, padding, dilation, bool(ceil_mode))
    values = call(op, (x,), shape, x.dtype, attrs)
    if not return_indices:
        return values
    return values, call("max_pool2d_indices", (x,), shape, _dtype.int64, attrs)


not_differentiable("max_pool2d_indices")


@differentiable("max_pool2d", compute_bound=True)
def _max_pool2d_backward(ctx: Any, grad: Tensor) -> tuple:
    (x,) = ctx.inputs
    return (call("max_pool2d_backward", (x, grad), x.shape, x.dtype, ctx.attrs),)


def avg_pool2d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    """The mean over each window, as ``torch.nn.functional.avg_pool2d``.

    Each window's sum is divided by ``divisor_override`` if given, else by its cell
    count: with ``count_include_pad`` the zero padding counts (but not the cells a
    ceil_mode window runs past the padding), without it only input cells do.

    Args:
        x: (N, C, H, W) or (C, H, W), floating point.
        kernel_size, stride (default the kernel size), padding (at most half the
            kernel), ceil_mode: as ``max_pool2d``.
        count_include_pad: count padding cells in the divisor. Default True.
        divisor_override: a non-zero int to divide every sum by. Default None.

    Shape:
        H_out = floor_or_ceil((H + 2·p - k) / s) + 1, W_out alike.
    """
    op = "avg_pool2d"
    _pool_input(op, x, allow_int=False)
    kernel, stride, padding = _pool_args(op, kernel_size, stride, padding)
    out = _pool_output(op, x, kernel, stride, padding, (1, 1), bool(ceil_mode))
    if divisor_override is not None:
        if isinstance(divisor_override, bool) or not hasattr(divisor_override, "__index__"):
            raise TypeError(f"{op}: divisor_override must be an int, got {divisor_override!r}")
        divisor_override = int(divisor_override.__index__())
        if divisor_override == 0:
            raise ShapeError(f"{op}: divisor_override must not be zero")
    attrs = (kernel, stride, padding, bool(ceil_mode), bool(count_include_pad), divisor_override)
    return call(op, (x,), x.shape[:-2] + out, x.dtype, attrs)


@differentiable("avg_pool2d", inputs=False, compute_bound=True)
def _avg_pool2d_backward(ctx: Any, grad: Tensor) -> tuple:
    return (call("avg_pool2d_backward", (grad,), ctx.input_shapes[0], grad.dtype, ctx.attrs),)


def adaptive_avg_pool2d(x: Tensor, output_size: Any) -> Tensor:
    """The mean over PyTorch's adaptive windows, as ``torch.nn.functional.adaptive_avg_pool2d``.

    Output cell ``i`` along a dim of input size ``S`` and output size ``O`` averages
    input cells ``floor(i·S/O)`` to ``ceil((i+1)·S/O) - 1``.

    Args:
        x: (N, C, H, W) or (C, H, W), floating point.
        output_size: an int or an (h, w) pair; None in the pair keeps that input size.

    Shape:
        (..., H, W) → (..., h, w).
    """
    op = "adaptive_avg_pool2d"
    _pool_input(op, x, allow_int=False)
    sizes = tuple(output_size) if isinstance(output_size, (tuple, list)) else (output_size,) * 2
    if len(sizes) != 2:
        raise ShapeError(f"{op}: output_size must be an int or 2 ints, got {output_size!r}")
    sizes = tuple(x.shape[-2 + i] if s is None else s for i, s in enumerate(sizes))
    out = _ints(op, "output_size", sizes, 2, 0)
    return call(op, (x,), x.shape[:-2] + out, x.dtype, ())


@differentiable("adaptive_avg_pool2d", inputs=False, compute_bound=True)
def _adaptive_avg_pool2d_backward(ctx: Any, grad: Tensor) -> tuple:
    return (call("adaptive_avg_pool2d_backward", (grad,), ctx.input_shapes[0], grad.dtype),)
