"""Tiny ops on an idle CPU device run on the caller's thread at once (``run_at_once``):
the value is computed when the op returns, order and failures are as when queued."""

from __future__ import annotations

import time

import numpy as np
import pytest

import ember as em
from ember.actors import device_actor
from tests.runtime_mode import lazy_only
from tests.threads import run_in_threads


def _computed(t: em.Tensor) -> bool:
    return t.device.actor.executor.computed(t._id)


def test_a_tiny_op_on_an_idle_device_is_computed_when_it_returns():
    device = em.cpu(11)
    x = em.tensor([1.0, 2.0, 3.0], device=device)
    em.sync(device)
    y = (x + 1) * 2
    assert _computed(y)
    assert len(device.actor._pending) <= device_actor._AT_ONCE_DROPS
    np.testing.assert_array_equal(y.numpy(), [4.0, 6.0, 8.0])


@lazy_only
def test_a_tiny_op_behind_queued_work_queues_and_keeps_order():
    device = em.cpu(11)
    big = em.ones(1 << 16, device=device) * 3  # queued: too large to run at once
    tiny = big[:4] + 1  # reads the queued value: must wait its turn
    assert not _computed(tiny)
    np.testing.assert_array_equal(tiny.numpy(), [4.0, 4.0, 4.0, 4.0])


@lazy_only
def test_an_op_too_large_to_run_at_once_queues():
    device = em.cpu(11)
    x = em.ones(4096, device=device)
    em.sync(device)
    y = x + 1
    assert not _computed(y)
    assert y.numpy().sum() == 2 * 4096


@lazy_only
def test_a_failure_at_once_reaches_the_reader_with_the_users_line():
    device = em.cpu(11)
    x = em.tensor([0, 1], device=device)
    em.sync(device)
    y = x // 0  # integer division by zero fails in the kernel; this line is the site
    assert _computed(y)  # failed at once, recorded for the reader
    with pytest.raises(em.KernelError, match="test_at_once.py"):
        y.numpy()
    with pytest.raises(em.KernelError):
        (y + 1).numpy()  # what depends on it fails too


def test_drops_queued_while_idle_are_run_before_the_next_op():
    device = em.cpu(11)
    x = em.tensor([1.0, 2.0], device=device)
    em.sync(device)
    executor = device.actor.executor
    held = executor.bytes_held
    for _ in range(100):
        x = x + 1
    assert executor.bytes_held <= held + 2 * x.numpy().nbytes  # old values were freed
    np.testing.assert_array_equal(x.numpy(), [101.0, 102.0])


def _wait_until_idle(actor) -> None:
    """Until the worker sleeps: a sync returns before it lets go of its turn."""
    deadline = time.monotonic() + 10
    while actor._turn.locked() or actor._wake.is_set() or actor._pending:
        assert time.monotonic() < deadline, "the worker never went idle"
        time.sleep(0.001)


def test_a_handle_dropped_on_an_idle_device_frees_its_value_at_once():
    device = em.cpu(11)
    x = em.tensor([1.0, 2.0], device=device)
    big = em.ones(1 << 16, device=device) * 2  # queued (too large to run at once)
    em.sync(device)
    y = x + 1
    executor, y_id, big_id = device.actor.executor, y._id, big._id
    _wait_until_idle(device.actor)
    del y, big
    # No message: nothing queued could read them, so they are gone when del returns.
    assert not executor.computed(y_id) and not executor.computed(big_id)
    assert not device.actor._pending


@lazy_only
def test_a_handle_dropped_behind_queued_work_is_freed_in_its_turn():
    device = em.cpu(11)
    big = em.ones(1 << 16, device=device) * 3  # queued
    total = big.sum()  # queued, reads big
    del big  # must not free big before the sum has read it
    assert total.item() == 3 * (1 << 16)


def test_tiny_ops_inside_a_graphed_step_are_not_run_apart():
    device = em.cpu(11)
    w = em.tensor([1.0, 2.0], device=device)

    @em.graphed
    def step(v):
        return v * 2 + 1

    for i in range(3):
        np.testing.assert_array_equal(step(w + i).numpy(), (np.array([1.0, 2.0]) + i) * 2 + 1)


def test_at_once_can_be_switched_off(monkeypatch):
    monkeypatch.setattr(device_actor, "AT_ONCE", False)
    actor = device_actor.DeviceActor("cpu:97", em.cpu(11).actor.backend.__class__(97))
    try:
        assert actor.at_once_bytes == -1
    finally:
        actor.stop()


def test_threads_submitting_tiny_ops_at_once_get_their_own_answers():
    device = em.cpu(11)
    results: dict[int, list] = {}

    def work(k: int) -> None:
        x = em.full((3,), float(k), device=device)
        out = []
        for _ in range(200):
            x = x + 1
            out.append((x * 2).sum().item())
        results[k] = out

    run_in_threads(work, range(4), 30)
    for k in range(4):
        assert results[k] == [6.0 * (k + i + 1) for i in range(200)]


def test_a_trace_shows_ops_run_at_once():
    device = em.cpu(11)
    x = em.tensor([1.0], device=device)
    em.sync(device)
    with em.trace() as trace:
        y = x + 1
        y.numpy()
    assert any(event.name == "add" for event in trace.events)
