"""Gradients across devices: a move with ``.to(device)`` sends the gradient back.

``cpu:0`` and ``cpu:1`` are independent device actors, so these tests cover
what a move between two GPUs does, without a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember as em


@pytest.fixture(params=[None, "balanced"], ids=["plain", "balanced"])
def checkpointing(request) -> str | None:
    return request.param


def test_gradient_of_a_moved_leaf_arrives_on_its_device(checkpointing) -> None:
    src, dst = em.cpu(0).autodiff(checkpointing), em.cpu(1).autodiff(checkpointing)
    values = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])
    x = em.tensor(values, device=src).require_grad()
    y = x.to(dst)
    assert y.is_tracked and y.device is dst
    loss = (y.exp() * y + y.sin()).sum()
    assert loss.device is dst
    grads = loss.backward()
    g = x.grad(grads)
    assert g.device == em.cpu(0) and g.shape == x.shape and g.dtype is em.float64
    np.testing.assert_allclose(g.numpy(), np.exp(values) * (values + 1) + np.cos(values),
                               rtol=1e-12)


def test_there_and_back_accumulates_with_the_local_path(checkpointing) -> None:
    src, dst = em.cpu(0).autodiff(checkpointing), em.cpu(1).autodiff(checkpointing)
    values = np.array([0.3, -0.6, 1.2, 2.0])
    x = em.tensor(values, device=src).require_grad()
    w = em.tensor(np.array([2.0, 1.0, -1.0, 0.5]), device=dst).require_grad()
    remote = (x.to(dst) * w).tanh()          # computed on cpu:1
    loss = (remote.to(src) * x + x).sum()    # back on cpu:0, x used three times
    grads = loss.backward()
    t = np.tanh(values * w.numpy())
    gx, gw = x.grad(grads), w.grad(grads)
    assert gx.device == em.cpu(0) and gw.device == em.cpu(1)
    np.testing.assert_allclose(gx.numpy(), t + values * (1 - t * t) * w.numpy() + 1, rtol=1e-12)
    np.testing.assert_allclose(gw.numpy(), values * (1 - t * t) * values, rtol=1e-12)


def test_torch_agrees(checkpointing) -> None:
    torch = pytest.importorskip("torch")
    src, dst = em.cpu(0).autodiff(checkpointing), em.cpu(1).autodiff(checkpointing)
    values = np.array([0.5, -1.5, 2.5])
    x = em.tensor(values, device=src).require_grad()
    grads = (x.to(dst).float().sigmoid() * 3).sum().backward()
    t = torch.tensor(values, requires_grad=True)
    (t.float().sigmoid() * 3).sum().backward()
    np.testing.assert_allclose(x.grad(grads).numpy(), t.grad.numpy(), rtol=1e-6)


def test_a_move_to_an_untracked_device_is_a_constant() -> None:
    x = em.tensor([1.0, 2.0], device=em.cpu(0).autodiff()).require_grad()
    assert not x.to(em.cpu(1)).is_tracked
    assert not x.to("cpu:1").is_tracked
    assert not x.detach().to(em.cpu(1).autodiff()).is_tracked
