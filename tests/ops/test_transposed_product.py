"""Matmuls that read an operand transposed (backward passes' products: one op, not a
``transpose`` and a ``matmul``), on every device, against NumPy; and their own gradients,
against finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import precision
from ember.errors import ShapeError
from ember.ops.linalg import _transposed_product
from tests.ops.cases_linalg import array

# (stored lhs shape, stored rhs shape, transpose lhs, transpose rhs)
CASES = [
    ((4, 3), (4, 5), True, False),          # aᵀ @ b: a weight's gradient
    ((3, 4), (5, 4), False, True),          # a @ bᵀ: an input's gradient
    ((4, 3), (5, 4), True, True),
    ((2, 6, 3, 4), (2, 6, 5, 4), False, True),   # batched, as q @ kᵀ
    ((2, 6, 4, 3), (2, 6, 4, 5), True, False),
    ((2, 1, 4, 3), (5, 4, 2), True, False),      # broadcast batch dims
    ((3, 4), (2, 5, 4), False, True),
    ((0, 3), (0, 4), True, False),               # empty inner dim: zeros
    ((4, 0), (5, 4), True, True),                # empty rows
    ((1, 1), (1, 1), True, True),
]


def _reference(a: np.ndarray, b: np.ndarray, ta: bool, tb: bool) -> np.ndarray:
    wide = np.float64 if a.dtype.kind == "f" else np.int64
    lhs = np.swapaxes(a, -1, -2) if ta else a
    rhs = np.swapaxes(b, -1, -2) if tb else b
    return np.matmul(lhs.astype(wide), rhs.astype(wide))


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32"])
@pytest.mark.parametrize("a_shape,b_shape,ta,tb", CASES)
def test_products_of_transposed_reads_match_numpy(device, a_shape, b_shape, ta, tb, dtype):
    a_np, b_np = array(a_shape, dtype), array(b_shape, dtype)
    a, b = em.tensor(a_np, device=device), em.tensor(b_np, device=device)
    out = _transposed_product(a, b, ta, tb)
    expected = _reference(a_np, b_np, ta, tb)
    assert out.shape == expected.shape and out.dtype.name == dtype
    got = out.numpy()
    if dtype == "int32":
        np.testing.assert_array_equal(got, expected.astype(np.int32))
    else:
        tolerance = {"float32": 1e-5, "float64": 1e-12, "float16": 2e-3}[dtype]
        scale = np.abs(expected).max(initial=1.0)
        np.testing.assert_allclose(got.astype(np.float64), expected,
                                   atol=tolerance * scale * max(a_np.shape[-1], 1),
                                   rtol=tolerance)


def test_a_transposed_read_equals_transpose_then_matmul_bit_for_bit(device):
    a_np, b_np = array((2, 3, 7, 5), "float32"), array((2, 3, 9, 5), "float32")
    a, b = em.tensor(a_np, device=device), em.tensor(b_np, device=device)
    fused = _transposed_product(a, b, False, True).numpy()
    plain = (a @ b.transpose(-2, -1)).numpy()
    np.testing.assert_array_equal(fused, plain)


def test_inner_dims_that_differ_as_read_raise_naming_both_layouts():
    a, b = em.ones((3, 4)), em.ones((3, 5))
    with pytest.raises(ShapeError, match=r"lhs \(3, 4\) vs rhs \(5, 3\)"):
        _transposed_product(a, b, False, True)


def test_attrs_carry_the_flags_and_the_precision():
    before = precision.get_float32_matmul_precision()
    try:
        for name in precision.PRECISIONS:
            precision.set_float32_matmul_precision(name)
            attrs = precision.matmul_attrs(True, True, False)
            assert attrs == (name, True, False)
            assert precision.read_matmul_attrs(attrs) == (name, True, False)
            assert precision.read_matmul_attrs(precision.matmul_attrs()) == (name, False, False)
    finally:
        precision.set_float32_matmul_precision(before)
    assert precision.read_matmul_attrs(()) == ("highest", False, False)
    assert precision.matmul_attrs(False, False, True) == ("highest", False, True)  # float16


@pytest.mark.parametrize("ta,tb", [(True, False), (False, True), (True, True)])
def test_gradients_of_a_recorded_transposed_read_match_finite_differences(ta, tb):
    rng = np.random.default_rng(3)
    # Read as (2, 3, 4) @ (2, 4, 5); stored transposed where flagged.
    a_np, b_np = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 5))
    if ta:
        a_np = np.swapaxes(a_np, -1, -2).copy()
    if tb:
        b_np = np.swapaxes(b_np, -1, -2).copy()
    device = em.cpu().autodiff()
    a = em.tensor(a_np, device=device).require_grad()
    b = em.tensor(b_np, device=device).require_grad()
    weights = rng.standard_normal((2, 3, 5))

    def loss(x_np: np.ndarray, y_np: np.ndarray) -> float:
        return float((_reference(x_np, y_np, ta, tb) * weights).sum())

    out = _transposed_product(a, b, ta, tb)
    grads = (out * em.tensor(weights, device=device)).sum().backward()
    for tensor, value, which in ((a, a_np, 0), (b, b_np, 1)):
        numeric = np.zeros_like(value)
        for index in np.ndindex(value.shape):
            step = np.zeros_like(value)
            step[index] = 1e-6
            args = [a_np, b_np]
            args[which] = value + step
            up = loss(*args)
            args[which] = value - step
            numeric[index] = (up - loss(*args)) / 2e-6
        np.testing.assert_allclose(tensor.grad(grads).numpy(), numeric, rtol=1e-6, atol=1e-7)
