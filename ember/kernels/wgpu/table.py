"""The WebGPU kernel table and the kernel-authoring contract.

Kernel signature
----------------
A kernel is registered with ``@kernel("op", ...)`` and called as
``kernel(msg, rt, *inputs)``: ``msg`` is the IR message (``op``, ``attrs``,
``shape``, ``dtype``; a ``MultiCall`` has ``shapes`` / ``dtypes``), ``rt`` the
device's :class:`~ember.kernels.wgpu.runtime.Runtime`, and each input a
:class:`WgpuArray`. It returns a ``WgpuArray`` (a tuple of them for a
``MultiCall``). Kernels run on the device's worker thread; an exception fails
the op's outputs and reaches whoever reads them.

Arrays, strides and offsets
---------------------------
A ``WgpuArray`` is a strided view of a device buffer: ``shape``, ``strides``
and ``offset`` count *elements* (not bytes); strides may be 0 (broadcast) or
negative. ``x.view(shape, strides, offset)`` makes a zero-copy view that keeps
the buffer alive; reshape / permute / expand / slicing should be views.
``x.contiguous`` says whether it is dense row-major from ``offset``. Kernels
never write into their inputs (views share buffers).

Allocating outputs
------------------
``rt.empty(shape, dtype)`` gives a fresh contiguous array from the buffer pool
(``dtype`` is the ember dtype name, usually ``msg.dtype``). Buffers go back to
the pool when the last array viewing them dies.

Dispatching WGSL
----------------
``rt.dispatch(source, writes, reads, params, groups)`` runs the compute entry
point ``main`` of ``source``. Bindings of group 0 follow one fixed order:
``writes`` (``var<storage, read_write>``) at 0..W-1, then ``reads``
(``var<storage, read>``) at W..W+R-1, then one uniform block of ``params`` at
W+R. ``codegen.bindings(writes, reads, n_params)`` renders exactly these
declarations, plus ``pu(i)`` / ``pi(i)`` / ``pf(i)`` reading parameter ``i``
as u32 / i32 / f32. ``params`` are Python ints (stored as 32-bit two's
complement) and floats (stored as f32 bits). ``groups`` is the workgroup
count (``rt.groups(n, size)`` spreads ``n`` invocations over x and y, and
``codegen.LINEAR_INDEX`` recovers the linear index). Pipelines are compiled
once per source and cached; keep sizes in ``params`` rather than in the
source so that one shader serves every size. ``sources.source(kind, key,
render)`` caches rendered WGSL by structure, in memory and on disk.

Dtypes on the device (``STORAGE``)
----------------------------------
float32 → ``f32``; float16 → ``f16`` (only where the adapter has
``shader-f16``; sources need ``enable f16;``, which ``codegen.header`` adds);
int32 → ``i32``; int64 → ``i32`` too (WGSL has no 64-bit integers: uploads
that do not fit raise ``DTypeError``, reads widen back to int64, arithmetic
wraps at 32 bits); bool → ``u32`` holding 0 or 1. float64, bfloat16, uint8, int8 and
int16 are refused with ``DTypeError``. Kernels compute float16 in f32 and round once per
op, as the CPU backend does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ember.errors import DTypeError
from ember.kernels.registry import refuse, registrar

KERNELS: dict[str, Callable[..., Any]] = {}

# ember dtype name -> (WGSL storage type, bytes per element, NumPy dtype of that storage).
STORAGE: dict[str, tuple[str, int, np.dtype]] = {
    "float32": ("f32", 4, np.dtype(np.float32)),
    "float16": ("f16", 2, np.dtype(np.float16)),
    "int32": ("i32", 4, np.dtype(np.int32)),
    "int64": ("i32", 4, np.dtype(np.int32)),
    "bool": ("u32", 4, np.dtype(np.uint32)),
}
_REFUSED = {
    "float64": "WGSL has no 64-bit floats; help: convert with .float() first",
    "bfloat16": "WGSL has no bfloat16; help: use float16 or float32",
    **{name: "WGSL has no 8- or 16-bit integer storage; help: convert with .int() first"
       for name in ("uint8", "int8", "int16")},
}
# Declared ops (ember/op_kinds.py) this backend does not run: op -> why, with the fix. The
# backend's check_dtype refuses them on the caller's line, their kernels at run time.
REFUSED_OPS: dict[str, str] = {
    "collective_all_reduce": "collectives run over NCCL between CUDA devices; help: "
                             "replicate onto em.cuda(i) devices",
    "collective_broadcast": "collectives run over NCCL between CUDA devices; help: "
                            "replicate onto em.cuda(i) devices",
    "collective_world_all_reduce": "collectives run over NCCL between CUDA devices; "
                                   "help: a RayCluster of device='cuda'",
    **{op: "no matrix decompositions in WGSL; help: move the tensor to em.cpu() for this op"
       for op in ("linalg_inv", "linalg_det", "linalg_solve", "linalg_cholesky", "linalg_qr",
                  "linalg_svd", "linalg_eigh")},
    "bitcast": "wgpu stores int64 and bool in 32-bit words, so their bytes are not PyTorch's; "
               "help: move the tensor to em.cpu() to view its bytes as another dtype",
}


kernel = registrar(KERNELS, "wgpu")
refuse(KERNELS, "wgpu", REFUSED_OPS)


def check_dtype(dtype: str, what: str, device: str, has_f16: bool) -> None:
    """Raise ``DTypeError`` naming ``what`` (an op) and ``device`` for a dtype it cannot hold."""
    if dtype in STORAGE and (dtype != "float16" or has_f16):
        return
    if dtype == "float16":
        reason = "the adapter lacks the shader-f16 feature; help: use float32"
    else:
        reason = _REFUSED.get(dtype, "unknown dtype")
    raise DTypeError(f"{what}: {dtype} is not supported on {device}: {reason}")


_INT32 = np.iinfo(np.int32)


def check_values(data: np.ndarray, what: str, device: str) -> None:
    """Raise ``DTypeError`` naming ``what`` and ``device`` when host int64 ``data`` has
    values past int32, which the device's int32 storage of int64 cannot hold."""
    if data.dtype == np.int64 and data.size:
        low, high = data.min(), data.max()
        if low < _INT32.min or high > _INT32.max:
            raise DTypeError(f"{what}: int64 values outside the int32 range do not fit on "
                             f"{device} (WGSL has no 64-bit integers; ember stores int64 "
                             f"as int32 there): min {low}, max {high}")


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    step = 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


