"""NumPy kernels of the elementwise ops.

Operands are first cast to the op's compute dtype (PyTorch's promoted
dtype), so ``int64 < float32`` compares in float32 and a float64 0-d tensor
added to a float16 tensor is rounded to float16 first, as in PyTorch.
float16 and bfloat16 then compute in float32 and round once on output, as
PyTorch's CPU kernels do (and NumPy has no bfloat16 math of its own).
"""

from __future__ import annotations

import math

import numpy as np

from ember.dtype import LOW_PRECISION as _LOW_PRECISION
from ember.dtype import LOW_PRECISION_NAMES as _LOW_PRECISION_NAMES
from ember.kernels.fusion import powers
from ember.kernels.numpy import compiled, fast_erf, lazy_scipy
from ember.kernels.numpy.table import MODULES, NP, is_array, kernel, namespace

_F32 = np.dtype(np.float32)
_I64 = np.dtype(np.int64)


def _cast(x, dtype: np.dtype):
    """An array operand in ``dtype``; Python scalars pass through (NumPy casts them)."""
    if is_array(x) and x.dtype != dtype:
        return x.astype(dtype)
    return x


def _widen(x, dtype: np.dtype):
    """An operand rounded to the low-precision ``dtype`` and widened to float32 to compute."""
    if is_array(x):
        return _cast(x, dtype).astype(_F32)
    return x


def _operands(msg, inputs):
    """(lhs, rhs) from two tensors, or one tensor and the scalar in ``attrs``."""
    if len(inputs) == 2:
        return inputs
    _, scalar, scalar_is_lhs = msg.attrs
    return (scalar, inputs[0]) if scalar_is_lhs else (inputs[0], scalar)


def _check_int_divisor(divisor, op: str) -> None:
    if is_array(divisor):
        if not divisor.all():
            raise ZeroDivisionError(f"{op}: integer division by zero")
    elif divisor == 0:
        raise ZeroDivisionError(f"{op}: integer division by zero")


def _int_pow(base, exponent, out: np.ndarray) -> np.ndarray:
    """Integer ``base ** exponent`` with PyTorch's answer for negative exponents:
    1 for base 1, ±1 for base -1 (by parity), 0 otherwise (NumPy raises instead).

    Narrow integers compute in int64 and wrap on the way out: the same bits (a power
    wraps modulo 2^64 and then modulo 2^8 as it would modulo 2^8 alone), and CuPy's own
    int8 power is wrong."""
    xp = namespace(out)
    if out.dtype.itemsize < 8:
        wide = _int_pow(_cast(base, _I64), _cast(exponent, _I64), xp.empty(out.shape, _I64))
        xp.copyto(out, wide, casting="unsafe")
        return out
    base = xp.asarray(base)  # a scalar base meets array-only functions below
    negative = exponent < 0 if is_array(exponent) else None
    if negative is None or not negative.any():
        return xp.power(base, exponent, out=out, dtype=out.dtype, casting="unsafe")
    xp.power(base, xp.where(negative, 0, exponent), out=out, dtype=out.dtype, casting="unsafe")
    odd = (exponent & 1).astype(bool)
    special_case = xp.where(base == 1, 1, xp.where(base == -1, xp.where(odd, -1, 1), 0))
    xp.copyto(out, special_case, where=negative, casting="unsafe")
    return out


def _lowered_pow(xp, exponent: float, x, out_dtype: np.dtype, shape, pool):
    """``x ** exponent`` as products, sqrt and quotients (``fusion/powers.py``), the
    operations compiled and generated kernels render."""
    if out_dtype in _LOW_PRECISION:
        return powers.compute(xp, exponent, _widen(x, out_dtype),
                              xp.empty(shape, _F32)).astype(out_dtype)
    return powers.compute(xp, exponent, _cast(x, out_dtype), pool.empty(shape, out_dtype))


