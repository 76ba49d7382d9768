"""Op cases of the small integer dtypes (uint8, int8, int16) and of the shifts on every
integer dtype.

References compute in Python ints (or NumPy's int64) and wrap into the dtype at the end,
so they do not share the kernels' NumPy calls: ``uint8 250 + 10`` is 4, as in PyTorch.
"""

from __future__ import annotations

import operator

import numpy as np

import ember as em
from tests.ops.harness import INTEGER_DTYPES, Case, array

SMALL = ("uint8", "int8", "int16")
CASES: list[Case] = []


def _wrap(values, dtype: str) -> np.ndarray:
    """Python / int64 values wrapped into ``dtype`` modulo 2**bits (PyTorch's integer
    overflow)."""
    npd = np.dtype(dtype)
    bits = 8 * npd.itemsize
    flat = [int(v) & ((1 << bits) - 1) for v in np.asarray(values, dtype=object).reshape(-1)]
    if npd.kind == "i":
        flat = [v - (1 << bits) if v >> (bits - 1) else v for v in flat]
    return np.array(flat, dtype=npd).reshape(np.shape(values))


def _elementwise(fn, dtype: str):
    """A reference applying Python-int ``fn`` elementwise over broadcast operands."""

    def ref(*operands):
        arrays = [np.asarray(o) for o in operands]
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
        cols = [np.broadcast_to(a, shape).astype(object).reshape(-1) for a in arrays]
        out = [fn(*(int(c[k]) for c in cols)) for k in range(len(cols[0]))]
        return _wrap(np.array(out, dtype=object).reshape(shape), dtype)

    return ref


def _range(dtype: str) -> tuple[int, int]:
    info = np.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max)


def _floordiv(a: int, b: int) -> int:
    return a // b  # Python's floor: PyTorch's floor_divide on integers


# ----- arithmetic with wraparound ----------------------------------------------------------

