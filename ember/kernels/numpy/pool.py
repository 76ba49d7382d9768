"""A per-device pool of NumPy buffers, reused by exact shape and dtype.

Training loops allocate the same shapes every step; reusing those buffers
skips the page faults of fresh large allocations and keeps RSS flat.

The pool never holds more idle bytes than the device's recent peak of live bytes
(the values its kernels made and the device still holds), nor more than
``EMBER_POOL_BYTES`` where that is set: buffers a loop never asks for again
(most NumPy kernels allocate their own outputs) cannot pile up past what the
device needed at once.

A full pool still makes room for a shape that kernels keep asking for and missing, by
giving back buffers of shapes nobody asked for lately (a program that moves on from
one workload to the next would otherwise find the pool full of the last one's shapes
and fault in fresh pages on every call). Shapes a loop uses every step are never idle
that long, so a training loop's buffers stay.
"""

from __future__ import annotations

import os
import sys
from time import monotonic

import numpy as np

# Below this size malloc's own free lists are as fast as a pool lookup.
_MIN_POOLED_BYTES = 1 << 16
_CAPACITY_SETTING = os.environ.get("EMBER_POOL_BYTES")
# How long "recent" is, in releases of buffers the pool would keep: the peak of the
# window before the current one still counts, so a loop's peak survives one window
# boundary. A guess, long enough to span several training steps of a large model.
WINDOW_RELEASES = 4096
# References to a buffer when nothing else holds it: the caller's local, this
# function's argument, and getrefcount's own argument. A view or a reader's
# array holds one more, and such buffers must never be reused.
_REFS_WHEN_UNSHARED = 3
# How long a pooled shape must have gone unasked for before it makes room for a shape
# that kernels miss: far longer than a training step, far shorter than a workload.
IDLE_S = 0.25
# Missed shapes remembered at most (a program of ever-new shapes forgets them all).
_MAX_MISSED = 256


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
        self._asked: dict[tuple, float] = {}  # when each pooled shape was last asked for
        self._missed: set[tuple] = set()  # large shapes asked for when none was free

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An uninitialized array, from the pool when one of this shape is free."""
        key = (shape, dtype)
        stack = self._free.get(key)
        if stack:
            array = stack.pop()
            self._bytes -= array.nbytes
            self._count -= 1
            self._asked[key] = monotonic()
            return array
        array = np.empty(shape, dtype)
        if array.nbytes >= _MIN_POOLED_BYTES:
            if len(self._missed) >= _MAX_MISSED:
                self._missed.clear()
            self._missed.add(key)
        return array

    def lend(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A scratch buffer for a kernel's own use, live until ``give_back``."""
        array = self.empty(shape, dtype)
        self.made(array)
        return array

    def give_back(self, array: np.ndarray) -> None:
        """Take back a lent scratch buffer if no one else holds it."""
        if array.nbytes < _MIN_POOLED_BYTES:
            return
        self._live = max(self._live - array.nbytes, 0)
        if (sys.getrefcount(array) <= _REFS_WHEN_UNSHARED
                and self._bytes + array.nbytes <= self.limit()):
            self._keep(array)

    def made(self, value: np.ndarray) -> None:
        """Count a value the device now holds (a kernel's output, an upload) as live; only
        buffers the pool would keep count (the peak bounds what it keeps)."""
        if (type(value) is np.ndarray and value.base is None
                and value.nbytes >= _MIN_POOLED_BYTES):
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
        if nbytes < _MIN_POOLED_BYTES:  # never counted live, never kept
            return nbytes
        self._live = max(self._live - nbytes, 0)  # values made elsewhere were never counted
        self._releases += 1
        if self._releases >= WINDOW_RELEASES:
            self._next_window()
        if (sys.getrefcount(array) <= _REFS_WHEN_UNSHARED
                and array.flags.c_contiguous and array.flags.writeable
                and (self._bytes + nbytes <= self.limit() or self._make_room(array))):
            self._keep(array)
        return nbytes

    def _make_room(self, array: np.ndarray) -> bool:
        """Whether idle shapes were given back so that ``array``, of a shape kernels have
        missed, fits: the longest-unasked first, only those idle for ``IDLE_S``."""
        key = (array.shape, array.dtype)
        limit = self.limit()
        if key not in self._missed or array.nbytes > limit:
            return False
        idle_since = monotonic() - IDLE_S
        asked = self._asked
        idle = sorted((k for k, stack in self._free.items()
                       if stack and k != key and asked.get(k, 0.0) < idle_since),
                      key=lambda k: asked.get(k, 0.0))
        idle_bytes = sum(a.nbytes for k in idle for a in self._free[k])
        if self._bytes - idle_bytes + array.nbytes > limit:
            return False  # not enough is idle: give nothing back for nothing
        # Oldest first, one buffer at a time: no more goes back than the room needed.
        for k in idle:
            stack = self._free[k]
            while stack and self._bytes + array.nbytes > limit:
                self._bytes -= stack.pop().nbytes
                self._count -= 1
            if not stack:
                del self._free[k]
                asked.pop(k, None)
        self._missed.discard(key)
        return True

    def _keep(self, array: np.ndarray) -> None:
        key = (array.shape, array.dtype)
        self._free.setdefault(key, []).append(array)
        self._asked.setdefault(key, monotonic())
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
                self._asked.pop(key, None)
            self._bytes -= array.nbytes
            self._count -= 1

    def clear(self) -> None:
        self._free.clear()
        self._asked.clear()
        self._missed.clear()
        self._bytes = self._count = 0

    def statistics(self) -> dict[str, int]:
        return {"buffers_pooled": self._count, "bytes_pooled": self._bytes}