# IR op → the ufunc's name in NumPy's API (the same in every array module that mirrors it).
_ARITHMETIC = {
    "add": "add", "sub": "subtract", "mul": "multiply", "div": "true_divide",
    "floordiv": "floor_divide", "remainder": "remainder", "pow": "power",
    "maximum": "maximum", "minimum": "minimum", "atan2": "arctan2",
    "bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
}
_COMPARISON = {
    "eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
    "gt": "greater", "ge": "greater_equal",
}


def _arithmetic_kernel(ufunc_name, op):
    is_pow = op == "pow"

    def run(msg, pool, *inputs):
        lhs, rhs = inputs if len(inputs) == 2 else _operands(msg, inputs)
        xp = MODULES.get(type(lhs)) or namespace(rhs)
        out_dtype = NP[msg.dtype]
        if is_pow:
            exponent = powers.lowered_exponent(msg)
            if exponent is not None:
                return _lowered_pow(xp, exponent, lhs, out_dtype, msg.shape, pool)
        ufunc = getattr(xp, ufunc_name)
        if msg.dtype in _LOW_PRECISION_NAMES:
            result = ufunc(_widen(lhs, out_dtype), _widen(rhs, out_dtype),
                           out=xp.empty(msg.shape, _F32), dtype=_F32)
            return result.astype(out_dtype)
        if out_dtype.kind == "i":
            if op == "floordiv" or op == "remainder":
                _check_int_divisor(rhs, op)
            elif op == "pow":
                return _int_pow(_cast(lhs, out_dtype), _cast(rhs, out_dtype),
                                pool.empty(msg.shape, out_dtype))
        elif out_dtype.kind == "b" and (op == "add" or op == "mul"):
            logical = xp.logical_or if op == "add" else xp.logical_and
            return logical(lhs, rhs, out=pool.empty(msg.shape, out_dtype))
        out = pool.empty(msg.shape, out_dtype)
        return ufunc(lhs, rhs, out=out, dtype=out_dtype, casting="unsafe")

    return run


def _comparison_kernel(ufunc_name):
    def run(msg, pool, *inputs):
        lhs, rhs = _operands(msg, inputs)
        ufunc = getattr(namespace(lhs, rhs), ufunc_name)
        compute = NP[msg.attrs[0]]
        if compute in _LOW_PRECISION:
            # The scalar too is rounded to the compute dtype: float16(0.1) == 0.1 is True.
            lhs, rhs = (_F32.type(compute.type(v)) if not is_array(v)
                        else _widen(v, compute) for v in (lhs, rhs))
        else:
            lhs, rhs = _cast(lhs, compute), _cast(rhs, compute)
        return ufunc(lhs, rhs, out=pool.empty(msg.shape, NP["bool"]))

    return run


for _name, _ufunc in _ARITHMETIC.items():
    kernel(_name)(_arithmetic_kernel(_ufunc, _name))


def _shift_kernel(left: bool):
    """PyTorch's shifts: an amount below 0 or at least the bit width shifts every bit out
    (0; -1 for a negative value shifted right); NumPy leaves those to the C compiler."""

    def run(msg, pool, *inputs):
        value, amount = _operands(msg, inputs)
        out_dtype = NP[msg.dtype]
        bits = 8 * out_dtype.itemsize
        xp = namespace(value, amount)
        value = xp.asarray(value, out_dtype)
        amount = xp.asarray(amount, out_dtype)
        inside = (amount >= 0) & (amount < bits)
        # Out-of-range amounts shift by bits - 1 instead: a signed right shift then fills
        # with the sign bit, which is PyTorch's answer; the others are masked to 0 below.
        safe = xp.where(inside, amount, bits - 1).astype(out_dtype, copy=False)
        shift = xp.left_shift if left else xp.right_shift
        out = pool.empty(msg.shape, out_dtype)
        shift(value, safe, out=out, casting="unsafe")
        if left or out_dtype.kind == "u":
            xp.copyto(out, 0, where=~inside)
        return out

    return run


kernel("bitwise_left_shift")(_shift_kernel(True))
kernel("bitwise_right_shift")(_shift_kernel(False))
for _name, _ufunc in _COMPARISON.items():
    kernel(_name)(_comparison_kernel(_ufunc))


