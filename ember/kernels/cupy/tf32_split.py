"""Float32 operands as two TF32 parts, ``x = hi + lo``, for "high" precision matmuls.

Each part has TF32's 10-bit mantissa, so tensor cores multiply it exactly; ``hi + lo``
holds 22 of float32's 24 bits (the rest is rounded, ≤ 2^-23 relative). ``hi`` rounds to
nearest even; a finite value that would round past the largest float is truncated
instead. A non-finite value keeps its ``hi`` (a NaN as the quiet NaN 0x7fc00000: tensor cores
read only the top 19 bits, which a NaN's payload may miss) and a zero ``lo``.

The parts keep the operand's strides: they are written over its whole memory span (gaps
included), so cuBLAS reads them through the same plan as the operand itself. CuPy compiles
with -ftz=true: a float32 subnormal (below 2^-126) counts as zero in ``x - hi``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.kernels.cupy.grid_stride import launch_shape

SOURCE = r"""
__device__ __forceinline__ float round_tf32(float x) {
    unsigned int bits = __float_as_uint(x);
    unsigned int rounded = (bits + 0xfffu + ((bits >> 13) & 1u)) & 0xffffe000u;
    if ((rounded & 0x7f800000u) == 0x7f800000u) rounded = bits & 0xffffe000u;
    return __uint_as_float(rounded);
}

__device__ __forceinline__ void split(float v, float& hi, float& lo) {
    bool finite = isfinite(v);
    hi = finite ? round_tf32(v) : (isnan(v) ? __int_as_float(0x7fc00000) : v);
    lo = finite ? round_tf32(v - hi) : 0.0f;
}

__device__ __forceinline__ void split(float4 v, float4& hi, float4& lo) {
    split(v.x, hi.x, lo.x);
    split(v.y, hi.y, lo.y);
    split(v.z, hi.z, lo.z);
    split(v.w, hi.w, lo.w);
}

// parts: a's hi and lo (a_length each), then b's; lengths in T's.
template <typename T>
__device__ void split_both(const T* a, long long a_length, const T* b, long long b_length,
                           T* parts) {
    long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
         i < a_length + b_length; i += step) {
        bool of_a = i < a_length;
        long long at = of_a ? i : i - a_length;
        T* hi = parts + (of_a ? 0 : 2 * a_length) + at;
        T h, l;
        split(of_a ? a[at] : b[at], h, l);
        hi[0] = h;
        hi[of_a ? a_length : b_length] = l;
    }
}

extern "C" __global__ void split_tf32(const float* a, long long a_length, const float* b,
                                      long long b_length, float* parts) {
    split_both(a, a_length, b, b_length, parts);
}

// Spans of whole float4s at 16-byte addresses: one vector load and two stores a thread.
extern "C" __global__ void split_tf32_x4(const float4* a, long long a_length,
                                         const float4* b, long long b_length, float4* parts) {
    split_both(a, a_length, b, b_length, parts);
}
"""

# RawKernels, not one RawModule's functions: a RawKernel loads itself on whichever device
# calls it, and each worker thread drives its own GPU.
_kernels: dict[str, Any] = {}


def span(shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """Elements from an array's first element to its last in memory (element strides,
    none negative), gaps between rows included."""
    return 1 + sum((n - 1) * s for n, s in zip(shape, strides))


def split(a: Any, b: Any) -> tuple[Any, tuple[int, int, int, int]]:
    """Both operands' parts in one launch: ``(buffer, (a_hi, a_lo, b_hi, b_lo))``, the
    buffer that holds them and their device addresses. ``a`` and ``b`` are non-empty float32
    CuPy arrays whose strides are not negative; each part has its operand's strides."""
    import cupy

    if not _kernels:
        _kernels.update((name, cupy.RawKernel(SOURCE, name))
                        for name in ("split_tf32", "split_tf32_x4"))
    a_length = span(a.shape, tuple(s // 4 for s in a.strides))
    b_length = span(b.shape, tuple(s // 4 for s in b.strides))
    parts = cupy.empty(2 * (a_length + b_length), np.float32)  # the pool aligns it to 512
    vector = 4 if (a_length % 4 == 0 and b_length % 4 == 0 and a.data.ptr % 16 == 0
                   and b.data.ptr % 16 == 0) else 1
    kernel = _kernels["split_tf32_x4" if vector == 4 else "split_tf32"]
    kernel(*launch_shape((a_length + b_length) // vector),
           (a, np.int64(a_length // vector), b, np.int64(b_length // vector), parts))
    base = parts.data.ptr
    b_base = base + 8 * a_length
    return parts, (base, base + 4 * a_length, b_base, b_base + 4 * b_length)
