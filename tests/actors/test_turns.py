"""Turns: on a backend whose worker only launches (a GPU's), a caller hands the worker
what it queued at a message that ends fusible runs and waits while a batch runs. Checked
on the CPU with a NumPy backend that says it launches asynchronously."""

from __future__ import annotations

import contextlib
import threading
import time

import numpy as np
import pytest
import trio

import ember as em
from ember.actors import device_actor, registry
from ember.autodiff import engine
from ember.kernels.numpy import NumpyBackend
from ember.kernels.numpy.table import KERNELS
from ember.ops._core import call
from tests.fusion.batching import fresh_index
from tests.runtime_mode import lazy_only
from tests.threads import run_in_threads

_gates: dict[int, threading.Event] = {}
_timings: dict[int, float] = {}


class _TurnTakingBackend(NumpyBackend):
    launches_async = True


def _gated(msg, pool, x):
    """Waits for its gate (attrs: gate id, whether the wait is reported as one on others)."""
    gate_id, on_others = msg.attrs
    with device_actor.waiting_on_others() if on_others else contextlib.nullcontext():
        if not _gates[gate_id].wait(10):
            raise TimeoutError("test gate never opened")
    return x.copy()


def _takes_a_turn_itself(msg, pool, x):
    """Runs the caller's turn-taking on the worker thread, timing it."""
    actor = registry._actors[msg.attrs[0]]
    start = time.perf_counter()
    actor._take_turn()
    _timings[msg.attrs[1]] = time.perf_counter() - start
    return x.copy()


def _failing(msg, pool, x):
    raise ValueError("injected failure")


KERNELS.setdefault("test_turn_gate", _gated)
KERNELS.setdefault("test_turn_fail", _failing)
KERNELS.setdefault("test_turn_self", _takes_a_turn_itself)


@pytest.fixture(scope="module")
def device():
    """A cpu device of an index no other test uses, whose actor takes turns with its
    callers (one for the module: a device keeps the actor it first found)."""
    index = fresh_index()
    name = f"cpu:{index}"
    actor = device_actor.DeviceActor(name, _TurnTakingBackend(index))
    registry._actors[name] = actor
    yield em.cpu(index)
    actor.stop()


def _gated_op(x: em.Tensor, on_others: bool = False) -> tuple[em.Tensor, threading.Event]:
    gate = threading.Event()
    _gates[id(gate)] = gate
    return call("test_turn_gate", (x,), x.shape, x.dtype, (id(gate), on_others)), gate


def _submit_in_thread(x: em.Tensor) -> tuple[threading.Thread, dict]:
    """``x + 1`` submitted from a new thread; ``done["at"]``: when its submit returned."""
    done: dict = {}

    def submit() -> None:
        done["result"] = x + 1
        done["at"] = time.perf_counter()

    thread = threading.Thread(target=submit)
    thread.start()
    return thread, done


def test_results_match_numpy_and_long_issuing_is_handed_over_in_batches(device, monkeypatch):
    monkeypatch.setattr(device_actor, "LINGER_S", 10.0)  # no batch starts on its own
    # The caller issues the backward walk itself here (the autodiff actor would issue it
    # into a lane, which the device runs in pieces as it arrives: test_lanes.py).
    monkeypatch.setattr(engine, "ACTORS", False)
    rng = np.random.default_rng(0)
    w_np = rng.standard_normal((8, 8)).astype(np.float32)
    x_np = rng.standard_normal((4, 8)).astype(np.float32)
    w = em.from_numpy(w_np, device=device.autodiff()).require_grad()
    x = em.from_numpy(x_np, device=device)
    before = device.actor._batches_done
    h, h_np = x, x_np
    for _ in range(200):
        h = (h @ w).tanh() * 0.5 + h
        h_np = np.tanh(h_np @ w_np) * np.float32(0.5) + h_np
    grads = h.sum().backward()
    np.testing.assert_allclose(h.numpy(), h_np, rtol=1e-4, atol=1e-5)
    assert w.grad(grads).shape == (8, 8)
    assert np.isfinite(w.grad(grads).numpy()).all()
    # ~7,000 messages were handed over at matmuls every 64 or so, not at the 1,024-message
    # batch bound (or the read) alone.
    assert device.actor._batches_done - before > 50


@lazy_only
def test_a_caller_waits_while_a_batch_runs(device, monkeypatch):
    monkeypatch.setattr(device_actor, "_TURN_LIMIT_S", 10.0)
    x = em.ones(4, device=device)
    y, gate = _gated_op(x)
    device.actor._urge()  # the batch with the gated op starts now
    deadline = time.perf_counter() + 5
    while not device.actor._running and time.perf_counter() < deadline:
        time.sleep(0.001)
    assert device.actor._running
    thread, done = _submit_in_thread(x)
    time.sleep(0.2)
    assert "at" not in done  # its submit waits for the batch
    opened = time.perf_counter()
    gate.set()
    thread.join(5)
    assert done["at"] >= opened
    np.testing.assert_array_equal(done["result"].numpy(), np.full(4, 2, np.float32))
    np.testing.assert_array_equal(y.numpy(), np.ones(4, np.float32))