_ARITHMETIC = {
    "add": (operator.add, lambda a, b: a + b),
    "sub": (operator.sub, lambda a, b: a - b),
    "mul": (operator.mul, lambda a, b: a * b),
    "maximum": (max, lambda a, b: em.maximum(a, b)),
    "minimum": (min, lambda a, b: em.minimum(a, b)),
    "bitwise_and": (operator.and_, lambda a, b: a & b),
    "bitwise_or": (operator.or_, lambda a, b: a | b),
    "bitwise_xor": (operator.xor, lambda a, b: a ^ b),
}
for _dtype in SMALL:
    _low, _high = _range(_dtype)
    for _op, (_py, _fn) in _ARITHMETIC.items():
        for _shape_a, _shape_b in (((3, 4), (3, 4)), ((2, 3, 1), (1, 4)), ((0,), (1,)),
                                   ((), (5,))):
            CASES.append(Case(
                f"{_op}/{_dtype}/{_shape_a}x{_shape_b}", _fn, _elementwise(_py, _dtype),
                [array(_shape_a, _dtype, _low, _high), array(_shape_b, _dtype, _low, _high, 1)],
                dtype=_dtype))
        # The scalar wraps into the dtype first (int8: 200 is -56), as PyTorch converts it.
        _scalar = int(_wrap(200, _dtype))
        CASES.append(Case(f"{_op}/{_dtype}/scalar", lambda a, _fn=_fn: _fn(a, 200),
                          _elementwise(lambda a, _py=_py, _s=_scalar: _py(a, _s), _dtype),
                          [array((7,), _dtype, _low, _high)], dtype=_dtype))
    # Floor division and remainder with Python's signs (PyTorch's), by nonzero divisors.
    _divisor = np.array([3, 7, 1, 2] if _dtype == "uint8" else [3, -3, 7, -7, 1, 2], _dtype)
    _lows = -100 if _dtype != "uint8" else 0
    CASES.append(Case(f"floordiv/{_dtype}", lambda a, b: a // b,
                      _elementwise(_floordiv, _dtype),
                      [array((3, _divisor.size), _dtype, _lows, 100), _divisor], dtype=_dtype))
    CASES.append(Case(f"remainder/{_dtype}", lambda a, b: a % b,
                      _elementwise(lambda a, b: a % b, _dtype),
                      [array((3, _divisor.size), _dtype, _lows, 100), _divisor], dtype=_dtype))
    CASES.append(Case(f"neg/{_dtype}", lambda a: -a, _elementwise(operator.neg, _dtype),
                      [array((9,), _dtype, _low, _high)], dtype=_dtype))
    CASES.append(Case(f"bitwise_not/{_dtype}", lambda a: ~a, _elementwise(operator.invert, _dtype),
                      [array((9,), _dtype, _low, _high)], dtype=_dtype))
    CASES.append(Case(f"pow/{_dtype}", lambda a: a ** 3,
                      _elementwise(lambda a: a ** 3, _dtype),
                      [array((9,), _dtype, _low, _high)], dtype=_dtype))
    CASES.append(Case(f"lt/{_dtype}", lambda a, b: a < b, lambda a, b: a < b,
                      [array((4, 5), _dtype, _low, _high), array((5,), _dtype, _low, _high, 2)],
                      dtype="bool"))
    # int / int true division gives the default float; float functions too.
    CASES.append(Case(f"div/{_dtype}", lambda a, b: a / b,
                      lambda a, b: (a.astype(np.float64) / b).astype(np.float32),
                      [array((3, _divisor.size), _dtype, _lows, 100), _divisor],
                      dtype="float32"))
    CASES.append(Case(f"exp/{_dtype}", lambda a: (a % 8).exp(),
                      lambda a: np.exp((a.astype(np.int64) % 8).astype(np.float32)),
                      [array((6,), _dtype, _low, _high)], dtype="float32"))
    # Reductions: sum and prod accumulate to int64; max / min keep the dtype.
    for _shape, _dim in (((3, 4), 1), ((0, 3), 0), ((5,), None), ((2, 1, 3), 2)):
        _x = array(_shape, _dtype, _low, _high)
        CASES.append(Case(f"sum/{_dtype}/{_shape}/{_dim}", lambda a, _dim=_dim: a.sum(_dim),
                          lambda a, _dim=_dim: a.astype(np.int64).sum(_dim), [_x], dtype="int64"))
        CASES.append(Case(f"prod/{_dtype}/{_shape}/{_dim}", lambda a, _dim=_dim: (a % 4).prod(_dim),
                          lambda a, _dim=_dim: (a.astype(np.int64) % 4).prod(_dim), [_x],
                          dtype="int64"))
        if 0 not in _shape:
            CASES.append(Case(f"max/{_dtype}/{_shape}/{_dim}", lambda a, _dim=_dim: a.max(_dim),
                              lambda a, _dim=_dim: a.max(_dim), [_x], dtype=_dtype))
    # Casts to and from the dtype: float → int truncates toward zero; ints wrap.
    CASES.append(Case(f"cast/int64_to_{_dtype}", lambda a, _d=_dtype: a.to(getattr(em, _d)),
                      lambda a, _d=_dtype: _wrap(a, _d),
                      [np.array([0, 255, 256, -1, -129, 70000, -70000], np.int64)], dtype=_dtype))
    CASES.append(Case(f"cast/float32_to_{_dtype}", lambda a, _d=_dtype: a.to(getattr(em, _d)),
                      lambda a, _d=_dtype: _wrap(np.trunc(a).astype(np.int64), _d),
                      [np.array([0.0, 3.7, -3.7, 100.5, 127.0], np.float32)], dtype=_dtype))
    CASES.append(Case(f"cast/{_dtype}_to_float32", lambda a: a.float(),
                      lambda a: a.astype(np.float32), [array((6,), _dtype, _low, _high)],
                      dtype="float32"))
    CASES.append(Case(f"where/{_dtype}", lambda c, a: em.where(c, a, 7),
                      lambda c, a: np.where(c, a, np.array(7, a.dtype)),
                      [array((4,), "bool"), array((4,), _dtype, _low, _high)], dtype=_dtype))
    _bound = 0 if _dtype == "uint8" else -5
    CASES.append(Case(f"clamp/{_dtype}", lambda a, _bound=_bound: a.clamp(_bound, 100),
                      lambda a, _bound=_bound: np.clip(a, _bound, 100),
                      [array((9,), _dtype, _low, _high)], dtype=_dtype))

