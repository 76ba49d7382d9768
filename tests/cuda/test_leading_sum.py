"""float32 sums and means over leading dims run as one cuBLAS product with ones on CUDA:
the values of NumPy's, for every shape class, keepdim, and layouts that keep CuPy's."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from tests.cuda.gpu import needs_gpu

pytestmark = needs_gpu


@pytest.mark.parametrize("op", ["sum", "mean"])
@pytest.mark.parametrize("shape, dims", [((2048, 768), (0,)), ((8, 256, 3072), (0, 1)),
                                          ((1, 5), (0,)), ((7, 1), (0,)), ((3, 4, 5), (0,)),
                                          ((0, 4), (0,)), ((6, 4), (1,)), ((6, 4), (0, 1))])
@pytest.mark.parametrize("keepdim", [False, True])
def test_cuda_leading_sums_match_numpy(op, shape, dims, keepdim):
    rng = np.random.default_rng(len(shape) * 7 + sum(dims))
    x_np = rng.standard_normal(shape).astype(np.float32)
    x = em.from_numpy(x_np, device=em.cuda(0))
    got = getattr(x, op)(dims, keepdim=keepdim).numpy()
    want = getattr(x_np.astype(np.float64), op)(axis=dims, keepdims=keepdim)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.sqrt(max(x_np.size, 1)))


def test_cuda_leading_sum_of_a_transposed_view_and_specials():
    x_np = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = em.from_numpy(x_np, device=em.cuda(0))
    np.testing.assert_array_equal(x.permute(1, 0).sum(0).numpy(), x_np.T.sum(0))
    y_np = np.array([[1.0, np.inf, np.nan], [2.0, -np.inf, 0.0]], np.float32)
    y = em.from_numpy(y_np, device=em.cuda(0))
    np.testing.assert_array_equal(y.sum(0).numpy(), [3.0, np.nan, np.nan])
