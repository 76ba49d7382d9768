"""ember's own float32 exp, log, tanh, sigmoid (``kernels/numpy/float32_math.py``): within
1 ulp of the correctly rounded result (float64 NumPy rounded once), over special values,
overflow / underflow thresholds, denormals, dense grids and random values; the unfused
kernels and fused groups compute them alike (tests/fusion/test_compiled.py checks bits)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special

import ember as em
from ember.kernels.numpy import compiled, float32_math

pytestmark = pytest.mark.skipif(compiled.compiler().compiler is None,
                                reason="no C compiler: the kernels keep NumPy's functions")

_REFERENCE = {"exp": np.exp, "log": np.log, "tanh": np.tanh, "sigmoid": special.expit}
_TINY = np.finfo(np.float32).tiny
_SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1e-45, -1e-45, _TINY, -_TINY,
             _TINY / 2, 3.4028235e38, -3.4028235e38,
             # exp: overflow (88.72284), the smallest normal and denormal results, ln 2 · k
             88.72283, 88.72284, 88.7229, 89.0, -87.33654, -87.3366, -103.27893, -103.9721,
             -104.0, 0.6931472, -0.6931472, 44.36142, 1e-8, -1e-8,
             # tanh: where it rounds to ±1, and its small-x region
             9.0, 9.010913, 9.1, 10.0, -9.010913, 1e-4, 0.173, 0.55, 3e-38,
             # sigmoid: where it rounds to 1, to 0 and to denormals
             16.635532, 17.0, -87.0, -103.0, -104.0, -110.0]


def _ulps(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """How many float32 steps ``got`` is from ``exact`` (float64) rounded to float32."""
    with np.errstate(over="ignore"):
        rounded = exact.astype(np.float32)

    def ordered(a: np.ndarray) -> np.ndarray:
        bits = a.view(np.int32).astype(np.int64)
        return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)

    distance = np.abs(ordered(got) - ordered(rounded))
    nan_got, nan_exact = np.isnan(got), np.isnan(rounded)
    distance[nan_got & nan_exact] = 0
    distance[nan_got != nan_exact] = 1 << 40
    return distance


def _operands(op: str) -> np.ndarray:
    rng = np.random.default_rng(0)
    dense = np.linspace(-20, 20, 400_001, dtype=np.float32)
    # Every 97th float32 bit pattern: all exponents, signs, denormals and NaNs.
    patterns = np.arange(0, 1 << 32, 97 * 4096 + 1, dtype=np.uint64).astype(np.uint32)
    wide = (rng.standard_normal(200_000) * rng.choice([1e-6, 1e-2, 1.0, 30.0], 200_000))
    values = np.concatenate([np.array(_SPECIALS, np.float32), dense,
                             patterns.view(np.float32), wide.astype(np.float32)])
    if op == "log":
        values = np.concatenate([values, np.linspace(0.5, 2.0, 400_001, dtype=np.float32),
                                 np.abs(values)])
    return values


@pytest.mark.parametrize("op", ["exp", "log", "tanh", "sigmoid"])
def test_within_one_ulp_of_the_correctly_rounded_result(op):
    x = _operands(op)
    got = getattr(em.tensor(x), op)().numpy()
    with np.errstate(all="ignore"):
        exact = _REFERENCE[op](x.astype(np.float64))
    distance = _ulps(got, exact)
    worst = int(distance.argmax())
    assert distance.max() <= 1, f"{op}({x[worst]!r}) = {got[worst]!r}, exact {exact[worst]!r}"
    # Most results are the correctly rounded ones.
    assert (distance == 0).mean() > 0.999


@pytest.mark.parametrize("op", ["exp", "log", "tanh", "sigmoid"])
def test_special_values_are_exact(op):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0], np.float32)
    got = getattr(em.tensor(x), op)().numpy()
    expected = {"exp": [1, 1, np.inf, 0, np.nan, np.exp(-1.0)],
                "log": [-np.inf, -np.inf, np.inf, np.nan, np.nan, np.nan],
                "tanh": [0.0, -0.0, 1, -1, np.nan, np.tanh(-1.0)],
                "sigmoid": [0.5, 0.5, 1, 0, np.nan, special.expit(-1.0)]}[op]
    expected = np.array(expected, np.float32)  # -1: correctly rounded from float64
    np.testing.assert_array_equal(got, expected)
    numbers = ~np.isnan(expected)
    np.testing.assert_array_equal(np.signbit(got[numbers]), np.signbit(expected[numbers]))


@pytest.mark.parametrize("shape", [(0,), (1,), (3, 1, 5), (70_001,)])
def test_any_shape_and_a_strided_input(shape):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    for op in ("exp", "tanh", "sigmoid"):
        got = getattr(em.tensor(x), op)().numpy()
        assert got.shape == shape and got.dtype == np.float32
        np.testing.assert_allclose(got, _REFERENCE[op](x.astype(np.float64)), rtol=1.2e-7)
    matrix = np.random.default_rng(2).standard_normal((300, 200)).astype(np.float32)
    got = em.tensor(matrix).permute(1, 0).tanh().numpy()
    np.testing.assert_array_equal(got, em.tensor(np.ascontiguousarray(matrix.T)).tanh().numpy())


def test_silu_and_gelu_tanh_use_the_same_functions():
    x = np.random.default_rng(3).standard_normal(5000).astype(np.float32) * 4
    sigmoid = em.tensor(x).sigmoid().numpy()
    np.testing.assert_array_equal(em.tensor(x).silu().numpy(), x * sigmoid)
    t = x * x * np.float32(0.044715) + np.float32(1.0)
    t = t * x * np.float32(np.sqrt(2 / np.pi))
    expected = (em.tensor(t).tanh().numpy() + np.float32(1.0)) * x * np.float32(0.5)
    np.testing.assert_array_equal(em.tensor(x).gelu("tanh").numpy(), expected)


def test_float64_and_float16_keep_numpys_functions_or_round_float32s():
    x = np.linspace(-3, 3, 101)
    np.testing.assert_array_equal(em.tensor(x).exp().numpy(), np.exp(x))
    half = x.astype(np.float16)
    got = em.tensor(half).tanh().numpy()
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, em.tensor(half.astype(np.float32)).tanh().numpy()
                                  .astype(np.float16))


def test_fused_groups_compile_these_only_once_the_unfused_kernel_runs_them():
    assert {"exp", "tanh"} <= float32_math.READY or not float32_math.READY
    em.tensor(np.ones(4, np.float32)).sigmoid().numpy()
    assert "sigmoid" in float32_math.READY


def test_exp_loops_ask_for_wide_vectors_and_dividing_ones_do_not():
    """512-bit vectors (gcc on x86) speed exp's loops up and slow double divisions down
    over large arrays: exp's array function and row kernels ask for them, tanh's do not."""
    assert "prefer-vector-width=512" in float32_math.array_source("exp").code
    assert "prefer-vector-width" not in float32_math.array_source("tanh").code
    assert float32_math.vector_width(["exp", "sigmoid"]) == ""
    assert float32_math.vector_width(["mul", "add"]) == ""
