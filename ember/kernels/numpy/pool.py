"""A per-device pool of NumPy buffers, reused by exact shape and dtype.

Training loops allocate the same shapes every step; reusing those buffers
skips the page faults of fresh large allocations and keeps RSS flat.
"""

from __future__ import annotations

import os
import sys

import numpy as np

# Below this size malloc's own free lists are as fast as a pool lookup.
_MIN_POOLED_BYTES = 1 << 16
DEFAULT_CAPACITY = int(os.environ.get("EMBER_POOL_BYTES", str(512 << 20)))
# References to a buffer when nothing else holds it: the caller's local, this
# function's argument, and getrefcount's own argument. A view or a reader's
# array holds one more, and such buffers must never be reused.
_REFS_WHEN_UNSHARED = 3


class BufferPool:
    xp = np  # the array module kernels create arrays with (creation kernels have no input)

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._free: dict[tuple, list[np.ndarray]] = {}
        self._bytes = 0
        self._count = 0

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An uninitialized array, from the pool when one of this shape is free."""
        stack = self._free.get((shape, dtype))
        if stack:
            array = stack.pop()
            self._bytes -= array.nbytes
            self._count -= 1
            return array
        return np.empty(shape, dtype)

    def release(self, array: np.ndarray) -> int:
        """Take back a dropped buffer if no one else holds it; returns the bytes it owned."""
        if type(array) is not np.ndarray or array.base is not None:
            return 0
        nbytes = array.nbytes
        if (nbytes >= _MIN_POOLED_BYTES and sys.getrefcount(array) <= _REFS_WHEN_UNSHARED
                and self._bytes + nbytes <= self.capacity and array.flags.c_contiguous
                and array.flags.writeable):
            self._free.setdefault((array.shape, array.dtype), []).append(array)
            self._bytes += nbytes
            self._count += 1
        return nbytes

    def clear(self) -> None:
        self._free.clear()
        self._bytes = self._count = 0

    def statistics(self) -> dict[str, int]:
        return {"buffers_pooled": self._count, "bytes_pooled": self._bytes}
