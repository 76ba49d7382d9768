"""Index range checks on the device: recorded by a kernel, read back only when needed.

A check launches one kernel over the index tensor that records, in a slot of a
device-wide table, the smallest value below the allowed range and the largest at or
above it (atomics; the sentinels mean none). Nothing waits: the gather that follows
wraps a bad value into range as CuPy does (never an out-of-bounds access), and the
device actor taints what it computes (``ember/actors/deferred.py``) until ``resolve``
reads the table, once for every pending check, when a tainted value is read.

Slots: a check holds its slot until resolved, then frees it; a check captured into a
CUDA graph keeps its slot for the graph's life (``keep``), its kernel writing there at
every replay, and a resolved failure puts its slot's sentinels back. With every slot
taken a check runs at once instead, reading the range back (the old, waiting way).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ember.dtype import storage_name
from ember.kernels.numpy.indexing import check_range, range_error

if TYPE_CHECKING:
    import cupy

SLOTS = 1024
_NONE_BELOW, _NONE_ABOVE = np.iinfo(np.int64).max, np.iinfo(np.int64).min
_BLOCK, _MAX_BLOCKS = 256, 1024
_INDEX_TYPES = {"int64": "long long", "int32": "int"}


def source(dtype: str) -> str:
    """The check kernel for an index of ``dtype`` (int64 or int32)."""
    return f"""
extern "C" __global__ void ember_index_range_{dtype}(
    const {_INDEX_TYPES[dtype]}* index, long long n, long long low, long long size,
    long long* record) {{
  long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {{
    long long v = index[i];
    if (v < low) atomicMin(&record[0], v);
    else if (v >= size) atomicMax(&record[1], v);
  }}
}}
"""


class RangeCheck:
    """One deferred check: where it records, and what its error names."""

    __slots__ = ("dim", "kept", "op", "size", "slot")

    def __init__(self, op: str, slot: int, size: int, dim: int) -> None:
        self.op, self.slot, self.size, self.dim = op, slot, size, dim
        self.kept = False


class RangeChecks:
    """The slot table of one device and the checks recorded in it (used on its worker)."""

    def __init__(self) -> None:
        self.created: list[RangeCheck] = []  # since the actor last took them
        self._free = list(range(SLOTS - 1, -1, -1))
        self._table: cupy.ndarray | None = None
        self._kernels: dict[str, cupy.RawKernel] = {}

    def start(self) -> None:
        """Allocate the table (on the worker, with its device, stream and pool current)."""
        import cupy  # here, not at import: source() renders on machines without CuPy

        self._table = cupy.empty((SLOTS, 2), np.int64)
        self._table[:, 0] = _NONE_BELOW
        self._table[:, 1] = _NONE_ABOVE

    def defer_range_check(self, op: str, index: cupy.ndarray, low: int, size: int,
                          dim: int) -> None:
        """Check that ``index`` lies in ``[low, size)`` on the device (``check_range``'s
        deferred form); with no slot free, check it now."""
        n = index.size
        if not n:
            return
        if not self._free:
            check_range(None, op, index, low, size, dim)
            return
        import cupy

        dtype = storage_name(index.dtype)
        if dtype not in _INDEX_TYPES:
            index = index.astype(np.int64)
            dtype = "int64"
        kernel = self._kernels.get(dtype)
        if kernel is None:
            kernel = self._kernels[dtype] = cupy.RawKernel(source(dtype),
                                                           f"ember_index_range_{dtype}")
        slot = self._free.pop()
        index = cupy.ascontiguousarray(index)
        blocks = min(_MAX_BLOCKS, -(-n // _BLOCK))
        kernel((blocks,), (_BLOCK,), (index, np.int64(n), np.int64(low), np.int64(size),
                                      self._table[slot]))
        self.created.append(RangeCheck(op, slot, size, dim))

    def keep(self, checks: Any) -> None:
        """``checks`` were captured into a graph: their slots stay theirs."""
        for check in checks:
            check.kept = True

    @property
    def table(self) -> cupy.ndarray:
        """The slots' records on the device (what ``failures`` reads a host copy of)."""
        return self._table

    @staticmethod
    def failures(checks: Any, records: np.ndarray) -> dict[RangeCheck, Exception]:
        """The error of every check in ``checks`` that failed, by a host copy of the
        table taken after their kernels ran."""
        failed: dict[RangeCheck, Exception] = {}
        for check in checks:
            below, above = (int(v) for v in records[check.slot])
            if below != _NONE_BELOW or above != _NONE_ABOVE:
                bad = below if below != _NONE_BELOW else above
                failed[check] = range_error(check.op, bad, check.dim, check.size)
        return failed

    def resolve(self, checks: list[RangeCheck]) -> dict[RangeCheck, Exception]:
        """The error of every check in ``checks`` that failed (waits for the worker's
        stream, the current one); frees the slots not kept and resets the failed ones."""
        failed = self.failures(checks, self._table.get())
        for check in checks:
            if not check.kept:
                self._free.append(check.slot)
        if failed:
            import cupy

            slots = cupy.asarray([check.slot for check in failed])
            self._table[slots, 0] = _NONE_BELOW
            self._table[slots, 1] = _NONE_ABOVE
        return failed
