"""The CPU backend's vectorized float32 erf against SciPy's correctly rounded one."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special

from ember.kernels.numpy.fast_erf import erf


def _ulps(got: np.ndarray, x: np.ndarray) -> np.ndarray:
    exact = special.erf(x.astype(np.float64))
    spacing = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - exact) / spacing


def test_float32_within_7_ulp_on_a_dense_grid() -> None:
    x = np.linspace(-6, 6, 2_000_001, dtype=np.float32)
    x = np.concatenate([x, x * np.float32(1e-4), x * np.float32(1e-38)])
    got = erf(x, np.empty_like(x))
    assert got.dtype == np.float32
    assert _ulps(got, x).max() <= 7
    assert np.abs(got).max() <= 1.0


def test_special_values_match_scipy() -> None:
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, 4.0, 1e30], np.float32)
    got = erf(x, np.empty_like(x))
    np.testing.assert_array_equal(got, special.erf(x))
    assert np.signbit(got[4])  # erf(-0) is -0


@pytest.mark.parametrize("shape", [(0,), (1,), (3, 5), (70_001,), (2, 3, 40_000)])
def test_shapes_in_place_and_strided_output(shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32) * 3
    want = erf(x, np.empty_like(x))
    assert _ulps(want, x).max(initial=0) <= 7
    in_place = x.copy()
    erf(in_place, in_place)
    np.testing.assert_array_equal(in_place, want)
    wide = np.zeros((*shape[:-1], 2 * shape[-1]), np.float32)
    erf(x, wide[..., ::2])
    np.testing.assert_array_equal(wide[..., ::2], want)
    np.testing.assert_array_equal(erf(x.T, np.empty_like(x.T)), want.T)


def test_float64_is_scipy_exactly() -> None:
    x = np.linspace(-5, 5, 10_001)
    np.testing.assert_array_equal(erf(x, np.empty_like(x)), special.erf(x))
