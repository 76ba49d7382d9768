"""The autodiff actor: ``backward`` posts one message and returns; the walk issues the
gradient ops from its own thread into gates the caller queued, so whatever the caller
submits afterwards runs after them."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

import ember as em
from ember.autodiff import engine
from ember.ops.gradient_rules import differentiable
from ember.kernels.numpy.table import KERNELS
from ember.ops._core import call
from tests.runtime_mode import lazy_only

_gates: dict[int, threading.Event] = {}


def _copy(msg, pool, x):
    return x.copy()


KERNELS.setdefault("test_slow_grad", _copy)
KERNELS.setdefault("test_bad_grad", _copy)


@differentiable("test_slow_grad", inputs=False, replay=False)
def _slow_backward(ctx, grad):
    """Waits for its gate on the autodiff thread, then passes the gradient doubled."""
    if not _gates[ctx.attrs[0]].wait(10):
        raise TimeoutError("test gate never opened")
    return (grad * 2.0,)


@differentiable("test_bad_grad", inputs=False)
def _bad_backward(ctx, grad):
    raise ValueError("a rule that fails")


@pytest.fixture
def device():
    return em.cpu(0).autodiff()


def _slow(x: em.Tensor) -> tuple[em.Tensor, threading.Event]:
    gate = threading.Event()
    _gates[id(gate)] = gate
    return call("test_slow_grad", (x,), x.shape, x.dtype, (id(gate),)), gate


@lazy_only
def test_backward_returns_before_the_walk_and_later_ops_see_its_gradients(device):
    w = em.tensor([1.0, 2.0, 3.0], device=device).require_grad()
    y, gate = _slow(w * 3.0)
    grads = y.sum().backward()  # returns although the walk is held inside a rule
    gw = w.grad(grads)
    assert gw.shape == (3,) and gw.dtype == em.float32 and gw.device == em.cpu(0)
    after = gw * 10.0 + 1.0  # queued behind the walk's gate, before it has issued anything
    gate.set()
    np.testing.assert_array_equal(after.numpy(), [61.0, 61.0, 61.0])
    np.testing.assert_array_equal(gw.numpy(), [6.0, 6.0, 6.0])


@lazy_only
def test_a_forward_after_backward_reads_values_the_walk_releases(device):
    """A value the caller reads after backward() and then lets go of is not freed by the
    walk before that read runs."""
    x = em.tensor([[1.0, -2.0], [3.0, 4.0]], device=device).require_grad()
    hidden = (x * 2.0).relu()
    y, gate = _slow(hidden)
    grads = y.sum().backward()
    shown = hidden.detach() + 1.0  # queued behind the gate
    del hidden, y
    gate.set()
    np.testing.assert_array_equal(shown.numpy(), [[3.0, 1.0], [7.0, 9.0]])
    np.testing.assert_array_equal(x.grad(grads).numpy(), [[4.0, 0.0], [4.0, 4.0]])


@lazy_only
def test_a_failing_rule_reaches_the_gradients_reader_with_the_backward_line(device):
    w = em.tensor([1.0, 2.0], device=device).require_grad()
    loss = call("test_bad_grad", (w * 1.0,), (2,), em.float32).sum()
    grads = loss.backward()
    line = sys._getframe().f_lineno - 1
    with pytest.raises(em.KernelError) as info:
        w.grad(grads).numpy()
    assert "a rule that fails" in str(info.value) and f"test_actor.py:{line}" in str(info.value)
    assert isinstance(info.value.__cause__, ValueError)
    np.testing.assert_array_equal((w * 2.0).numpy(), [2.0, 4.0])  # the device goes on


def test_a_second_backward_through_a_graph_raises_at_the_call(device):
    w = em.tensor([1.0, 2.0], device=device).require_grad()
    loss = (w * w).sum()
    loss.backward()
    with pytest.raises(em.EmberError, match="already consumed"):
        loss.backward()


def test_gradients_match_the_walk_on_the_callers_thread(device, monkeypatch):
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((4, 5), (5, 3), (3,))]

    def gradients() -> list[np.ndarray]:
        x, w, b = (em.from_numpy(a, device=device).require_grad() for a in arrays)
        loss = ((x @ w + b).tanh() ** 2).mean() + (w * w).sum() * 0.1
        grads = loss.backward()
        return [t.grad(grads).numpy() for t in (x, w, b)]

    on_actor = gradients()
    monkeypatch.setattr(engine, "ACTORS", False)
    for a, b in zip(on_actor, gradients()):
        np.testing.assert_array_equal(a, b)


@lazy_only
def test_the_walk_runs_on_the_autodiff_thread_and_the_trace_says_so(device):
    w = em.tensor([1.0, 2.0], device=device).require_grad()
    with em.trace() as tr:
        w.grad((w * 3.0).sum().backward()).numpy()
    walks = [e for e in tr.events if e.name == "backward"]
    assert [e.thread for e in walks] == ["ember-autodiff"]
    assert walks[0].posted_by == threading.current_thread().name  # the hand-off it shows
    assert walks[0].site.endswith("test_actor.py:" + str(sys._getframe().f_lineno - 4))


@lazy_only
def test_list_actors_names_devices_and_the_autodiff_actor(device):
    w = em.tensor([1.0], device=device).require_grad()
    before = {a.name: a for a in em.list_actors()}
    w.grad((w * 2.0).sum().backward()).numpy()
    actors = {a.name: a for a in em.list_actors()}
    assert isinstance(actors["cpu:0"], em.ActorInfo)
    assert actors["cpu:0"].kind == "device" and actors["cpu:0"].thread == "ember-cpu:0"
    autodiff = actors["autodiff"]
    assert autodiff.kind == "autodiff" and autodiff.thread == "ember-autodiff"
    previous = before["autodiff"].messages if "autodiff" in before else 0
    assert autodiff.messages == previous + 1 and autodiff.queue_depth == 0
    assert actors["cpu:0"].messages > 0
    with pytest.raises(AttributeError):
        autodiff.messages = 0  # frozen


KERNELS.setdefault("test_exit_grad", _copy)


@differentiable("test_exit_grad", inputs=False)
def _exit_backward(ctx, grad):
    raise SystemExit("a rule that exits")


@lazy_only
def test_a_rule_that_kills_its_walk_fails_that_backward_only(device):
    w = em.tensor([1.0, 2.0], device=device).require_grad()
    grads = call("test_exit_grad", (w * 1.0,), (2,), em.float32).sum().backward()
    with pytest.raises(em.KernelError, match="SystemExit"):
        w.grad(grads).numpy()
    # The actor answers the next backward (its thread is restarted if it had died).
    np.testing.assert_array_equal(w.grad((w * 5.0).sum().backward()).numpy(), [5.0, 5.0])
    assert engine.ACTOR.info().thread == "ember-autodiff"
