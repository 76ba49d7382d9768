"""A per-device pool of wgpu buffers, reused by size class.

Creating a wgpu buffer costs a driver call and zero-fills it; a training loop
asks for the same sizes every step. Sizes round up to a class (quarter steps
between powers of two, so at most 25% is wasted) and freed buffers wait in
the pool for the next request of their class.
"""

from __future__ import annotations

import os
import threading
from typing import Any

DEFAULT_CAPACITY = int(os.environ.get("EMBER_WGPU_POOL_BYTES", str(1 << 30)))
# Every buffer is at least this big: bindings of size 0 are invalid, and tiny
# buffers share one class (a guess; 256 is the usual storage offset alignment).
_MIN_BYTES = 256


def size_class(nbytes: int) -> int:
    """``nbytes`` rounded up to its pool class."""
    if nbytes <= _MIN_BYTES:
        return _MIN_BYTES
    top = 1 << (nbytes - 1).bit_length()
    quarter = top // 8  # classes at 5/8, 6/8, 7/8 and 8/8 of the next power of two
    return -(-nbytes // quarter) * quarter


class BufferPool:
    """Free buffers by size class; thread-safe (arrays may die on any thread)."""

    def __init__(self, create: Any, destroy: Any, capacity: int = DEFAULT_CAPACITY) -> None:
        self._create = create
        self._destroy = destroy
        self.capacity = capacity
        self._free: dict[int, list[Any]] = {}
        self._bytes = 0
        self._count = 0
        self._lock = threading.Lock()
        self.allocated = 0
        self.reused = 0

    def take(self, nbytes: int) -> tuple[Any, int]:
        """A buffer of at least ``nbytes``: (buffer, its class size)."""
        size = size_class(nbytes)
        with self._lock:
            stack = self._free.get(size)
            if stack:
                self._bytes -= size
                self._count -= 1
                self.reused += 1
                return stack.pop(), size
        self.allocated += 1
        return self._create(size), size

    def give_back(self, buffer: Any, size: int) -> None:
        with self._lock:
            if self._bytes + size <= self.capacity:
                self._free.setdefault(size, []).append(buffer)
                self._bytes += size
                self._count += 1
                return
        self._destroy(buffer)

    def clear(self) -> None:
        with self._lock:
            stacks, self._free = self._free, {}
            self._bytes = self._count = 0
        for stack in stacks.values():
            for buffer in stack:
                self._destroy(buffer)

    def statistics(self) -> dict[str, int]:
        return {"buffers_pooled": self._count, "bytes_pooled": self._bytes}
