"""The autodiff engine: tracking, the backward walk, accumulation, errors, memory, checkpointing."""

from __future__ import annotations

import gc
import itertools

import numpy as np
import pytest

import ember as em
from ember.autodiff import engine
from ember.autodiff.graph import Node
from ember.ops import _core

_fresh = itertools.count(40)


def fresh_device(checkpointing=None) -> em.Device:
    """A device no other test has used, so its byte counters start at zero."""
    return em.cpu(next(_fresh)).autodiff(checkpointing)


@pytest.fixture(params=[None, "balanced"], ids=["plain", "balanced"])
def device(request) -> em.Device:
    return em.cpu(0).autodiff(request.param)


def test_tracking_follows_require_grad(device):
    x = em.tensor([1.0, 2.0], device=device)
    assert not x.is_tracked
    assert x.require_grad() is x and x.is_tracked
    c = em.tensor([3.0, 4.0], device=device)
    y = x * c
    assert y.is_tracked and not c.is_tracked
    assert not (c * 2.0).is_tracked
    assert not (x > 1.0).is_tracked  # bool results carry no gradient
    assert not x.detach().is_tracked


def test_require_grad_errors():
    with pytest.raises(em.EmberError, match="autodiff"):
        em.ones(2).require_grad()
    d = em.cpu().autodiff()
    x = em.ones(2, device=d).require_grad()
    with pytest.raises(em.EmberError, match="only leaves"):
        (x * 2.0).require_grad()
    with pytest.raises(em.EmberError, match="floating"):
        em.ones(2, dtype=em.int64, device=d).require_grad()


def test_backward_needs_a_scalar_or_a_seed(device):
    x = em.ones((2, 3), device=device).require_grad()
    y = x * 2.0
    with pytest.raises(em.ShapeError, match=r"\(2, 3\).*sum\(\)"):
        y.backward()
    with pytest.raises(em.ShapeError, match="does not match"):
        y.backward(em.ones(3, device=device))
    grads = y.backward(em.full((2, 3), 0.5, device=device))
    np.testing.assert_array_equal(x.grad(grads).numpy(), np.ones((2, 3)))
    with pytest.raises(em.EmberError, match="not tracked"):
        em.ones(2, device=device).backward(em.ones(2, device=device))


def test_gradients_accumulate_over_uses(device):
    x = em.tensor([1.0, -2.0, 3.0], device=device).require_grad()
    y = (x * x + x * 3.0 + x).sum()
    g = x.grad(y.backward())
    np.testing.assert_allclose(g.numpy(), 2 * np.array([1.0, -2.0, 3.0]) + 4.0)
    assert g.device == em.cpu(0) and not g.device.is_autodiff


@pytest.mark.parametrize("on_actor", [True, False])
def test_leaf_gradients_live_on_the_inner_device_moved_or_aliased(device, on_actor, monkeypatch):
    """Walked on the caller's thread, a leaf's gradient that nothing else holds moves to
    the inner device without an op; one shared with another leaf (an add hands both the
    same tensor) gets its own handle on the same buffer. Walked by the autodiff actor,
    every leaf's gradient is a handle promised before the walk: one alias (a view, no
    copy) each. Either way untracked, and holding the right values."""
    monkeypatch.setattr(engine, "ACTORS", on_actor)
    a = em.tensor([1.0, 2.0], device=device).require_grad()
    b = em.tensor([3.0, 4.0], device=device).require_grad()
    w = em.tensor([[1.0, 2.0], [3.0, 4.0]], device=device).require_grad()
    with em.trace() as tr:
        grads = ((a + b) * 3.0).sum().backward()
        ga, gb = a.grad(grads), b.grad(grads)
        gw = w.grad((a @ w).sum().backward())
        for g in (ga, gb, gw):
            g.numpy()
    assert ga is not gb
    for g in (ga, gb):
        assert g.device == em.cpu(0) and not g.device.is_autodiff and not g.is_tracked
        np.testing.assert_array_equal(g.numpy(), [3.0, 3.0])
    assert gw.device == em.cpu(0) and not gw.is_tracked
    np.testing.assert_array_equal(gw.numpy(), [[1.0, 1.0], [2.0, 2.0]])
    # Inline, one alias: for the first of a and b (the add's gradient, shared); b's and
    # w's moved. On the actor: the four promised gradients.
    walked_by_actor = on_actor and not _core.EAGER  # EMBER_EAGER=1 walks on the caller
    assert sum(e.name.split("+").count("alias") for e in tr.events) == (4 if walked_by_actor
                                                                       else 1)


