"""max and min on the CPU order -0 below +0 (the rule the compiled row kernels follow,
``kernels/numpy/crows.py``), whichever position a tie of zeros is in, over any dims."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em

_MAX_ROWS = np.array([[-0.0, 0.0, -1.0], [0.0, -0.0, -2.0], [-0.0, -3.0, -0.0],
                      [-1.0, 0.0, 0.0]])


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("op", ["max", "min"])
def test_a_zero_extreme_is_signed_as_if_minus_zero_were_smaller(dtype, op):
    rows = _MAX_ROWS if op == "max" else -_MAX_ROWS
    x = em.tensor(rows.astype(dtype))
    got = getattr(x, op)(dim=1).numpy()
    # max: +0 wherever the row holds a +0; min: -0 wherever it holds a -0.
    want_sign = [False, False, True, False] if op == "max" else [True, True, False, True]
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, np.zeros(4))
    np.testing.assert_array_equal(np.signbit(got), want_sign)
    whole = getattr(x, op)().numpy()
    assert whole == 0 and np.signbit(whole) == (op == "min")
    columns = getattr(em.tensor(np.ascontiguousarray(rows.T.astype(dtype))), op)(
        dim=0, keepdim=True).numpy()
    assert columns.shape == (1, 4)
    np.testing.assert_array_equal(np.signbit(columns[0]), want_sign)


@pytest.mark.parametrize("op", ["max", "min"])
def test_extremes_without_zeros_or_with_nan_are_numpys(op):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 6, 7)).astype(np.float32)
    x[1, 2, 3] = np.nan
    got = getattr(em.tensor(x), op)(dim=(0, 2)).numpy()
    want = getattr(np, op)(x, axis=(0, 2))
    np.testing.assert_array_equal(got, want)
    assert np.isnan(got[2]) and not np.isnan(np.delete(got, 2)).any()
