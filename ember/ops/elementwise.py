"""Elementwise ops: arithmetic, comparisons, bitwise and math functions.

Type promotion is PyTorch's (``ember.dtype.result_type``): a Python scalar
or a 0-d tensor only raises the result dtype into a higher kind, int / int
true division gives the default float, and float functions of integer
tensors compute in the default float. Comparisons compare in the promoted
dtype and give bool.

IR of a binary op: inputs are the tensor operands; ``attrs`` is
``(compute dtype name,)`` for two tensors, or ``(compute dtype name, scalar,
scalar_is_lhs)`` for a tensor and a Python scalar (the scalar already
converted to the compute dtype's kind: wrapped into int32 / int64, or a float).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember import dtype as _dtype
from ember.autodiff.rules import differentiable
from ember.dtype import DType
from ember.errors import DTypeError
from ember.ops._core import broadcast_shapes, call, same_device
from ember.tensor import Tensor

# ----- dtype rules: compute dtype -> output dtype, or a DTypeError -------------------------


def _keep(op: str, d: DType) -> DType:
    return d


def _numeric(op: str, d: DType) -> DType:
    if d.kind == "b":
        raise DTypeError(f"{op}: not defined for bool tensors; help: convert with .to(em.int64) "
                         f"or use the logical operators & | ^ ~")
    return d


def _floating(op: str, d: DType) -> DType:
    return d if d.kind == "f" else _dtype.DEFAULT_FLOAT


def _to_bool(op: str, d: DType) -> DType:
    return _dtype.bool_


def _integral(op: str, d: DType) -> DType:
    if d.kind == "f":
        raise DTypeError(f"{op}: needs bool or integer tensors, got {d.name}")
    return d


_BINARY_RULES = {
    "add": _keep, "mul": _keep, "sub": _numeric, "div": _floating, "floordiv": _numeric,
    "remainder": _numeric, "pow": _numeric, "maximum": _keep, "minimum": _keep,
    "eq": _to_bool, "ne": _to_bool, "lt": _to_bool, "le": _to_bool, "gt": _to_bool,
    "ge": _to_bool, "bitwise_and": _integral, "bitwise_or": _integral, "bitwise_xor": _integral,
}

_UNARY_RULES = {
    "neg": _numeric, "abs": _numeric, "sign": _keep, "floor": _numeric, "ceil": _numeric,
    "round": _numeric, "relu": _numeric,
    "exp": _floating, "log": _floating, "log1p": _floating, "sqrt": _floating,
    "rsqrt": _floating, "sin": _floating, "cos": _floating, "tanh": _floating,
    "sigmoid": _floating, "gelu": _floating, "gelu_tanh": _floating, "silu": _floating,
    "erf": _floating, "reciprocal": _floating,
    "isnan": _to_bool, "isinf": _to_bool, "bitwise_not": _integral,
}

_SCALAR_TYPES = (bool, int, float)


def _scalar(op: str, value: Any) -> Any:
    """A Python scalar operand, as a plain bool / int / float.

    NumPy scalars of an ember dtype (``np.float32(2)``, ``ml_dtypes.bfloat16(1)``)
    count as Python scalars, as in PyTorch.
    """
    if isinstance(value, _SCALAR_TYPES):
        return value
    if isinstance(value, np.generic) and (value.dtype.kind in "biuf"
                                          or value.dtype == _dtype.bfloat16.np):
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
            out = _apply_rule(rule, op, compute, a, b)
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


def _with_scalar(op: str, rule: Any, x: Tensor, value: Any, scalar_is_lhs: bool) -> Tensor:
    value = _scalar(op, value)
    kind = _dtype.scalar_kind(value)
    compute = _dtype.promote_with_scalar(x.dtype, kind)
    if op == "sub":
        _no_bool_sub(x.dtype.kind == "b", kind == "b")
    out = _apply_rule(rule, op, compute, *((value, x) if scalar_is_lhs else (x, value)))
    # True division computes in its float output: int32_tensor / 2**33 does not wrap the 2**33.
    value = _as_kind(value, out if op == "div" else compute)
    if op == "pow" and not scalar_is_lhs and compute.kind == "i" and value < 0:
        raise DTypeError(f"pow: integers to negative integer powers are not allowed "
                         f"({x.dtype.name} tensor ** {value}); help: use a float exponent "
                         f"({float(value)}) or convert the tensor with .float()")
    return call(op, (x,), x.shape, out, (compute.name, value, scalar_is_lhs), x.device)


def unary(op: str, x: Tensor) -> Tensor:
    if type(x) is not Tensor:
        raise DTypeError(f"{op}: expected a tensor, got {type(x).__name__}")
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
    _numeric("clamp", dtype)
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

@differentiable("add", inputs=False)
def _add_backward(ctx: Any, grad: Tensor) -> tuple:
    return (grad,) if len(ctx.input_shapes) == 1 else (grad, grad)


@differentiable("mul")
def _mul_backward(ctx: Any, grad: Tensor) -> tuple:
    if len(ctx.inputs) == 1:
        return (grad * ctx.attrs[1],)
    a, b = ctx.inputs
    return grad * b, grad * a
