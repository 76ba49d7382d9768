"""CUDA graphs of ``em.graphed`` steps: the capturer ``StepGraphs`` drives on a device.

Capture runs on the worker's own stream (CuPy's stream capture, relaxed mode), with the
worker's allocator switched to a memory pool of the graph's own: every buffer the step
allocates, its outputs and its intermediates, keeps its address for the graph's life,
and no other work is ever handed that memory. Matmuls are cuBLAS calls CuPy lets a
capture hold (gemm.py); generated kernels were compiled and autotuned by the step's
first, uncaptured run. Independent products run on a second stream, ordered against
the first by events (side_stream.py), so the graph runs them side by side;
``SIDE_STREAM = False`` (or ``EMBER_SIDE_STREAM=0``) keeps captures on one stream.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import cupy
from cupy.cuda import memory as cupy_memory

from ember.kernels.cupy import copy_many, gemm
from ember.kernels.cupy.side_stream import MAIN, TwoStreams

# Read at each capture's start.
SIDE_STREAM = os.environ.get("EMBER_SIDE_STREAM", "1") != "0"


def _allocation(array: cupy.ndarray) -> int:
    """The address of the allocation ``array`` lives in (a view: its base's)."""
    return array.data.mem.ptr


class _SideStream:
    """A device's second stream for captures, and events to order the two (made on the
    worker, from the device's own memory pool, outside any capture)."""

    def __init__(self, main: cupy.cuda.Stream) -> None:
        self._streams = (main, cupy.cuda.Stream(non_blocking=True))
        self._events: list[cupy.cuda.Event] = []  # reused by every capture
        self._used = 0
        with self._streams[1]:
            gemm.current()  # its own cuBLAS handle and workspace

    def start(self) -> None:
        self._used = 0

    def record(self, stream: int) -> cupy.cuda.Event:
        if self._used == len(self._events):
            self._events.append(cupy.cuda.Event(disable_timing=True))
        event = self._events[self._used]
        self._used += 1
        event.record(self._streams[stream])
        return event

    def wait(self, stream: int, event: cupy.cuda.Event) -> None:
        self._streams[stream].wait_event(event)

    def on(self, stream: int) -> Any:
        return contextlib.nullcontext() if stream == MAIN else self._streams[stream]


class CupyCapturer:
    """Capture and replay on one device's stream (made and used on its worker)."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self._side_stream: _SideStream | None = None
        self.side_ops = 0  # ops the last capture ran on the side stream

    @contextlib.contextmanager
    def memory(self) -> Iterator[cupy.cuda.MemoryPool]:
        """A new pool for one graph, the worker's allocator while the block runs."""
        if SIDE_STREAM and self._side_stream is None:  # from the device's pool, made once
            self._side_stream = _SideStream(self._backend.stream)
        pool = cupy.cuda.MemoryPool()
        cupy_memory._set_thread_local_allocator(pool.malloc)
        try:
            yield pool
        finally:
            cupy_memory._set_thread_local_allocator(self._backend.memory.malloc)

    def begin(self) -> None:
        self.side_ops = 0
        self._backend.stream.begin_capture()
        if SIDE_STREAM and self._side_stream is not None:
            self._side_stream.start()
            self._backend.two_streams = TwoStreams(self._side_stream, _allocation)

    def end(self) -> cupy.cuda.Graph | None:
        """The captured graph; None when the capture was invalidated by a call it refused
        (ending it raises then, and must still be asked for: until it is, the stream
        refuses all work) or had already ended."""
        backend = self._backend
        two_streams, backend.two_streams = backend.two_streams, None
        joined = True
        if two_streams is not None:
            self.side_ops = two_streams.side_ops
            try:
                two_streams.join()  # a capture ends with every stream it forked joined
            except Exception:  # the capture was invalidated: still ended below, no graph
                joined = False
        try:
            graph = backend.stream.end_capture()
        except Exception:  # invalidated, or not capturing: no graph
            return None
        return graph if joined else None

    def launch(self, graph: cupy.cuda.Graph) -> None:
        graph.launch(stream=self._backend.stream)

    @staticmethod
    def copy(value: cupy.ndarray) -> cupy.ndarray:
        """A graph input buffer holding ``value`` (from the current allocator)."""
        return value.copy()

    def copy_out(self, values: list[cupy.ndarray]) -> list[cupy.ndarray]:
        """An earlier replay's outputs, moved to buffers of their own before the next (the
        contiguous ones by one launch: copy_many.py)."""
        copies = [cupy.empty(v.shape, v.dtype) if v.flags.c_contiguous else v.copy()
                  for v in values]
        copy_many.copy_many([(c, v) for c, v in zip(copies, values) if v.flags.c_contiguous])
        return copies

    def copy_into(self, static: cupy.ndarray, value: cupy.ndarray) -> None:
        if (static.flags.c_contiguous and value.flags.c_contiguous
                and static.shape == value.shape and static.dtype == value.dtype):
            self._memcpy(static, value)
        else:
            cupy.copyto(static, value)

    def _memcpy(self, dst: cupy.ndarray, src: cupy.ndarray) -> None:
        # One runtime call on the worker's stream: a copy kernel launched through CuPy
        # costs several times its host time.
        if src.nbytes:
            cupy.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes,
                                          cupy.cuda.runtime.memcpyDeviceToDevice,
                                          self._backend.stream.ptr)
