"""Matrix products through cuBLAS called directly, on the worker's stream.

Not ``cupy.matmul``: CuPy refuses every cuBLAS call while a stream captures (its
``setStream`` raises NotImplementedError, "calling cuBLAS API during stream capture is
currently unsupported"), so a CUDA graph of a training step could not hold its matmuls.
cuBLAS itself supports capture. This module calls ``cublasGemmStridedBatchedEx`` through
ctypes on a handle of its own, with a fixed workspace: the same call, algorithm choice
and workspace in eager runs and in captured ones, so a replayed graph gives the eager
bits.

Operands reach cuBLAS without copies when they are row-major or transposed views with
one batch stride (a weight's ``.T``, ``k.transpose(-2, -1)``, a broadcast batch);
anything else is made contiguous first. ``layout`` (pure Python) decides which.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import threading
from typing import Any

import numpy as np

from ember.kernels.cupy import strided_copy, tf32_split

# cudaDataType, cublasComputeType_t and cublasOperation_t values (cuBLAS headers).
_CUDA_R_32F, _CUDA_R_64F, _CUDA_R_16F, _CUDA_R_16BF = 0, 1, 2, 14
_COMPUTE_32F, _COMPUTE_64F, _COMPUTE_32F_FAST_TF32 = 68, 70, 77
_OP_N, _OP_T = 0, 1
_GEMM_DEFAULT = -1
_POINTER_MODE_HOST = 0
# cuBLAS's recommended workspace on Hopper (its docs: 32 MiB).
WORKSPACE_BYTES = 32 << 20

# "high" splits products of at least this many multiply-adds (a 1024³ product). Below it
# the split costs about what the tensor cores save, on the H200 (probe_precision.py,
# probe_host.py), and they run in float32, which is closer still.
SPLIT_FROM_MACS = 1 << 30

DATA_TYPES = {"float32": _CUDA_R_32F, "float64": _CUDA_R_64F, "float16": _CUDA_R_16F,
              "bfloat16": _CUDA_R_16BF}


def compute_type(dtype: str, tf32: bool) -> int:
    """cuBLAS's compute type for ``dtype``: float64 in float64, the rest accumulate in
    float32 (TF32 products for float32 when ``tf32``)."""
    if dtype == "float64":
        return _COMPUTE_64F
    return _COMPUTE_32F_FAST_TF32 if tf32 and dtype == "float32" else _COMPUTE_32F


def _matrix(rows: int, cols: int, s0: int, s1: int) -> tuple[int, int] | None:
    """(op, ld) that hands a (rows, cols) row-major-indexed operand with element strides
    (s0, s1) to column-major cuBLAS as its transpose, or None (needs a copy)."""
    if s1 == 1 and s0 >= max(cols, 1):
        return _OP_N, s0  # row-major: column-major memory of the transpose
    if s0 == 1 and s1 >= max(rows, 1):
        return _OP_T, s1  # a transposed view: column-major memory of the operand itself
    if rows == 1 and s1 == 1:
        return _OP_N, max(cols, 1)
    if cols == 1 and s0 == 1:
        return _OP_T, max(rows, 1)
    return None


def _batch_stride(batch: tuple[int, ...], shape: tuple[int, ...],
                  strides: tuple[int, ...]) -> int | None:
    """One element stride between consecutive matrices of the flattened ``batch`` dims
    (0: broadcast), or None when the operand's batch dims have no single stride."""
    lead = len(batch) - len(shape)
    per_dim = [0 if i < lead or shape[i - lead] == 1 else strides[i - lead]
               for i in range(len(batch))]
    live = [(size, stride) for size, stride in zip(batch, per_dim) if size != 1]
    if not live or all(stride == 0 for _, stride in live):
        return 0
    if any(stride == 0 for _, stride in live):
        return None
    expected = live[-1][1]
    for size, stride in reversed(live):
        if stride != expected:
            return None
        expected = stride * size
    return live[-1][1]


def layout(batch: tuple[int, ...], a_shape: tuple[int, ...], a_strides: tuple[int, ...],
           b_shape: tuple[int, ...], b_strides: tuple[int, ...]) -> Any:
    """How to hand ``a @ b`` (both at least 2-D, element strides) to one strided-batched
    GEMM: ((op_a, lda, stride_a) or None, (op_b, ldb, stride_b) or None); None for an
    operand that must be made contiguous (broadcast to ``batch``) first."""
    found = []
    for shape, strides in ((a_shape, a_strides), (b_shape, b_strides)):
        matrix = _matrix(shape[-2], shape[-1], strides[-2], strides[-1])
        stride = _batch_stride(batch, shape[:-2], strides[:-2])
        found.append(None if matrix is None or stride is None else (*matrix, stride))
    return tuple(found)


