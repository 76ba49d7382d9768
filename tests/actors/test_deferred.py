"""Index checks a GPU leaves on the device (actors/deferred.py), on the CPU: a NumPy
backend that defers its gathers' range checks as CUDA does (the gather wraps a bad index
into range; the check resolves when the actor reads a tainted value or syncs)."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator

import numpy as np
import pytest

import ember as em
from ember.actors import deferred
from ember.actors.device_actor import DeviceActor
from ember.actors.step_graphs import StepGraphs
from ember.kernels.numpy import NumpyBackend
from ember.kernels.numpy.indexing import range_error
from tests.cuda.test_graphs import RecordingCapturer
from tests.runtime_mode import lazy_only

_fresh = itertools.count(940)


class _HostCheck:
    """Reads its index at resolution, as a device check reads what its kernel recorded
    (a captured check's index is the graph's input buffer: each replay's values)."""

    def __init__(self, op: str, index: np.ndarray, size: int, dim: int) -> None:
        self.op, self.index, self.size, self.dim = op, index, size, dim

    def error(self) -> IndexError | None:
        low, high = int(self.index.min()), int(self.index.max())
        if low >= 0 and high < self.size:
            return None
        return range_error(self.op, low if low < 0 else high, self.dim, self.size)


class _HostChecks:
    def __init__(self) -> None:
        self.created: list = []
        self.resolutions = 0
        self.kept: list = []

    def keep(self, checks) -> None:
        self.kept.extend(checks)

    def resolve(self, checks) -> dict:
        self.resolutions += 1
        return {c: c.error() for c in checks if c.error() is not None}


class DeferringBackend(NumpyBackend):
    """Gathers wrap out-of-range indices and leave their range check pending."""

    def __init__(self) -> None:
        super().__init__(0)
        self.deferred = _HostChecks()
        self.pool.defer_range_check = lambda *args: None  # the gather's own check: below

    def run(self, msg, inputs):
        if msg.op == "gather":
            x, index = inputs
            (dim,) = msg.attrs
            size = x.shape[dim]
            self.deferred.created.append(_HostCheck("gather", index, size, dim))
            inputs = [x, np.mod(index, size)]
        return super().run(msg, inputs)


@contextlib.contextmanager
def device_of(backend: NumpyBackend) -> Iterator[em.Device]:
    """A fresh CPU device whose actor runs ``backend``, stopped at the end."""
    dev = em.cpu(next(_fresh))
    dev._actor = DeviceActor(dev.name, backend)
    try:
        yield dev
    finally:
        dev._actor.stop()


@pytest.fixture
def device():
    with device_of(DeferringBackend()) as dev:
        yield dev


def _gathered(device, index):
    x = em.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4), device=device)
    return x.gather(1, em.tensor(index, device=device))


def test_a_good_index_reads_as_on_the_cpu_with_one_resolution(device) -> None:
    picked = _gathered(device, [[3], [0], [2]])
    np.testing.assert_array_equal(((picked * 2.0) + 1.0).numpy(), [[7.0], [9.0], [21.0]])
    checks = device.actor.backend.deferred
    assert checks.resolutions == 1
    np.testing.assert_array_equal(picked.numpy(), [[3.0], [4.0], [10.0]])
    assert checks.resolutions == 1  # resolved once: nothing tainted is left


@lazy_only
def test_a_bad_index_fails_what_was_computed_from_it_and_only_that(device) -> None:
    picked = _gathered(device, [[3], [4], [2]])
    loss = (picked * 2.0).exp().sum()
    unrelated = em.ones(3, device=device) * 5.0
    np.testing.assert_array_equal(unrelated.numpy(), [5.0] * 3)  # untainted: no resolution
    assert device.actor.backend.deferred.resolutions == 0
    with pytest.raises(em.KernelError, match=r"gather failed: IndexError: gather: index 4 is "
                                             r"out of range for dim 1 of size 4") as info:
        loss.item()
    assert "test_deferred.py" in info.value.site  # the gather's own line
    with pytest.raises(em.KernelError, match="index 4"):
        picked.numpy()
    with pytest.raises(em.KernelError, match="index 4"):
        (loss + 1.0).numpy()  # computed after the resolution: fails from its input
    np.testing.assert_array_equal(unrelated.numpy(), [5.0] * 3)


@lazy_only
def test_await_and_sync_resolve(device) -> None:
    import trio

    picked = _gathered(device, [[-1], [0], [0]])

    async def main():
        with pytest.raises(em.KernelError, match="index -1"):
            await picked

    trio.run(main)
    later = _gathered(device, [[9], [0], [0]]) + 0.0
    em.sync(device)  # resolves every pending check: the failure is already known
    assert not device.actor.executor.taints.pending
    with pytest.raises(em.KernelError, match="index 9"):
        later.numpy()


@lazy_only
def test_a_dropped_value_leaves_no_taint_and_bytes_are_released(device) -> None:
    em.sync(device)
    held = em.stats(device).bytes_held
    picked = _gathered(device, [[5], [0], [0]])
    del picked
    em.sync(device)
    assert not device.actor.executor.taints.of
    assert em.stats(device).bytes_held == held


def test_pending_checks_resolve_past_the_bound_while_nothing_is_read(device, monkeypatch) -> None:
    monkeypatch.setattr(deferred, "MAX_PENDING", 8)
    kept = [_gathered(device, [[1], [2], [3]]) for _ in range(30)]
    assert em.stats(device).ops_submitted > 0
    em.sync(device)
    assert device.actor.backend.deferred.resolutions >= 3
    np.testing.assert_array_equal(kept[-1].numpy(), [[1.0], [6.0], [11.0]])


@lazy_only
def test_a_graphed_step_re_arms_its_captured_checks_at_every_replay(device) -> None:
    device.actor.graphs = StepGraphs(RecordingCapturer())
    x = em.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4), device=device)
    index = em.tensor([[1], [2], [3]], device=device)
    step = em.graphed(lambda: x.gather(1, index).sum() * 2.0, device)
    for _ in range(3):  # run, capture, replay
        assert step().item() == 2.0 * (1 + 6 + 11)
    assert step.graph_stats()["replays"] == 1
    assert len(device.actor.backend.deferred.kept) == 1
    # A replay's bad index: the graph's input buffer holds it when its check resolves.
    index = em.tensor([[1], [7], [3]], device=device)
    with pytest.raises(em.KernelError, match="gather: index 7"):
        step().item()
    assert step.graph_stats()["replays"] == 2
    index = em.tensor([[0], [0], [0]], device=device)
    step().item()  # in range again: no error (the recording "graph" recomputes nothing)
    assert step.graph_stats()["replays"] == 3


@lazy_only
def test_a_transfer_out_resolves_first(device) -> None:
    """A tainted value sent to another device is checked before it leaves: the copy on the
    other device fails with the same error, a clean one arrives."""
    moved = _gathered(device, [[0], [9], [0]]).to(em.cpu())
    with pytest.raises(em.KernelError, match="gather: index 9"):
        moved.numpy()
    np.testing.assert_array_equal(_gathered(device, [[1], [1], [1]]).to(em.cpu()).numpy(),
                                  [[1.0], [5.0], [9.0]])
