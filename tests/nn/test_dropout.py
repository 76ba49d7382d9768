"""Dropout: train vs eval, scaling, seeding, gradients."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.nn import F

torch = pytest.importorskip("torch")


def test_eval_and_p_zero_are_the_identity():
    x = em.randn(10, 10)
    m = nn.Dropout(0.5).eval()
    assert m(x) is x
    assert F.dropout(x, 0.0, training=True) is x
    assert F.dropout(x, 0.7, training=False) is x


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_training_zeros_about_p_and_scales_the_rest(p):
    em.manual_seed(0)
    x = np.random.default_rng(0).uniform(1.0, 2.0, (200, 200)).astype(np.float32)
    y = nn.Dropout(p)(em.tensor(x)).numpy()
    dropped = y == 0
    assert abs(dropped.mean() - p) < 0.01
    np.testing.assert_allclose(y[~dropped], x[~dropped] / (1 - p), rtol=1e-6)
    # the same statistics as torch's (its generator differs, so not the same mask)
    t = torch.nn.functional.dropout(torch.tensor(x), p).numpy()
    assert abs((t == 0).mean() - dropped.mean()) < 0.015


def test_manual_seed_reproduces_the_mask():
    x = em.ones(1000)
    em.manual_seed(42)
    a = F.dropout(x, 0.3).numpy()
    b = F.dropout(x, 0.3).numpy()
    em.manual_seed(42)
    c = F.dropout(x, 0.3).numpy()
    np.testing.assert_array_equal(a, c)
    assert not np.array_equal(a, b)


def test_p_one_gives_zeros_and_bad_p_raises():
    np.testing.assert_array_equal(F.dropout(em.ones(5), 1.0).numpy(), np.zeros(5))
    for p in (-0.1, 1.5):
        with pytest.raises(ValueError, match="between 0 and 1"):
            nn.Dropout(p)
        with pytest.raises(ValueError, match="between 0 and 1"):
            F.dropout(em.ones(2), p)


@pytest.mark.parametrize("dtype", [em.float64, em.float32, em.float16, em.bfloat16])
def test_dtype_is_kept(dtype):
    y = F.dropout(em.ones(50, dtype=dtype), 0.5)
    assert y.dtype is dtype
    assert set(np.unique(y.numpy().astype(np.float32))) <= {0.0, 2.0}


def test_gradient_is_the_mask_scaled():
    device = em.cpu().autodiff()
    x = em.tensor(np.linspace(1.0, 2.0, 400), device=device).require_grad()
    y = nn.Dropout(0.25)(x)
    g = x.grad(y.sum().backward()).numpy()
    kept = y.numpy() != 0
    np.testing.assert_allclose(g, kept / 0.75, rtol=1e-12)


def test_module_follows_train_and_eval_of_its_parent():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    x = em.ones(64, 4)
    model.eval()
    np.testing.assert_array_equal(model(x).numpy(), model[0](x).numpy())
    model.train()
    assert (model(x).numpy() == 0).any()
