"""NumPy kernels of the elementwise ops.

float16 and bfloat16 compute in float32 and round once on output, as
PyTorch's CPU kernels do (and NumPy has no bfloat16 math of its own).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from ember.kernels.numpy.table import NP, kernel

_LOW_PRECISION = {np.dtype(np.float16), NP["bfloat16"]}
_F32 = np.dtype(np.float32)


def _int_divisor_check(divisor: np.ndarray | int | float, op: str) -> None:
    if isinstance(divisor, np.ndarray):
        if divisor.dtype.kind in "iub" and not divisor.all():
            raise ZeroDivisionError(f"{op}: integer division by zero")
    elif isinstance(divisor, int) and divisor == 0:
        raise ZeroDivisionError(f"{op}: integer division by zero")


def _int_pow_check(exponent: np.ndarray | int | float) -> None:
    if isinstance(exponent, np.ndarray):
        if exponent.dtype.kind == "i" and (exponent < 0).any():
            raise ValueError("pow: integers to negative integer powers are not allowed")
    elif isinstance(exponent, int) and not isinstance(exponent, bool) and exponent < 0:
        raise ValueError("pow: integers to negative integer powers are not allowed")


_ARITHMETIC = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
    "floordiv": np.floor_divide, "remainder": np.remainder, "pow": np.power,
    "maximum": np.maximum, "minimum": np.minimum,
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
}
_COMPARISON = {
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal,
}


def _operands(msg, inputs):
    """(lhs, rhs) from two tensors, or one tensor and the scalar in ``attrs``."""
    if len(inputs) == 2:
        return inputs
    scalar, scalar_is_lhs = msg.attrs
    return (scalar, inputs[0]) if scalar_is_lhs else (inputs[0], scalar)


def _arithmetic_kernel(ufunc, op):
    def run(msg, pool, *inputs):
        lhs, rhs = _operands(msg, inputs)
        out_dtype = NP[msg.dtype]
        if out_dtype.kind in "iu":
            if op in ("floordiv", "remainder"):
                _int_divisor_check(rhs, op)
            elif op == "pow":
                _int_pow_check(rhs)
        if out_dtype in _LOW_PRECISION:
            result = ufunc(_as_f32(lhs), _as_f32(rhs), dtype=_F32)
            return result.astype(out_dtype)
        if out_dtype.kind == "b" and op in ("add", "mul"):
            logical = np.logical_or if op == "add" else np.logical_and
            return logical(lhs, rhs, out=pool.empty(msg.shape, out_dtype))
        out = pool.empty(msg.shape, out_dtype)
        return ufunc(lhs, rhs, out=out, dtype=out_dtype, casting="unsafe")

    return run


def _comparison_kernel(ufunc):
    def run(msg, pool, *inputs):
        lhs, rhs = _operands(msg, inputs)
        lhs, rhs = _as_f32(lhs), _as_f32(rhs)
        return ufunc(lhs, rhs, out=pool.empty(msg.shape, NP["bool"]))

    return run


def _as_f32(x):
    if isinstance(x, np.ndarray) and x.dtype in _LOW_PRECISION:
        return x.astype(_F32)
    return x


for _name, _ufunc in _ARITHMETIC.items():
    kernel(_name)(_arithmetic_kernel(_ufunc, _name))
for _name, _ufunc in _COMPARISON.items():
    kernel(_name)(_comparison_kernel(_ufunc))


_SQRT_HALF = 1.0 / math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _gelu(x, out):
    np.multiply(x, _SQRT_HALF, out=out)
    special.erf(out, out=out)
    out += 1.0
    out *= x
    out *= 0.5
    return out


def _gelu_tanh(x, out):
    np.multiply(x, x, out=out)
    out *= 0.044715
    out += 1.0
    out *= x
    out *= _SQRT_2_OVER_PI
    np.tanh(out, out=out)
    out += 1.0
    out *= x
    out *= 0.5
    return out


def _silu(x, out):
    special.expit(x, out=out)
    out *= x
    return out


def _rsqrt(x, out):
    np.sqrt(x, out=out)
    return np.reciprocal(out, out=out)


def _relu(x, out):
    return np.maximum(x, 0, out=out)


def _with_out(fn):
    return lambda x, out: fn(x, out=out)


_FLOAT_FUNCTIONS = {
    "exp": _with_out(np.exp), "log": _with_out(np.log), "log1p": _with_out(np.log1p),
    "sqrt": _with_out(np.sqrt), "rsqrt": _rsqrt, "sin": _with_out(np.sin),
    "cos": _with_out(np.cos), "tanh": _with_out(np.tanh), "sigmoid": _with_out(special.expit),
    "gelu": _gelu, "gelu_tanh": _gelu_tanh, "silu": _silu, "erf": _with_out(special.erf),
    "reciprocal": lambda x, out: np.divide(1.0, x, out=out),
}
_SAME_DTYPE_FUNCTIONS = {
    "neg": _with_out(np.negative), "abs": _with_out(np.abs), "sign": _with_out(np.sign),
    "floor": _with_out(np.floor), "ceil": _with_out(np.ceil), "round": _with_out(np.round),
    "relu": _relu,
}


def _float_function_kernel(fn):
    def run(msg, pool, x):
        out_dtype = NP[msg.dtype]
        if out_dtype in _LOW_PRECISION:
            return fn(x.astype(_F32), np.empty(msg.shape, _F32)).astype(out_dtype)
        if x.dtype != out_dtype:
            x = x.astype(out_dtype)
        return fn(x, pool.empty(msg.shape, out_dtype))

    return run


def _same_dtype_kernel(fn, op):
    def run(msg, pool, x):
        if x.dtype.kind in "iu" and op in ("floor", "ceil", "round"):
            return x.copy()
        if x.dtype in _LOW_PRECISION:
            return fn(x.astype(_F32), np.empty(msg.shape, _F32)).astype(x.dtype)
        return fn(x, pool.empty(msg.shape, x.dtype))

    return run


for _name, _fn in _FLOAT_FUNCTIONS.items():
    kernel(_name)(_float_function_kernel(_fn))
for _name, _fn in _SAME_DTYPE_FUNCTIONS.items():
    kernel(_name)(_same_dtype_kernel(_fn, _name))


@kernel("isnan")
def _isnan(msg, pool, x):
    return np.isnan(x) if x.dtype.kind == "f" else np.zeros(x.shape, np.bool_)


@kernel("isinf")
def _isinf(msg, pool, x):
    return np.isinf(x) if x.dtype.kind == "f" else np.zeros(x.shape, np.bool_)


@kernel("bitwise_not")
def _bitwise_not(msg, pool, x):
    if x.dtype.kind == "b":
        return np.logical_not(x)
    return np.invert(x)


@kernel("clamp")
def _clamp(msg, pool, x):
    low, high = msg.attrs
    out_dtype = NP[msg.dtype]
    compute = _F32 if out_dtype in _LOW_PRECISION else out_dtype
    y = x.astype(compute)  # a copy: the input buffer is never written
    if low is not None:
        np.maximum(y, low, out=y, dtype=compute, casting="unsafe")
    if high is not None:
        np.minimum(y, high, out=y, dtype=compute, casting="unsafe")
    return y.astype(out_dtype, copy=False)


@kernel("where")
def _where(msg, pool, cond, *tensors):
    it = iter(tensors)
    a, b = (next(it) if v is None else v for v in msg.attrs)
    out_dtype = NP[msg.dtype]
    out = pool.empty(msg.shape, out_dtype)
    np.copyto(out, np.where(cond, a, b), casting="unsafe")
    return out


@kernel("cast")
def _cast(msg, pool, x):
    out = pool.empty(msg.shape, NP[msg.dtype])
    np.copyto(out, x, casting="unsafe")
    return out


@kernel("alias")
def _alias(msg, pool, x):
    return x
