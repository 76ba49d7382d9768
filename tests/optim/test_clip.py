"""Gradient clipping equals torch.nn.utils' clip_grad_norm_ / clip_grad_value_."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

import ember as em
from ember import optim

torch = pytest.importorskip("torch")

DEVICE = em.cpu(0).autodiff()
SHAPES = [(5, 3), (4,), (2, 3, 2)]


def problem(name: str, scale: float):
    r = np.random.default_rng(zlib.crc32(name.encode()))
    values = [r.standard_normal(s) for s in SHAPES]
    coefs = [r.standard_normal(s) * scale for s in SHAPES]
    leaves = [em.tensor(v, device=DEVICE).require_grad() for v in values]
    loss = sum(((p * em.tensor(c)) + 0.1 * p * p).sum() for p, c in zip(leaves, coefs))
    grads = loss.backward()
    torch_params = [torch.tensor(v, requires_grad=True) for v in values]
    tloss = sum(((p * torch.tensor(c)) + 0.1 * p * p).sum() for p, c in zip(torch_params, coefs))
    tloss.backward()
    return leaves, grads, torch_params


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf, 0.5])
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_grad_norm_matches_torch(max_norm, norm_type):
    leaves, grads, torch_params = problem(f"norm{norm_type}", 2.0)
    total = optim.clip_grad_norm(grads, max_norm, norm_type=norm_type)
    expected = torch.nn.utils.clip_grad_norm_(torch_params, max_norm, norm_type=norm_type)
    assert isinstance(total, em.Tensor) and total.shape == ()
    np.testing.assert_allclose(total.item(), expected.item(), rtol=1e-12)
    for leaf, p in zip(leaves, torch_params):
        np.testing.assert_allclose(leaf.grad(grads).numpy(), p.grad.numpy(), rtol=1e-12,
                                   atol=1e-15)


def test_clip_grad_norm_really_clips():
    leaves, grads, _ = problem("clips", 10.0)
    optim.clip_grad_norm(grads, 1.0)
    norm = math.sqrt(sum(float((g.numpy() ** 2).sum()) for g in grads.tensors()))
    assert math.isclose(norm, 1.0, rel_tol=1e-5)


@pytest.mark.parametrize("clip_value", [0.1, 1.0, 100.0])
def test_clip_grad_value_matches_torch(clip_value):
    leaves, grads, torch_params = problem("value", 2.0)
    assert optim.clip_grad_value(grads, clip_value) is None
    torch.nn.utils.clip_grad_value_(torch_params, clip_value)
    for leaf, p in zip(leaves, torch_params):
        np.testing.assert_array_equal(leaf.grad(grads).numpy(), p.grad.numpy())


def test_clip_then_step_uses_clipped_gradients():
    from ember import nn

    values = np.array([3.0, -4.0])
    param = nn.Param(em.tensor(values, device=DEVICE))
    grads = (param.value * param.value).sum().backward()  # grad = 2p = (6, -8), norm 10
    total = optim.clip_grad_norm(grads, 1.0)
    optim.SGD([param], lr=1.0).step(grads)
    assert math.isclose(total.item(), 10.0)
    np.testing.assert_allclose(param.value.numpy(), values - np.array([6.0, -8.0]) / (10 + 1e-6))


def test_float32_gradients_stay_float32():
    leaf = em.ones(3, device=DEVICE).require_grad()
    grads = (leaf * 2.0).sum().backward()
    total = optim.clip_grad_norm(grads, 1.0)
    assert total.dtype == em.float32 and leaf.grad(grads).dtype == em.float32
