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

SOURCE = r"""
__device__ __forceinline__ float round_tf32(float x) {
    unsigned int bits = __float_as_uint(x);
    unsigned int rounded = (bits + 0xfffu + ((bits >> 13) & 1u)) & 0xffffe000u;
    if ((rounded & 0x7f800000u) == 0x7f800000u) rounded = bits & 0xffffe000u;
    return __uint_as_float(rounded);
}

// parts: a's hi and lo (a_length each), then b's.
extern "C" __global__ void split_tf32(const float* a, long long a_length, const float* b,
                                      long long b_length, float* parts) {
    long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
         i < a_length + b_length; i += step) {
        bool of_a = i < a_length;
        long long at = of_a ? i : i - a_length;
        long long length = of_a ? a_length : b_length;
        float* hi = parts + (of_a ? 0 : 2 * a_length) + at;
        float v = of_a ? a[at] : b[at];
        bool finite = isfinite(v);
        float h = finite ? round_tf32(v) : (isnan(v) ? __int_as_float(0x7fc00000) : v);
        hi[0] = h;
        hi[length] = finite ? round_tf32(v - h) : 0.0f;
    }
}
"""

_BLOCK = 256
_MAX_BLOCKS = 8192  # a grid-stride loop beyond: 2M threads cover an H200's 132 SMs
_kernel: Any = None


def span(shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """Elements from an array's first element to its last in memory (element strides,
    none negative), gaps between rows included."""
    return 1 + sum((n - 1) * s for n, s in zip(shape, strides))


def split(a: Any, b: Any) -> tuple[Any, tuple[int, int, int, int]]:
    """Both operands' parts in one launch: ``(buffer, (a_hi, a_lo, b_hi, b_lo))``, the
    buffer that holds them and their device addresses. ``a`` and ``b`` are non-empty float32
    CuPy arrays whose strides are not negative; each part has its operand's strides."""
    import cupy

    global _kernel
    if _kernel is None:
        _kernel = cupy.RawKernel(SOURCE, "split_tf32")
    a_length = span(a.shape, tuple(s // 4 for s in a.strides))
    b_length = span(b.shape, tuple(s // 4 for s in b.strides))
    parts = cupy.empty(2 * (a_length + b_length), np.float32)
    blocks = min(-(-(a_length + b_length) // _BLOCK), _MAX_BLOCKS)
    _kernel((blocks,), (_BLOCK,), (a, np.int64(a_length), b, np.int64(b_length), parts))
    base = parts.data.ptr
    b_base = base + 8 * a_length
    return parts, (base, base + 4 * a_length, b_base, b_base + 4 * b_length)
