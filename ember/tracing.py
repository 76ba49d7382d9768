"""``em.trace()``: a record of every op the device workers execute.

While a trace is active each worker appends one event per executed message
(op name, device, worker thread, start, duration, the user's source line).
``Trace.save`` writes Chrome's ``traceEvents`` JSON, which Perfetto opens.
Below both the actors and the kernels (a backend records its compiles here too); not
``ember/trace.py``, which would shadow the public ``em.trace()`` as ``ember.trace``.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import msgspec


class TraceEvent(msgspec.Struct, frozen=True):
    name: str
    device: str
    thread: str
    start_ns: int
    duration_ns: int
    site: str
    kind: str = "op"  # "op", "group" and "kernel" come with fusion; "actor": an actor's job
    posted_by: str = ""  # the thread that handed this work over ("": the one that ran it)


class Trace:
    """The events recorded while the ``with em.trace() as tr:`` block ran."""

    def __init__(self) -> None:
        self.events: list[TraceEvent] = []
        self._lock = threading.Lock()

    def record(self, event: TraceEvent) -> None:
        with self._lock:
            self.events.append(event)

    def to_chrome(self) -> dict:
        pid = os.getpid()
        return {
            "traceEvents": [
                {
                    "name": e.name,
                    "cat": e.kind,
                    "ph": "X",
                    "ts": e.start_ns / 1000.0,
                    "dur": e.duration_ns / 1000.0,
                    "pid": pid,
                    "tid": e.thread,
                    "args": {"device": e.device, "site": e.site,
                             **({"posted_by": e.posted_by} if e.posted_by else {})},
                }
                for e in self.events
            ],
            "displayTimeUnit": "ms",
        }

    def save(self, path: str | os.PathLike) -> None:
        """Write the Chrome trace atomically (a temporary file renamed into place)."""
        from ember.record_io import atomic_write_bytes

        atomic_write_bytes(Path(path), msgspec.json.encode(self.to_chrome()))


_active: list[Trace] = []


def active() -> list[Trace]:
    return _active


def start() -> Trace:
    trace = Trace()
    _active.append(trace)
    return trace


def stop(trace: Trace) -> None:
    _active.remove(trace)


def now_ns() -> int:
    return time.perf_counter_ns()
