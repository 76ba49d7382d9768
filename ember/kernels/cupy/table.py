"""The CUDA kernel table: the NumPy backend's kernels (array-module generic, so they run
on CuPy arrays) plus the kernels the GPU needs done differently.

Different on the GPU: matmul (cuBLAS called directly, gemm.py: float16 / bfloat16 natively,
TF32 or split-TF32 products at em.set_float32_matmul_precision's request, and capturable
into CUDA graphs),
random numbers (cuRAND, seeded per op), and the special functions NumPy's kernels take
from SciPy (``cupyx.scipy.special`` here).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import cupy
import numpy as np
from cupyx.scipy import special

from ember.kernels import multi_update as _multi_update
from ember.kernels.cupy import gemm, strided_copy, take_along
from ember.kernels.cupy.multi_update import optimizer_update
from ember.kernels.numpy import creation
from ember.kernels.numpy.linalg import read_operands
from ember.kernels.numpy.table import KERNELS as NUMPY_KERNELS
from ember.kernels.numpy.table import NP
from ember.kernels.registry import refuse
from ember.precision import TF32_FROM_ENV

KERNELS: dict[str, Callable[..., Any]] = dict(NUMPY_KERNELS)
_LOW_PRECISION = {np.dtype(np.float16), NP["bfloat16"]}
_F32 = np.dtype(np.float32)


def cuda_kernel(*names: str) -> Callable:
    """Register a CUDA-specific kernel in place of the NumPy backend's for ``names``."""

    def register(fn: Callable) -> Callable:
        for name in names:
            if name not in NUMPY_KERNELS:
                raise RuntimeError(f"CUDA kernel {name!r} replaces no NumPy kernel")
            KERNELS[name] = fn
        return fn

    return register


def _float_function(fn: Callable) -> Callable:
    """A float function computed in float32 for float16 / bfloat16 (rounded once)."""

    def run(msg, pool, x):
        out_dtype = NP[msg.dtype]
        compute = _F32 if out_dtype in _LOW_PRECISION else out_dtype
        return fn(x.astype(compute, copy=False)).astype(out_dtype, copy=False)

    return run


_SQRT_HALF = 1.0 / math.sqrt(2.0)

# Declared ops (ember/op_kinds.py) this backend does not run: op -> why. The collectives'
# kernels replace these when CuPy finds NCCL (``CupyBackend.collectives``) and when a
# process joins a communicator (nccl_world.py).
REFUSED_OPS: dict[str, str] = {
    "collective_all_reduce": "CuPy found no NCCL; help: install a CuPy built with NCCL",
    "collective_broadcast": "CuPy found no NCCL; help: install a CuPy built with NCCL",
    "collective_world_all_reduce": "no NCCL communicator joined in this process; help: "
                                   "ember.distributed.NcclCommunicator",
}
refuse(KERNELS, "CUDA", REFUSED_OPS)

cuda_kernel(_multi_update.OP)(optimizer_update)
cuda_kernel("erf")(_float_function(special.erf))
cuda_kernel("sigmoid")(_float_function(special.expit))
cuda_kernel("silu")(_float_function(lambda x: x * special.expit(x)))
cuda_kernel("gelu")(_float_function(lambda x: 0.5 * x * (1.0 + special.erf(x * _SQRT_HALF))))


if TF32_FROM_ENV:
    # CuPy's switch for its own float32 GEMMs (not ember's matmuls: their message says),
    # read at the process's first one.
    os.environ.setdefault("CUPY_TF32", "1")


@cuda_kernel("matmul")
def _matmul(msg, pool, a, b):
    # cuBLAS multiplies float16 and bfloat16 natively (float32 accumulation), unlike
    # NumPy, whose kernel widens them; integer products stay NumPy's kernel (on CuPy).
    if msg.dtype not in gemm.DATA_TYPES:
        return NUMPY_KERNELS["matmul"](msg, pool, a, b)
    a, b, precision = read_operands(msg, a, b)  # views: cuBLAS reads them transposed
    out_dtype = NP[msg.dtype]
    a = a.astype(out_dtype, copy=False)
    b = b.astype(out_dtype, copy=False)
    if a.ndim == 1:
        a = a.reshape(1, -1)
    if b.ndim == 1:
        b = b.reshape(-1, 1)
    elif a.ndim > 2 and b.ndim == 2:
        # (..., m, k) @ (k, n) as one GEMM over the flattened rows.
        a = a.reshape(-1, a.shape[-1])
    return gemm.current().matmul(a, b, msg.dtype, precision).reshape(msg.shape)


# (1, rows) float32 ones per (device, rows); a few hundred lengths at most.
_ones: dict[tuple[int, int], cupy.ndarray] = {}


@cuda_kernel("sum", "mean")
def _sum(msg, pool, x):
    """A float32 sum or mean over leading dims of a contiguous array is ``ones(1, rows) @
    x(rows, cols)`` in cuBLAS: one pass at memory speed. CuPy's reduction over leading axes
    took ~45 µs per bias gradient, 0.54 ms of an encoder layer's 3 ms step on the H200."""
    dims, keepdim = msg.attrs
    lead = len(dims)
    if (msg.dtype != "float32" or x.dtype != _F32 or not 0 < lead < x.ndim or not x.size
            or tuple(dims) != tuple(range(lead)) or not x.flags.c_contiguous):
        return NUMPY_KERNELS[msg.op](msg, pool, x)
    rows = math.prod(x.shape[:lead])
    key = (x.device.id, rows)
    ones = _ones.get(key)
    if ones is None:
        if cupy.cuda.get_current_stream().is_capturing():
            return NUMPY_KERNELS[msg.op](msg, pool, x)  # made in a capture, it holds nothing
        if len(_ones) >= 256:
            _ones.clear()
        ones = _ones[key] = cupy.ones((1, rows), _F32)
    total = gemm.current().matmul(ones, x.reshape(rows, -1), "float32")
    if msg.op == "mean":
        total /= _F32.type(rows)
    return total.reshape(msg.shape)


