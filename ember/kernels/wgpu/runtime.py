"""The wgpu runtime of one adapter: device and queue, buffers, uploads, reads, dispatches.

Adapters: ``adapters()`` lists the compute-capable adapters (Vulkan, Metal,
D3D12; wgpu's OpenGL fallback is left out: its compute support is partial, and
a machine without Vulkan would otherwise get a silent software GL device).
Discovery runs once per process, in a thread with a time limit, so a broken
driver makes ``em.available("wgpu")`` empty instead of hanging.

Ordering: dispatches are recorded into one command encoder, one compute pass
each, and submitted every ``_SUBMIT_EVERY`` dispatches, once they add up to
``_SUBMIT_GROUPS`` workgroups, or before anything that acts on the queue
directly (an upload's ``write_buffer``, a read). A
pooled buffer can thus be reused by a later dispatch while earlier ones still
read it: the queue runs them in order. Each dispatch's params are a slice of
one uniform ring buffer (bound at a dynamic offset), written for the whole
encoder by one ``write_buffer`` just before its submit; bind groups are cached
by their buffers, so a steady loop creates none.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.errors import DeviceError
from ember.kernels.wgpu.fault_checks import FaultChecks
from ember.kernels.wgpu.pool import BufferPool
from ember.kernels.wgpu.table import (STORAGE, Allocation, WgpuArray, check_dtype, check_values,
                                      contiguous_strides)
from ember.tracing import TraceEvent, active, now_ns

_COMPUTE_BACKENDS = ("Vulkan", "Metal", "D3D12")
# Seconds adapter discovery may take (lavapipe: ~1.5 s) before wgpu counts as absent.
PROBE_TIMEOUT_S = float(os.environ.get("EMBER_WGPU_PROBE_TIMEOUT", "30"))
# Dispatches recorded before a submit: bounds the commands a read may wait behind (a guess).
_SUBMIT_EVERY = 64
# Workgroups recorded before a submit: a large kernel goes to the GPU at once, so the
# GPU runs it while the host records the next ones (a guess: ~4M invocations).
_SUBMIT_GROUPS = 16384
_MAX_GROUPS = 65535  # WebGPU's guaranteed workgroups per dimension
# The uniform ring for dispatch params: a submit's worth of slices at most (64 dispatches
# of at most a few KiB each) fits many times over.
_RING_BYTES = 4 << 20
# Storage buffers one kernel binds at most, whatever the adapter offers: the fusion
# planner's input cap and _PARAMS_BYTES are sized for this many, and CI's lavapipe offers
# exactly 32. NVIDIA's Vulkan driver offers 1048576 (H200, driver 580.159.04): a fused
# group's inputs and params would have no bound (there the test that fills the limit,
# a chain of a million tensors, lost its pytest worker).
_MAX_STORAGE_BUFFERS = 32
# Params one dispatch may bind: 1024 words, past what the renderers need at rank 8 with
# _MAX_STORAGE_BUFFERS buffers.
_PARAMS_BYTES = 4096
# Bind groups cached per device (a guess: a large model's step uses a few thousand).
_MAX_BIND_GROUPS = 4096

_adapters: list | None = None
_adapters_lock = threading.Lock()


def adapters() -> list:
    """The usable wgpu adapters, in wgpu's order; empty where wgpu or a driver is missing."""
    global _adapters
    with _adapters_lock:
        if _adapters is None:
            found: list = []

            def probe() -> None:
                try:
                    import wgpu

                    found.extend(a for a in wgpu.gpu.enumerate_adapters_sync()
                                 if a.info.get("backend_type") in _COMPUTE_BACKENDS)
                except Exception:  # no wgpu, no loader, no driver: no adapters
                    found.clear()

            thread = threading.Thread(target=probe, name="ember-wgpu-probe", daemon=True)
            thread.start()
            thread.join(PROBE_TIMEOUT_S)
            _adapters = list(found) if not thread.is_alive() else []
        return _adapters


def usable_storage_buffers(adapter_limit: int) -> int:
    """Storage buffers one kernel may bind: the adapter's limit, capped at what the
    renderers are sized for."""
    return min(adapter_limit, _MAX_STORAGE_BUFFERS)


