"""Elementwise ops: arithmetic, comparisons, bitwise and math functions.

Type promotion is PyTorch's (``ember.dtype.result_type``): a Python scalar
or a 0-d tensor only raises the result dtype into a higher kind, int / int
true division gives the default float, and float functions of integer
tensors compute in the default float.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember import dtype as _dtype
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


def _compare(op: str, d: DType) -> DType:
    return _dtype.bool_


_BINARY_RULES = {
    "add": _keep, "mul": _keep, "sub": _numeric, "div": _floating, "floordiv": _numeric,
    "remainder": _numeric, "pow": _numeric, "maximum": _keep, "minimum": _keep,
    "eq": _compare, "ne": _compare, "lt": _compare, "le": _compare, "gt": _compare,
    "ge": _compare, "bitwise_and": _integral, "bitwise_or": _integral, "bitwise_xor": _integral,
}

_UNARY_RULES = {
    "neg": _numeric, "abs": _numeric, "sign": _numeric, "floor": _numeric, "ceil": _numeric,
    "round": _numeric, "relu": _numeric,
    "exp": _floating, "log": _floating, "log1p": _floating, "sqrt": _floating,
    "rsqrt": _floating, "sin": _floating, "cos": _floating, "tanh": _floating,
    "sigmoid": _floating, "gelu": _floating, "gelu_tanh": _floating, "silu": _floating,
    "erf": _floating, "reciprocal": _floating,
    "isnan": _to_bool, "isinf": _to_bool, "bitwise_not": _integral,
}

_SCALAR_TYPES = (bool, int, float, np.bool_, np.integer, np.floating)


def _scalar(op: str, value: Any) -> Any:
    """A Python scalar operand, as a plain bool / int / float."""
    if isinstance(value, _SCALAR_TYPES):
        return value.item() if isinstance(value, np.generic) else value
    hint = " help: wrap it with em.tensor(...)" if isinstance(value, (list, tuple, np.ndarray)) else ""
    raise DTypeError(f"{op}: expected a tensor or a Python scalar, got "
                     f"{type(value).__name__}.{hint}")


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
                compute = _dtype.result_type([(a.dtype, bool(a.shape)), (b.dtype, bool(b.shape))], [])
            return call(op, (a, b), shape, rule(op, compute), (), device)
        b = _scalar(op, b)
        compute = _dtype.promote_with_scalar(a.dtype, _dtype.scalar_kind(b))
        return call(op, (a,), a.shape, rule(op, compute), (b, False), a.device)
    if type(b) is not Tensor:
        raise DTypeError(f"{op}: needs at least one tensor operand, got "
                         f"{type(a).__name__} and {type(b).__name__}")
    a = _scalar(op, a)
    compute = _dtype.promote_with_scalar(b.dtype, _dtype.scalar_kind(a))
    return call(op, (b,), b.shape, rule(op, compute), (a, True), b.device)


def unary(op: str, x: Tensor) -> Tensor:
    if type(x) is not Tensor:
        raise DTypeError(f"{op}: expected a tensor, got {type(x).__name__}")
    return call(op, (x,), x.shape, _UNARY_RULES[op](op, x.dtype))


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """GELU: exact ``x·Φ(x)`` (erf), or its tanh approximation with ``approximate="tanh"``."""
    if approximate == "none":
        return unary("gelu", x)
    if approximate == "tanh":
        return unary("gelu_tanh", x)
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def clamp(x: Tensor, min: Any = None, max: Any = None) -> Tensor:
    """Limit values to ``[min, max]``; either bound may be None (not both). Tensor bounds broadcast."""
    if min is None and max is None:
        raise ValueError("clamp: at least one of min and max must be given")
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        out = x if min is None else binary("maximum", x, min)
        return out if max is None else binary("minimum", out, max)
    dtype = _numeric("clamp", x.dtype)
    bounds = []
    for bound in (min, max):
        if bound is not None:
            bound = _scalar("clamp", bound)
            dtype = _dtype.promote_with_scalar(dtype, _dtype.scalar_kind(bound))
        bounds.append(bound)
    return call("clamp", (x,), x.shape, dtype, tuple(bounds))


def where(cond: Tensor, a: Any, b: Any) -> Tensor:
    """Elements of ``a`` where ``cond`` is true, else of ``b``; all three broadcast."""
    if type(cond) is not Tensor:
        raise DTypeError(f"where: cond must be a bool tensor, got {type(cond).__name__}")
    if cond.dtype is not _dtype.bool_:
        raise DTypeError(f"where: cond must be a bool tensor, got {cond.dtype.name}")
    tensors = [t for t in (a, b) if type(t) is Tensor]
    device = same_device("where", (cond, *tensors))
    scalars = [_scalar("where", v) for v in (a, b) if type(v) is not Tensor]
    dtype = _dtype.result_type([(t.dtype, bool(t.shape)) for t in tensors],
                               [_dtype.scalar_kind(s) for s in scalars])
    shape = broadcast_shapes("where", cond.shape, *(t.shape for t in tensors))
    attrs = tuple(None if type(v) is Tensor else _scalar("where", v) for v in (a, b))
    return call("where", (cond, *tensors), shape, dtype, attrs, device)
