"""Elementwise op cases: operators, math functions, clamp, where.

Every case states the result dtype PyTorch gives (``dtype=``), so the table
also pins type promotion; ``test_elementwise_torch.py`` checks that reading
of PyTorch against torch itself. References are NumPy, written to PyTorch's
semantics: operands are cast to the promoted dtype first, low-precision
floats compute in float64 here and are compared with the harness's
tolerance, ``//`` floors, ``%`` takes the divisor's sign, ``round`` is
half-to-even, ``sign(nan)`` is 0.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
from scipy import special

from tests.ops.grad_harness import GradCase
from tests.ops.harness import FLOAT_DTYPES, NP_DTYPES, Case, array, rng

INT_DTYPES = ("int32", "int64")
NUMERIC_DTYPES = FLOAT_DTYPES + INT_DTYPES
ALL_DTYPES = NUMERIC_DTYPES + ("bool",)

CASES: list[Case] = []


def _np(dtype: str) -> np.dtype:
    return np.dtype(NP_DTYPES[dtype])


def _compute(x, dtype: str, round_scalars: bool = False):
    """An operand as PyTorch computes it in ``dtype``: arrays rounded to ``dtype`` (floats then
    widened to float64 for the reference); scalars stay Python numbers unless ``round_scalars``."""
    if isinstance(x, np.ndarray):
        x = x.astype(_np(dtype))
        return x.astype(np.float64) if dtype in FLOAT_DTYPES else x
    if round_scalars and dtype in FLOAT_DTYPES:
        return float(_np(dtype).type(x))
    return x


def binary_ref(fn, compute: str, out: str, round_scalars: bool = False):
    """A NumPy reference: both operands in ``compute``, the result in ``out``."""
    def ref(a, b):
        with np.errstate(all="ignore"):
            result = fn(_compute(a, compute, round_scalars), _compute(b, compute, round_scalars))
            return np.asarray(result).astype(_np(out))
    return ref


def unary_ref(fn, compute: str, out: str | None = None):
    def ref(x):
        with np.errstate(all="ignore"):
            return np.asarray(fn(_compute(x, compute))).astype(_np(out or compute))
    return ref


def nonzero(shape, dtype: str, salt: int = 0) -> np.ndarray:
    """Integers in ±[1, 5] (divisors), or floats in ±[0.5, 2]."""
    g = rng(zlib.crc32(repr((shape, dtype, salt, "nonzero")).encode()) % 10_000)
    sign = np.where(g.random(shape) < 0.5, -1, 1)
    if dtype in INT_DTYPES:
        return np.asarray(sign * g.integers(1, 6, shape)).astype(_np(dtype))
    return np.asarray(sign * g.uniform(0.5, 2.0, shape)).astype(_np(dtype))


def special_values(dtype: str) -> np.ndarray:
    values = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.75, np.inf, -np.inf, np.nan]
    return np.array(values, dtype=_np(dtype))


# ----- arithmetic operators ------------------------------------------------------------------

OPERATORS = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "div": (lambda a, b: a / b, np.true_divide),
    "floordiv": (lambda a, b: a // b, np.floor_divide),
    "remainder": (lambda a, b: a % b, np.remainder),
    "pow": (lambda a, b: a ** b, np.power),
}

# Shape pairs: same, broadcast, size-0 and size-1 dims, 0-d on either side, both 0-d.
LAYOUTS = [
    ("same", (3, 4), (3, 4)),
    ("broadcast", (3, 4), (4,)),
    ("outer", (2, 1, 3), (4, 1)),
    ("size1", (1,), (5,)),
    ("empty", (0, 3), (3,)),
    ("empty_broadcast", (2, 0, 3), (1, 3)),
    ("zerodim_rhs", (2, 3), ()),
    ("zerodim_lhs", (), (4,)),
    ("zerodim_both", (), ()),
]


def _operands(op: str, dtype: str, shape_a, shape_b, salt: int):
    """Inputs on which ``op`` is defined and well conditioned for ``dtype``."""
    if op in ("floordiv", "remainder", "div"):
        return array(shape_a, dtype, -9, 9, salt), nonzero(shape_b, dtype, salt)
    if op == "pow":
        if dtype in INT_DTYPES:
            return array(shape_a, dtype, -4, 4, salt), array(shape_b, dtype, 0, 3, salt + 1)
        return array(shape_a, dtype, 0.25, 2.0, salt), array(shape_b, dtype, -2.0, 2.0, salt + 1)
    low, high = (-9, 9) if dtype in INT_DTYPES else (-2.0, 2.0)
    return array(shape_a, dtype, low, high, salt), array(shape_b, dtype, low, high, salt + 1)


def _out_dtype(op: str, dtype: str) -> str:
    return "float32" if op == "div" and dtype in INT_DTYPES + ("bool",) else dtype


for _op, (_fn, _np_fn) in OPERATORS.items():
    for _dtype in NUMERIC_DTYPES:
        _out = _out_dtype(_op, _dtype)
        for _i, (_layout, _sa, _sb) in enumerate(LAYOUTS):
            CASES.append(Case(f"{_op}/{_layout}/{_dtype}", _fn, binary_ref(_np_fn, _out, _out),
                              list(_operands(_op, _dtype, _sa, _sb, _i)), dtype=_out))

# Bool operands: + and * are logical (bool), / gives float32; PyTorch refuses - // % **.
for _op, _fn, _np_fn, _out in [
    ("add", lambda a, b: a + b, np.logical_or, "bool"),
    ("mul", lambda a, b: a * b, np.logical_and, "bool"),
    ("div", lambda a, b: a / b, np.true_divide, "float32"),
]:
    CASES.append(Case(f"{_op}/broadcast/bool", _fn, binary_ref(_np_fn, _out, _out),
                      [array((3, 4), "bool"), np.ones(4, np.bool_)], dtype=_out))

# Python scalars on either side: (scalar, kind it is, what a tensor of each dtype gives).
SCALARS = [
    ("int", 3, {"float32": "float32", "float64": "float64", "float16": "float16",
                "bfloat16": "bfloat16", "int32": "int32", "int64": "int64", "bool": "int64"}),
    ("float", 1.5, {"float32": "float32", "float64": "float64", "float16": "float16",
                    "bfloat16": "bfloat16", "int32": "float32", "int64": "float32",
                    "bool": "float32"}),
    ("bool", True, {"float32": "float32", "float64": "float64", "float16": "float16",
                    "bfloat16": "bfloat16", "int32": "int32", "int64": "int64", "bool": "bool"}),
]

for _op, (_fn, _np_fn) in OPERATORS.items():
    for _dtype in ALL_DTYPES:
        for _kind, _value, _results in SCALARS:
            _compute_dtype = _results[_dtype]
            if _op == "sub" and (_dtype == "bool" or _kind == "bool"):
                continue  # PyTorch refuses bool subtraction (see test_elementwise_errors.py)
            if _op in ("floordiv", "remainder", "pow") and _compute_dtype == "bool":
                continue
            _out = _out_dtype(_op, _compute_dtype)
            _x = _operands(_op, _dtype, (2, 3), (2, 3), 7)[0]
            if _op in ("floordiv", "remainder", "div", "pow") and _dtype != "bool":
                _divisor = nonzero((2, 3), _dtype, 3)
                _base = np.abs(_divisor) if _dtype in FLOAT_DTYPES else _divisor
            elif _op in ("floordiv", "remainder"):
                _divisor = _base = np.ones((2, 3), np.bool_)  # scalar // bool: no zero divisors
            else:
                _divisor = _base = _x
            _ref = binary_ref(_np_fn, _out, _out)
            CASES.append(Case(f"{_op}/scalar_rhs_{_kind}/{_dtype}",
                              lambda a, v=_value, f=_fn: f(a, v), lambda a, v=_value, r=_ref: r(a, v),
                              [_base if _op == "pow" else _x], dtype=_out))
            if _op == "pow":
                _divisor = np.abs(_divisor)  # negative integer exponents have their own cases
            CASES.append(Case(f"{_op}/scalar_lhs_{_kind}/{_dtype}",
                              lambda b, v=_value, f=_fn: f(v, b), lambda b, v=_value, r=_ref: r(v, b),
                              [_divisor], dtype=_out))

# Mixed dtypes: (a dtype, b dtype, result) for dimensioned operands, and 0-d operands,
# which only promote into a higher kind.
MIXED = [
    ("int32", "float32", "float32"), ("int64", "float16", "float16"),
    ("int64", "bfloat16", "bfloat16"), ("int32", "int64", "int64"),
    ("bool", "int32", "int32"), ("bool", "float64", "float64"),
    ("float16", "bfloat16", "float32"), ("float16", "float32", "float32"),
    ("bfloat16", "float64", "float64"), ("float32", "float64", "float64"),
]
ZERO_DIM = [  # (dimensioned, 0-d, result)
    ("float16", "float64", "float16"), ("int32", "int64", "int32"),
    ("int32", "float64", "float64"), ("int64", "float16", "float16"),
    ("bool", "int32", "int32"), ("bool", "float64", "float64"),
    ("bfloat16", "float16", "bfloat16"), ("float32", "int64", "float32"),
]

for _op in ("add", "mul", "div", "pow", "sub"):
    _fn, _np_fn = OPERATORS[_op]
    for _a, _b, _res in MIXED:
        if _op == "sub" and "bool" in (_a, _b):
            continue
        _out = _out_dtype(_op, _res)
        _lo = 0.25 if _op == "pow" else -2.0
        _xa = array((3, 4), _a, 1 if _op == "pow" else -3, 3) if _a in INT_DTYPES \
            else array((3, 4), _a, _lo, 2.0)
        _xb = array((4,), _b, 0, 3) if _b in INT_DTYPES + ("bool",) else array((4,), _b, 0.5, 2.0)
        for _name, _args in (("ab", (_xa, _xb)), ("ba", (_xb, _xa))):
            if _op == "pow" and _name == "ba":
                continue
            CASES.append(Case(f"{_op}/mixed_{_name}/{_a}_{_b}", _fn,
                              binary_ref(_np_fn, _out, _out), list(_args), dtype=_out))
    for _dim, _zero, _res in ZERO_DIM:
        if _op in ("sub", "pow") and "bool" in (_dim, _zero):
            continue
        _out = _out_dtype(_op, _res)
        _x = array((5,), _dim, 1, 3) if _dim in INT_DTYPES + ("bool",) else array((5,), _dim, 0.5, 2)
        _z = np.array(2, _np(_zero)) if _zero != "float64" else np.array(1.2345678912345, np.float64)
        CASES.append(Case(f"{_op}/zero_dim/{_dim}_{_zero}", _fn, binary_ref(_np_fn, _out, _out),
                          [_x, _z], dtype=_out))
        CASES.append(Case(f"{_op}/zero_dim_lhs/{_zero}_{_dim}", _fn,
                          binary_ref(_np_fn, _out, _out), [_z, _x], dtype=_out))

# ----- special values and integer semantics ---------------------------------------------

for _dtype in FLOAT_DTYPES:
    _x = np.repeat(special_values(_dtype), 10)
    _y = np.tile(special_values(_dtype), 10)
    for _op, (_fn, _np_fn) in OPERATORS.items():
        CASES.append(Case(f"{_op}/special/{_dtype}", _fn, binary_ref(_np_fn, _dtype, _dtype),
                          [_x, _y], dtype=_dtype))
    CASES.append(Case(f"div/by_zero/{_dtype}", lambda a: a / 0.0,
                      lambda a, r=binary_ref(np.true_divide, _dtype, _dtype): r(a, 0.0),
                      [special_values(_dtype)], dtype=_dtype))

_signed = np.array([7, -7, 7, -7, 6, -6, 0, 1, -1], np.int64)
_divisors = np.array([2, 2, -2, -2, 3, -3, 5, -5, 5], np.int64)
for _dtype in INT_DTYPES:
    _a, _b = _signed.astype(_np(_dtype)), _divisors.astype(_np(_dtype))
    CASES.append(Case(f"floordiv/negative/{_dtype}", lambda a, b: a // b,
                      lambda a, b: np.array([3, -4, -4, 3, 2, 2, 0, -1, -1], a.dtype),
                      [_a, _b], dtype=_dtype))
    CASES.append(Case(f"remainder/negative/{_dtype}", lambda a, b: a % b,
                      lambda a, b: np.array([1, 1, -1, -1, 0, 0, 0, -4, 4], a.dtype),
                      [_a, _b], dtype=_dtype))
    # Integer overflow wraps, as in PyTorch (two's complement).
    _big = np.array([np.iinfo(_np(_dtype)).max, np.iinfo(_np(_dtype)).min], _np(_dtype))
    CASES.append(Case(f"add/wraps/{_dtype}", lambda a: a + 1,
                      lambda a: np.array([np.iinfo(a.dtype).min, np.iinfo(a.dtype).min + 1],
                                         a.dtype), [_big], dtype=_dtype))
    # Integer powers with negative tensor exponents: 1, ±1 for -1, else 0 (PyTorch).
    CASES.append(Case(f"pow/negative_exponent/{_dtype}", lambda a, b: a ** b,
                      lambda a, b: np.array([1, -1, 1, 0, 0, 8], a.dtype),
                      [np.array([1, -1, -1, 2, 0, 2], _np(_dtype)),
                       np.array([-3, -3, -2, -1, -1, 3], _np(_dtype))], dtype=_dtype))
    CASES.append(Case(f"pow/scalar_base_negative_exponent/{_dtype}", lambda b: 2 ** b,
                      lambda b: np.array([0, 1, 2, 1024], b.dtype),
                      [np.array([-1, 0, 1, 10], _np(_dtype))], dtype=_dtype))
    # A Python int past int32 wraps into the tensor's dtype (PyTorch converts it so).
    CASES.append(Case(f"add/large_python_int/{_dtype}", lambda a: a + (2**32 + 5),
                      lambda a: (a.astype(np.int64) + (2**32 + 5)).astype(a.dtype), [_a],
                      dtype=_dtype))

_floats = np.array([5.5, -5.5, 5.5, -5.5, 4.0, -4.0, 0.0], np.float64)
_float_divisors = np.array([2.0, 2.0, -2.0, -2.0, 2.0, 2.0, -3.0], np.float64)
for _dtype in FLOAT_DTYPES:
    CASES.append(Case(f"floordiv/negative/{_dtype}", lambda a, b: a // b,
                      lambda a, b: np.array([2, -3, -3, 2, 2, -2, -0.0]).astype(a.dtype),
                      [_floats.astype(_np(_dtype)), _float_divisors.astype(_np(_dtype))],
                      dtype=_dtype))
    CASES.append(Case(f"remainder/negative/{_dtype}", lambda a, b: a % b,
                      lambda a, b: np.array([1.5, 0.5, -0.5, -1.5, 0, 0, 0]).astype(a.dtype),
                      [_floats.astype(_np(_dtype)), _float_divisors.astype(_np(_dtype))],
                      dtype=_dtype))

# ----- comparisons ------------------------------------------------------------------------

COMPARISONS = {
    "eq": (lambda a, b: a == b, np.equal), "ne": (lambda a, b: a != b, np.not_equal),
    "lt": (lambda a, b: a < b, np.less), "le": (lambda a, b: a <= b, np.less_equal),
    "gt": (lambda a, b: a > b, np.greater), "ge": (lambda a, b: a >= b, np.greater_equal),
}

for _op, (_fn, _np_fn) in COMPARISONS.items():
    for _dtype in ALL_DTYPES:
        # Small integers in the inputs make ties, so == and <= are exercised.
        _x = array((3, 4), _dtype, -2, 2, 1)
        _y = array((4,), _dtype, -2, 2, 2)
        if _dtype in FLOAT_DTYPES:
            _x, _y = np.round(_x.astype(np.float32)).astype(_np(_dtype)), \
                np.round(_y.astype(np.float32)).astype(_np(_dtype))
        CASES.append(Case(f"{_op}/broadcast/{_dtype}", _fn, binary_ref(_np_fn, _dtype, "bool"),
                          [_x, _y], dtype="bool"))
        for _kind, _value, _results in SCALARS:
            _ref = binary_ref(_np_fn, _results[_dtype], "bool", round_scalars=True)
            CASES.append(Case(f"{_op}/scalar_{_kind}/{_dtype}", lambda a, v=_value, f=_fn: f(a, v),
                              lambda a, v=_value, r=_ref: r(a, v), [_x], dtype="bool"))
            CASES.append(Case(f"{_op}/scalar_lhs_{_kind}/{_dtype}",
                              lambda a, v=_value, f=_fn: f(v, a),
                              lambda a, v=_value, r=_ref: r(v, a), [_x], dtype="bool"))
    for _dtype in FLOAT_DTYPES:
        CASES.append(Case(f"{_op}/special/{_dtype}", _fn, binary_ref(_np_fn, _dtype, "bool"),
                          [np.repeat(special_values(_dtype), 10),
                           np.tile(special_values(_dtype), 10)], dtype="bool"))
    # Mixed dtypes compare in the promoted dtype: int64 2**24 + 1 equals float32 2**24.
    CASES.append(Case(f"{_op}/mixed/int64_float32", _fn, binary_ref(_np_fn, "float32", "bool"),
                      [np.array([2**24 + 1, 3, -7], np.int64),
                       np.array([2.0**24, 3.5, -7.0], np.float32)], dtype="bool"))
    CASES.append(Case(f"{_op}/zero_dim/float16_float64", _fn, binary_ref(_np_fn, "float16", "bool"),
                      [np.array([0.1, 0.2, 0.3], np.float16), np.array(0.1, np.float64)],
                      dtype="bool"))

# ----- bitwise ----------------------------------------------------------------------------

BITWISE = {
    "bitwise_and": (lambda a, b: a & b, np.bitwise_and),
    "bitwise_or": (lambda a, b: a | b, np.bitwise_or),
    "bitwise_xor": (lambda a, b: a ^ b, np.bitwise_xor),
}
for _op, (_fn, _np_fn) in BITWISE.items():
    for _dtype in ("bool", "int32", "int64"):
        _x, _y = array((3, 4), _dtype, -50, 50, 1), array((4,), _dtype, -50, 50, 2)
        CASES.append(Case(f"{_op}/broadcast/{_dtype}", _fn, binary_ref(_np_fn, _dtype, _dtype),
                          [_x, _y], dtype=_dtype))
        for _kind, _value, _results in SCALARS[::2]:  # int and bool scalars
            _out = _results[_dtype]
            _ref = binary_ref(_np_fn, _out, _out)
            CASES.append(Case(f"{_op}/scalar_{_kind}/{_dtype}", lambda a, v=_value, f=_fn: f(a, v),
                              lambda a, v=_value, r=_ref: r(a, v), [_x], dtype=_out))
            CASES.append(Case(f"{_op}/scalar_lhs_{_kind}/{_dtype}",
                              lambda a, v=_value, f=_fn: f(v, a),
                              lambda a, v=_value, r=_ref: r(v, a), [_x], dtype=_out))
    CASES.append(Case(f"{_op}/mixed/bool_int32", _fn, binary_ref(_np_fn, "int32", "int32"),
                      [array((5,), "bool"), array((5,), "int32", -9, 9)], dtype="int32"))
for _dtype in ("bool", "int32", "int64"):
    CASES.append(Case(f"bitwise_not/{_dtype}", lambda a: ~a,
                      np.logical_not if _dtype == "bool" else np.invert,
                      [array((3, 4), _dtype, -50, 50)], dtype=_dtype))

# ----- unary functions ----------------------------------------------------------------------


def _sign(x):
    return np.where(np.isnan(x), 0, np.sign(x)) + 0.0


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


# name: (ember call, float64 reference, input range)
FLOAT_FUNCTIONS = {
    "exp": (lambda x: x.exp(), np.exp, (-3, 3)),
    "log": (lambda x: x.log(), np.log, (0.1, 5)),
    "log1p": (lambda x: x.log1p(), np.log1p, (-0.5, 5)),
    "sqrt": (lambda x: x.sqrt(), np.sqrt, (0, 5)),
    "rsqrt": (lambda x: x.rsqrt(), lambda x: 1 / np.sqrt(x), (0.1, 5)),
    "sin": (lambda x: x.sin(), np.sin, (-4, 4)),
    "cos": (lambda x: x.cos(), np.cos, (-4, 4)),
    "tanh": (lambda x: x.tanh(), np.tanh, (-4, 4)),
    "sigmoid": (lambda x: x.sigmoid(), special.expit, (-8, 8)),
    "gelu": (lambda x: x.gelu(), lambda x: 0.5 * x * (1 + special.erf(x / math.sqrt(2))), (-4, 4)),
    "gelu_tanh": (lambda x: x.gelu(approximate="tanh"), _gelu_tanh, (-4, 4)),
    "silu": (lambda x: x.silu(), lambda x: x * special.expit(x), (-6, 6)),
    "erf": (lambda x: x.erf(), special.erf, (-3, 3)),
    "reciprocal": (lambda x: x.reciprocal(), lambda x: 1 / x, (0.25, 4)),
}
SAME_DTYPE_FUNCTIONS = {
    "neg": (lambda x: -x, np.negative),
    "neg_method": (lambda x: x.neg(), np.negative),
    "abs": (lambda x: abs(x), np.abs),
    "abs_method": (lambda x: x.abs(), np.abs),
    "sign": (lambda x: x.sign(), _sign),
    "floor": (lambda x: x.floor(), np.floor),
    "ceil": (lambda x: x.ceil(), np.ceil),
    "round": (lambda x: x.round(), np.round),
    "relu": (lambda x: x.relu(), lambda x: np.maximum(x, 0)),
}

for _name, (_fn, _ref_fn, (_low, _high)) in FLOAT_FUNCTIONS.items():
    for _dtype in FLOAT_DTYPES:
        for _shape in ((3, 4), (), (0, 2)):
            _sid = "x".join(map(str, _shape)) or "scalar"
            CASES.append(Case(f"{_name}/{_sid}/{_dtype}", _fn, unary_ref(_ref_fn, _dtype),
                              [array(_shape, _dtype, _low, _high)], dtype=_dtype,
                              atol=1e-2 if _dtype == "bfloat16" else None))
        CASES.append(Case(f"{_name}/special/{_dtype}", _fn, unary_ref(_ref_fn, _dtype),
                          [special_values(_dtype)], dtype=_dtype,
                          atol=1e-2 if _dtype == "bfloat16" else None))
    # Float functions of integer and bool tensors compute in the default float, float32.
    for _dtype in ("int32", "int64", "bool"):
        _x = array((2, 3), _dtype, max(int(_low), 1) if _name in ("log", "rsqrt", "reciprocal")
                   else int(_low), int(_high))
        CASES.append(Case(f"{_name}/from/{_dtype}", _fn, unary_ref(_ref_fn, "float32"), [_x],
                          dtype="float32"))

for _name, (_fn, _ref_fn) in SAME_DTYPE_FUNCTIONS.items():
    for _dtype in NUMERIC_DTYPES:
        CASES.append(Case(f"{_name}/{_dtype}", _fn, unary_ref(_ref_fn, _dtype),
                          [array((3, 4), _dtype, -9, 9)], dtype=_dtype))
        CASES.append(Case(f"{_name}/empty/{_dtype}", _fn, unary_ref(_ref_fn, _dtype),
                          [array((0,), _dtype)], dtype=_dtype))
    for _dtype in FLOAT_DTYPES:
        CASES.append(Case(f"{_name}/special/{_dtype}", _fn, unary_ref(_ref_fn, _dtype),
                          [special_values(_dtype)], dtype=_dtype))
CASES.append(Case("sign/bool", lambda x: x.sign(), lambda x: x, [array((5,), "bool")],
                  dtype="bool"))

# round: half to even, and PyTorch's decimals.
for _dtype in FLOAT_DTYPES:
    CASES.append(Case(f"round/half_even/{_dtype}", lambda x: x.round(),
                      lambda x: np.array([0, 2, 2, -0.0, -2, 4, -4, 1]).astype(x.dtype),
                      [np.array([0.5, 1.5, 2.5, -0.5, -2.5, 3.5, -3.5, 0.7], _np(_dtype))],
                      dtype=_dtype, exact=True))
for _dtype in ("float32", "float64"):
    CASES.append(Case(f"round/decimals2/{_dtype}", lambda x: x.round(decimals=2),
                      lambda x: np.round(x, 2), [array((10,), _dtype, -50, 50)], dtype=_dtype))
    CASES.append(Case(f"round/decimals-1/{_dtype}", lambda x: x.round(-1),
                      lambda x: np.array([1230, 20, 0, -20, 120]).astype(x.dtype),
                      [np.array([1234.5, 15.0, 4.9, -25.0, 115.0], _np(_dtype))], dtype=_dtype))

for _name, _fn, _ref_fn in (("isnan", lambda x: x.isnan(), np.isnan),
                            ("isinf", lambda x: x.isinf(), np.isinf)):
    for _dtype in FLOAT_DTYPES:
        CASES.append(Case(f"{_name}/{_dtype}", _fn, _ref_fn, [special_values(_dtype)],
                          dtype="bool"))
    for _dtype in ("int32", "int64", "bool"):
        CASES.append(Case(f"{_name}/{_dtype}", _fn, lambda x: np.zeros(x.shape, bool),
                          [array((2, 3), _dtype)], dtype="bool"))

# ----- clamp, pow, maximum, minimum -------------------------------------------------------

for _dtype in NUMERIC_DTYPES:
    _x = array((3, 4), _dtype, -9, 9)
    _ref = unary_ref(lambda x: np.clip(x, -3, 4), _dtype)
    CASES.append(Case(f"clamp/both/{_dtype}", lambda x: x.clamp(-3, 4), _ref, [_x], dtype=_dtype))
    CASES.append(Case(f"clamp/min/{_dtype}", lambda x: x.clamp(min=-1),
                      unary_ref(lambda x: np.maximum(x, -1), _dtype), [_x], dtype=_dtype))
    CASES.append(Case(f"clamp/max/{_dtype}", lambda x: x.clamp(max=2),
                      unary_ref(lambda x: np.minimum(x, 2), _dtype), [_x], dtype=_dtype))
    CASES.append(Case(f"clamp/min_above_max/{_dtype}", lambda x: x.clamp(3, -3),
                      unary_ref(lambda x: np.full_like(x, -3), _dtype), [_x], dtype=_dtype))
    _lo, _hi = array((4,), _dtype, -6, 0, 1), array((3, 1), _dtype, 0, 6, 2)
    CASES.append(Case(f"clamp/tensor_bounds/{_dtype}", lambda x, lo, hi: x.clamp(lo, hi),
                      lambda x, lo, hi, d=_dtype: np.minimum(np.maximum(x, lo), hi).astype(_np(d)),
                      [_x, _lo, _hi], dtype=_dtype))
    CASES.append(Case(f"clamp/tensor_min_scalar_max/{_dtype}", lambda x, lo: x.clamp(lo, 5),
                      lambda x, lo, d=_dtype: np.minimum(np.maximum(x, lo), 5).astype(_np(d)),
                      [_x, _lo], dtype=_dtype))
for _dtype in ("int32", "int64"):
    CASES.append(Case(f"clamp/float_bound/{_dtype}", lambda x: x.clamp(-2.5, 2.5),
                      unary_ref(lambda x: np.clip(x, -2.5, 2.5), "float32"),
                      [array((3, 4), _dtype, -9, 9)], dtype="float32"))
    CASES.append(Case(f"clamp/huge_bound/{_dtype}", lambda x: x.clamp(max=2**40, min=-2**40),
                      lambda x: x, [array((5,), _dtype, -9, 9)], dtype=_dtype))
CASES.append(Case("clamp/bool_int_bounds", lambda x: x.clamp(0, 1),
                  lambda x: x.astype(np.int64), [array((5,), "bool")], dtype="int64"))
for _dtype in FLOAT_DTYPES:
    CASES.append(Case(f"clamp/special/{_dtype}", lambda x: x.clamp(-1, 1),
                      unary_ref(lambda x: np.clip(x, -1, 1), _dtype), [special_values(_dtype)],
                      dtype=_dtype))

for _name, _call, _np_fn in (("maximum", lambda a, b: a.maximum(b), np.maximum),
                             ("minimum", lambda a, b: a.minimum(b), np.minimum)):
    for _dtype in ALL_DTYPES:
        CASES.append(Case(f"{_name}/broadcast/{_dtype}", _call, binary_ref(_np_fn, _dtype, _dtype),
                          [array((3, 4), _dtype, -9, 9, 1), array((4,), _dtype, -9, 9, 2)],
                          dtype=_dtype))
    for _dtype in FLOAT_DTYPES:  # NaN propagates, as in PyTorch
        CASES.append(Case(f"{_name}/special/{_dtype}", _call, binary_ref(_np_fn, _dtype, _dtype),
                          [np.repeat(special_values(_dtype), 10),
                           np.tile(special_values(_dtype), 10)], dtype=_dtype))
    CASES.append(Case(f"{_name}/mixed/int32_float16", _call,
                      binary_ref(_np_fn, "float16", "float16"),
                      [array((5,), "int32", -9, 9), array((5,), "float16", -9, 9)],
                      dtype="float16"))
    CASES.append(Case(f"{_name}/scalar/int64", lambda a, f=_call: f(a, 2.5),
                      lambda a, f=_np_fn: f(a.astype(np.float64), 2.5).astype(np.float32),
                      [array((5,), "int64", -9, 9)], dtype="float32"))

for _dtype in FLOAT_DTYPES:
    CASES.append(Case(f"pow_method/{_dtype}", lambda x: x.pow(2.5),
                      unary_ref(lambda x: x ** 2.5, _dtype), [array((3, 4), _dtype, 0, 3)],
                      dtype=_dtype))
    CASES.append(Case(f"pow_method/tensor/{_dtype}", lambda x, y: x.pow(y),
                      binary_ref(np.power, _dtype, _dtype),
                      [array((3, 4), _dtype, 0.5, 3), array((4,), _dtype, -2, 2)], dtype=_dtype))
CASES.append(Case("pow/int_float_exponent", lambda x: x ** 0.5,
                  unary_ref(np.sqrt, "float32"), [array((5,), "int64", 0, 9)], dtype="float32"))

# ----- where ------------------------------------------------------------------------------

_cond = array((3, 4), "bool", salt=11)
for _dtype in ALL_DTYPES:
    _a, _b = array((3, 4), _dtype, -9, 9, 1), array((4,), _dtype, -9, 9, 2)
    CASES.append(Case(f"where/tensors/{_dtype}", lambda c, a, b: _where(c, a, b), np.where,
                      [_cond, _a, _b], dtype=_dtype))
    CASES.append(Case(f"where/broadcast_cond/{_dtype}", lambda c, a, b: _where(c, a, b),
                      np.where, [array((3, 1), "bool", salt=3), _b, array((3, 4), _dtype)],
                      dtype=_dtype))
    for _kind, _value, _results in SCALARS:
        _out = _results[_dtype]
        CASES.append(Case(f"where/scalar_b_{_kind}/{_dtype}",
                          lambda c, a, v=_value: _where(c, a, v),
                          lambda c, a, v=_value, o=_out: np.where(c, a.astype(_np(o)),
                                                                  _np(o).type(v)),
                          [_cond, _a], dtype=_out))
        CASES.append(Case(f"where/scalar_a_{_kind}/{_dtype}",
                          lambda c, b, v=_value: _where(c, v, b),
                          lambda c, b, v=_value, o=_out: np.where(c, _np(o).type(v),
                                                                  b.astype(_np(o))),
                          [_cond, _b], dtype=_out))
for _a_value, _b_value, _out in ((1, 0, "int64"), (1.0, 0.0, "float32"), (True, False, "bool"),
                                 (2, 0.5, "float32"), (True, 3, "int64")):
    CASES.append(Case(f"where/scalars/{type(_a_value).__name__}_{type(_b_value).__name__}",
                      lambda c, a=_a_value, b=_b_value: _where(c, a, b),
                      lambda c, a=_a_value, b=_b_value, o=_out: np.where(c, a, b).astype(_np(o)),
                      [_cond], dtype=_out))
for _a, _b, _out in MIXED[:6]:
    CASES.append(Case(f"where/mixed/{_a}_{_b}", lambda c, a, b: _where(c, a, b),
                      lambda c, a, b, o=_out: np.where(c, a.astype(_np(o)), b.astype(_np(o))),
                      [_cond, array((3, 4), _a, -5, 5), array((4,), _b, -5, 5)], dtype=_out))
CASES.append(Case("where/zero_dim_branch", lambda c, a, b: _where(c, a, b),
                  lambda c, a, b: np.where(c, a, b.astype(np.float16)),
                  [_cond, array((3, 4), "float16"), np.array(2.5, np.float64)], dtype="float16"))
CASES.append(Case("where/empty", lambda c, a, b: _where(c, a, b), np.where,
                  [array((0, 4), "bool"), array((4,)), array((1, 4))], dtype="float32"))


def _where(cond, a, b):
    import ember as em

    return em.where(cond, a, b)


# ----- gradients --------------------------------------------------------------------------
#
# Small float64 problems for the gradient harness (grad_harness.py). Most ember calls
# are spelled as in torch, so a case's torch twin is its own ``fn`` unless given. Inputs
# stay away from the points where a function has no derivative (kinks, jumps, bounds), where
# finite differences cannot agree with any one convention; test_elementwise_grad.py pins
# PyTorch's conventions there.

GRAD_CASES: list[GradCase] = []
_SAME = object()


def _torch():
    import torch

    return torch


def _grad(id: str, fn, inputs, torch_fn=_SAME, **kwargs) -> None:
    GRAD_CASES.append(GradCase(id, fn, inputs, torch_fn=fn if torch_fn is _SAME else torch_fn,
                               **kwargs))


def _f64(shape, low=-2.0, high=2.0, salt=0) -> np.ndarray:
    return array(shape, "float64", low, high, salt)


def _away_from_integers(x: np.ndarray) -> np.ndarray:
    """``x`` moved to the middle of its unit interval where it is near an integer or a half."""
    frac = x - np.floor(x)
    near = (np.abs(frac - np.round(frac * 2) / 2) < 0.05)
    return np.where(near, np.floor(x) + 0.25, x)


# Binary operators: both tensors (same shape, broadcast both ways, 0-d), scalars on either side.
_GRAD_LAYOUTS = [("same", (3, 4), (3, 4)), ("broadcast", (3, 4), (4,)),
                 ("outer", (2, 1, 3), (4, 1)), ("zerodim_rhs", (2, 3), ()),
                 ("zerodim_lhs", (), (2, 3))]


def _grad_operands(op: str, shape_a, shape_b, salt: int):
    if op in ("div", "remainder"):
        return _f64(shape_a, -3, 3, salt), nonzero(shape_b, "float64", salt)
    if op == "pow":
        return _f64(shape_a, 0.25, 2.0, salt), _f64(shape_b, -2.0, 2.0, salt + 1)
    return _f64(shape_a, salt=salt), _f64(shape_b, salt=salt + 1)


for _op in ("add", "sub", "mul", "div", "remainder", "pow"):
    _fn = OPERATORS[_op][0]
    for _i, (_layout, _sa, _sb) in enumerate(_GRAD_LAYOUTS):
        _grad(f"{_op}/{_layout}", _fn, list(_grad_operands(_op, _sa, _sb, _i)))
    _x = _grad_operands(_op, (2, 3), (2, 3), 9)
    _grad(f"{_op}/scalar_rhs", lambda a, f=_fn: f(a, 1.75), [_x[0]])
    _divisor = _x[1] if _op != "pow" else _f64((2, 3), -2.0, 2.0, 10)
    _grad(f"{_op}/scalar_lhs", lambda b, f=_fn: f(2.5, b), [_divisor],
          # torch has no gradient for scalar % tensor: its tensor % tensor twin has one.
          torch_fn=(lambda b: _torch().tensor(2.5, dtype=b.dtype) % b) if _op == "remainder"
          else _SAME)
    _grad(f"{_op}/one_tracked", _fn, list(_grad_operands(_op, (3, 4), (4,), 11)), wrt=[1])

_grad("pow/integer_exponent_negative_base", lambda x: x ** 3, [_f64((2, 3))])
_grad("pow/square", lambda x: x ** 2, [_f64((3, 4))])
_grad("pow/zero_exponent", lambda x: x ** 0, [_f64((2, 3))])
_grad("pow/sqrt_exponent", lambda x: x.pow(0.5), [_f64((2, 3), 0.25, 3)])
_grad("pow/negative_exponent", lambda x: x ** -1.5, [_f64((2, 3), 0.25, 3)])
_grad("pow/zero_base_scalar", lambda x: 0.0 ** x, [_f64((2, 3), 0.5, 2)])
_grad("pow/negative_base_tensor_exponent", lambda a, b: a ** b,
      [_f64((2, 3), -2, 2), np.array([1.0, 2.0, 3.0])],
      wrt=[0])  # negative bases: the exponent's gradient is NaN there (log), so only the base

# Mixed dtypes: float32 operands round, so finite differences take a larger step.
_grad("mul/mixed_float32", lambda a, b: a.float() * b, [_f64((3, 4)), _f64((4,), salt=1)],
      eps=1e-2, rtol=1e-4, atol=1e-5)
_grad("div/mixed_float32_zerodim", lambda a, b: a / b.float(),
      [_f64((2, 3)), np.array(1.375)], eps=1e-2, rtol=1e-4, atol=1e-5)

# maximum / minimum: ties split the gradient (central differences agree: half on each side).
for _name in ("maximum", "minimum"):
    _call = (lambda a, b: a.maximum(b)) if _name == "maximum" else (lambda a, b: a.minimum(b))
    _grad(f"{_name}/broadcast", _call, [_f64((3, 4), salt=1), _f64((4,), salt=2)])
    _grad(f"{_name}/ties", _call, [np.array([1.0, 2.0, -3.0, 4.0, 0.5, -1.0]),
                                   np.array([1.0, 0.0, -3.0, 5.0, 0.5, 2.0])])
    _grad(f"{_name}/same_tensor", lambda a, f=_call: f(a, a), [_f64((2, 3))])
    _grad(f"{_name}/scalar", lambda a, f=_call: f(a, 0.5), [_f64((3, 4), salt=3)],
          torch_fn=lambda a, f=_call: f(a, _torch().tensor(0.5, dtype=a.dtype)))

# Unary functions: (ember call, torch twin or _SAME, input range).
_GRAD_UNARY = {
    "neg": (lambda x: -x, _SAME, (-2, 2)),
    "abs": (lambda x: abs(x), _SAME, (-2, 2)),
    "exp": (lambda x: x.exp(), _SAME, (-2, 2)),
    "log": (lambda x: x.log(), _SAME, (0.2, 3)),
    "log1p": (lambda x: x.log1p(), _SAME, (-0.5, 3)),
    "sqrt": (lambda x: x.sqrt(), _SAME, (0.2, 3)),
    "rsqrt": (lambda x: x.rsqrt(), _SAME, (0.2, 3)),
    "sin": (lambda x: x.sin(), _SAME, (-3, 3)),
    "cos": (lambda x: x.cos(), _SAME, (-3, 3)),
    "tanh": (lambda x: x.tanh(), _SAME, (-2, 2)),
    "sigmoid": (lambda x: x.sigmoid(), _SAME, (-4, 4)),
    "relu": (lambda x: x.relu(), _SAME, (-2, 2)),
    "gelu": (lambda x: x.gelu(), lambda x: _torch().nn.functional.gelu(x), (-3, 3)),
    "gelu_tanh": (lambda x: x.gelu(approximate="tanh"),
                  lambda x: _torch().nn.functional.gelu(x, approximate="tanh"), (-3, 3)),
    "silu": (lambda x: x.silu(), lambda x: _torch().nn.functional.silu(x), (-4, 4)),
    "erf": (lambda x: x.erf(), _SAME, (-2, 2)),
    "reciprocal": (lambda x: x.reciprocal(), _SAME, (0.3, 3)),
    "sign": (lambda x: x.sign(), _SAME, (-2, 2)),
    "floor": (lambda x: x.floor(), _SAME, (-3, 3)),
    "ceil": (lambda x: x.ceil(), _SAME, (-3, 3)),
    "round": (lambda x: x.round(), _SAME, (-3, 3)),
    "round_decimals": (lambda x: x.round(decimals=1), _SAME, (-3, 3)),
}
for _name, (_fn, _twin, (_low, _high)) in _GRAD_UNARY.items():
    for _shape in ((3, 4), ()):
        _x = _f64(_shape, _low, _high, 5)
        if _name in ("floor", "ceil", "round"):
            _x = _away_from_integers(_x)
        elif _name == "round_decimals":
            _x = np.asarray(_away_from_integers(_x * 10) / 10)
        _grad(f"{_name}/{'x'.join(map(str, _shape)) or 'scalar'}", _fn, [_x], torch_fn=_twin)
    # A function of a function, so the incoming gradient is not the plain cotangent.
    _grad(f"{_name}/chained", lambda x, f=_fn: f(x * 0.5 + 0.25) * x,
          [_f64((2, 3), max(_low, 0.1) if _name in ("log", "sqrt", "rsqrt", "reciprocal")
                else _low, _high, 6)],
          torch_fn=_SAME if _twin is _SAME else lambda x, f=_twin: f(x * 0.5 + 0.25) * x)

# clamp: scalar bounds (inclusive), one bound, min > max, and tensor bounds (maximum / minimum).
_cx = _f64((3, 4), -3, 3, 7)
_grad("clamp/both", lambda x: x.clamp(-1.0, 1.5), [_cx])
_grad("clamp/min", lambda x: x.clamp(min=-0.5), [_cx])
_grad("clamp/max", lambda x: x.clamp(max=0.5), [_cx])
_grad("clamp/min_above_max", lambda x: x.clamp(2.0, -1.0), [_cx])
_grad("clamp/tensor_bounds", lambda x, lo, hi: x.clamp(lo, hi),
      [_cx, _f64((4,), -2, -0.5, 8), _f64((3, 1), 0.5, 2, 9)])
_grad("clamp/tensor_min_scalar_max", lambda x, lo: x.clamp(lo, 1.0),
      [_cx, _f64((4,), -2, -0.5, 8)],
      torch_fn=lambda x, lo: x.clamp(lo, _torch().tensor(1.0, dtype=x.dtype)))

# where: gradient to the chosen branch only, summed over broadcast dims; none to the condition.
_wc = array((3, 4), "bool", salt=11)
_grad("where/tensors", lambda c, a, b: _where(c, a, b), [_wc, _f64((3, 4), salt=1),
                                                          _f64((4,), salt=2)],
      torch_fn=lambda c, a, b: _torch().where(c, a, b))
_grad("where/broadcast_cond", lambda c, a, b: _where(c, a, b),
      [array((3, 1), "bool", salt=3), _f64((4,), salt=4), _f64((3, 4), salt=5)],
      torch_fn=lambda c, a, b: _torch().where(c, a, b))
_grad("where/scalar_b", lambda c, a: _where(c, a, 0.0), [_wc, _f64((3, 4), salt=6)],
      torch_fn=lambda c, a: _torch().where(c, a, 0.0))
_grad("where/scalar_a", lambda c, b: _where(c, 1.5, b), [_wc, _f64((1, 4), salt=7)],
      torch_fn=lambda c, b: _torch().where(c, 1.5, b))
_grad("where/same_tensor", lambda x: _where(x > 0, x, x * 2), [_f64((3, 4), salt=8)],
      torch_fn=lambda x: _torch().where(x > 0, x, x * 2))

# Repeated use of one tensor: the engine accumulates its gradients.
_rx = _f64((2, 3), 0.3, 2, 12)
_grad("mul/same_tensor", lambda x: x * x, [_rx])
_grad("sub/same_tensor", lambda x: x - x * x, [_rx])
_grad("div/same_tensor", lambda x: (x + 1) / x, [_rx])
_grad("pow/same_tensor", lambda x: x ** x, [_rx])
_grad("exp/same_tensor", lambda x: x * x.exp() + x.sin() * x.cos(), [_rx])
_grad("chain/broadcast_reuse", lambda x, y: (x * y).tanh() + x.sigmoid() * y,
      [_f64((3, 1), salt=13), _f64((4,), salt=14)])

# floordiv has no gradient (torch: not implemented); the other path still carries one.
_grad("floordiv/untracked_path", lambda x: x // 0.7 + x * 2, [_away_from_integers(_rx / 0.7) * 0.7],
      torch_fn=lambda x: _torch().floor_divide(x.detach(), 0.7) + x * 2)

# Casts: float -> float carries the gradient (rounded through float32 on the way back).
_grad("cast/float32_roundtrip", lambda x: x.float().double() * 3, [_f64((2, 3))],
      eps=1e-2, rtol=1e-4, atol=1e-5)
_grad("cast/float32_output", lambda x: (x.float() * 2 + 1) * 3, [_f64((2, 3))],
      eps=1e-2, rtol=1e-3, atol=1e-4)  # exact float32 ops: torch agrees to the last bit
_grad("cast/float32_product", lambda x: (x.float() * 2 + 1).double() * x, [_f64((2, 3))],
      eps=1e-2, rtol=1e-4, atol=1e-5)
