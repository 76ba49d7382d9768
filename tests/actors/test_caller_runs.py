"""Reads that run on the reader's thread: a blocked reader that finds the worker idle runs
what is queued itself (holding the actor's turn), and a computed value costs no message."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import ember as em
from ember.kernels.numpy.table import KERNELS
from ember.ops._core import call
from tests.fusion.batching import fresh_device
from tests.runtime_mode import lazy_only
from tests.threads import run_in_threads

_gates: dict[int, threading.Event] = {}


_started: dict[int, threading.Event] = {}


def _gated(msg, pool, x):
    _started.setdefault(msg.attrs[0], threading.Event()).set()
    if not _gates[msg.attrs[0]].wait(10):
        raise TimeoutError("test gate never opened")
    return x.copy()


def _interrupting(msg, pool, x):
    raise KeyboardInterrupt("simulated Ctrl-C")


KERNELS.setdefault("test_caller_gate", _gated)
KERNELS.setdefault("test_caller_interrupt", _interrupting)


def _record_messages(monkeypatch: pytest.MonkeyPatch, actor) -> list:
    """Every message posted to ``actor`` from now on (still delivered)."""
    posted: list = []
    submit, post = actor.submit, actor._post_urgent

    def recording_submit(msg, nbytes):
        posted.append(msg)
        submit(msg, nbytes)

    def recording_post(msg):
        posted.append(msg)
        post(msg)

    monkeypatch.setattr(actor, "submit", recording_submit)
    monkeypatch.setattr(actor, "_post_urgent", recording_post)
    return posted


def test_a_blocking_read_of_a_computed_value_sends_no_message(monkeypatch):
    device = fresh_device()
    actor = device.actor
    x = em.arange(6, device=device).astype(em.float32) * 3.0
    em.sync(device)
    batches = actor.statistics().batches
    posted = _record_messages(monkeypatch, actor)
    np.testing.assert_array_equal(x.numpy(), np.arange(6) * 3.0)
    assert posted == []
    assert actor.statistics().batches == batches  # nothing ran, here or on the worker


def test_a_read_runs_the_queued_ops_on_the_readers_thread(monkeypatch):
    device = fresh_device()
    actor = device.actor
    x = em.ones(4, device=device)
    em.sync(device)
    posted = _record_messages(monkeypatch, actor)
    with em.trace() as tr:
        value = (x + 1).exp().sum().item()
    assert value == pytest.approx(4 * np.exp(2.0), rel=1e-6)
    assert [type(m).__name__ for m in posted].count("Fetch") == 0
    threads = {e.thread for e in tr.events if e.device == device.name}
    assert threads == {threading.current_thread().name}


@lazy_only
def test_a_computed_value_reads_at_once_while_the_worker_is_busy():
    device = fresh_device()
    x = em.ones(3, device=device) * 2.0
    em.sync(device)
    gate = threading.Event()
    _gates[id(gate)] = gate
    started = _started.setdefault(id(gate), threading.Event())
    held = call("test_caller_gate", (x,), x.shape, x.dtype, (id(gate),))
    device.actor.flush()
    assert started.wait(10)
    try:
        # The worker is inside the gated kernel; x was computed before it.
        reader = threading.Thread(target=lambda: x.numpy())
        reader.start()
        reader.join(5)
        assert not reader.is_alive()
        np.testing.assert_array_equal(x.numpy(), [2.0, 2.0, 2.0])
    finally:
        gate.set()
    np.testing.assert_array_equal(held.numpy(), [2.0, 2.0, 2.0])


@lazy_only
def test_a_read_interrupted_on_its_own_thread_fails_what_did_not_run():
    device = fresh_device()
    x = em.ones(2, device=device)
    em.sync(device)
    before = x + 1
    interrupted = call("test_caller_interrupt", (x,), x.shape, x.dtype)
    after = interrupted * 2
    with pytest.raises(KeyboardInterrupt):
        after.numpy()
    np.testing.assert_array_equal(before.numpy(), [2.0, 2.0])  # it ran before the interrupt
    with pytest.raises(em.KernelError, match="interrupted"):
        after.numpy()
    np.testing.assert_array_equal((x * 5).numpy(), [5.0, 5.0])  # the device goes on


def test_readers_and_submitters_on_many_threads_agree():
    device = fresh_device()
    base = em.arange(64, device=device).astype(em.float32)
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for i in range(40):
                y = base
                for _ in range(5):
                    y = y * 1.0 + float(k)
                np.testing.assert_array_equal(y.numpy(), np.arange(64) + 5.0 * k)
                if i % 10 == 0:
                    em.sync(device)
        except BaseException as exc:  # reported below
            errors.append(exc)

    run_in_threads(work, range(8), 60)
    assert errors == []


@lazy_only
def test_small_ops_do_not_wake_the_worker_but_large_ones_do():
    device = fresh_device()
    actor = device.actor
    em.sync(device)
    batches = actor.statistics().batches
    small = em.ones(8, device=device) + 1
    assert actor.statistics().batches == batches and actor.statistics().queue_depth > 0
    large = em.ones(1 << 20, device=device) + 1  # 4 MiB: worth running while the caller goes on
    for _ in range(500):
        if actor.statistics().queue_depth == 0:
            break
        threading.Event().wait(0.01)
    assert actor.statistics().queue_depth == 0
    assert small.numpy().tolist() == [2.0] * 8 and large.numpy()[-1] == 2.0


def _exiting(msg, pool, x):
    raise SystemExit("a kernel called sys.exit")


KERNELS.setdefault("test_caller_exit", _exiting)


async def _await_value(t: em.Tensor) -> np.ndarray:
    return await t


@lazy_only
def test_a_worker_that_dies_fails_its_values_is_reported_once_and_restarts():
    device = fresh_device()
    actor = device.actor
    x = em.ones(2, device=device)
    em.sync(device)
    doomed = call("test_caller_exit", (x,), x.shape, x.dtype)
    later = doomed + 1
    actor.flush()  # the worker itself runs it, and dies
    for _ in range(500):
        if not actor.alive():
            break
        threading.Event().wait(0.01)
    assert not actor.alive()
    with pytest.raises(em.KernelError, match="SystemExit"):
        later.numpy()
    with pytest.raises(em.KernelError, match="died"):
        em.sync()  # every device: the dead one is reported, not skipped
    em.sync()  # once
    assert actor.alive()
    # Awaits need the worker: a fresh one answers them.
    np.testing.assert_array_equal(em.run(_await_value, x * 3), [3.0, 3.0])
    with pytest.raises(em.KernelError):
        doomed.numpy()