class Gemm:
    """cuBLAS on one stream of one device: a handle and workspace of its own (made on the
    worker, or by whoever owns ``stream``; the current stream by default)."""

    def __init__(self, stream: Any = None) -> None:
        import cupy

        self._lib = ctypes.CDLL(_cublas_path())
        handle = ctypes.c_void_p()
        self._check("cublasCreate_v2", self._lib.cublasCreate_v2(ctypes.byref(handle)))
        self._handle = handle
        self._check("cublasSetPointerMode_v2",
                    self._lib.cublasSetPointerMode_v2(handle, _POINTER_MODE_HOST))
        stream = cupy.cuda.get_current_stream() if stream is None else stream
        self._check("cublasSetStream_v2",
                    self._lib.cublasSetStream_v2(handle, ctypes.c_void_p(stream.ptr)))
        # After the stream (setting one puts cuBLAS's default workspace pool back), held
        # for the handle's life: cuBLAS never allocates, in eager runs or in capture.
        self._workspace = cupy.empty(WORKSPACE_BYTES, np.uint8)
        self._check("cublasSetWorkspace_v2", self._lib.cublasSetWorkspace_v2(
            handle, ctypes.c_void_p(self._workspace.data.ptr), ctypes.c_size_t(WORKSPACE_BYTES)))
        # The scaling factors by reference (a byref holds its value alive), made once.
        scalars = {_COMPUTE_64F: ctypes.c_double, _COMPUTE_32F: ctypes.c_float,
                   _COMPUTE_32F_FAST_TF32: ctypes.c_float}
        self._one = {c: ctypes.byref(kind(1.0)) for c, kind in scalars.items()}
        self._zero = {c: ctypes.byref(kind(0.0)) for c, kind in scalars.items()}
        self._plans: dict[tuple, _Plan] = {}
        gemm = self._lib.cublasGemmStridedBatchedEx
        gemm.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                         ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                         ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_longlong,
                         ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_longlong,
                         ctypes.c_void_p,
                         ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_longlong,
                         ctypes.c_int, ctypes.c_int, ctypes.c_int]
        self._gemm = gemm
        # One matrix: the plain call, whose kernel choice is not limited to batched kernels.
        single = self._lib.cublasGemmEx
        single.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                           ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                           ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                           ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                           ctypes.c_void_p,
                           ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                           ctypes.c_int, ctypes.c_int]
        self._single = single

    @staticmethod
    def _check(name: str, status: int) -> None:
        if status != 0:
            raise RuntimeError(f"{name} failed: cuBLAS status {status}")

    def matmul(self, a: Any, b: Any, dtype: str, precision: str = "highest") -> Any:
        """``a @ b`` (each at least 2-D, both of ``dtype``) as a new contiguous array, at a
        float32 ``precision`` of ember/precision.py's."""
        import cupy

        key = (a.shape, a.strides, b.shape, b.strides, dtype, precision)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= 4096:
                self._plans.clear()
            plan = self._plans[key] = _Plan(a, b, dtype, precision)
        out = cupy.empty(plan.out_shape, a.dtype)
        if plan.empty:
            if plan.zero:
                out.fill(0)
            return out
        if plan.copy_a:  # one copy into a layout cuBLAS reads
            a = _copied(a, plan.batch, plan.copy_a == _COPY_COLUMNS)
        if plan.copy_b:
            b = _copied(b, plan.batch, plan.copy_b == _COPY_COLUMNS)
        if not plan.split:
            self._product(plan, a.data.ptr, b.data.ptr, out.data.ptr, self._zero[plan.compute])
            return out
        # "high": hi·hi + hi·lo + lo·hi, the small products first (tf32_split.py). The
        # parts' buffer lives until the products are queued (the pool orders its reuse).
        _parts, (a_hi, a_lo, b_hi, b_lo) = tf32_split.split(a, b)
        one, out_ptr = self._one[plan.compute], out.data.ptr
        self._product(plan, a_lo, b_hi, out_ptr, self._zero[plan.compute])
        self._product(plan, a_hi, b_lo, out_ptr, one)
        self._product(plan, a_hi, b_hi, out_ptr, one)
        return out

    def _product(self, plan: _Plan, a: int, b: int, out: int, beta: Any) -> None:
        """``out = a @ b + beta·out`` (device addresses) in one cuBLAS call, as ``plan``
        says."""
        one = self._one[plan.compute]
        # Row-major C = A B is column-major Cᵀ = Bᵀ Aᵀ: b goes first.
        if plan.count == 1:
            status = self._single(self._handle, plan.op_b, plan.op_a, plan.n, plan.m, plan.k,
                                  one, b, plan.data, plan.ldb, a, plan.data, plan.lda, beta,
                                  out, plan.data, plan.n, plan.compute, _GEMM_DEFAULT)
        else:
            status = self._gemm(self._handle, plan.op_b, plan.op_a, plan.n, plan.m, plan.k, one,
                                 b, plan.data, plan.ldb, plan.stride_b, a, plan.data, plan.lda,
                                 plan.stride_a, beta, out, plan.data, plan.n, plan.m * plan.n,
                                 plan.count, plan.compute, _GEMM_DEFAULT)
        if status:
            self._check("cublasGemmEx" if plan.count == 1 else "cublasGemmStridedBatchedEx",
                        status)