class Allocation:
    """One pooled device buffer; it goes back to the pool when no array views it.

    ``failure``: set when a submit that was to write this buffer failed, so that
    reading it (or computing from it) raises that error instead of giving garbage.
    """

    __slots__ = ("buffer", "size", "pool", "failure")

    def __init__(self, buffer: Any, size: int, pool: Any) -> None:
        self.buffer = buffer
        self.size = size
        self.pool = pool
        self.failure: BaseException | None = None

    def __del__(self) -> None:
        pool = self.pool
        if pool is not None:
            pool.give_back(self.buffer, self.size)


class WgpuArray:
    """A strided view (in elements) of a device buffer holding ember dtype ``dtype``."""

    __slots__ = ("allocation", "shape", "strides", "offset", "dtype", "base")

    def __init__(self, allocation: Allocation, shape: tuple[int, ...], strides: tuple[int, ...],
                 offset: int, dtype: str, base: WgpuArray | None = None) -> None:
        self.allocation = allocation
        self.shape = shape
        self.strides = strides
        self.offset = offset
        self.dtype = dtype  # the ember name: the device actor reads it as the stored dtype
        self.base = base

    @property
    def buffer(self) -> Any:
        return self.allocation.buffer

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * STORAGE[self.dtype][1]

    @property
    def contiguous(self) -> bool:
        if self.size <= 1:
            return True
        return all(stride == want for stride, want, size
                   in zip(self.strides, contiguous_strides(self.shape), self.shape) if size != 1)

    def view(self, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> WgpuArray:
        """A zero-copy view of the same buffer (the caller keeps it in bounds)."""
        return WgpuArray(self.allocation, tuple(shape), tuple(strides), offset, self.dtype,
                         self.base if self.base is not None else self)

    def broadcast_strides(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """Strides that read this array broadcast to ``shape`` (0 along broadcast dims)."""
        pad = len(shape) - self.ndim
        return (0,) * pad + tuple(0 if size == 1 else stride
                                  for size, stride in zip(self.shape, self.strides))

    def __repr__(self) -> str:
        return (f"WgpuArray({self.dtype}, shape={self.shape}, strides={self.strides}, "
                f"offset={self.offset})")