@lazy_only
def test_a_worker_waiting_on_other_threads_lets_its_caller_go_on(device, monkeypatch):
    monkeypatch.setattr(device_actor, "_TURN_LIMIT_S", 10.0)
    x = em.ones(4, device=device)
    y, gate = _gated_op(x, on_others=True)  # as a collective's rank waits for the others
    device.actor._urge()
    start = time.perf_counter()
    while not device.actor._blocked and time.perf_counter() - start < 5:
        time.sleep(0.001)
    z = x * 3  # the caller is not held: it may be about to give what the worker waits for
    assert time.perf_counter() - start < 2
    gate.set()
    np.testing.assert_array_equal(z.numpy(), np.full(4, 3, np.float32))
    np.testing.assert_array_equal(y.numpy(), np.ones(4, np.float32))
    assert not device.actor._blocked


@lazy_only
def test_the_wait_for_a_batch_is_bounded(device, monkeypatch):
    monkeypatch.setattr(device_actor, "_TURN_LIMIT_S", 0.2)
    x = em.ones(4, device=device)
    y, gate = _gated_op(x)  # a wait the worker does not report
    device.actor._urge()
    while not device.actor._running:
        time.sleep(0.001)
    thread, done = _submit_in_thread(x)
    thread.join(5)
    assert "at" in done and device.actor._running  # went on while the batch still runs
    gate.set()
    np.testing.assert_array_equal(done["result"].numpy(), np.full(4, 2, np.float32))
    np.testing.assert_array_equal(y.numpy(), np.ones(4, np.float32))


def test_the_worker_never_waits_for_itself(device, monkeypatch):
    monkeypatch.setattr(device_actor, "_TURN_LIMIT_S", 10.0)
    x = em.ones(4, device=device)
    y = call("test_turn_self", (x,), x.shape, x.dtype, (device.name, id(x)))
    np.testing.assert_array_equal(y.numpy(), np.ones(4, np.float32))
    assert _timings[id(x)] < 1.0


def test_backends_that_run_on_the_worker_take_no_turns():
    actor = em.cpu(0).actor
    assert not actor._takes_turns
    y = em.ones(3) + 1
    assert not actor._running or y.numpy() is not None
    with device_actor.waiting_on_others():  # off a worker thread: nothing
        assert not actor._blocked
    np.testing.assert_array_equal(y.numpy(), np.full(3, 2, np.float32))


@lazy_only
def test_a_graphed_step_is_handed_over_whole_at_its_end(device, monkeypatch):
    monkeypatch.setattr(device_actor, "LINGER_S", 10.0)  # no batch starts on its own
    w_np = np.eye(4, dtype=np.float32) * np.float32(0.5)
    w = em.from_numpy(w_np, device=device)

    def step(x: em.Tensor) -> em.Tensor:
        for _ in range(100):  # ~300 messages, a matmul every 3
            x = (x @ w) + 1.0
        return x

    graphed = em.graphed(step, device)
    x = em.ones((2, 4), device=device)
    em.sync(device)
    before = device.actor._batches_done
    y = graphed(x)
    # Only the step's end handed it over (the worker collects a step until its end).
    assert device.actor._batches_done - before == 1
    expected = np.ones((2, 4), np.float32)
    for _ in range(100):
        expected = expected @ w_np + np.float32(1.0)
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-6)


def test_threads_issuing_to_one_device_in_turns_match_numpy(device):
    results: dict[int, np.ndarray] = {}

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        a_np = rng.standard_normal((6, 6)).astype(np.float32)
        a = em.tensor(a_np, device=device)
        x, x_np = a, a_np
        for _ in range(60):
            x = (x @ a) * 0.1 + 1.0
            x_np = (x_np @ a_np) * np.float32(0.1) + np.float32(1.0)
        np.testing.assert_allclose(x.numpy(), x_np, rtol=1e-4, atol=1e-5)
        results[seed] = x_np

    run_in_threads(work, range(4), 30)
    assert sorted(results) == [0, 1, 2, 3]


@lazy_only
def test_a_failure_in_a_batch_ends_the_turn_and_reaches_its_reader(device, monkeypatch):
    monkeypatch.setattr(device_actor, "_TURN_LIMIT_S", 10.0)
    x = em.ones(4, device=device)
    bad = call("test_turn_fail", (x,), x.shape, x.dtype)
    start = time.perf_counter()
    for _ in range(40):  # past the hand-over point: the caller waits for the failing batch
        x = (x @ em.ones((4, 4), device=device)) * 0.25
    assert time.perf_counter() - start < 5
    with pytest.raises(em.KernelError, match="injected"):
        bad.numpy()
    np.testing.assert_allclose(x.numpy(), np.ones(4, np.float32))


async def test_trio_tasks_awaiting_results_of_a_device_in_turns(device):
    results: dict[int, np.ndarray] = {}

    async def task(seed: int) -> None:
        rng = np.random.default_rng(seed)
        a_np = rng.standard_normal((5, 5)).astype(np.float32) * np.float32(0.3)
        a = em.tensor(a_np, device=device)
        x, x_np = a, a_np
        for step in range(80):
            x = (x @ a).tanh() + a
            x_np = np.tanh(x_np @ a_np) + a_np
            if step % 20 == 0:
                await trio.sleep(0)  # let the other tasks issue in between
        results[seed] = await x
        np.testing.assert_allclose(results[seed], x_np, rtol=1e-4, atol=1e-5)

    async with trio.open_nursery() as nursery:
        for seed in range(3):
            nursery.start_soon(task, seed)
    assert sorted(results) == [0, 1, 2]
