"""Copies between the host and the GPU that leave the worker free, through pinned memory.

Reads. A blocking copy (CuPy's ``get``) holds the worker until the GPU has run
everything queued before it. A Learner reads each step's loss a few steps behind:
the worker, which would be launching the next step, waited instead, and so did its
caller at its next turn. Here the worker queues the copy on its stream, behind the
value's kernels, into pinned host memory, records an event and moves on; the reader
waits for the event on its own thread, then copies the bytes into an array of its own.

Uploads. A copy from pageable memory goes through the driver's small staging
buffers, so a batch of megabytes waits, chunk by chunk, for the stream's earlier
kernels: the worker stalled on each upload until the GPU had drained (an MLP batch
of 12.8 MB: the Learner ran 14.4 ms a step, the bare step 10). Here the uploading
thread copies its data into a pinned buffer (``staging``) instead of a plain one,
and the worker's copy from it is asynchronous.

Pinned blocks come from CuPy's pinned pool and go back to it only once their copy
has landed: each stays referenced here until its event has passed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from ember.kernels.later import Later

# Sizes that go through pinned memory. Larger ones stay blocking: pinned memory is
# scarce, and such copies are bandwidth-bound whoever waits (a guess). Smaller uploads
# fit the driver's staging buffers, which take them at once (a guess too).
MAX_BYTES = 64 << 20
MIN_STAGED_UPLOAD = 1 << 20


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


def staging(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
    """A pinned host array to fill with an upload's data (on the uploading thread), or
    None for a size that needs none."""
    import cupy

    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if not MIN_STAGED_UPLOAD <= nbytes <= MAX_BYTES:
        return None
    return np.ndarray(shape, dtype, buffer=cupy.cuda.alloc_pinned_memory(nbytes))


class HostCopies:
    """One worker's copies in flight, and the pinned blocks they still read or write."""

    def __init__(self) -> None:
        self._landing: deque[tuple[Any, list]] = deque()  # (event, pinned blocks)

    def _landed(self, event: Any, blocks: list) -> None:
        while self._landing and self._landing[0][0].done:
            self._landing.popleft()
        self._landing.append((event, blocks))

    def read(self, stream: Any, arrays: list[Any],
             finish: Callable[[list[np.ndarray]], Any]) -> InFlightRead:
        """Queue copies of ``arrays`` (CuPy arrays of this worker) on ``stream``."""
        import cupy

        staged, blocks = [], []
        for array in arrays:
            source = cupy.ascontiguousarray(array)  # 1-d for a 0-d array: shape from array
            block = cupy.cuda.alloc_pinned_memory(source.nbytes)
            host = np.ndarray(array.shape, source.dtype, buffer=block)
            cupy.cuda.runtime.memcpyAsync(host.ctypes.data, source.data.ptr, source.nbytes,
                                          cupy.cuda.runtime.memcpyDeviceToHost, stream.ptr)
            staged.append(host)
            blocks.append(block)
        event = stream.record()
        self._landed(event, blocks)
        return InFlightRead(event, staged, finish)

    @staticmethod
    def is_staged(data: np.ndarray) -> bool:
        """Whether ``data`` is a ``staging`` array."""
        import cupy

        return isinstance(data.base, cupy.cuda.PinnedMemoryPointer)

    def upload(self, stream: Any, data: np.ndarray) -> Any:
        """A CuPy array of ``data`` (a ``staging`` array), its copy queued on ``stream``."""
        import cupy

        array = cupy.empty(data.shape, data.dtype)
        cupy.cuda.runtime.memcpyAsync(array.data.ptr, data.ctypes.data, data.nbytes,
                                      cupy.cuda.runtime.memcpyHostToDevice, stream.ptr)
        self._landed(stream.record(), [data.base])
        return array