# How an operand that cuBLAS cannot read as it is gets copied (_Plan.copy_a / copy_b).
_COPY_ROWS, _COPY_COLUMNS = 1, 2


def _copied(x: Any, batch: tuple[int, ...], columns: bool) -> Any:
    """``x`` broadcast to ``batch`` in a buffer of its own: row-major, or with ``columns``
    the transpose of a row-major copy of its transpose."""
    import cupy

    x = cupy.broadcast_to(x, batch + x.shape[-2:])
    if columns:
        return strided_copy.contiguous(x.swapaxes(-1, -2)).swapaxes(-1, -2)
    return strided_copy.contiguous(x)


class _Plan:
    """How one (shapes, strides, dtype) of ``a @ b`` reaches cuBLAS, worked out once."""

    __slots__ = ("batch", "compute", "copy_a", "copy_b", "count", "data", "empty", "k",
                 "lda", "ldb", "m", "n", "op_a", "op_b", "out_shape", "split", "stride_a",
                 "stride_b", "zero")

    def __init__(self, a: Any, b: Any, dtype: str, precision: str) -> None:
        self.batch = batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
        self.m, self.k, self.n = m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        self.out_shape = batch + (m, n)
        self.count = count = math.prod(batch)
        self.empty = m * n * count == 0 or k == 0
        self.zero = k == 0
        self.data = DATA_TYPES[dtype]
        self.split = (dtype == "float32" and precision == "high" and min(m, n) > 1
                      and m * n * k * count >= SPLIT_FROM_MACS)
        # TF32 products at "medium", and at "high" for the split's parts only.
        self.compute = compute_type(dtype, precision == "medium" or self.split)
        item = a.itemsize
        strides = [tuple(s // item for s in x.strides) for x in (a, b)]
        found = layout(batch, a.shape, strides[0], b.shape, strides[1])
        copies, contiguous = [], []
        for x, (rows, cols), how in zip((a, b), (x.shape[-2:] for x in (a, b)), found):
            copy = 0
            if how is None:  # copied (and broadcast to the batch) before the call
                # A view whose columns are closer in memory than its rows (a head's key
                # read transposed) is copied in that order and read transposed: the copy
                # moves whole 16-byte runs, not single elements.
                copy = _COPY_COLUMNS if x.strides[-2] < x.strides[-1] else _COPY_ROWS
                op, ld = (_OP_T, rows) if copy == _COPY_COLUMNS else (_OP_N, cols)
                how = (op, ld, rows * cols if count > 1 else 0)
            copies.append(copy)
            contiguous.append(how)
        self.copy_a, self.copy_b = copies
        (self.op_a, self.lda, self.stride_a), (self.op_b, self.ldb, self.stride_b) = contiguous


_per_thread = threading.local()


def current() -> Gemm:
    """The calling thread's Gemm for its current stream (made on first use). A worker
    thread owns one device; each of its streams gets a handle and workspace of its own, so
    products running side by side on two streams never share a workspace."""
    import cupy

    engines = getattr(_per_thread, "engines", None)
    if engines is None:
        engines = _per_thread.engines = {}
    stream = cupy.cuda.get_current_stream()
    gemm = engines.get(stream.ptr)
    if gemm is None:
        gemm = engines[stream.ptr] = Gemm(stream)
    return gemm


def _cublas_path() -> str:
    """The libcublas CuPy loaded (CuPy's pip wheels put it outside the loader's path)."""
    import cupy

    cupy.cuda.device.get_cublas_handle()  # loads the library, if nothing did yet
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1] if "/" in line else ""
            name = path.rsplit("/", 1)[-1]
            if name.startswith("libcublas.so"):
                return path
    return ctypes.util.find_library("cublas") or "libcublas.so"
