"""Runtime entry points: ``em.run``, ``em.sync``, ``em.sync_async``, ``em.stats``, ``em.trace``."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import trio

from ember.actors import trace as _trace
from ember.actors.registry import live_actors
from ember.actors.stats import Stats
from ember.device import Device
from ember.ops._core import resolve_device


def run(async_fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    """Run ``async_fn(*args)`` under trio and return its result (for plain scripts)."""
    return trio.run(async_fn, *args)


def _actors(device: Device | str | None) -> list:
    if device is None:  # every device that can still have work (a crashed one cannot)
        return [a for a in live_actors() if a.alive()]
    return [resolve_device(device).actor]


def sync(device: Device | str | None = None) -> None:
    """Block until the device's stream (every device's, when None) has run."""
    from ember.tensor import _refuse_inside_trio

    _refuse_inside_trio("sync")
    for actor in _actors(device):
        actor.wait(actor.barrier())


async def sync_async(device: Device | str | None = None) -> None:
    """Park the trio task until the device's stream (every device's, when None) has run."""
    for actor in _actors(device):
        await actor.barrier().wait_async()


def stats(device: Device | str | None = None) -> Stats:
    """Counters of one device, or totals over every device used so far."""
    total = Stats()
    for actor in _actors(device):
        total = total + actor.statistics()
    return total


@contextlib.contextmanager
def trace() -> Iterator[_trace.Trace]:
    """Record every op executed while the block runs: ``with em.trace() as tr: ...``.

    On exit the devices are synced so the trace holds every op submitted in
    the block; ``tr.events`` lists them and ``tr.save(path)`` writes a Chrome trace.
    """
    recording = _trace.start()
    try:
        yield recording
        for actor in _actors(None):
            actor.wait(actor.barrier())
    finally:
        _trace.stop(recording)
