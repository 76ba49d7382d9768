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


def test_inplace_names_rebind_a_param_with_torchs_statistics():
    d = em.cpu().autodiff()
    p = nn.Param(em.zeros((256, 128), device=d))
    pid = p.id
    fan_in, fan_out = 128, 256
    cases = [
        (lambda: nn.init.uniform_(p, -0.5, 1.5), 0.5, 2.0 / math.sqrt(12)),
        (lambda: nn.init.normal_(p, 1.0, 0.25), 1.0, 0.25),
        (lambda: nn.init.xavier_uniform_(p, gain=2.0), 0.0,
         2.0 * math.sqrt(6.0 / (fan_in + fan_out)) / math.sqrt(3)),
        (lambda: nn.init.xavier_normal_(p), 0.0, math.sqrt(2.0 / (fan_in + fan_out))),
        (lambda: nn.init.kaiming_uniform_(p, a=math.sqrt(5)), 0.0, 1 / math.sqrt(3 * fan_in)),
        (lambda: nn.init.kaiming_normal_(p, mode="fan_out", nonlinearity="relu"), 0.0,
         math.sqrt(2.0 / fan_out)),
    ]
    em.manual_seed(3)
    for init_fn, mean, std in cases:
        assert init_fn() is p and p.id == pid and p.value.is_tracked and p.device == d
        x = p.value.numpy()
        assert abs(x.mean() - mean) < 0.02 * max(std, 0.1)
        assert abs(x.std() - std) < 0.02 * std
    assert nn.init.constant_(p, 0.3) is p and np.all(p.value.numpy() == np.float32(0.3))
    assert np.all(nn.init.zeros_(p).value.numpy() == 0)
    assert np.all(nn.init.ones_(p).value.numpy() == 1)
    q = nn.Param(em.zeros((6, 10), dtype="float64"))
    w = nn.init.orthogonal_(q, gain=0.5).value.numpy()
    assert w.dtype == np.float64
    np.testing.assert_allclose(w @ w.T, 0.25 * np.eye(6), atol=1e-6)


def test_inplace_names_refuse_tensors_and_generators():
    with pytest.raises(TypeError, match="uniform_: expected a Param"):
        nn.init.uniform_(em.zeros(3, 3))
    with pytest.raises(ValueError, match="generator"):
        nn.init.normal_(nn.Param(em.zeros(3)), generator=object())
    with pytest.raises(ValueError, match="at least 2 dims"):
        nn.init.xavier_uniform_(nn.Param(em.zeros(3)))


def test_trunc_normal_matches_torchs_distribution():
    torch = pytest.importorskip("torch")
    em.manual_seed(4)
    for mean, std, a, b in [(0.0, 1.0, -2.0, 2.0), (1.0, 2.0, -1.0, 4.0), (0.0, 0.02, -0.04, 0.04),
                            (0.0, 1.0, 0.5, 3.0)]:
        p = nn.Param(em.zeros(100_000))
        x = nn.init.trunc_normal_(p, mean, std, a, b).value.numpy().astype(np.float64)
        t = torch.nn.init.trunc_normal_(torch.empty(400_000, dtype=torch.float64), mean, std, a, b)
        assert x.min() >= a and x.max() <= b
        assert abs(x.mean() - t.mean().item()) < 0.02 * std
        assert abs(x.std() - t.std().item()) < 0.02 * std
        for q in (0.1, 0.5, 0.9):  # the shape, not only two moments
            assert abs(np.quantile(x, q) - t.quantile(q).item()) < 0.03 * std
    y = nn.init.trunc_normal((1000,), dtype="float64")
    assert y.dtype == em.float64
    with pytest.raises(ValueError, match="a < b"):
        nn.init.trunc_normal((3,), a=1.0, b=1.0)


def test_erfinv_against_torch():
    torch = pytest.importorskip("torch")
    from ember.nn.init import _erfinv

    p = np.linspace(-0.9999, 0.9999, 2001)
    np.testing.assert_allclose(_erfinv(em.tensor(p)).numpy(), torch.erfinv(torch.tensor(p)),
                               rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(_erfinv(em.tensor(p.astype(np.float32))).numpy(),
                               torch.erfinv(torch.tensor(p)).numpy(), rtol=2e-3, atol=1e-5)


def test_conv_transpose_gains():
    torch = pytest.importorskip("torch")
    for name in ("conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "conv3d"):
        assert nn.init.calculate_gain(name) == torch.nn.init.calculate_gain(name)
    assert nn.init.calculate_gain("leaky_relu", 0.2) == pytest.approx(
        torch.nn.init.calculate_gain("leaky_relu", 0.2))
