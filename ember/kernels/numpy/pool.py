"""A per-device pool of NumPy buffers, reused by exact shape and dtype.

Training loops allocate the same shapes every step; reusing those buffers
skips the page faults of fresh large allocations and keeps RSS flat.

The pool never holds more idle bytes than the device's recent peak of live bytes
(the values its kernels made and the device still holds), nor more than
``EMBER_POOL_BYTES`` where that is set: buffers a loop never asks for again
(most NumPy kernels allocate their own outputs) cannot pile up past what the
device needed at once.
"""

from __future__ import annotations

import os
import sys

import numpy as np

# Below this size malloc's own free lists are as fast as a pool lookup.
_MIN_POOLED_BYTES = 1 << 16
_CAPACITY_SETTING = os.environ.get("EMBER_POOL_BYTES")
# How long "recent" is, in releases: the peak of the window before the current one
# still counts, so a loop's peak survives one window boundary. A guess, long enough
# to span several training steps of a large model.
WINDOW_RELEASES = 4096
# References to a buffer when nothing else holds it: the caller's local, this
# function's argument, and getrefcount's own argument. A view or a reader's
# array holds one more, and such buffers must never be reused.
_REFS_WHEN_UNSHARED = 3


class BufferPool:
    xp = np  # the array module kernels create arrays with (creation kernels have no input)

    def __init__(self, capacity: int | None = None) -> None:
        if capacity is None and _CAPACITY_SETTING:
            capacity = int(_CAPACITY_SETTING)
        self.capacity = capacity  # None: bounded by the recent peak alone
        self._free: dict[tuple, list[np.ndarray]] = {}
        self._bytes = 0
        self._count = 0
        self._live = 0
        self._peak = 0  # of live bytes in this window
        self._previous_peak = 0  # in the window before
        self._releases = 0

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An uninitialized array, from the pool when one of this shape is free."""
        stack = self._free.get((shape, dtype))
        if stack:
            array = stack.pop()
            self._bytes -= array.nbytes
            self._count -= 1
            return array
        return np.empty(shape, dtype)

    def lend(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A scratch buffer for a kernel's own use, live until ``give_back``."""
        array = self.empty(shape, dtype)
        self.made(array)
        return array

    def give_back(self, array: np.ndarray) -> None:
        """Take back a lent scratch buffer if no one else holds it."""
        self._live = max(self._live - array.nbytes, 0)
        if (sys.getrefcount(array) <= _REFS_WHEN_UNSHARED
                and self._bytes + array.nbytes <= self.limit()):
            self._keep(array)

    def made(self, value: np.ndarray) -> None:
        """Count a value the device now holds (a kernel's output, an upload) as live."""
        if type(value) is np.ndarray and value.base is None:
            live = self._live + value.nbytes
            self._live = live
            if live > self._peak:
                self._peak = live

    def limit(self) -> int:
        """The most idle bytes the pool may hold now."""
        recent = max(self._peak, self._previous_peak)
        return recent if self.capacity is None else min(recent, self.capacity)

    def release(self, array: np.ndarray) -> int:
        """Take back a dropped buffer if no one else holds it; returns the bytes it owned."""
        if type(array) is not np.ndarray or array.base is not None:
            return 0
        nbytes = array.nbytes
        self._live = max(self._live - nbytes, 0)  # values made elsewhere were never counted
        self._releases += 1
        if self._releases >= WINDOW_RELEASES:
            self._next_window()
        if (nbytes >= _MIN_POOLED_BYTES and sys.getrefcount(array) <= _REFS_WHEN_UNSHARED
                and self._bytes + nbytes <= self.limit() and array.flags.c_contiguous
                and array.flags.writeable):
            self._keep(array)
        return nbytes

    def _keep(self, array: np.ndarray) -> None:
        self._free.setdefault((array.shape, array.dtype), []).append(array)
        self._bytes += array.nbytes
        self._count += 1

    def _next_window(self) -> None:
        self._previous_peak, self._peak, self._releases = self._peak, self._live, 0
        limit = self.limit()
        while self._bytes > limit:  # the peak fell: give back the largest idle buffers
            key = max((k for k, stack in self._free.items() if stack),
                      key=lambda k: self._free[k][0].nbytes)
            array = self._free[key].pop()
            if not self._free[key]:
                del self._free[key]
            self._bytes -= array.nbytes
            self._count -= 1

    def clear(self) -> None:
        self._free.clear()
        self._bytes = self._count = 0

    def statistics(self) -> dict[str, int]:
        return {"buffers_pooled": self._count, "bytes_pooled": self._bytes}
