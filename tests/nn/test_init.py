"""Initializers: PyTorch's formulas (bounds, standard deviations, orthogonality)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ember as em
from ember import nn


def test_fans_and_gains_match_torch():
    torch = pytest.importorskip("torch")
    for shape in [(8, 4), (16, 3, 5, 5), (6, 2, 7)]:
        assert nn.init.fan_in_and_out(shape) == torch.nn.init._calculate_fan_in_and_fan_out(
            torch.empty(shape))
    for name in ("linear", "relu", "tanh", "sigmoid", "leaky_relu", "selu"):
        assert nn.init.calculate_gain(name) == pytest.approx(torch.nn.init.calculate_gain(name))


def test_uniform_families_respect_their_bounds():
    em.manual_seed(0)
    shape = (256, 128)
    fan_in, fan_out = 128, 256
    cases = {
        "kaiming_uniform": math.sqrt(2.0) * math.sqrt(3.0 / fan_in),  # leaky_relu gain, a=0
        "xavier_uniform": math.sqrt(6.0 / (fan_in + fan_out)),
    }
    for name, bound in cases.items():
        x = getattr(nn.init, name)(shape).numpy()
        assert np.abs(x).max() <= bound * (1 + 1e-6)  # float32 rounding of a + (b - a) u
        assert np.abs(x).max() > 0.95 * bound  # fills the interval
        assert abs(x.std() - bound / math.sqrt(3)) < 0.03 * bound


def test_normal_families_have_their_std():
    em.manual_seed(1)
    shape = (512, 256)
    x = nn.init.kaiming_normal(shape, nonlinearity="relu").numpy()
    assert abs(x.std() - math.sqrt(2.0 / 256)) < 0.02 * math.sqrt(2.0 / 256)
    y = nn.init.xavier_normal(shape, gain=2.0).numpy()
    assert abs(y.std() - 2.0 * math.sqrt(2.0 / 768)) < 0.02 * 2.0 * math.sqrt(2.0 / 768)
    z = nn.init.normal(shape, 3.0, 0.5).numpy()
    assert abs(z.mean() - 3.0) < 0.01 and abs(z.std() - 0.5) < 0.01


def test_orthogonal_rows_or_columns():
    for shape in [(6, 10), (10, 6), (4, 2, 3)]:
        q = nn.init.orthogonal(shape, gain=1.5).numpy().reshape(shape[0], -1).astype(np.float64)
        small = q @ q.T if shape[0] <= q.shape[1] else q.T @ q
        np.testing.assert_allclose(small, 1.5 ** 2 * np.eye(small.shape[0]), atol=1e-5)


def test_initializers_fill_params_in_place_and_keep_tracking():
    d = em.cpu().autodiff()
    p = nn.Param(em.zeros((3, 4), device=d))
    pid = p.id
    assert nn.init.constant(p, 2.5) is p and p.id == pid
    np.testing.assert_array_equal(p.value.numpy(), np.full((3, 4), 2.5))
    assert p.value.is_tracked and p.device == d
    nn.init.ones(p)
    assert p.value.numpy().sum() == 12


def test_linear_default_init_matches_torch_bounds():
    layer = nn.Linear(50, 20)
    bound = 1 / math.sqrt(50)
    assert np.abs(layer.weight.value.numpy()).max() <= bound
    assert np.abs(layer.bias.value.numpy()).max() <= bound


def test_same_seed_same_initialization():
    em.manual_seed(9)
    a = nn.Linear(5, 5).state_dict()
    em.manual_seed(9)
    b = nn.Linear(5, 5).state_dict()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
