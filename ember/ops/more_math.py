"""Everyday math composed from existing primitives, PyTorch's names and semantics:
``norm trunc fmod div(rounding_mode=) isclose isfinite logical_* lerp tan log2 log10 exp2
expm1 square std_mean var_mean``, and ``softmax`` / ``log_softmax`` as tensor methods.

Composites: gradients, fusion and every backend come from the primitives. ``norm`` with
p=2 records one node, whose rule gives 0 (not NaN) where the norm is 0, as PyTorch does.
"""

from __future__ import annotations

import math
from typing import Any

from ember import dtype as _dtype
from ember.ops.recording import no_record, record_composite
from ember.ops.gradient_rules import differentiable
from ember.errors import DTypeError
from ember.mixed_precision import float32_op
from ember.ops import elementwise as _ew
from ember.ops import reduction as _red
from ember.ops._core import normalize_dims
from ember.ops.elementwise import where
from ember.tensor import Tensor

_LN2 = math.log(2.0)
_LN10 = math.log(10.0)


def _check_tensor(op: str, x: Any) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: expected a tensor, got {type(x).__name__}")


def _check_float(op: str, x: Tensor) -> None:
    _check_tensor(op, x)
    if x.dtype.kind != "f":
        raise DTypeError(f"{op}: needs a floating tensor, got {x.dtype.name}; "
                         f"help: convert with .float()")


def _as_float(x: Tensor) -> Tensor:
    """Integer and bool inputs of a float function compute in float32, as in PyTorch."""
    return x if x.dtype.kind == "f" else x.astype(_dtype.DEFAULT_FLOAT)


# ----- elementwise ---------------------------------------------------------------------


def trunc(x: Tensor) -> Tensor:
    """Rounds toward zero (integer tensors are returned as they are)."""
    _check_tensor("trunc", x)
    if x.dtype.kind != "f":
        return x
    return where(x < 0, x.ceil(), x.floor())


def fmod(a: Tensor, b: Any) -> Tensor:
    """C's ``fmod``: the remainder of truncated division, with the sign of the dividend
    (``%`` takes the divisor's). Integer division by zero fails at the read."""
    _check_tensor("fmod", a)
    r = a % b
    differs = (r != 0) & ((a < 0) != (b < 0))
    return where(differs, r - b, r)


def div(a: Any, b: Any, rounding_mode: str | None = None) -> Tensor:
    """``a / b`` (true division), or rounded: ``"trunc"`` toward zero, ``"floor"`` down.

    Integer operands with a rounding mode give an integer result, as in PyTorch.

    Raises:
        ValueError: an unknown ``rounding_mode``.
    """
    if rounding_mode is None:
        return _ew.binary("div", a, b)
    if rounding_mode == "floor":
        return _ew.binary("floordiv", a, b)
    if rounding_mode != "trunc":
        raise ValueError(f"div: rounding_mode must be None, 'trunc' or 'floor', got "
                         f"{rounding_mode!r}")
    q = _ew.binary("floordiv", a, b)
    if q.dtype.kind == "f":
        return trunc(_ew.binary("div", a, b))
    # floor and trunc differ where the quotient is negative and inexact: one step up.
    return where((q < 0) & (q * b != a), q + 1, q)


def isfinite(x: Tensor) -> Tensor:
    """True where ``x`` is neither infinite nor NaN (every integer is finite)."""
    _check_tensor("isfinite", x)
    if x.dtype.kind != "f":
        return x == x
    # From isnan and isinf, which every backend computes from the bits: a shader compiler
    # may fold (x - x) == 0 to true.
    return ~(x.isnan() | x.isinf())


def isclose(a: Tensor, b: Any, rtol: float = 1e-05, atol: float = 1e-08,
            equal_nan: bool = False) -> Tensor:
    """``|a - b| <= atol + rtol * |b|`` elementwise (equal infinities are close)."""
    _check_tensor("isclose", a)
    close = ((a - b).abs() <= atol + rtol * abs(b)) | (a == b)
    if equal_nan:
        close = close | (_ew.unary("isnan", a) & (b != b))
    return close


def logical_not(x: Tensor) -> Tensor:
    """True where ``x`` is zero / False."""
    _check_tensor("logical_not", x)
    return x == 0