class Runtime:
    """Device, queue, buffer pool and pipeline cache of one adapter (``wgpu:index``)."""

    def __init__(self, index: int) -> None:
        import wgpu

        found = adapters()
        if index >= len(found):
            raise DeviceError(f"wgpu:{index}: no such adapter ({len(found)} found); "
                              f"em.available('wgpu') lists usable devices")
        self._wgpu = wgpu
        self.name = f"wgpu:{index}"
        # Gathers' fault buffers the device actor resolves when it reads (fault_checks.py).
        self.faults = FaultChecks(self)
        adapter = found[index]
        self.adapter_name = adapter.info.get("device", "unknown")
        self.has_f16 = "shader-f16" in adapter.features
        wanted = ("max-storage-buffers-per-shader-stage", "max-buffer-size",
                  "max-storage-buffer-binding-size", "max-compute-workgroup-storage-size",
                  "max-compute-invocations-per-workgroup", "max-compute-workgroup-size-x",
                  "max-compute-workgroup-size-y")
        required = {k: adapter.limits[k] for k in wanted}
        required["max-storage-buffers-per-shader-stage"] = usable_storage_buffers(
            adapter.limits["max-storage-buffers-per-shader-stage"])
        self.device = adapter.request_device_sync(
            required_features=["shader-f16"] if self.has_f16 else [],
            required_limits=required)
        self.queue = self.device.queue
        self.limits = dict(self.device.limits)
        self.max_storage_buffers = usable_storage_buffers(
            self.limits["max-storage-buffers-per-shader-stage"])
        self.max_binding_bytes = min(self.limits["max-storage-buffer-binding-size"],
                                     self.limits["max-buffer-size"])
        usage = wgpu.BufferUsage
        self._usage = usage.STORAGE | usage.COPY_SRC | usage.COPY_DST
        self.pool = BufferPool(self._create_buffer, self._destroy_buffer)
        self._bind_groups: dict[tuple, Any] = {}
        self._doomed: list[Any] = []
        self._keys_of_buffer: dict[int, list[tuple]] = {}
        self._pipelines: dict[tuple[int, int, str], Any] = {}
        self._layouts: dict[tuple[int, int], tuple[Any, Any]] = {}
        self._encoder: Any = None
        self._recorded = 0
        self._recorded_groups = 0
        # Params of the recorded dispatches, written to the ring in one write_buffer at
        # submit; each dispatch binds its own aligned slice.
        self._align = self.limits["min-uniform-buffer-offset-alignment"]
        self._ring = self.device.create_buffer(
            size=_RING_BYTES, usage=usage.UNIFORM | usage.COPY_DST)
        self._ring_start = 0
        self._pending_params = bytearray()
        self._pending_writes: list[Allocation] = []
        self.dispatches = 0
        self.compiles = 0
        self.compile_seconds = 0.0
        self.pipeline_hits = 0

    # ----- buffers -------------------------------------------------------------------

    def _create_buffer(self, size: int) -> Any:
        return self.device.create_buffer(size=size, usage=self._usage)

    def empty(self, shape: tuple[int, ...], dtype: str) -> WgpuArray:
        """A fresh contiguous array of ember dtype ``dtype`` (contents undefined)."""
        check_dtype(dtype, "allocate", self.name, self.has_f16)
        shape = tuple(shape)
        count = 1
        for size in shape:
            count *= size
        nbytes = count * STORAGE[dtype][1]
        if nbytes > self.max_binding_bytes:
            raise DeviceError(f"{self.name}: a {dtype} tensor of shape {shape} needs {nbytes} "
                              f"bytes, over the adapter's {self.max_binding_bytes}-byte limit "
                              f"for one storage binding")
        buffer, size = self.pool.take(nbytes)
        return WgpuArray(Allocation(buffer, size, self.pool), shape,
                         contiguous_strides(shape), 0, dtype)

    def upload(self, data: np.ndarray) -> WgpuArray:
        """Copy a host array to the device (int64 must fit int32; see table.STORAGE)."""
        dtype = str(data.dtype)
        check_dtype(dtype, "upload", self.name, self.has_f16)
        check_values(data, "upload", self.name)
        storage = STORAGE[dtype][2]
        out = self.empty(data.shape, dtype)
        host = np.ascontiguousarray(data, dtype=storage)
        raw = host.tobytes()
        if len(raw) % 4:
            raw += b"\0" * (4 - len(raw) % 4)  # write_buffer copies whole 4-byte words
        if raw:
            self.flush()
            self.queue.write_buffer(out.buffer, 0, raw)
        return out

    def read(self, array: WgpuArray, dense: WgpuArray | None = None) -> np.ndarray:
        """The data of ``array`` as a new host array of its ember dtype, read from
        ``dense`` (a dense copy, for a strided ``array``) or from ``array`` itself."""
        source = array if dense is None else dense
        _check_intact(array)
        storage = STORAGE[array.dtype]
        host_dtype = np.dtype(np.bool_) if array.dtype == "bool" else np.dtype(array.dtype)
        count = array.size
        if count == 0:
            return np.empty(array.shape, host_dtype)
        if not source.contiguous:
            raise ValueError(f"{self.name}: read needs a contiguous array, got {source!r}")
        start = source.offset * storage[1]
        nbytes = count * storage[1]
        # read_buffer copies whole 4-byte words from a 4-byte-aligned offset.
        lead = start % 4
        span = -(-(lead + nbytes) // 4) * 4
        self.flush()
        raw = self.queue.read_buffer(source.buffer, start - lead, span)
        values = np.frombuffer(raw, dtype=storage[2], count=count, offset=lead)
        return values.astype(host_dtype).reshape(array.shape)

    # ----- dispatch --------------------------------------------------------------------

    @staticmethod
    def groups(invocations: int, size: int = 256) -> tuple[int, int, int]:
        """Workgroups covering ``invocations`` (spread over x and y past 65535 groups)."""
        needed = max(1, -(-invocations // size))
        if needed <= _MAX_GROUPS:
            return (needed, 1, 1)
        y = -(-needed // _MAX_GROUPS)
        return (-(-needed // y), y, 1)

    def _layout(self, n_writes: int, n_reads: int) -> tuple[Any, Any]:
        found = self._layouts.get((n_writes, n_reads))
        if found is not None:
            return found
        wgpu = self._wgpu
        stage = wgpu.ShaderStage.COMPUTE
        entries = [{"binding": i, "visibility": stage,
                    "buffer": {"type": wgpu.BufferBindingType.storage}} for i in range(n_writes)]
        entries += [{"binding": n_writes + i, "visibility": stage,
                     "buffer": {"type": wgpu.BufferBindingType.read_only_storage}}
                    for i in range(n_reads)]
        entries.append({"binding": n_writes + n_reads, "visibility": stage,
                        "buffer": {"type": wgpu.BufferBindingType.uniform,
                                   "has_dynamic_offset": True}})
        group_layout = self.device.create_bind_group_layout(entries=entries)
        pipeline_layout = self.device.create_pipeline_layout(bind_group_layouts=[group_layout])
        found = self._layouts[(n_writes, n_reads)] = (group_layout, pipeline_layout)
        return found

    def pipeline(self, source: str, n_writes: int, n_reads: int) -> Any:
        """The compute pipeline of ``source`` (compiled once per source and binding counts)."""
        key = (n_writes, n_reads, source)  # the source's str hash is cached: cheap
        found = self._pipelines.get(key)
        if found is not None:
            self.pipeline_hits += 1
            return found
        start = time.perf_counter()
        _, pipeline_layout = self._layout(n_writes, n_reads)
        module = self.device.create_shader_module(code=source)
        found = self.device.create_compute_pipeline(
            layout=pipeline_layout, compute={"module": module, "entry_point": "main"})
        elapsed = time.perf_counter() - start
        self.compile_seconds += elapsed
        self.compiles += 1
        self._pipelines[key] = found
        traces = active()
        if traces:  # a compile is a cost the op that needed it pays once: show it
            event = TraceEvent("compile", self.name, threading.current_thread().name,
                               now_ns() - int(elapsed * 1e9), int(elapsed * 1e9),
                               "", "compile")
            for trace in traces:
                trace.record(event)
        return found

    def dispatch(self, source: str, writes: Sequence[WgpuArray], reads: Sequence[WgpuArray],
                 params: Sequence[int | float], groups: tuple[int, int, int]) -> None:
        """Record one dispatch of ``source``'s ``main`` (binding order: see table.py)."""
        if groups[0] == 0 or groups[1] == 0 or groups[2] == 0:
            return
        for array in reads:
            _check_intact(array)
        pipeline = self.pipeline(source, len(writes), len(reads))
        group_layout, _ = self._layout(len(writes), len(reads))
        data = pack_params(params)
        if len(data) > _PARAMS_BYTES:
            raise ValueError(f"{self.name}: {len(data)} bytes of params, over the "
                             f"{_PARAMS_BYTES} one dispatch may bind")
        if self._ring_start + len(self._pending_params) + _PARAMS_BYTES > _RING_BYTES:
            self.flush()
            self._ring_start = 0  # every earlier slice was submitted before this write
        offset = self._ring_start + len(self._pending_params)
        slot = -(-len(data) // self._align) * self._align
        self._pending_params += data + bytes(slot - len(data))
        bind_group = self._bind_group(group_layout, writes, reads)
        if self._encoder is None:
            self._encoder = self.device.create_command_encoder()
        compute = self._encoder.begin_compute_pass()
        compute.set_pipeline(pipeline)
        compute.set_bind_group(0, bind_group, [offset])
        compute.dispatch_workgroups(*groups)
        compute.end()
        self._pending_writes.extend(a.allocation for a in writes)
        self.dispatches += 1
        self._recorded += 1
        self._recorded_groups += groups[0] * groups[1] * groups[2]
        if self._recorded >= _SUBMIT_EVERY or self._recorded_groups >= _SUBMIT_GROUPS:
            self.flush()

    def _bind_group(self, layout: Any, writes: Sequence[WgpuArray],
                    reads: Sequence[WgpuArray]) -> Any:
        """The bind group of these buffers (params come in by dynamic offset), cached:
        a training step asks for the same pooled buffers in the same order every time."""
        arrays = (*writes, *reads)
        key = (len(writes), *(id(a.allocation.buffer) for a in arrays))
        found = self._bind_groups.get(key)
        if found is not None:
            return found
        entries = [{"binding": i, "resource": {"buffer": a.buffer, "offset": 0,
                                               "size": a.allocation.size}}
                   for i, a in enumerate(arrays)]
        entries.append({"binding": len(entries), "resource": {"buffer": self._ring, "offset": 0,
                                                              "size": _PARAMS_BYTES}})
        found = self.device.create_bind_group(layout=layout, entries=entries)
        if len(self._bind_groups) >= _MAX_BIND_GROUPS:
            del self._bind_groups[next(iter(self._bind_groups))]  # the oldest
        self._bind_groups[key] = found
        for a in arrays:
            self._keys_of_buffer.setdefault(id(a.allocation.buffer), []).append(key)
        return found

    def _destroy_buffer(self, buffer: Any) -> None:
        """Destroy a buffer the pool lets go, with the bind groups that name it (its id
        may be reused by a new buffer). A recorded dispatch may still read it, so with
        an encoder pending it is destroyed after the submit (WebGPU lets submitted
        work finish first)."""
        for key in self._keys_of_buffer.pop(id(buffer), ()):
            self._bind_groups.pop(key, None)
        if self._encoder is None:
            buffer.destroy()
        else:
            self._doomed.append(buffer)

    def flush(self) -> None:
        """Submit the recorded dispatches."""
        if self._encoder is not None:
            encoder, self._encoder = self._encoder, None
            written, self._pending_writes = self._pending_writes, []
            self._recorded = self._recorded_groups = 0
            try:
                if self._pending_params:
                    # Queue order: this write lands after every earlier submit has read
                    # its slices, and before this encoder runs.
                    self.queue.write_buffer(self._ring, self._ring_start, self._pending_params)
                    self._ring_start += len(self._pending_params)
                    self._pending_params = bytearray()
                self.queue.submit([encoder.finish()])
            except Exception as exc:  # late validation: whatever this submit wrote is lost
                self._pending_params = bytearray()
                for allocation in written:
                    allocation.failure = exc
                raise
            finally:
                doomed, self._doomed = self._doomed, []
                for buffer in doomed:
                    buffer.destroy()

    def finish(self) -> None:
        """Submit and wait until the device is idle (benchmarks; reads wait by themselves)."""
        self.flush()
        # A one-word read waits for everything submitted before it (0.32.0's
        # on_submitted_work_done_sync is broken; this works on every version).
        probe = self.empty((1,), "int32")
        self.queue.read_buffer(probe.buffer, 0, 4)

    def statistics(self) -> dict[str, int]:
        stats = self.pool.statistics()
        stats.update(dispatches=self.dispatches, pipelines_compiled=self.compiles,
                     pipeline_cache_hits=self.pipeline_hits)
        return stats


def _check_intact(array: WgpuArray) -> None:
    failure = array.allocation.failure
    if failure is not None:
        raise RuntimeError(f"the kernel that wrote this {array.dtype}{list(array.shape)} "
                           f"array failed when its commands were submitted") from failure


def pack_params(params: Sequence[int | float]) -> bytes:
    """Params as 32-bit words (ints: two's complement, floats: f32), padded to 16 bytes."""
    words = np.zeros(max(4, -(-len(params) // 4) * 4), np.uint32)
    for i, value in enumerate(params):
        if isinstance(value, float):
            words[i] = np.float32(value).view(np.uint32)
        else:
            words[i] = int(value) & 0xFFFFFFFF
    return words.tobytes()
