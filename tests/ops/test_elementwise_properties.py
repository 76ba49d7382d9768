"""Property tests: random arrays of shapes that broadcast; ember equals NumPy (and the
algebraic laws PyTorch's integer division and remainder keep)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ember as em

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

FLOAT_BINARY = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "div": (lambda a, b: a / b, np.true_divide),
    "maximum": (lambda a, b: a.maximum(b), np.maximum),
    "minimum": (lambda a, b: a.minimum(b), np.minimum),
    "lt": (lambda a, b: a < b, np.less),
    "eq": (lambda a, b: a == b, np.equal),
    "ge": (lambda a, b: a >= b, np.greater_equal),
}


def _floats(dtype):
    """Mostly moderate values, some of any size, NaN and ±inf included."""
    width = np.dtype(dtype).itemsize * 8
    return st.one_of(st.floats(-1e3, 1e3, width=width), st.floats(width=width))


@st.composite
def broadcasting_pair(draw, dtype):
    """Two arrays whose shapes broadcast (sizes 0 and 1 included, up to 4 dims)."""
    shapes, _ = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4,
                                                       min_side=0, max_side=4))
    a = draw(hnp.arrays(dtype, shapes[0], elements=_floats(dtype)))
    b = draw(hnp.arrays(dtype, shapes[1], elements=_floats(dtype)))
    return a, b


@pytest.mark.parametrize("op", list(FLOAT_BINARY))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_binary_ops_equal_numpy(op, dtype) -> None:
    ember_fn, numpy_fn = FLOAT_BINARY[op]

    @SETTINGS
    @given(broadcasting_pair(dtype))
    def check(pair):
        a, b = pair
        got = ember_fn(em.tensor(a), em.tensor(b))
        with np.errstate(all="ignore"):
            want = np.asarray(numpy_fn(a, b))
        assert got.shape == want.shape
        assert got.dtype.np == want.dtype
        np.testing.assert_array_equal(got.numpy(), want)

    check()


@SETTINGS
@given(broadcasting_pair(np.float32), st.floats(-100, 100, width=32))
def test_scalar_operand_equals_numpy(pair, scalar) -> None:
    a, _ = pair
    x = em.tensor(a)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal((x * scalar).numpy(), a * np.float32(scalar))
        np.testing.assert_array_equal((scalar - x).numpy(), np.float32(scalar) - a)
        np.testing.assert_array_equal((x > scalar).numpy(), a > np.float32(scalar))


int_arrays = hnp.arrays(np.int64, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5),
                        elements=st.integers(-10**6, 10**6))


@SETTINGS
@given(int_arrays, st.integers(-1000, 1000).filter(lambda d: d != 0), st.sampled_from(["int32", "int64"]))
def test_integer_floordiv_and_remainder_laws(a, divisor, dtype) -> None:
    """a == (a // d) * d + a % d, and a % d is 0 or has d's sign, smaller than |d|."""
    x = em.tensor(a, dtype=dtype)
    quotient, remainder = (x // divisor).numpy(), (x % divisor).numpy()
    assert quotient.dtype == remainder.dtype == np.dtype(dtype)
    a = a.astype(dtype).astype(np.int64)
    np.testing.assert_array_equal(quotient * divisor + remainder, a)
    assert np.all((remainder == 0) | (np.sign(remainder) == np.sign(divisor)))
    assert np.all(np.abs(remainder) < abs(divisor))
    np.testing.assert_array_equal(quotient, a // divisor)  # Python's floor semantics


@SETTINGS
@given(broadcasting_pair(np.float64))
def test_float_floordiv_and_remainder_equal_numpy(pair) -> None:
    a, b = pair
    x, y = em.tensor(a), em.tensor(b)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal((x // y).numpy(), np.floor_divide(a, b))
        np.testing.assert_array_equal((x % y).numpy(), np.remainder(a, b))


UNARY = {
    "exp": (lambda x: x.exp(), np.exp), "log": (lambda x: x.log(), np.log),
    "sqrt": (lambda x: x.sqrt(), np.sqrt), "tanh": (lambda x: x.tanh(), np.tanh),
    "abs": (lambda x: abs(x), np.abs), "neg": (lambda x: -x, np.negative),
    "floor": (lambda x: x.floor(), np.floor), "round": (lambda x: x.round(), np.round),
    "isnan": (lambda x: x.isnan(), np.isnan), "isinf": (lambda x: x.isinf(), np.isinf),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_float64_equals_numpy(name) -> None:
    ember_fn, numpy_fn = UNARY[name]

    @SETTINGS
    @given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0),
                      elements=_floats(np.float64)))
    def check(a):
        with np.errstate(all="ignore"):
            want = numpy_fn(a)
        np.testing.assert_array_equal(ember_fn(em.tensor(a)).numpy(), want)

    check()


@SETTINGS
@given(broadcasting_pair(np.float32), st.data())
def test_where_equals_numpy(pair, data) -> None:
    a, b = pair
    shape = np.broadcast_shapes(a.shape, b.shape)
    cond = data.draw(hnp.arrays(np.bool_, shape))
    np.testing.assert_array_equal(em.where(em.tensor(cond), em.tensor(a), em.tensor(b)).numpy(),
                                  np.where(cond, a, b))


@SETTINGS
@given(broadcasting_pair(np.float32), st.floats(-10, 10, width=32), st.floats(-10, 10, width=32))
def test_clamp_equals_minimum_of_maximum(pair, low, high) -> None:
    a, _ = pair
    got = em.tensor(a).clamp(low, high).numpy()
    np.testing.assert_array_equal(got, np.minimum(np.maximum(a, np.float32(low)), np.float32(high)))


@SETTINGS
@given(hnp.arrays(np.int32, hnp.array_shapes(min_dims=0, max_dims=2, min_side=0),
                  elements=st.integers(-2**31, 2**31 - 1)))
def test_int32_to_float64_and_back_is_exact(a) -> None:
    x = em.tensor(a)
    np.testing.assert_array_equal(x.astype(em.float64).astype(em.int32).numpy(), a)
    np.testing.assert_array_equal(x.astype(em.bool).numpy(), a != 0)