_SQRT_HALF = 1.0 / math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _gelu(x, out):
    np.multiply(x, _SQRT_HALF, out=out)
    fast_erf.erf(out, out)
    out += 1.0
    out *= x
    out *= 0.5
    return out


def _gelu_tanh(x, out):
    xp = namespace(x)
    xp.multiply(x, x, out=out)
    out *= 0.044715
    out += 1.0
    out *= x
    out *= _SQRT_2_OVER_PI
    xp.tanh(out, out=out)
    out += 1.0
    out *= x
    out *= 0.5
    return out


def _sigmoid(x, out):
    expit = lazy_scipy.special().expit
    # SciPy's ufuncs, which array modules do not carry, dispatch through __array_ufunc__.
    return getattr(namespace(x), "expit", expit)(x, out=out)


def _silu(x, out):
    lazy_scipy.special().expit(x, out=out)
    out *= x
    return out


def _rsqrt(x, out):
    xp = namespace(x)
    xp.sqrt(x, out=out)
    return xp.reciprocal(out, out=out)


def _relu(x, out):
    return namespace(x).maximum(x, 0, out=out)


def _sign(x, out):
    xp = namespace(x)
    xp.sign(x, out=out)
    if out.dtype.kind == "f":
        # PyTorch's sign is (0 < x) - (x < 0): NaN gives 0 (NumPy: NaN), -0.0 gives +0.0.
        xp.copyto(out, 0, where=xp.isnan(out))
        out += 0
    return out


def _own_float32(op, fallback):
    """``op`` as ember's own float32 C (``float32_math``, which fused groups compile too)
    for float32 host arrays; ``fallback`` (NumPy's) for other dtypes and modules, or
    where no C compiler works."""

    def apply(x, out):
        if (type(x) is np.ndarray and x.dtype == _F32 and out.dtype == _F32
                and compiled.apply_math(op, x, out)):
            return out
        return fallback(x, out)

    return apply


def _with_out(fn):
    """``fn`` (a NumPy ufunc) through the array module of its input."""

    def apply(x, out):
        return getattr(namespace(x), fn.__name__, fn)(x, out=out)

    return apply


_FLOAT_FUNCTIONS = {
    "exp": _own_float32("exp", _with_out(np.exp)), "log": _own_float32("log", _with_out(np.log)),
    "log1p": _with_out(np.log1p), "sqrt": _with_out(np.sqrt), "rsqrt": _rsqrt,
    "sin": _with_out(np.sin), "cos": _with_out(np.cos),
    "tanh": _own_float32("tanh", _with_out(np.tanh)),
    "sigmoid": _own_float32("sigmoid", _sigmoid), "gelu": _gelu,
    "gelu_tanh": _own_float32("gelu_tanh", _gelu_tanh), "silu": _own_float32("silu", _silu),
    "erf": fast_erf.erf,
    "reciprocal": lambda x, out: namespace(x).divide(1.0, x, out=out),
    "asin": _with_out(np.arcsin), "acos": _with_out(np.arccos), "atan": _with_out(np.arctan),
    "sinh": _with_out(np.sinh), "cosh": _with_out(np.cosh), "asinh": _with_out(np.arcsinh),
    "acosh": _with_out(np.arccosh), "atanh": _with_out(np.arctanh),
}
_SAME_DTYPE_FUNCTIONS = {
    "neg": _with_out(np.negative), "abs": _with_out(np.abs), "sign": _sign,
    "floor": _with_out(np.floor), "ceil": _with_out(np.ceil), "round": _with_out(np.round),
    "relu": _relu,
}


def _float_function_kernel(fn):
    def run(msg, pool, x):
        out_dtype = NP[msg.dtype]
        if out_dtype in _LOW_PRECISION:
            return fn(x.astype(_F32), namespace(x).empty(msg.shape, _F32)).astype(out_dtype)
        if x.dtype != out_dtype:
            x = x.astype(out_dtype)
        return fn(x, pool.empty(msg.shape, out_dtype))

    return run


