"""Reads that leave the worker free: device-to-host copies the reader waits for.

A blocking copy (CuPy's ``get``) holds the worker until the GPU has run everything
queued before it. A Learner reads each step's loss a few steps behind: the worker,
which would be launching the next step, waited instead, and so did its caller at
its next turn (16.3 ms per MLP step on the H200 against 13.0 with the reads left
out). Here the worker queues the copy on its stream, behind the value's kernels,
into pinned host memory, records an event and moves on; the reader waits for the
event on its own thread, then copies the bytes into an array of its own.

Pinned blocks come from CuPy's pinned pool and go back to it only once their copy
has landed: each stays referenced here until its event has passed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from ember.actors.waiter import Later

# Larger reads stay blocking: pinned memory is scarce, and a copy this large is
# bandwidth-bound whoever waits for it (a guess).
MAX_BYTES = 64 << 20


class InFlightRead(Later):
    """Host copies of device arrays in flight behind ``event``; ``finish`` makes the
    result from them (the first the value read, any others what it needs checked)."""

    __slots__ = ("_event", "_staged", "_finish", "_value", "_error")

    def __init__(self, event: Any, staged: list[np.ndarray],
                 finish: Callable[[list[np.ndarray]], Any]) -> None:
        self._event = event
        self._staged: list[np.ndarray] | None = staged
        self._finish = finish
        self._value: Any = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        return self._staged is None or self._event.done

    def result(self) -> Any:
        if self._staged is not None:
            self._event.synchronize()
            copies = [np.array(staged) for staged in self._staged]  # out of pinned memory
            self._staged = None
            try:
                self._value = self._finish(copies)
            except Exception as exc:
                self._error = exc
        if self._error is not None:
            raise self._error
        return self._value


class Reads:
    """One worker's reads in flight, and the pinned blocks their copies still write."""

    def __init__(self) -> None:
        self._landing: deque[tuple[Any, list]] = deque()  # (event, pinned blocks)

    def start(self, stream: Any, arrays: list[Any],
              finish: Callable[[list[np.ndarray]], Any]) -> InFlightRead:
        """Queue copies of ``arrays`` (CuPy arrays of this worker) on ``stream``."""
        import cupy

        while self._landing and self._landing[0][0].done:
            self._landing.popleft()
        staged, blocks = [], []
        for array in arrays:
            source = cupy.ascontiguousarray(array)  # 1-d for a 0-d array: shape from array
            block = cupy.cuda.alloc_pinned_memory(source.nbytes)
            host = np.frombuffer(block, source.dtype, source.size).reshape(array.shape)
            cupy.cuda.runtime.memcpyAsync(host.ctypes.data, source.data.ptr, source.nbytes,
                                          cupy.cuda.runtime.memcpyDeviceToHost, stream.ptr)
            staged.append(host)
            blocks.append(block)
        event = stream.record()
        self._landing.append((event, blocks))
        return InFlightRead(event, staged, finish)