# Mixed dtypes promote as PyTorch: uint8 with int8 is int16; a Python int keeps the dtype.
CASES.append(Case("add/uint8_int8", lambda a, b: a + b,
                  _elementwise(operator.add, "int16"),
                  [array((5,), "uint8", 0, 255), array((5,), "int8", -128, 127)], dtype="int16"))
CASES.append(Case("add/bool_uint8", lambda a, b: a + b,
                  _elementwise(operator.add, "uint8"),
                  [array((5,), "bool"), array((5,), "uint8", 0, 255)], dtype="uint8"))
CASES.append(Case("mul/int8_int32", lambda a, b: a * b,
                  _elementwise(operator.mul, "int32"),
                  [array((5,), "int8", -128, 127), array((5,), "int32", -1000, 1000)],
                  dtype="int32"))


# ----- shifts on every integer dtype --------------------------------------------------------


def _shift_left(bits: int):
    def fn(a: int, s: int) -> int:
        return 0 if s < 0 or s >= bits else a << s  # wrapped by _wrap

    return fn


def _shift_right(bits: int):
    def fn(a: int, s: int) -> int:
        return a >> bits if s < 0 else a >> s  # Python's >> is arithmetic: -1 or 0 past bits

    return fn


def _amounts(dtype: str, n: int) -> np.ndarray:
    """Shift amounts around the bit width, negative ones for signed dtypes."""
    bits = 8 * np.dtype(dtype).itemsize
    pool = [0, 1, 2, bits - 1, bits, bits + 1, 3] + ([-1, -bits] if dtype != "uint8" else [])
    return np.array([pool[k % len(pool)] for k in range(n)], dtype=dtype)


for _dtype in INTEGER_DTYPES:
    _bits = 8 * np.dtype(_dtype).itemsize
    _low, _high = _range(_dtype)
    if _dtype == "int64":
        _low, _high = -2**31, 2**31 - 1  # the harness' int32 probe skips wider on wgpu
    for _name, _op, _ref in (("bitwise_left_shift", operator.lshift, _shift_left(_bits)),
                             ("bitwise_right_shift", operator.rshift, _shift_right(_bits))):
        CASES.append(Case(f"{_name}/{_dtype}/tensors", _op, _elementwise(_ref, _dtype),
                          [array((2, 9), _dtype, _low, _high), _amounts(_dtype, 9)],
                          dtype=_dtype))
        CASES.append(Case(f"{_name}/{_dtype}/broadcast", _op, _elementwise(_ref, _dtype),
                          [array((4, 1), _dtype, _low, _high), _amounts(_dtype, 9)[None, :]],
                          dtype=_dtype))
        CASES.append(Case(f"{_name}/{_dtype}/empty", _op, _elementwise(_ref, _dtype),
                          [array((0, 3), _dtype, _low, _high), _amounts(_dtype, 3)],
                          dtype=_dtype))
        for _amount in (0, 3, _bits - 1, _bits, 100):
            CASES.append(Case(f"{_name}/{_dtype}/scalar_{_amount}",
                              lambda a, _op=_op, _amount=_amount: _op(a, _amount),
                              lambda a, _ref=_ref, _amount=_amount, _d=_dtype:
                              _elementwise(_ref, _d)(a, np.array(_amount)),
                              [array((3, 4), _dtype, _low, _high)], dtype=_dtype))
        CASES.append(Case(f"{_name}/{_dtype}/scalar_lhs",
                          lambda s, _op=_op: _op(5, s),
                          lambda s, _ref=_ref, _d=_dtype: _elementwise(_ref, _d)(np.array(5), s),
                          [_amounts(_dtype, 9)], dtype=_dtype))
CASES.append(Case("bitwise_left_shift/bool_by_int", lambda a: a << 1,
                  lambda a: a.astype(np.int64) << 1, [array((5,), "bool")], dtype="int64"))
CASES.append(Case("bitwise_left_shift/uint8_by_int8", operator.lshift,
                  _elementwise(_shift_left(16), "int16"),
                  [array((9,), "uint8", 0, 255), _amounts("int8", 9)], dtype="int16"))
CASES.append(Case("bitwise_right_shift/int16_by_int64", em.bitwise_right_shift,
                  _elementwise(_shift_right(64), "int64"),
                  [array((9,), "int16", -2**15, 2**15 - 1), _amounts("int64", 9)], dtype="int64"))