def _same_dtype_kernel(fn, op):
    integral_is_identity = op in ("floor", "ceil", "round")

    def run(msg, pool, x):
        if x.dtype.kind == "b" or (integral_is_identity and x.dtype.kind in "iu"):
            return x.copy()  # sign of a bool; floor / ceil / round of an integer
        if x.dtype in _LOW_PRECISION:
            return fn(x.astype(_F32), namespace(x).empty(msg.shape, _F32)).astype(x.dtype)
        return fn(x, pool.empty(msg.shape, x.dtype))

    return run


for _name, _fn in _FLOAT_FUNCTIONS.items():
    kernel(_name)(_float_function_kernel(_fn))
for _name, _fn in _SAME_DTYPE_FUNCTIONS.items():
    if _name != "round":
        kernel(_name)(_same_dtype_kernel(_fn, _name))

_round_to_integer = _same_dtype_kernel(_SAME_DTYPE_FUNCTIONS["round"], "round")


@kernel("round")
def _round(msg, pool, x):
    if not msg.attrs:
        return _round_to_integer(msg, pool, x)
    # PyTorch's decimals: x * 10**d rounded half to even, divided back (d < 0: / then *).
    decimals = msg.attrs[0]
    compute = _F32 if x.dtype in _LOW_PRECISION else x.dtype
    y = x.astype(compute)
    scale = compute.type(10.0 ** abs(decimals))
    xp = namespace(x)
    if decimals > 0:
        xp.multiply(y, scale, out=y)
        xp.rint(y, out=y)
        xp.divide(y, scale, out=y)
    else:
        xp.divide(y, scale, out=y)
        xp.rint(y, out=y)
        xp.multiply(y, scale, out=y)
    return y.astype(x.dtype, copy=False)


# Every kernel writes into ``out=``: on 0-d inputs NumPy would otherwise return a scalar.

@kernel("isnan")
def _isnan(msg, pool, x):
    out = pool.empty(msg.shape, NP["bool"])
    if x.dtype.kind in "biu":  # (bfloat16's NumPy kind is "V", not "f")
        out.fill(False)
        return out
    return namespace(x).isnan(x, out=out)


@kernel("isinf")
def _isinf(msg, pool, x):
    out = pool.empty(msg.shape, NP["bool"])
    if x.dtype.kind in "biu":
        out.fill(False)
        return out
    return namespace(x).isinf(x, out=out)


@kernel("bitwise_not")
def _bitwise_not(msg, pool, x):
    out = pool.empty(msg.shape, x.dtype)
    xp = namespace(x)
    if x.dtype.kind == "b":
        return xp.logical_not(x, out=out)
    return xp.invert(x, out=out)


@kernel("clamp")
def _clamp(msg, pool, x):
    low, high = msg.attrs
    out_dtype = NP[msg.dtype]
    compute = _F32 if out_dtype in _LOW_PRECISION else out_dtype
    y = x.astype(out_dtype).astype(compute, copy=False)  # a copy: the input is never written
    xp = namespace(x)
    if low is not None:
        xp.maximum(y, low, out=y, dtype=compute, casting="unsafe")
    if high is not None:
        xp.minimum(y, high, out=y, dtype=compute, casting="unsafe")
    return y.astype(out_dtype, copy=False)


@kernel("where")
def _where(msg, pool, cond, *tensors):
    it = iter(tensors)
    a, b = (next(it) if v is None else v for v in msg.attrs)
    out = pool.empty(msg.shape, NP[msg.dtype])
    xp = namespace(out)
    xp.copyto(out, b, casting="unsafe")
    xp.copyto(out, a, casting="unsafe", where=cond)
    return out


@kernel("cast")
def _cast_kernel(msg, pool, x):
    out = pool.empty(msg.shape, NP[msg.dtype])
    if x.dtype.kind == "f" and out.dtype.kind in "iu" and out.dtype.itemsize < 8:
        # Through int64, as PyTorch converts: -3.0 becomes uint8 253 (a GPU's own
        # conversion saturates to 0).
        x = x.astype(_I64)
    namespace(out).copyto(out, x, casting="unsafe")
    return out


@kernel("alias")
def _alias(msg, pool, x):
    return x
