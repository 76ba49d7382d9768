"""``one_batch(device)``: everything submitted inside the block runs in one worker batch;
``step_counts`` measures the fusion counters of such a batch on a ``fresh_device()``.

Fusion plans one batch at a time, and a batch is whatever the worker drained
when it woke. Building ops and then reading usually gives one batch, but a
slow caller can outlast the worker's linger and split it. Here the worker is
held inside a kernel that waits on a gate until the block ends, so every op
submitted in the block is queued when it next drains.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator

import ember as em
from ember.kernels.numpy.table import KERNELS
from ember.ops import _core
from ember.ops._core import call

_holds: dict[int, tuple[threading.Event, threading.Event]] = {}


def _hold_kernel(msg, pool, x):
    started, gate = _holds[msg.attrs[0]]
    started.set()
    if not gate.wait(30):
        raise TimeoutError("one_batch: the gate never opened")
    return x.copy()


KERNELS.setdefault("test_fusion_hold", _hold_kernel)


@contextlib.contextmanager
def one_batch(device: em.Device) -> Iterator[None]:
    """Hold ``device``'s worker until the block ends (do not read or sync inside it). With
    ``EMBER_EAGER=1`` every op runs at its call: there is no batch to hold."""
    if _core.EAGER:
        yield
        return
    started, gate = threading.Event(), threading.Event()
    key = id(gate)
    _holds[key] = (started, gate)
    seed = em.zeros(1, device=device.inner)
    hold = call("test_fusion_hold", (seed,), (1,), em.float32, (key,))
    device.actor.flush()  # a tiny op alone does not wake the worker
    try:
        if not started.wait(30):
            raise TimeoutError(f"one_batch: the worker of {device} never reached the hold")
        yield
    finally:
        gate.set()
        del hold, seed
        _holds.pop(key, None)


_fresh = itertools.count(60)


def fresh_index() -> int:
    """The index of a CPU device no other test has used, so its counters start at zero."""
    return next(_fresh)


def fresh_device() -> em.Device:
    return em.cpu(fresh_index())


def step_counts(device: em.Device, build) -> dict[str, int]:
    """Counter increments (groups, ops_fused, kernels_launched) over ``build()`` run in one
    batch and read, less what an empty batch costs (the hold of ``one_batch``)."""

    def measure(fn) -> dict[str, int]:
        em.sync(device)
        before = em.stats(device).as_dict()
        with one_batch(device):
            result = fn()
        if result is not None:
            for t in result if isinstance(result, tuple) else (result,):
                t.numpy()
        em.sync(device)
        after = em.stats(device).as_dict()
        return {k: after[k] - before[k] for k in ("groups", "ops_fused", "kernels_launched")}

    overhead = measure(lambda: None)
    counts = measure(build)
    return {k: counts[k] - overhead[k] for k in counts}
