"""``x ** n`` for the exponents kernels lower to products, square roots and quotients
(``kernels/fusion/powers.py``): values against PyTorch (which lowers the same way) on
special values and every float dtype, and gradients through the unchanged pow rule."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ember as em
from ember.kernels.fusion import powers

_SPECIALS = [0.0, -0.0, 1.0, -1.0, 0.25, -3.5, 2.0, 7.0, 1e-30, -1e-30, 1e-40, -1e-45,
             3e38, -3e38, 1e20, -1e20, np.inf, -np.inf, np.nan]
_EXPONENTS = sorted(powers.LOWERED)
# PyTorch lowers these exactly as ember does; for ±3 and ±4 it calls pow, and its float32
# sqrt (for 0.5) is 1 ulp off the correctly rounded one NumPy and C give in some cases.
_TORCH_LOWERS = {0.0, 1.0, 2.0, 3.0, -1.0, -2.0, -0.5}
_NP = {"float32": np.float32, "float64": np.float64, "float16": np.float16}


def _operand(dtype: str) -> np.ndarray:
    rng = np.random.default_rng(0)
    values = np.concatenate([np.array(_SPECIALS), rng.standard_normal(500) * 4,
                             rng.uniform(-1e-3, 1e-3, 100)])
    return values.astype(_NP[dtype])


def _assert_matches(got: np.ndarray, expected: np.ndarray, exact: bool) -> None:
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    finite = ~np.isnan(expected)
    if exact:
        # Bits, the sign of zero included (NaN's sign is not specified anywhere).
        np.testing.assert_array_equal(np.signbit(got[finite]), np.signbit(expected[finite]))
        np.testing.assert_array_equal(got[finite], expected[finite])
    else:
        np.testing.assert_allclose(got[finite], expected[finite], rtol=3e-7 if
                                   got.dtype == np.float32 else 1e-15, atol=0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", _EXPONENTS)
def test_lowered_powers_match_torch_on_special_values(dtype, n):
    x = _operand(dtype)
    with np.errstate(all="ignore"):
        got = (em.tensor(x) ** n).numpy()
    expected = (torch.from_numpy(x) ** n).numpy()
    _assert_matches(got, expected, exact=n in _TORCH_LOWERS)


@pytest.mark.parametrize("n", [2, 3, -1, 0.5, -0.5])
def test_float16_powers_round_the_float32_result_once(n):
    x = np.array([0.0, -0.0, 0.5, 3.0, -2.0, 300.0, np.inf, np.nan], np.float16)
    got = (em.tensor(x) ** n).numpy()
    with np.errstate(all="ignore"):
        wide = x.astype(np.float32)
        expected = {2: wide * wide, 3: wide * wide * wide, -1: 1 / wide, 0.5: np.sqrt(wide),
                    -0.5: 1 / np.sqrt(wide)}[n].astype(np.float16)
    _assert_matches(got, expected, exact=True)


def test_the_lowering_gives_torchs_signs_where_c_pow_differs():
    x = em.tensor(np.array([-0.0, -np.inf], np.float32))
    half = (x ** 0.5).numpy()
    assert np.signbit(half[0]) and np.isnan(half[1])  # sqrt's answers, as torch's
    assert (x ** 0).numpy().tolist() == [1.0, 1.0]
    assert (em.tensor(np.array([np.nan], np.float32)) ** 0).numpy().tolist() == [1.0]


def test_integer_tensors_keep_integer_powers_and_lower_float_ones():
    x = np.array([-3, -1, 0, 2, 5], np.int32)
    assert (em.tensor(x) ** 3).numpy().tolist() == (x ** 3).tolist()
    got = (em.tensor(x) ** 0.5).numpy()
    expected = (torch.from_numpy(x) ** 0.5).numpy()
    assert got.dtype == np.float32
    _assert_matches(got, expected, exact=True)


@pytest.mark.parametrize("case", ["scalar base", "tensor exponent", "other exponent"])
def test_other_powers_still_compute_pow(case):
    x_np = np.array([0.5, 1.5, 2.0, 3.0], np.float32)
    x = em.tensor(x_np)
    got = {"scalar base": lambda: 3.0 ** x, "tensor exponent": lambda: x ** em.tensor(x_np),
           "other exponent": lambda: x ** 2.5}[case]().numpy()
    expected = {"scalar base": np.float32(3.0) ** x_np, "tensor exponent": x_np ** x_np,
                "other exponent": x_np ** np.float32(2.5)}[case]
    np.testing.assert_allclose(got, expected, rtol=1e-6)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, -1, -2, 0.5, -0.5])
def test_gradients_of_lowered_powers_match_torch(n):
    values = [0.0, -2.0, -0.5, 0.5, 1.5, 3.0] if float(n).is_integer() else [0.25, 1.0, 4.0]
    x_np = np.array(values, np.float64)
    g_np = np.linspace(0.5, 1.5, len(values))
    x = em.tensor(x_np, device=em.cpu().autodiff()).require_grad()
    grads = ((x ** n) * em.tensor(g_np, device=x.device)).sum().backward()
    xt = torch.tensor(x_np, requires_grad=True)
    ((xt ** n) * torch.from_numpy(g_np)).sum().backward()
    got = grads.get(x).numpy()
    expected = xt.grad.numpy()
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0)
