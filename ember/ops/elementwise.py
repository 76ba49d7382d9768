"""Elementwise ops: arithmetic, comparisons, bitwise and math functions.

Type promotion is PyTorch's (``ember.dtype.result_type``): a Python scalar
or a 0-d tensor only raises the result dtype into a higher kind, int / int
true division gives the default float, and float functions of integer
tensors compute in the default float. Comparisons compare in the promoted
dtype and give bool.

IR of a binary op: inputs are the tensor operands; ``attrs`` is
``(compute dtype name,)`` for two tensors, or ``(compute dtype name, scalar,
scalar_is_lhs)`` for a tensor and a Python scalar (the scalar already
converted to the compute dtype's kind: wrapped into the integer dtype's range, or a
float).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ember import dtype as _dtype
from ember import mixed_precision as _mixed
from ember.ops.gradient_rules import differentiable, not_differentiable
from ember.dtype import DType
from ember.errors import DTypeError
from ember.op_kinds import BOUNDS, BRANCHES, EITHER_SIDE, ELEMENTWISE, declare, declare_rules
from ember.ops import dtype_rules as rules
from ember.ops._core import broadcast_shapes, call, same_device
from ember.tensor import Tensor

# ----- dtype rules: compute dtype -> output dtype, or a DTypeError -------------------------


_BINARY_RULES = {
    "add": rules.keep, "mul": rules.keep, "maximum": rules.keep, "minimum": rules.keep,
    "sub": rules.numeric, "floordiv": rules.numeric, "remainder": rules.numeric,
    "pow": rules.numeric, "div": rules.floating,
    "eq": rules.to_bool, "ne": rules.to_bool, "lt": rules.to_bool, "le": rules.to_bool,
    "gt": rules.to_bool, "ge": rules.to_bool,
    "bitwise_and": rules.integral, "bitwise_or": rules.integral, "bitwise_xor": rules.integral,
    "atan2": rules.floating,
    "bitwise_left_shift": rules.integer, "bitwise_right_shift": rules.integer,
}

_UNARY_RULES = {
    "neg": rules.numeric, "abs": rules.numeric, "floor": rules.numeric, "ceil": rules.numeric,
    "round": rules.numeric, "relu": rules.numeric, "sign": rules.keep,
    "exp": rules.floating, "log": rules.floating, "log1p": rules.floating,
    "sqrt": rules.floating, "rsqrt": rules.floating, "sin": rules.floating,
    "cos": rules.floating, "tanh": rules.floating, "sigmoid": rules.floating,
    "gelu": rules.floating, "gelu_tanh": rules.floating, "silu": rules.floating,
    "erf": rules.floating, "reciprocal": rules.floating,
    "asin": rules.floating, "acos": rules.floating, "atan": rules.floating,
    "sinh": rules.floating, "cosh": rules.floating, "asinh": rules.floating,
    "acosh": rules.floating, "atanh": rules.floating,
    "isnan": rules.to_bool, "isinf": rules.to_bool, "bitwise_not": rules.integral,
}

# Every op of the tables above is elementwise (planner, backends: ember/op_kinds.py);
# clamp's rule applies to the promoted dtype of x and its bounds, where's is the promotion.
declare_rules(ELEMENTWISE, _BINARY_RULES, scalar=EITHER_SIDE)
declare_rules(ELEMENTWISE, _UNARY_RULES)
declare(ELEMENTWISE, "clamp", scalar=BOUNDS, dtype_rule=rules.numeric)
declare(ELEMENTWISE, "where", scalar=BRANCHES)

_SCALAR_TYPES = (bool, int, float)


def _scalar(op: str, value: Any) -> Any:
    """A Python scalar operand, as a plain bool / int / float.

    NumPy scalars of an ember dtype (``np.float32(2)``, ``ml_dtypes.bfloat16(1)``)
    count as Python scalars, as in PyTorch.
    """
    if isinstance(value, _SCALAR_TYPES):
        return value
    if isinstance(value, np.generic) and (value.dtype.kind in "biuf"
                                          or _dtype.is_bfloat16(value.dtype)):
        return value.item()
    hint = ""
    if isinstance(value, (list, tuple, np.ndarray)):
        hint = " help: wrap it with em.tensor(...)"
    raise DTypeError(f"{op}: expected a tensor or a Python scalar, got "
                     f"{type(value).__name__}.{hint}")


def _as_kind(value: bool | int | float, dtype: DType) -> bool | int | float:
    """A Python scalar converted the way PyTorch converts a scalar operand to ``dtype``."""
    if dtype.kind == "f":
        return float(value)
    if dtype.kind == "i":
        return _dtype.wrap_int(value, dtype)
    return bool(value)


def _no_bool_sub(a_bool: bool, b_bool: bool) -> None:
    # PyTorch refuses rather than guess between logical xor and integer subtraction.
    if a_bool or b_bool:
        raise DTypeError("sub: subtraction with a bool operand is not supported; help: use "
                         "a ^ b (logical xor) for bools, or convert with .to(em.int64) first")


def binary(op: str, a: Any, b: Any) -> Tensor:
    """``a op b`` with broadcasting; either side may be a Python scalar."""
    rule = _BINARY_RULES[op]
    if _mixed.entered:
        a, b = _mixed.binary_inputs(op, a, b)
    if type(a) is Tensor:
        if type(b) is Tensor:
            device = a.device if a.device is b.device else same_device(op, (a, b))
            shape = a.shape if a.shape == b.shape else broadcast_shapes(op, a.shape, b.shape)
            if a.dtype is b.dtype:
                compute = a.dtype
            else:
                compute = _dtype.result_type([(a.dtype, bool(a.shape)), (b.dtype, bool(b.shape))],
                                             [])
            if op == "sub":
                _no_bool_sub(a.dtype.kind == "b", b.dtype.kind == "b")
            out = _tensor_rules.get((op, compute))
            if out is None:
                out = _tensor_rules[(op, compute)] = _apply_rule(rule, op, compute, a, b)
            return call(op, (a, b), shape, out, (compute.name,), device)
        return _with_scalar(op, rule, a, b, False)
    if type(b) is not Tensor:
        raise DTypeError(f"{op}: needs at least one tensor operand, got "
                         f"{type(a).__name__} and {type(b).__name__}")
    return _with_scalar(op, rule, b, a, True)


def _describe(operand: Any) -> str:
    if type(operand) is Tensor:
        return f"{operand.dtype.name} tensor of shape {operand.shape}"
    return f"Python {type(operand).__name__} {operand!r}"


def _apply_rule(rule: Any, op: str, compute: DType, lhs: Any, rhs: Any) -> DType:
    """The output dtype; a refusal names both operands."""
    try:
        return rule(op, compute)
    except DTypeError as exc:
        raise DTypeError(f"{exc} (lhs: {_describe(lhs)}, rhs: {_describe(rhs)})") from None


# (op, compute dtype) -> output dtype of two tensor operands, for combinations the rules
# accepted: they decide by the compute dtype alone (a refusal raises again each time).
_tensor_rules: dict[tuple, DType] = {}

# (op, tensor dtype, scalar type, scalar_is_lhs) -> (compute dtype, output dtype, the
# scalar's conversion): for Python scalars the rules decide by type alone, so an op's
# later calls skip them.
_scalar_rules: dict[tuple, tuple[DType, DType, Any]] = {}


def _with_scalar(op: str, rule: Any, x: Tensor, value: Any, scalar_is_lhs: bool) -> Tensor:
    key = (op, x.dtype, type(value), scalar_is_lhs)
    found = _scalar_rules.get(key)
    if found is None:
        found = _scalar_rule(op, rule, x, value, scalar_is_lhs)
        if type(value) in _SCALAR_TYPES:
            _scalar_rules[key] = found
    compute, out, convert = found
    value = convert(value)
    if op == "pow" and not scalar_is_lhs and compute.kind == "i" and value < 0:
        raise DTypeError(f"pow: integers to negative integer powers are not allowed "
                         f"({x.dtype.name} tensor ** {value}); help: use a float exponent "
                         f"({float(value)}) or convert the tensor with .float()")
    return call(op, (x,), x.shape, out, (compute.name, value, scalar_is_lhs), x.device)


def _scalar_rule(op: str, rule: Any, x: Tensor, value: Any,
                 scalar_is_lhs: bool) -> tuple[DType, DType, Any]:
    """The compute and output dtypes of ``x op value`` and how the scalar converts; raises
    for a refused combination, naming both operands."""
    plain = _scalar(op, value)
    kind = _dtype.scalar_kind(plain)
    compute = _dtype.promote_with_scalar(x.dtype, kind)
    if op == "sub":
        _no_bool_sub(x.dtype.kind == "b", kind == "b")
    out = _apply_rule(rule, op, compute, *((plain, x) if scalar_is_lhs else (x, plain)))
    # True division computes in its float output: int32_tensor / 2**33 does not wrap the 2**33.
    target = out if op == "div" else compute
    if target.kind == "f":
        convert = float
    elif target.kind == "i":
        convert = functools.partial(_dtype.wrap_int, dtype=target)
    else:
        convert = bool
    if type(value) in _SCALAR_TYPES:
        return compute, out, convert
    return compute, out, lambda v: convert(_scalar(op, v))


def bitwise_left_shift(input: Any, other: Any) -> Tensor:  # noqa: A002  (torch's name)
    """``input << other``, elementwise with broadcasting, as ``torch.bitwise_left_shift``.

    Both operands promote to one integer dtype (``result_type``); bits shifted past the
    top are lost (the result wraps), and a shift by a negative amount or by the dtype's
    bit width or more gives 0.

    Args:
        input: an integer tensor, or a Python int when ``other`` is a tensor.
        other: the shift amounts: an integer tensor or a Python int.

    Returns:
        A tensor of the promoted integer dtype and the broadcast shape.

    Raises:
        DTypeError: the promoted dtype is bool or floating (``float32_tensor << 1``).
        ShapeError: the shapes do not broadcast.

    Example:
        >>> (em.tensor([1, 3], dtype=em.uint8) << 7).tolist()
        [128, 128]
    """
    return binary("bitwise_left_shift", input, other)


def bitwise_right_shift(input: Any, other: Any) -> Tensor:  # noqa: A002  (torch's name)
    """``input >> other``, elementwise with broadcasting, as ``torch.bitwise_right_shift``.

    Arithmetic for signed dtypes (the sign bit fills in: ``-5 >> 1 == -3``), logical
    for uint8. A shift by a negative amount or by the bit width or more gives -1 for
    negative values of a signed dtype and 0 otherwise.

    Args:
        input: an integer tensor, or a Python int when ``other`` is a tensor.
        other: the shift amounts: an integer tensor or a Python int.

    Returns:
        A tensor of the promoted integer dtype and the broadcast shape.

    Raises:
        DTypeError: the promoted dtype is bool or floating.
        ShapeError: the shapes do not broadcast.

    Example:
        >>> (em.tensor([-5, 40], dtype=em.int8) >> 1).tolist()
        [-3, 20]
    """
    return binary("bitwise_right_shift", input, other)


def unary(op: str, x: Tensor) -> Tensor:
    if type(x) is not Tensor:
        raise DTypeError(f"{op}: expected a tensor, got {type(x).__name__}")
    if _mixed.entered:
        x = _mixed.unary_input(op, x)
    return call(op, (x,), x.shape, _UNARY_RULES[op](op, x.dtype))


def round(x: Tensor, decimals: int = 0) -> Tensor:  # noqa: A001  (Tensor.round)
    """Round half to even, to ``decimals`` decimal places (negative: tens, hundreds ...).

    Integer tensors are returned unchanged for ``decimals=0`` (as in PyTorch).
    """
    if isinstance(decimals, bool) or not isinstance(decimals, int | np.integer):
        raise TypeError(f"round: decimals must be an int, got {decimals!r}")
    if decimals == 0:
        return unary("round", x)
    if type(x) is not Tensor:
        raise DTypeError(f"round: expected a tensor, got {type(x).__name__}")
    if x.dtype.kind != "f":
        raise DTypeError(f"round: decimals={decimals} needs a floating tensor, got {x.dtype.name}")
    return call("round", (x,), x.shape, x.dtype, (int(decimals),))


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """GELU: exact ``x·Φ(x)`` (erf), or its tanh approximation with ``approximate="tanh"``."""
    if approximate == "none":
        return unary("gelu", x)
    if approximate == "tanh":
        return unary("gelu_tanh", x)
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def clamp(x: Tensor, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
    """Limit values to ``[min, max]``: ``minimum(maximum(x, min), max)``.

    Either bound may be None (not both); bounds may be scalars or tensors
    (which broadcast). The result dtype is PyTorch's ``result_type(x, min, max)``;
    where ``min > max`` every element becomes ``max``; NaN stays NaN.

    Example:
        >>> em.tensor([-2.0, 0.5, 3.0]).clamp(min=0.0, max=1.0).tolist()
        [0.0, 0.5, 1.0]
        >>> em.tensor([1, 5, 9]).clamp(max=em.tensor([2, 2, 10])).tolist()
        [1, 2, 9]
    """
    if type(x) is not Tensor:
        raise DTypeError(f"clamp: expected a tensor, got {type(x).__name__}")
    if min is None and max is None:
        raise ValueError("clamp: at least one of min and max must be given")
    bounds = [v if v is None or type(v) is Tensor else _scalar("clamp", v) for v in (min, max)]
    tensors = [x] + [v for v in bounds if type(v) is Tensor]
    dtype = _dtype.result_type([(t.dtype, bool(t.shape) or t is x) for t in tensors],
                               [_dtype.scalar_kind(v) for v in bounds
                                if v is not None and type(v) is not Tensor])
    rules.numeric("clamp", dtype)
    if len(tensors) > 1:
        out = x if min is None else binary("maximum", x, min)
        return out if max is None else binary("minimum", out, max)
    attrs = tuple(None if v is None else _clamp_bound(v, dtype) for v in bounds)
    return call("clamp", (x,), x.shape, dtype, attrs)


def _clamp_bound(value: bool | int | float, dtype: DType) -> int | float:
    if dtype.kind == "f":
        return float(value)
    # An int bound past the dtype's range clamps nothing on that side: saturate, never wrap.
    info = np.iinfo(dtype.np)
    return min(max(int(value), int(info.min)), int(info.max))


def where(cond: Tensor, a: Any, b: Any) -> Tensor:
    """Elements of ``a`` where ``cond`` is true, else of ``b``; all three broadcast.

    ``a`` and ``b`` may be tensors or Python scalars; the result dtype is
    PyTorch's ``result_type(a, b)``.

    Example:
        >>> x = em.tensor([-1.0, 2.0])
        >>> em.where(x > 0, x, 0.0).tolist()
        [0.0, 2.0]
    """
    if type(cond) is not Tensor:
        raise DTypeError(f"where: cond must be a bool tensor, got {type(cond).__name__}")
    if cond.dtype is not _dtype.bool_:
        raise DTypeError(f"where: cond must be a bool tensor, got {cond.dtype.name}; "
                         f"help: compare it, e.g. cond != 0")
    values = [v if type(v) is Tensor else _scalar("where", v) for v in (a, b)]
    tensors = [v for v in values if type(v) is Tensor]
    device = same_device("where", (cond, *tensors))
    dtype = _dtype.result_type([(t.dtype, bool(t.shape)) for t in tensors],
                               [_dtype.scalar_kind(v) for v in values if type(v) is not Tensor])
    shape = broadcast_shapes("where", cond.shape, *(t.shape for t in tensors))
    attrs = tuple(None if type(v) is Tensor else _as_kind(v, dtype) for v in values)
    return call("where", (cond, *tensors), shape, dtype, attrs, device)


# ----- gradients ------------------------------------------------------------------------
#
# PyTorch's formulas (its derivatives.yaml), and its choices where a function has
# no derivative. A binary op with a Python scalar has one tensor input, and
# attrs is (compute dtype name, scalar, scalar_is_lhs). Gradients are skipped for
# untracked inputs (constants), which the engine would drop anyway.

_SQRT_HALF = math.sqrt(0.5)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_ONE_OVER_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_GELU_KAPPA = 0.044715

not_differentiable("floordiv", "eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf",
                   "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
                   "bitwise_left_shift", "bitwise_right_shift")


def _wants(ctx: Any, i: int) -> bool:
    """Whether a gradient flows to tensor input ``i`` (it is tracked)."""
    return ctx.needs_input_grad[i]


def _scalar_operand(ctx: Any) -> tuple[bool | int | float, bool] | None:
    """(scalar, scalar_is_lhs) for a binary op with a Python scalar, else None."""
    return (ctx.attrs[1], ctx.attrs[2]) if len(ctx.input_shapes) == 1 else None


@differentiable("add", inputs=False)
def _add_backward(ctx: Any, grad: Tensor) -> tuple:
    return (grad,) if len(ctx.input_shapes) == 1 else (grad, grad)


@differentiable("sub", inputs=False)
def _sub_backward(ctx: Any, grad: Tensor) -> tuple:
    scalar = _scalar_operand(ctx)
    if scalar is not None:
        return (-grad if scalar[1] else grad,)
    return grad, -grad if _wants(ctx, 1) else None


@differentiable("mul")
def _mul_backward(ctx: Any, grad: Tensor) -> tuple:
    if len(ctx.inputs) == 1:
        return (grad * ctx.attrs[1],)
    a, b = ctx.inputs
    return (grad * b if _wants(ctx, 0) else None), (grad * a if _wants(ctx, 1) else None)


@differentiable("div")
def _div_backward(ctx: Any, grad: Tensor) -> tuple:
    # d(a / b) = da / b - db · (a / b) / b
    scalar = _scalar_operand(ctx)
    if scalar is not None:
        value, is_lhs = scalar
        if not is_lhs:
            return (grad / value,)
        (x,) = ctx.inputs
        return (-grad * (value / x / x),)
    a, b = ctx.inputs
    return ((grad / b if _wants(ctx, 0) else None),
            (-grad * (a / b / b) if _wants(ctx, 1) else None))


@differentiable("remainder")
def _remainder_backward(ctx: Any, grad: Tensor) -> tuple:
    # a % b = a - floor(a / b) · b: 1 for a, -floor(a / b) for b (the floor is locally constant).
    scalar = _scalar_operand(ctx)
    if scalar is not None:
        value, is_lhs = scalar
        if not is_lhs:
            return (grad,)
        (x,) = ctx.inputs
        return (-grad * binary("floordiv", value, x),)
    a, b = ctx.inputs
    return grad, (-grad * (a // b) if _wants(ctx, 1) else None)


@differentiable("pow")
def _pow_backward(ctx: Any, grad: Tensor) -> tuple:
    """PyTorch's conventions: no gradient to the base where the exponent is 0; none to the
    exponent where the base is 0 and the exponent >= 0.

    The result (needed for the exponent's gradient only) is recomputed rather than kept:
    ``x ** scalar``, by far the common form, needs only the base.
    """
    scalar = _scalar_operand(ctx)
    if scalar is not None:
        value, is_lhs = scalar
        (x,) = ctx.inputs
        if not is_lhs:  # x ** value
            if value == 0:
                from ember.ops.creation import zeros_like

                return (zeros_like(grad),)
            return (grad * (x ** (value - 1) * value),)
        # value ** x: d/dx = value ** x · log(value)
        result = binary("pow", value, x)
        if value == 0:
            return (grad * where(x >= 0, 0, result * -math.inf),)
        return (grad * (result * (math.log(value) if value > 0 else math.nan)),)
    # Both tensors, in the compute dtype (the kernel casts them so before computing).
    a, b = (t.astype(ctx.dtype) for t in ctx.inputs)
    grad_a = grad_b = None
    if _wants(ctx, 0):
        grad_a = where(b == 0, 0, grad * (b * a ** (b - 1)))
    if _wants(ctx, 1):
        grad_b = grad * where((a == 0) & (b >= 0), 0, (a ** b) * a.log())
    return grad_a, grad_b


def _share(op: str, grad: Tensor, mine: Any, other: Any) -> Tensor:
    """The gradient ``mine`` gets from maximum / minimum: all where it wins, half on a tie."""
    loses = mine < other if op == "maximum" else mine > other
    return where(loses, 0, where(mine == other, grad / 2, grad))


@differentiable("maximum", "minimum")
def _extremum_backward(ctx: Any, grad: Tensor) -> tuple:
    op = ctx.node.op
    scalar = _scalar_operand(ctx)
    if scalar is not None:
        (x,) = ctx.inputs
        return (_share(op, grad, x, scalar[0]),)
    a, b = ctx.inputs
    return ((_share(op, grad, a, b) if _wants(ctx, 0) else None),
            (_share(op, grad, b, a) if _wants(ctx, 1) else None))


@differentiable("neg", inputs=False)
def _neg_backward(ctx: Any, grad: Tensor) -> tuple:
    return (-grad,)


@differentiable("abs")
def _abs_backward(ctx: Any, grad: Tensor) -> tuple:
    (x,) = ctx.inputs
    return (grad * x.sign(),)  # sign(0) = 0: no gradient at the kink


@differentiable("sign", "floor", "ceil", "round", inputs=False)
def _step_backward(ctx: Any, grad: Tensor) -> tuple:
    # Piecewise constant: a zero gradient (PyTorch's choice at the jumps too).
    from ember.ops.creation import zeros_like

    return (zeros_like(grad),)


@differentiable("exp", inputs=False, output=True)
def _exp_backward(ctx: Any, grad: Tensor) -> tuple:
    return (grad * ctx.output,)


@differentiable("log")
def _log_backward(ctx: Any, grad: Tensor) -> tuple:
    (x,) = ctx.inputs
    return (grad / x,)


@differentiable("log1p")
def _log1p_backward(ctx: Any, grad: Tensor) -> tuple:
    (x,) = ctx.inputs
    return (grad / (x + 1),)


@differentiable("sqrt", inputs=False, output=True)
def _sqrt_backward(ctx: Any, grad: Tensor) -> tuple:
    return (grad / (ctx.output * 2),)


@differentiable("rsqrt", inputs=False, output=True)
def _rsqrt_backward(ctx: Any, grad: Tensor) -> tuple:
    # d(x^-1/2) = -1/2 x^-3/2 = -1/2 rsqrt(x)^3, the cube as two products (as PyTorch's
    # pow by 3 computes it), which fused CPU code compiles; pow would stay a NumPy call.
    y = ctx.output
    return (grad * -0.5 * (y * y * y),)


@differentiable("sin")
def _sin_backward(ctx: Any, grad: Tensor) -> tuple:
    (x,) = ctx.inputs
    return (grad * x.cos(),)


@differentiable("cos")
def _cos_backward(ctx: Any, grad: Tensor) -> tuple:
    (x,) = ctx.inputs
    return (grad * -x.sin(),)


@differentiable("asin")
def _asin_backward(ctx: Any, grad: Tensor) -> tuple:
    (x,) = ctx.inputs
    return (grad * (1 - x * x).rsqrt(),)


@differentiable("acos")
def _acos_backward(ctx: Any, grad: Tensor) -> tuple:
    (x,) = ctx.inputs
    return (-grad * (1 - x * x).rsqrt(),)


@differentiable("atan")
def _atan_backward(ctx: Any, grad: Tensor) -> tuple:
    (x,) = ctx.inputs
    return (grad / (x * x + 1),)


@differentiable("sinh")
def _sinh_backward(ctx: Any, grad: Tensor) -> tuple:
    (x,) = ctx.inputs
    return (grad * unary("cosh", x),)


@differentiable("cosh")
def _cosh_backward(ctx: Any, grad: Tensor) -> tuple:
    (x,) = ctx.inputs
    return (grad * unary("sinh", x),)


@differentiable("asinh")
def _asinh_backward(ctx: Any, grad: Tensor) -> tuple:
    (x,) = ctx.inputs
    return (grad * (x * x + 1).rsqrt(),)


@differentiable("acosh")
def _acosh_backward(ctx: Any, grad: Tensor) -> tuple:
    # 1 / sqrt((x - 1)(x + 1)): x² - 1 would cancel near x = 1.
    (x,) = ctx.inputs
    return (grad * ((x - 1) * (x + 1)).rsqrt(),)


@differentiable("atanh")
def _atanh_backward(ctx: Any, grad: Tensor) -> tuple:
    (x,) = ctx.inputs
    return (grad / (1 - x * x),)


@differentiable("atan2")
def _atan2_backward(ctx: Any, grad: Tensor) -> tuple:
    """∂atan2(a, b)/∂a = b / (a² + b²), ∂/∂b = -a / (a² + b²)."""
    scalar = _scalar_operand(ctx)
    if scalar is not None:
        value, is_lhs = scalar
        (x,) = ctx.inputs
        x = x.astype(ctx.dtype)
        scale = grad / (x * x + value * value)
        return ((-scale * value) if is_lhs else (scale * value),)
    a, b = (t.astype(ctx.dtype) for t in ctx.inputs)
    scale = grad / (a * a + b * b)
    return ((scale * b if _wants(ctx, 0) else None), (-scale * a if _wants(ctx, 1) else None))


@differentiable("tanh", inputs=False, output=True)
def _tanh_backward(ctx: Any, grad: Tensor) -> tuple:
    y = ctx.output
    return (grad * (1 - y * y),)


@differentiable("sigmoid", inputs=False, output=True)
def _sigmoid_backward(ctx: Any, grad: Tensor) -> tuple:
    y = ctx.output
    return (grad * (1 - y) * y,)


@differentiable("relu", inputs=False, output=True)
def _relu_backward(ctx: Any, grad: Tensor) -> tuple:
    return (where(ctx.output <= 0, 0, grad),)  # no gradient at 0, as PyTorch


@differentiable("gelu")
def _gelu_backward(ctx: Any, grad: Tensor) -> tuple:
    # d(x·Φ(x)) = Φ(x) + x·φ(x)
    (x,) = ctx.inputs
    cdf = ((x * _SQRT_HALF).erf() + 1) * 0.5
    pdf = (x * x * -0.5).exp() * _ONE_OVER_SQRT_2PI
    return (grad * (cdf + x * pdf),)


@differentiable("gelu_tanh")
def _gelu_tanh_backward(ctx: Any, grad: Tensor) -> tuple:
    # y = x/2 · (1 + tanh(u)), u = √(2/π)·(x + κx³)
    (x,) = ctx.inputs
    x_sq = x * x
    t = ((x + x_sq * x * _GELU_KAPPA) * _SQRT_2_OVER_PI).tanh()
    du = (x_sq * (3 * _GELU_KAPPA) + 1) * _SQRT_2_OVER_PI
    return (grad * ((t + 1) * 0.5 + x * 0.5 * (1 - t * t) * du),)


@differentiable("silu")
def _silu_backward(ctx: Any, grad: Tensor) -> tuple:
    # d(x·σ(x)) = σ(x)·(1 + x·(1 - σ(x)))
    (x,) = ctx.inputs
    s = x.sigmoid()
    return (grad * s * (x * (1 - s) + 1),)


@differentiable("erf")
def _erf_backward(ctx: Any, grad: Tensor) -> tuple:
    (x,) = ctx.inputs
    return (grad * ((x * x).neg().exp() * _TWO_OVER_SQRT_PI),)


@differentiable("reciprocal", inputs=False, output=True)
def _reciprocal_backward(ctx: Any, grad: Tensor) -> tuple:
    y = ctx.output
    return (-grad * (y * y),)


@differentiable("clamp")
def _clamp_backward(ctx: Any, grad: Tensor) -> tuple:
    # The gradient passes where min <= x <= max, both bounds included (PyTorch's subgradient).
    # Tensor bounds are maximum / minimum ops, with their own rule.
    (x,) = ctx.inputs
    low, high = ctx.attrs
    inside = None if low is None else x >= low
    if high is not None:
        inside = x <= high if inside is None else inside & (x <= high)
    return (where(inside, grad, 0),)


@differentiable("where", inputs=(0,))
def _where_backward(ctx: Any, grad: Tensor) -> tuple:
    # No gradient to the condition; each tensor branch gets it where it was chosen.
    cond = ctx.inputs[0]
    grads: list = [None]
    for chosen, scalar in zip((True, False), ctx.attrs):
        if scalar is None:  # this branch is a tensor input
            if not _wants(ctx, len(grads)):
                grads.append(None)
            else:
                grads.append(where(cond, grad, 0) if chosen else where(cond, 0, grad))
    return tuple(grads)