def _truth(x: Any) -> Any:
    return x if not isinstance(x, Tensor) or x.dtype.kind == "b" else x != 0


def logical_and(a: Tensor, b: Any) -> Tensor:
    """True where both are nonzero."""
    return _ew.binary("bitwise_and", _truth(a), _truth(b))


def logical_or(a: Tensor, b: Any) -> Tensor:
    """True where either is nonzero."""
    return _ew.binary("bitwise_or", _truth(a), _truth(b))


def logical_xor(a: Tensor, b: Any) -> Tensor:
    """True where exactly one is nonzero."""
    return _ew.binary("bitwise_xor", _truth(a), _truth(b))


def lerp(start: Tensor, end: Any, weight: Any) -> Tensor:
    """``start + weight * (end - start)``."""
    _check_tensor("lerp", start)
    return start + weight * (end - start)


@float32_op
def tan(x: Tensor) -> Tensor:
    """sin(x) / cos(x)."""
    _check_tensor("tan", x)
    x = _as_float(x)
    return x.sin() / x.cos()


def copysign(a: Tensor, b: Any) -> Tensor:
    """``|a|`` with the sign of ``b`` (a signed zero's sign counts), as ``torch.copysign``.

    Args:
        a: the magnitudes, a tensor of any dtype (integers and bools give the default float).
        b: the signs: a tensor that broadcasts against ``a``, or a Python scalar.

    Returns:
        A floating tensor of the broadcast shape. Its gradient is ``sign`` of the result
        over ``a`` (0 where ``a`` is 0) and none to ``b``.

    Example:
        >>> em.copysign(em.tensor([1.0, -2.0]), -0.0).tolist()
        [-1.0, -2.0]
    """
    _check_tensor("copysign", a)
    if isinstance(b, Tensor):
        dtype = _dtype.result_type([(a.dtype, bool(a.shape)), (b.dtype, bool(b.shape))], [])
        negative = _signbit(b)
    else:
        dtype = a.dtype
        negative = math.copysign(1.0, _ew._scalar("copysign", b)) < 0
    magnitude = a.astype(dtype if dtype.kind == "f" else _dtype.DEFAULT_FLOAT).abs()
    if not isinstance(negative, Tensor):
        return -magnitude if negative else magnitude
    return where(negative, -magnitude, magnitude)


def _signbit(b: Tensor) -> Tensor:
    """True where ``b`` is negative or -0.0 (1 / -0.0 is -inf)."""
    if b.dtype.kind != "f":
        return b < 0
    return (b < 0) | ((b == 0) & (b.reciprocal() < 0))


def logaddexp(a: Tensor, b: Any) -> Tensor:
    """``log(exp(a) + exp(b))`` without overflow: ``max + log1p(exp(-|a - b|))``.

    Args:
        a: a tensor; integers compute in the default float.
        b: a tensor that broadcasts against ``a``, or a Python scalar.

    Example:
        >>> em.logaddexp(em.tensor([0.0, 1000.0]), em.tensor([0.0, 1000.0])).tolist()
        [0.6931471824645996, 1000.6931762695312]
    """
    _check_tensor("logaddexp", a)
    a = _as_float(a)
    b = _as_float(b) if isinstance(b, Tensor) else float(_ew._scalar("logaddexp", b))
    high = _ew.binary("maximum", a, b)
    gap = (a - b).abs()
    # Equal infinities: a - b is NaN, and the answer is that infinity.
    return where(gap.isnan() & high.isinf(), high, high + (-gap).exp().log1p())


def log2(x: Tensor) -> Tensor:
    _check_tensor("log2", x)
    return _as_float(x).log() * (1.0 / _LN2)


def log10(x: Tensor) -> Tensor:
    _check_tensor("log10", x)
    return _as_float(x).log() * (1.0 / _LN10)


def exp2(x: Tensor) -> Tensor:
    _check_tensor("exp2", x)
    return (_as_float(x) * _LN2).exp()


def expm1(x: Tensor) -> Tensor:
    """``exp(x) - 1``, accurate near 0 (``2t / (1 - t)`` with ``t = tanh(x / 2)``, where
    ``exp(x) - 1`` would cancel); the tanh branch sees a clamped x so its gradient stays
    finite where it is not chosen."""
    _check_tensor("expm1", x)
    x = _as_float(x)
    t = (x.clamp(-0.5, 0.5) * 0.5).tanh()
    return where(x.abs() < 0.5, 2.0 * t / (1.0 - t), x.exp() - 1.0)