class _CupyRandom:
    """``creation.NumpyRandom``'s interface on cuRAND: one generator per op, seeded from
    the op's (seed, counter), so the same call on the same device gives the same numbers."""

    def __init__(self, seed: int, counter: int) -> None:
        mixed = np.random.SeedSequence([seed, counter]).generate_state(1, np.uint32)[0]
        self.generator = cupy.random.RandomState(int(mixed))

    def uniform(self, shape: tuple[int, ...], dtype: np.dtype) -> cupy.ndarray:
        return self.generator.random_sample(shape, dtype=dtype)

    def integers(self, low: int, high: int, shape: tuple[int, ...],
                 dtype: np.dtype) -> cupy.ndarray:
        return self.generator.randint(low, high, shape, dtype=dtype)

    def normal(self, shape: tuple[int, ...], dtype: np.dtype) -> cupy.ndarray:
        return self.generator.standard_normal(shape, dtype=dtype)


creation.register_random(cuda_kernel, _CupyRandom)



# NumPy's floor division and remainder of floats (its divmod: the quotient from
# (a - fmod(a, b)) / b, floored with a half-way correction; signed zeros and b == 0 as
# NumPy gives them). CuPy's own differ at infinities and signed zeros.
_DIVMOD = cupy.ElementwiseKernel(
    "T a, T b", "T quotient, T remainder",
    """
    T m = fmod(a, b);
    if (b == (T)0) {
      quotient = a / b;
      remainder = m;
    } else {
      T d = (a - m) / b;
      if (m != (T)0) {
        if ((b < (T)0) != (m < (T)0)) { m += b; d -= (T)1; }
      } else {
        m = copysign((T)0, b);
      }
      if (d != (T)0) {
        T f = floor(d);
        if (d - f > (T)0.5) f += (T)1;
        quotient = f;
      } else {
        quotient = copysign((T)0, a / b);
      }
      remainder = m;
    }
    """,
    "ember_float_divmod")


def _divmod_kernel(op: str) -> Callable:
    integral = NUMPY_KERNELS[op]

    def run(msg, pool, *inputs):
        out_dtype = NP[msg.dtype]
        if out_dtype.kind != "f" and out_dtype not in _LOW_PRECISION:
            return integral(msg, pool, *inputs)
        compute = _F32 if out_dtype in _LOW_PRECISION else out_dtype
        if len(inputs) == 2:
            lhs, rhs = inputs
        else:
            _, scalar, scalar_is_lhs = msg.attrs
            lhs, rhs = (scalar, inputs[0]) if scalar_is_lhs else (inputs[0], scalar)
        lhs, rhs = (v.astype(out_dtype, copy=False).astype(compute, copy=False)
                    if isinstance(v, cupy.ndarray) else cupy.asarray(v, compute)
                    for v in (lhs, rhs))
        quotient, remainder = _DIVMOD(lhs, rhs)
        result = quotient if op == "floordiv" else remainder
        return result.astype(out_dtype, copy=False).reshape(msg.shape)

    return run


cuda_kernel("floordiv")(_divmod_kernel("floordiv"))
cuda_kernel("remainder")(_divmod_kernel("remainder"))


@cuda_kernel("gather")
def _gather(msg, pool, x, index):
    # One kernel along the last dim (cross_entropy's forward); NumPy's kernel elsewhere.
    if take_along.gather_is_fast(x, index, msg.attrs[0]):
        return take_along.gather_last(msg, pool, x, index)
    return NUMPY_KERNELS["gather"](msg, pool, x, index)


@cuda_kernel("scatter_add")
def _scatter_add(msg, pool, x, index, src):
    # One copy and one kernel along the last dim (cross_entropy's backward); NumPy's elsewhere.
    if take_along.scatter_add_is_fast(x, index, src, msg.attrs[0]):
        return take_along.scatter_add_last(msg, pool, x, index, src)
    return NUMPY_KERNELS["scatter_add"](msg, pool, x, index, src)


@cuda_kernel("reshape")
def _reshape(msg, pool, x):
    # A reshape that must copy (heads merged back after attention) copies in 16-byte moves.
    if x.flags.c_contiguous or strided_copy.reshapes_as_view(x.shape, x.strides, msg.shape):
        return x.reshape(msg.shape)
    return strided_copy.contiguous(x).reshape(msg.shape)


@cuda_kernel("cat")
def _cat(msg, pool, *arrays):
    # Each piece in one strided copy; pieces of another dtype take NumPy's kernel (it casts).
    dim, new_axis = msg.attrs
    out_dtype = NP[msg.dtype]
    if any(a.dtype != out_dtype for a in arrays):
        return NUMPY_KERNELS["cat"](msg, pool, *arrays)
    out = pool.empty(msg.shape, out_dtype)
    lead = (slice(None),) * dim
    offset = 0
    for a in arrays:
        width = 1 if new_axis else a.shape[dim]
        strided_copy.copy(out[lead + (offset if new_axis else slice(offset, offset + width),)], a)
        offset += width
    return out
