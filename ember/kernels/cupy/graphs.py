"""CUDA graphs of ``em.graphed`` steps: the capturer ``StepGraphs`` drives on a device.

Capture runs on the worker's own stream (CuPy's stream capture, relaxed mode), with the
worker's allocator switched to a memory pool of the graph's own: every buffer the step
allocates, its outputs and its intermediates, keeps its address for the graph's life,
and no other work is ever handed that memory. Matmuls are cuBLAS calls CuPy lets a
capture hold (gemm.py); generated kernels were compiled and autotuned by the step's
first, uncaptured run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import cupy
from cupy.cuda import memory as cupy_memory

from ember.kernels.cupy import copy_many


class CupyCapturer:
    """Capture and replay on one device's stream (made and used on its worker)."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend

    @contextlib.contextmanager
    def memory(self) -> Iterator[cupy.cuda.MemoryPool]:
        """A new pool for one graph, the worker's allocator while the block runs."""
        pool = cupy.cuda.MemoryPool()
        cupy_memory._set_thread_local_allocator(pool.malloc)
        try:
            yield pool
        finally:
            cupy_memory._set_thread_local_allocator(self._backend.memory.malloc)

    def begin(self) -> None:
        self._backend.stream.begin_capture()

    def end(self) -> cupy.cuda.Graph | None:
        """The captured graph; None when the capture was invalidated by a call it refused
        (ending it raises then, and must still be asked for: until it is, the stream
        refuses all work) or had already ended."""
        try:
            return self._backend.stream.end_capture()
        except Exception:  # invalidated, or not capturing: no graph
            return None

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
