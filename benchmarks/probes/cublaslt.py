"""cuBLASLt called through ctypes for probe_lt.py: one product's descriptors and the
algorithms its heuristic offers, each timed there.

``cublasGemmEx`` takes one algorithm, picked by cuBLAS's heuristic from the sizes alone.
For the encoder layer's products on the H200 (2048 rows, 768 or 3072 columns: about one
wave of 128×128 tiles on 132 SMs) the heuristic's pick is not always the fastest of the
kernels cuBLAS has; cuBLASLt lists several candidates per product, each a 64-byte
descriptor valid for the same cuBLAS library. On the H200 the fastest of them saved 1% of
the encoder's products and 2% of the MLP's (BENCHMARKS.md), so gemm.py keeps GemmEx.
"""

from __future__ import annotations

import ctypes
from typing import Any

from ember.kernels.cupy.gemm import _COMPUTE_64F, _CUDA_R_32F, _CUDA_R_64F, Gemm

# cublasLt enum values (cublasLt.h).
_DESC_TRANSA, _DESC_TRANSB = 3, 4
_LAYOUT_BATCH_COUNT, _LAYOUT_BATCH_STRIDE = 5, 6
_PREF_MAX_WORKSPACE = 1
_PREF_MIN_ALIGNMENT = (5, 6, 7, 8)  # of A, B, C, D in bytes
_check = Gemm._check


class _Algorithm(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64 * 8)]


class _Heuristic(ctypes.Structure):
    _fields_ = [("algo", _Algorithm), ("workspace_size", ctypes.c_size_t),
                ("state", ctypes.c_int), ("waves", ctypes.c_float),
                ("reserved", ctypes.c_int * 4)]


class Lt:
    """A cuBLASLt handle (made and used on one worker thread) and its search preference."""

    def __init__(self, path: str, workspace_bytes: int) -> None:
        self._lib = lib = ctypes.CDLL(path)
        self.workspace_bytes = workspace_bytes
        handle = ctypes.c_void_p()
        _check("cublasLtCreate", lib.cublasLtCreate(ctypes.byref(handle)))
        self._handle = handle
        matmul = lib.cublasLtMatmul
        matmul.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                           ctypes.c_void_p]
        self._matmul = matmul
        lib.cublasLtMatrixLayoutCreate.argtypes = [ctypes.c_void_p, ctypes.c_int,
                                                   ctypes.c_uint64, ctypes.c_uint64,
                                                   ctypes.c_int64]
        self.version = int(lib.cublasLtGetVersion())

    def descriptors(self, data: int, compute: int, op_a: int, op_b: int,
                    shapes: tuple, lds: tuple, strides: tuple, count: int) -> Descriptors:
        """The descriptors of ``D = op_a(A) op_b(B)`` in cuBLAS's column-major terms:
        ``shapes`` are the stored (rows, cols) of A, B and D, ``lds`` their leading
        dimensions, ``strides`` their batch strides in elements."""
        lib = self._lib
        desc = ctypes.c_void_p()
        scale = _CUDA_R_64F if compute == _COMPUTE_64F else _CUDA_R_32F
        _check("cublasLtMatmulDescCreate",
               lib.cublasLtMatmulDescCreate(ctypes.byref(desc), compute, scale))
        for attr, op in ((_DESC_TRANSA, op_a), (_DESC_TRANSB, op_b)):
            value = ctypes.c_int32(op)
            _check("cublasLtMatmulDescSetAttribute", lib.cublasLtMatmulDescSetAttribute(
                desc, attr, ctypes.byref(value), ctypes.sizeof(value)))
        layouts = []
        for (rows, cols), ld, stride in zip(shapes, lds, strides):
            layout = ctypes.c_void_p()
            _check("cublasLtMatrixLayoutCreate", lib.cublasLtMatrixLayoutCreate(
                ctypes.byref(layout), data, rows, cols, ld))
            layouts.append(layout)
            if count > 1:
                for attr, value in ((_LAYOUT_BATCH_COUNT, ctypes.c_int32(count)),
                                    (_LAYOUT_BATCH_STRIDE, ctypes.c_int64(stride))):
                    _check("cublasLtMatrixLayoutSetAttribute",
                           lib.cublasLtMatrixLayoutSetAttribute(
                               layout, attr, ctypes.byref(value), ctypes.sizeof(value)))
        return Descriptors(lib, desc, layouts)

    def algorithms(self, found: Descriptors, alignment: int, most: int) -> list[tuple]:
        """Up to ``most`` algorithms the heuristic offers for ``found`` with operands
        aligned to ``alignment`` bytes, best guess first, each as 8 ints (JSON-able)."""
        lib = self._lib
        pref = ctypes.c_void_p()
        _check("cublasLtMatmulPreferenceCreate",
               lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)))
        try:
            settings = [(_PREF_MAX_WORKSPACE, ctypes.c_uint64(self.workspace_bytes))]
            settings += [(attr, ctypes.c_uint32(alignment)) for attr in _PREF_MIN_ALIGNMENT]
            for attr, value in settings:
                _check("cublasLtMatmulPreferenceSetAttribute",
                       lib.cublasLtMatmulPreferenceSetAttribute(
                           pref, attr, ctypes.byref(value), ctypes.sizeof(value)))
            results = (_Heuristic * most)()
            returned = ctypes.c_int(0)
            a, b, d = found.layouts
            status = lib.cublasLtMatmulAlgoGetHeuristic(
                self._handle, found.desc, a, b, d, d, pref, most, results,
                ctypes.byref(returned))
        finally:
            lib.cublasLtMatmulPreferenceDestroy(pref)
        if status != 0:  # no algorithm for this configuration: the caller keeps GemmEx
            return []
        return [tuple(r.algo.data) for r in results[:returned.value] if r.state == 0]

    def matmul(self, found: Descriptors, algorithm: Any, alpha: Any, a: int, b: int,
               beta: Any, d: int, workspace: int, stream: int) -> None:
        """``D = alpha·op(A) op(B) + beta·D`` (device addresses) with ``algorithm``, an
        ``algorithm_struct`` of one of ``algorithms``' results."""
        layout_a, layout_b, layout_d = found.layouts
        status = self._matmul(self._handle, found.desc, alpha, a, layout_a, b, layout_b, beta,
                              d, layout_d, d, layout_d, ctypes.byref(algorithm), workspace,
                              self.workspace_bytes, stream)
        if status:
            _check("cublasLtMatmul", status)


def algorithm_struct(algorithm: tuple) -> _Algorithm:
    """The descriptor cublasLtMatmul takes for one of ``Lt.algorithms``' results."""
    return _Algorithm((ctypes.c_uint64 * 8)(*algorithm))


class Descriptors:
    """One product's matmul descriptor and its A, B, D layouts, freed with the object."""

    __slots__ = ("_lib", "desc", "layouts")

    def __init__(self, lib: Any, desc: ctypes.c_void_p, layouts: list) -> None:
        self._lib, self.desc, self.layouts = lib, desc, layouts

    def __del__(self) -> None:
        for layout in self.layouts:
            self._lib.cublasLtMatrixLayoutDestroy(layout)
        self._lib.cublasLtMatmulDescDestroy(self.desc)

