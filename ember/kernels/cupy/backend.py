"""The CUDA backend: a CuPy stream and memory pool per device, owned by its worker thread.

CuPy's current device, stream and allocator are per thread, so the device actor's
worker calls ``start_worker`` first: from then on every kernel the worker launches
runs on this device's stream and allocates from this device's own pool, and nothing
on another thread ever touches them. Reads copy on that stream and wait for it, and a
sync drains it (on the worker, never on the caller's thread).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable
from typing import Any

import cupy
import numpy as np

from ember.kernels.cache import cache_dir
from ember.kernels.cupy import codegen, host_copies
from ember.kernels.cupy import indexing as _indexing  # noqa: F401  (registers its kernels)
from ember.kernels.cupy.fused import FusedKernels
from ember.kernels.cupy.range_checks import RangeChecks
from ember.kernels.cupy.side_stream import TwoStreams
from ember.kernels.cupy.table import KERNELS
from ember.kernels.fusion.planner import FusionPlanner
from ember.kernels.later import Later
from ember.kernels.numpy.table import NP, register_array_type

register_array_type(cupy.ndarray, cupy, cupy.asnumpy)

_KDL_CUDA = 2  # DLPack's device type of CUDA memory


# An elementwise op with nothing to fuse with runs as a generated kernel of its own from
# this many elements on: CuPy's ufuncs move one element per thread (a lone 64M-element add
# on the H200: 2.5 TB/s float32, 1.3 bfloat16; the generated kernel 4.3 and 2.5), and from
# about here the GPU time saved outweighs the group's extra ~25 µs of host time (a guess
# from those figures).
SINGLE_FROM = 1 << 20


# The pool's idle bytes are checked every so many releases (a guess: a sample cheap next to
# the releases), and "recent" spans two windows of that many checks.
_TRIM_EVERY = 256
_TRIM_WINDOW = 16
_POOL_BYTES = os.environ.get("EMBER_POOL_BYTES")


class CupyPool:
    """Hands kernels new device arrays (the device's CuPy memory pool recycles the memory)
    and checks index ranges on the device (``defer_range_check``)."""

    xp = cupy

    def __init__(self, checks: RangeChecks) -> None:
        self.defer_range_check = checks.defer_range_check

    @staticmethod
    def empty(shape: tuple[int, ...], dtype: np.dtype) -> cupy.ndarray:
        return cupy.empty(shape, dtype)


class CupyBackend:
    name = "cupy"
    # Kernel parameters live in 4 KiB of constant memory (32 KiB on Hopper); 32 pointers
    # plus sizes and strides stay far below, and wider groups gain little (a guess).
    MAX_FUSED_INPUTS = 32
    # The worker only launches what the GPU runs later: callers take turns with it
    # (device_actor.py), so it launches at once instead of waiting for the GIL.
    launches_async = True

    def __init__(self, index: int) -> None:
        self.index = index
        # Index range checks the device actor resolves when it reads (actors/deferred.py).
        self.deferred = RangeChecks()
        self.pool = CupyPool(self.deferred)
        self.stream: cupy.cuda.Stream | None = None
        self.memory: cupy.cuda.MemoryPool | None = None
        # Held for the worker's life: the stream stays current on its thread.
        self._context = contextlib.ExitStack()
        self.fused = FusedKernels(index, self.pool)
        self.host_copies = host_copies.HostCopies()
        # The pool's bound (_trim_pool): releases so far, and the peaks of used bytes seen.
        self._releases = self._checks = 0
        self._peak_used = self._previous_peak_used = 0
        # While a step is captured: which stream each op runs on (graphs.py, side_stream.py).
        self.two_streams: TwoStreams | None = None
        # Back-pressure in bytes: a quarter of the GPU's memory, so a chain of large
        # elementwise ops stays one batch (and one fused kernel) before the caller waits.
        total = cupy.cuda.runtime.getDeviceProperties(index)["totalGlobalMem"]
        self.max_bytes_in_flight = total // 4
        self.total_memory = total  # an output larger can never be allocated (ops/memory.py)

    def start_worker(self) -> None:
        """Select the device and make its stream and pool this (the worker) thread's own."""
        # Generated kernels persist with the other ember caches, keyed by CuPy by source,
        # compiler options, architecture and NVRTC version (the source names ember's version).
        os.environ.setdefault("CUPY_CACHE_DIR", cache_dir("cuda"))
        cupy.cuda.Device(self.index).use()
        self.memory = cupy.cuda.MemoryPool()
        # What cupy.cuda.using_allocator does on entry, without its generator: one left
        # open for the worker's life is closed by the garbage collector at interpreter
        # exit, on another thread, and prints "Exception ignored ... using_allocator".
        cupy.cuda.memory._set_thread_local_allocator(self.memory.malloc)
        self.stream = cupy.cuda.Stream(non_blocking=True)
        # Entered, not .use()d: CuPy's own `with stream:` blocks (get(stream=...) has one)
        # restore the top of the thread's stream stack on exit, which after .use() is the
        # null stream; uploads and kernels then ran there, unordered with the reads (seen
        # on the H200: 487 op tests read garbage).
        self._context.enter_context(self.stream)
        self.deferred.start()

    def caller_context(self) -> _OnCaller | None:
        """What a thread other than the worker enters to run batches (a reader that found
        the worker idle, holding the actor's turn): the worker's device, pool and stream
        are that thread's while inside. None until the worker has made them."""
        return None if self.stream is None else _OnCaller(self)

    def synchronize(self) -> None:
        """Wait until the GPU has run everything launched so far (``em.sync``)."""
        self.stream.synchronize()

    def run(self, msg: Any, inputs: list) -> Any:
        two_streams = self.two_streams
        if two_streams is None:
            result = KERNELS[msg.op](msg, self.pool, *inputs)
        else:
            result = two_streams.run(msg.op, inputs,
                                     lambda: KERNELS[msg.op](msg, self.pool, *inputs),
                                     shape=getattr(msg, "shape", None))
        if isinstance(result, tuple):
            return tuple(_on_device(r, dtype) for r, dtype in zip(result, msg.dtypes))
        return _on_device(result, msg.dtype)

    @functools.cached_property
    def collectives(self) -> bool:
        """Whether collectives across this host's GPUs run here (CuPy finds NCCL); importing
        nccl.py registers their kernels, before any rank's call reaches a worker."""
        try:
            import ember.kernels.cupy.nccl  # noqa: F401
        except (ImportError, OSError, RuntimeError):  # CuPy built or installed without NCCL
            return False
        return True

    def fusion_planner(self) -> FusionPlanner:
        return FusionPlanner(codegen.fusible, self.MAX_FUSED_INPUTS, reductions=True,
                             views=True, single_from=SINGLE_FROM)

    def graph_capturer(self) -> Any:
        """What captures and replays ``em.graphed`` steps here (used on the worker)."""
        from ember.kernels.cupy.graphs import CupyCapturer

        return CupyCapturer(self)

    def run_fused(self, group: Any, program: Any, inputs: list) -> list:
        two_streams = self.two_streams
        if two_streams is None:
            return self.fused.run(group, program, inputs)
        return two_streams.run("fused", inputs, lambda: self.fused.run(group, program, inputs),
                               lambda values: [value for _, value in values])

    # Runs on the uploading thread: a pinned array to copy an upload's data into.
    host_buffer = staticmethod(host_copies.staging)

    def upload(self, data: np.ndarray) -> cupy.ndarray:
        if self.host_copies.is_staged(data):
            return self.host_copies.upload(self.stream, data)
        return cupy.asarray(data)

    def to_host(self, value: cupy.ndarray) -> np.ndarray:
        host = value.get(stream=self.stream)
        host.flags.writeable = False  # a read is a snapshot, as on the CPU
        return host

    def read_later(self, value: cupy.ndarray, checks: Any = None,
                   failed: Callable[[dict], None] | None = None) -> Later | None:
        """``to_host`` without waiting: the copy queued behind the value's kernels, the
        reader waiting for it (host_copies.py); None for a read too large or empty for that.
        With ``checks`` (range checks tainting the value), a copy of their records comes
        along, and ``failed(errors by check)`` raises for those that failed."""
        if not 0 < value.nbytes <= host_copies.MAX_BYTES:
            return None
        deferred = self.deferred

        def finish(copies: list[np.ndarray]) -> np.ndarray:
            if checks:
                errors = deferred.failures(checks, copies[1])
                if errors:
                    failed(errors)
            copies[0].flags.writeable = False  # a read is a snapshot, as on the CPU
            return copies[0]

        arrays = [value, deferred.table] if checks else [value]
        return self.host_copies.read(self.stream, arrays, finish)

    def export(self, value: cupy.ndarray) -> cupy.ndarray:
        """The array itself, once this stream has finished writing it (another thread's
        stream reads it next)."""
        self.stream.synchronize()
        return value

    def import_(self, exported: Any, shape: tuple[int, ...], dtype: str) -> cupy.ndarray:
        if isinstance(exported, cupy.ndarray):
            if exported.device.id == self.index:
                return exported
            # A peer copy (CuPy copies to the current device), finished before the source
            # may recycle its buffer.
            copy = exported.copy()
            self.stream.synchronize()
            return copy
        return cupy.asarray(exported)

    def dlpack_device(self) -> tuple[int, int]:
        """Where this device's arrays live for DLPack: (kDLCUDA, index)."""
        return (_KDL_CUDA, self.index)

    def from_dlpack(self, producer: Any) -> cupy.ndarray:
        """Runs on the caller's thread: ``producer``'s memory (on this GPU) as a CuPy array,
        zero copy. The producer makes the caller's current stream wait for its writes
        (DLPack's stream argument); waiting for that stream here means the worker's
        stream, which does not order against it, reads finished data."""
        with cupy.cuda.Device(self.index):
            array = cupy.from_dlpack(producer)
            cupy.cuda.get_current_stream().synchronize()
        return array

    def release(self, value: cupy.ndarray) -> int:
        """Bytes the dropped array owned; CuPy's pool takes the memory back once unreferenced
        (in a capture, once no other stream may still read it: side_stream.py)."""
        if self.two_streams is not None:
            self.two_streams.hold(value)
        else:
            self._releases += 1
            if self._releases % _TRIM_EVERY == 0:
                self._trim_pool()
        return value.nbytes if value.base is None else 0

    def _trim_pool(self) -> None:
        """Return the pool's idle memory to the GPU when it holds more than the recent peak
        of live bytes (or ``EMBER_POOL_BYTES``), as the CPU's pool never keeps more."""
        memory = self.memory
        if memory is None:
            return
        used = memory.used_bytes()
        self._peak_used = max(self._peak_used, used)
        self._checks += 1
        if self._checks % _TRIM_WINDOW == 0:  # the window before still counts as recent
            self._previous_peak_used, self._peak_used = self._peak_used, used
        limit = max(self._peak_used, self._previous_peak_used)
        if _POOL_BYTES:
            limit = min(limit, int(_POOL_BYTES))
        if memory.free_bytes() > limit:
            memory.free_all_blocks()

    @staticmethod
    def owned_nbytes(value: cupy.ndarray) -> int:
        return value.nbytes if value.base is None else 0

    def statistics(self) -> dict[str, int]:
        memory = self.memory
        free = memory.free_bytes() if memory is not None else 0
        tuner = self.fused._tuner
        return {"buffers_pooled": 0, "bytes_pooled": free,
                "autotune_hits": tuner.hits if tuner is not None else 0,
                "autotune_misses": tuner.misses if tuner is not None else 0}


def _on_device(result: Any, dtype: str) -> cupy.ndarray:
    """Kernels return CuPy arrays; a host scalar (a few NumPy paths give one) is uploaded."""
    if isinstance(result, cupy.ndarray):
        return result
    return cupy.asarray(np.asarray(result, dtype=NP[dtype]))


class _OnCaller:
    """The worker's device, memory pool and stream, current on the entering thread."""

    __slots__ = ("_backend", "_device", "_allocator")

    def __init__(self, backend: CupyBackend) -> None:
        self._backend = backend

    def __enter__(self) -> None:
        backend = self._backend
        self._device = cupy.cuda.Device(backend.index)
        self._device.__enter__()
        self._allocator = cupy.cuda.memory._get_thread_local_allocator()
        cupy.cuda.memory._set_thread_local_allocator(backend.memory.malloc)
        backend.stream.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._backend.stream.__exit__(*exc)
        cupy.cuda.memory._set_thread_local_allocator(self._allocator)
        self._device.__exit__(*exc)
