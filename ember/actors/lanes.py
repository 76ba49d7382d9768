"""Lanes: ops another actor promises to a device's stream, in the caller's order.

An actor that takes work off the caller's thread (autodiff's backward walk, the
optimizer's update) hands the caller results at once: tensors whose ids it promises to
produce later. The caller opens a lane on each device it will touch, which queues a
``Gate`` at that point of the device's stream, and goes on; whatever it submits later
queues behind the gate. The other actor then issues its ops from its own thread: while it
*fills* the lanes, its submissions to those devices go into them instead of the streams.
A device that reaches a gate runs the lane's ops there as they arrive, until the lane
closes (the other actor never waits on a device, so it does close). So the
order the caller wrote is the order the device runs, and no caller waits.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

_tokens = itertools.count(1)
# A device at a gate runs a lane's ops in pieces of about this many as they arrive (a
# guess: as the turns of a caller issuing on a GPU).
_READY_EVERY = 64
# Lanes by token, until their gate is reached.
_open: dict[int, Lane] = {}
# Thread ident -> {device actor: lane} while that thread fills lanes.
filling: dict[int, dict[Any, Lane]] = {}


class Lane:
    """The ops one actor promises one device, and whether it has issued them all."""

    __slots__ = ("token", "first_id", "messages", "made", "read_after", "nbytes", "done",
                 "ready", "awaited", "error")

    def __init__(self, first_id: int) -> None:
        self.token = next(_tokens)
        self.first_id = first_id  # ids below it existed when the gate was queued
        self.messages: list = []
        self.made: set[int] = set()
        # Values from before the gate that the caller's ops queued behind it read: a drop of
        # one belongs behind them, not in the lane.
        self.read_after: set[int] = set()
        self.nbytes = 0
        self.done = threading.Event()
        # Set every _READY_EVERY messages and at the close: a device waiting at the gate
        # runs what has arrived while the rest is still being issued.
        self.ready = threading.Event()
        self.awaited = False  # a device waits at the gate for the next piece
        self.error: BaseException | None = None
        _open[self.token] = self

    def append(self, msg: Any, nbytes: int = 0) -> None:
        messages = self.messages
        messages.append(msg)
        self.nbytes += nbytes
        if len(messages) % _READY_EVERY == 0:
            self.ready.set()
            if self.awaited:
                # Hand the GIL to the waiting device now: a thread issuing pure Python
                # gives it up only every few milliseconds, and a GPU would idle meanwhile.
                time.sleep(0)
        out = getattr(msg, "out", None)
        if out is not None:
            self.made.add(out)
        else:
            self.made.update(getattr(msg, "outs", ()))

    def holds(self, tensor_id: int) -> bool:
        """Whether a drop of ``tensor_id`` belongs in this lane (so that the walk frees what
        it is done with as it goes): a value made in the lane, or one from before the gate
        that nothing queued behind the gate reads. Not one the caller made after the gate
        (a garbage collection on the filling thread may finalize that too)."""
        return tensor_id in self.made or (tensor_id < self.first_id
                                          and tensor_id not in self.read_after)

    def close(self, error: BaseException | None = None) -> None:
        """Every promised op is in (or ``error`` says why some never will be)."""
        self.error = error
        self.done.set()
        self.ready.set()


def take(token: int) -> Lane:
    """The lane of a gate a device has reached (once)."""
    return _open.pop(token)


def lane_of(actor: Any) -> Lane | None:
    """The lane this thread fills for ``actor``, if any (the caller checks ``filling``
    first: empty, the common case, costs nothing more)."""
    lanes = filling.get(threading.get_ident())
    return None if lanes is None else lanes.get(actor)


@contextlib.contextmanager
def fill(lanes: dict[Any, Lane]) -> Iterator[None]:
    """Submissions from this thread to the actors of ``lanes`` go into those lanes."""
    ident = threading.get_ident()
    filling[ident] = lanes
    try:
        yield
    finally:
        del filling[ident]
