"""Reads the worker does not wait for (a GPU backend's ``read_later``, kernels/cupy/host_copies.py),
on the CPU: a NumPy backend whose reads are copies "in flight" until the test lands them,
and whose gathers leave their range checks pending as a GPU's do (test_deferred.py)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import trio

import ember as em
from ember.kernels.cupy.host_copies import InFlightRead
from tests.actors.test_deferred import DeferringBackend, _gathered, device_of
from tests.runtime_mode import lazy_only


class _Event:
    """A CUDA event's two calls; it passes when the test sets ``passed``."""

    def __init__(self, passed: threading.Event | None = None) -> None:
        self.passed = passed or threading.Event()

    @property
    def done(self) -> bool:
        return self.passed.is_set()

    def synchronize(self) -> None:
        assert self.passed.wait(10.0), "the copy never landed"


class LaterReadingBackend(DeferringBackend):
    """Reads return an ``InFlightRead`` whose copy lands once the test calls ``land``
    (those made later land at once)."""

    def __init__(self) -> None:
        super().__init__()
        self.landed = threading.Event()
        self.blocking_reads = 0

    def read_later(self, value, checks=None, failed=None):
        event = _Event(self.landed)

        def finish(copies):
            if checks:
                errors = {c: c.error() for c in checks if c.error() is not None}
                if errors:
                    failed(errors)
            return copies[0]

        return InFlightRead(event, [np.array(value)], finish)

    def to_host(self, value):
        self.blocking_reads += 1
        return super().to_host(value)

    def land(self) -> None:
        self.landed.set()


@pytest.fixture
def device():
    with device_of(LaterReadingBackend()) as dev:
        yield dev


def test_the_worker_hands_over_the_read_and_the_reader_waits_for_the_copy(device) -> None:
    backend = device.actor.backend
    y = em.from_numpy(np.arange(5, dtype=np.float32), device=device) * 2.0
    waiter = device.actor.fetch(y._id)
    assert waiter._done.wait(5.0)  # resolved by the worker, the copy still in flight
    later = waiter._value
    assert not later.done()
    z = y + 1.0  # the worker carries on meanwhile
    em.sync(device)
    read = []
    reader = threading.Thread(target=lambda: read.append(waiter.result()))
    reader.start()
    reader.join(0.2)
    assert reader.is_alive()  # waiting for the copy, not for the worker
    backend.land()
    reader.join(5.0)
    np.testing.assert_array_equal(read[0], np.arange(5) * 2.0)
    np.testing.assert_array_equal(z.numpy(), np.arange(5) * 2.0 + 1.0)
    assert backend.blocking_reads == 0


@lazy_only
def test_a_tainted_read_judges_its_checks_on_the_reader_side(device) -> None:
    backend = device.actor.backend
    backend.land()
    bad = _gathered(device, [[0, 5], [1, 1], [2, 3]]) * 1.0
    good = _gathered(device, [[0, 3], [1, 1], [2, 2]]) * 1.0
    waiters = [device.actor.fetch(t._id) for t in (bad, good)]
    np.testing.assert_array_equal(device.actor.wait(waiters[1]),
                                  np.array([[0, 3], [5, 5], [10, 10]], dtype=np.float32))
    assert backend.deferred.resolutions == 0  # passed: the worker left them pending
    with pytest.raises(em.KernelError, match=r"gather failed: IndexError.*5"):
        device.actor.wait(waiters[0])
    # A failure has the worker resolve them all, failing what they spoiled.
    assert backend.deferred.resolutions == 1
    with pytest.raises(em.KernelError, match="gather failed"):
        (bad + 1.0).numpy()
    np.testing.assert_array_equal(good.numpy()[0], [0, 3])


async def test_an_await_waits_for_the_copy_off_trio_and_survives_cancellation(device) -> None:
    backend = device.actor.backend
    y = em.from_numpy(np.ones(3, dtype=np.float32), device=device) + 2.0
    with trio.move_on_after(0.2) as scope:
        await y
    assert scope.cancelled_caught  # the copy had not landed
    ticks = 0

    async def land_later() -> None:
        nonlocal ticks
        for _ in range(5):
            ticks += 1
            await trio.sleep(0.01)
        backend.land()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(land_later)
        value = await y  # trio keeps running its other tasks meanwhile
    assert ticks == 5
    np.testing.assert_array_equal(value, np.full(3, 3.0))


def test_an_in_flight_read_copies_out_of_its_staging_once() -> None:
    event = _Event()
    staged = np.arange(4.0)
    calls = []

    def finish(copies):
        calls.append(1)
        return copies[0]

    read = InFlightRead(event, [staged], finish)
    assert not read.done()
    event.passed.set()
    value = read.result()
    staged[:] = -1.0  # the pinned block goes back to the pool: the result is a copy
    np.testing.assert_array_equal(value, np.arange(4.0))
    assert read.result() is value and calls == [1] and read.done()

    def refuse(copies):
        raise em.KernelError("bad index")

    failing = InFlightRead(event, [staged], refuse)
    for _ in range(2):  # the same error at every read
        with pytest.raises(em.KernelError, match="bad index"):
            failing.result()


class StagingBackend(DeferringBackend):
    """Hands out its own host arrays for uploads (a GPU's pinned memory), noting them."""

    def __init__(self, refuse: bool = False) -> None:
        super().__init__()
        self.refuse = refuse
        self.staged: list[np.ndarray] = []
        self.received: list[np.ndarray] = []

    def host_buffer(self, shape, dtype):
        if self.refuse:
            return None
        buffer = np.empty(shape, dtype)
        self.staged.append(buffer)
        return buffer

    def upload(self, data):
        self.received.append(data)
        return super().upload(data)


@pytest.mark.parametrize("refuse", [False, True])
def test_an_upload_is_copied_once_into_the_devices_own_host_buffer(refuse) -> None:
    backend = StagingBackend(refuse)
    with device_of(backend) as device:
        source = np.arange(6, dtype=np.int64).reshape(2, 3)
        t = em.tensor(source, dtype=em.float32, device=device)
        source[:] = -1  # the data was copied when tensor() returned
        listed = em.tensor([[1.5, 2.5]], device=device)
        np.testing.assert_array_equal(t.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3))
        np.testing.assert_array_equal(listed.numpy(), [[1.5, 2.5]])
        assert [a.dtype for a in backend.received] == [np.float32, np.float32]
        if refuse:
            assert backend.staged == []
        else:  # the buffers handed out are what the worker received: no second copy
            assert [a is b for a, b in zip(backend.received, backend.staged)] == [True, True]