def test_untracked_tensor_gets_none(device):
    x = em.ones(3, device=device).require_grad()
    c = em.ones(3, device=device)
    grads = (x * c).sum().backward()
    assert c.grad(grads) is None
    assert x.grad(grads) is not None and x in grads and c not in grads


def test_broadcast_gradients_are_summed(device):
    x = em.ones((4, 1, 3), device=device).require_grad()
    b = em.ones((3,), device=device).require_grad()
    grads = (x * b + b).sum().backward()
    assert x.grad(grads).shape == (4, 1, 3) and b.grad(grads).shape == (3,)
    np.testing.assert_array_equal(b.grad(grads).numpy(), np.full(3, 8.0))


def test_second_backward_through_a_consumed_graph_raises(device):
    x = em.ones(3, device=device).require_grad()
    y = (x * 2.0).sum()
    y.backward()
    with pytest.raises(em.EmberError, match="already consumed"):
        y.backward()


def test_mixing_inner_and_autodiff_tensors():
    d = em.cpu().autodiff()
    x = em.ones(3, device=d).require_grad()
    data = em.full((3,), 2.0)  # on the inner device: a constant
    y = (x * data).sum()
    assert y.device == d and y.is_tracked
    np.testing.assert_array_equal(x.grad(y.backward()).numpy(), np.full(3, 2.0))


def _live_nodes() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is Node)


def test_graph_memory_returns_to_baseline_over_steps(device):
    w = em.randn((16, 16), device=device).require_grad()
    x = em.randn((8, 16), device=device)
    em.sync()
    for step in range(60):
        h = ((x @ w).tanh() * 0.5 + x).sum(dim=1)
        loss = (h * h).mean()
        grads = loss.backward()
        w_grad = w.grad(grads).numpy()
        assert np.isfinite(w_grad).all()
        del h, loss, grads
        if step == 9:
            em.sync()
            baseline_nodes = _live_nodes()
            baseline_bytes = em.stats(device).bytes_held
    em.sync()
    assert _live_nodes() <= baseline_nodes
    assert em.stats(device).bytes_held <= baseline_bytes


def _elementwise_chain(device, length: int, size: int) -> tuple[em.Tensor, em.Tensor]:
    x = em.randn((size,), device=device).require_grad()
    y = x
    for i in range(length):
        y = (y * 0.9).tanh() + 0.01 * i
    return x, y.sum()


def test_checkpointing_gives_identical_gradients():
    results = []
    for mode in (None, "balanced"):
        em.manual_seed(5)
        device = fresh_device(mode)
        x, loss = _elementwise_chain(device, 12, 1000)
        results.append(x.grad(loss.backward()).numpy())
    np.testing.assert_array_equal(results[0], results[1])


def test_checkpointing_holds_fewer_bytes_after_forward():
    held = {}
    for mode in (None, "balanced"):
        em.manual_seed(6)
        device = fresh_device(mode)
        x, loss = _elementwise_chain(device, 30, 1 << 16)
        em.sync(device)
        held[mode] = em.stats(device).bytes_held
        x.grad(loss.backward()).numpy()
    # Plain keeps every tanh output (and mul inputs) for backward; balanced only the leaf.
    assert held["balanced"] * 5 < held[None], held


def test_checkpointing_lowers_peak_bytes_over_a_step():
    peaks = {}
    for mode in (None, "balanced"):
        em.manual_seed(7)
        device = fresh_device(mode)
        h = em.randn((64, 256), device=device).require_grad()
        weights = [em.randn((256, 256), device=device) * 0.05 for _ in range(6)]
        out = h
        for w in weights:  # matmul (kept) then a run of elementwise ops (recomputed)
            out = out @ w
            for _ in range(6):
                out = (out * 1.1).tanh() + out * 0.1
        loss = out.sum()
        em.sync(device)  # the forward ran: what the graph keeps is held now
        h.grad(loss.backward()).numpy()
        peaks[mode] = em.stats(device).peak_bytes_held
    assert peaks["balanced"] < 0.6 * peaks[None], peaks
