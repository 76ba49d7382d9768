"""nn.Linear / F.linear against torch.nn.Linear: values and gradients for inputs of every
rank (the weight is read transposed inside the product), checkpointing, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.nn import F
from tests.nn.layer_check import assert_same_layout, check_pair, randn

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("shape", [(5,), (3, 5), (2, 3, 5), (2, 2, 3, 5), (0, 5), (1, 5)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("checkpointing", [None, "balanced"])
def test_linear_matches_torch(shape, bias, checkpointing):
    tm = torch.nn.Linear(5, 4, bias=bias)
    em_ = check_pair(tm, lambda d, dt: nn.Linear(5, 4, bias=bias, device=d, dtype=dt),
                     [randn(*shape)], checkpointing=checkpointing)
    assert_same_layout(tm, em_)


def test_linear_float32_forward_equals_x_times_weight_transposed():
    rng = np.random.default_rng(4)
    x_np = rng.standard_normal((3, 7, 6)).astype(np.float32)
    w_np = rng.standard_normal((5, 6)).astype(np.float32)
    got = F.linear(em.tensor(x_np), em.tensor(w_np)).numpy()
    np.testing.assert_array_equal(got, (em.tensor(x_np) @ em.tensor(w_np).T).numpy())
    np.testing.assert_allclose(got, x_np @ w_np.T, rtol=1e-5, atol=1e-5)


def test_linear_refuses_bad_input_naming_the_shapes():
    w = em.ones((4, 5))
    with pytest.raises(em.ShapeError, match=r"last dim is 3, the weight's in features 5"):
        F.linear(em.ones((2, 3)), w)
    with pytest.raises(em.ShapeError, match=r"2-D weight"):
        F.linear(em.ones((2, 5)), em.ones(5))
    with pytest.raises(em.ShapeError, match=r"2-D weight"):
        F.linear(em.ones(()), w)
    with pytest.raises(em.DTypeError, match="bool"):
        F.linear(em.ones((2, 5), dtype=em.bool), w)
    with pytest.raises(em.DTypeError, match="expected tensors"):
        F.linear(np.ones((2, 5)), w)