def square(x: Tensor) -> Tensor:
    _check_tensor("square", x)
    return x * x


def clip(x: Tensor, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
    """Alias of ``clamp``."""
    return _ew.clamp(x, min, max)


# ----- reductions ----------------------------------------------------------------------


def std_mean(x: Tensor, dim: Any = None, *, correction: int = 1,
             keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """``(x.std(dim, correction), x.mean(dim))``."""
    return (_red.var("std", x, dim, keepdim, correction), _red.reduce("mean", x, dim, keepdim))


def var_mean(x: Tensor, dim: Any = None, *, correction: int = 1,
             keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """``(x.var(dim, correction), x.mean(dim))``."""
    return (_red.var("var", x, dim, keepdim, correction), _red.reduce("mean", x, dim, keepdim))


def sum(x: Tensor, dim: Any = None, keepdim: bool = False, *,  # noqa: A001
        dtype: Any = None) -> Tensor:
    """``x.sum(dim)``, computed in ``dtype`` when given (the input is converted first)."""
    if dtype is None:
        return _red.reduce("sum", x, dim, keepdim)
    x = x.astype(dtype)
    # Integer sums accumulate in int64; wrapped back they equal PyTorch's sum in ``dtype``.
    return _red.reduce("sum", x, dim, keepdim).astype(x.dtype)


def norm(x: Tensor, p: float | str | None = 2, dim: Any = None, keepdim: bool = False) -> Tensor:
    """The vector p-norm of ``x`` over ``dim`` (every dim when None), as ``Tensor.norm``.

    ``p``: a number (``2`` by default, ``inf``, ``-inf``, ``0`` counts nonzeros, ``1``, any
    other ``p`` gives ``sum(|x|^p)^(1/p)``) or ``"fro"`` (the 2-norm over ``dim``).

    Raises:
        DTypeError: an integer or bool tensor (as in PyTorch).
        ValueError: an unknown string ``p``.
    """
    _check_float("norm", x)
    if p is None or p == "fro":
        p = 2
    if isinstance(p, str):
        raise ValueError(f"norm: p must be a number or 'fro', got {p!r}; help: "
                         f"em.linalg.norm(x, 'nuc') for the nuclear norm")
    dims = normalize_dims("norm", dim, x.shape)
    if p == 2:
        return _norm2(x, dims, keepdim)
    a = x.abs()
    if p == math.inf:
        return a.max(dims, keepdim) if x.numel() else a.sum(dims, keepdim)
    if p == -math.inf:
        return a.min(dims, keepdim)
    if p == 0:
        return (x != 0).astype(x.dtype).sum(dims, keepdim)
    if p == 1:
        return a.sum(dims, keepdim)
    return (a ** p).sum(dims, keepdim) ** (1.0 / p)


def _norm2(x: Tensor, dims: tuple[int, ...], keepdim: bool) -> Tensor:
    with no_record():
        y = (x * x).sum(dims, keepdim).sqrt()
    record_composite("norm2", (x,), (dims, keepdim), y)
    return y


@differentiable("norm2", inputs=True, output=True, compute_bound=True)
def _norm2_backward(ctx: Any, grad: Tensor) -> tuple:
    """∂‖x‖/∂x = x / ‖x‖, and 0 where the norm is 0 (PyTorch's subgradient)."""
    (x,) = ctx.inputs
    dims, keepdim = ctx.attrs
    y = ctx.output
    if not keepdim:
        kept = tuple(1 if d in dims else s for d, s in enumerate(x.shape))
        y, grad = y.reshape(kept), grad.reshape(kept)
    return (x * (grad / where(y == 0, 1.0, y)),)


# ----- softmax as methods ----------------------------------------------------------------


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """``nn.functional.softmax(x, dim)``."""
    from ember.nn.functional.activations import softmax as composite

    return composite(x, dim)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """``nn.functional.log_softmax(x, dim)``."""
    from ember.nn.functional.activations import log_softmax as composite

    return composite(x, dim)
