"""``gather`` and ``scatter_add`` along the last dim in one CUDA kernel launch each.

The NumPy backend's kernels run on CuPy arrays too (``take_along_axis``, ``add.at`` over
arange grids), but CuPy launches many small kernels from Python for them: 280-360 µs of
the worker's host time per call on an H200, twice in every ``cross_entropy`` step (the
target's log-probability forward, its scatter backward). The common case gets one kernel
here; every other case keeps the NumPy backend's kernel (``table.py`` decides, with
``gather_is_fast`` / ``scatter_add_is_fast``, pure functions of shapes, flags and dtypes).
Called in a loop on an idle H200 (a (64, 10) float32 ``x``), the kernel's host time fell
from 125 to 30 µs for gather and from 132 to 39 µs for scatter_add, the range check's
launch included in both.

The common case: ``dim`` is the last dim of ``x`` (a 0-d tensor counting as one of size 1),
the index has ``x``'s leading dims (its rows line up with ``x``'s; PyTorch reads only a
leading part otherwise) and is C-contiguous int64 / int32. ``gather`` copies bits, so any
2- or 4-byte float of a C-contiguous ``x`` works (float32, float16, bfloat16);
``scatter_add`` adds with ``atomicAdd`` on float, so float32 only, with ``src`` C-contiguous
and of the index's shape (``x`` is copied into the output first, whatever its strides).

Index values are checked as the NumPy kernels check them (``check_range``: on the GPU,
recorded on the device and raised when the result is read). Meanwhile a bad value wraps
into range, as CuPy's indexing does: the kernels never read or write out of bounds.
Repeated indices accumulate in the atomics' order, as CuPy's ``add.at`` (also atomics).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember.kernels.cupy.grid_stride import launch_shape
from ember.kernels.numpy.indexing import check_range
from ember.kernels.numpy.table import NP

INDEX_TYPES = {"int64": "long long", "int32": "int"}
# gather copies bits: the C type of each float's width.
GATHER_TYPES = {"float32": "unsigned int", "float16": "unsigned short",
                "bfloat16": "unsigned short"}
_BITS = {"unsigned int": 32, "unsigned short": 16}

_kernels: dict[tuple, Any] = {}  # by (op, value dtype, index dtype)

# A value outside [0, n) wraps into it (check_range reports it; the access stays in bounds).
_WRAP = "if (k < 0 || k >= n) k = ((k % n) + n) % n;"


def kernel_name(op: str, dtype: str, index_dtype: str) -> str:
    """The entry point of ``op``'s kernel for values of ``dtype`` and an ``index_dtype`` index;
    float16 and bfloat16 share a gather (both copy 16 bits)."""
    if op == "gather":
        return f"ember_gather_last_b{_BITS[GATHER_TYPES[dtype]]}_{index_dtype}"
    return f"ember_scatter_add_last_{dtype}_{index_dtype}"


def source(op: str, dtype: str, index_dtype: str) -> str:
    """The CUDA source of ``kernel_name(op, dtype, index_dtype)``: one thread per index
    element, grid-stride; row ``r`` of the index reads (or adds to) row ``r`` of ``x``."""
    index_type = INDEX_TYPES[index_dtype]
    if op == "gather":
        value = GATHER_TYPES[dtype]
        params = f"const {value}* x, const {index_type}* index, {value}* out"
        body = "out[i] = x[(i / cols) * n + k];"
    else:
        params = f"const {index_type}* index, const float* src, float* out"
        body = "atomicAdd(&out[(i / cols) * n + k], src[i]);"
    return f"""
extern "C" __global__ void {kernel_name(op, dtype, index_dtype)}(
    {params}, long long rows, long long n, long long cols) {{
  long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < rows * cols;
       i += step) {{
    long long k = index[i];
    {_WRAP}
    {body}
  }}
}}
"""


def _dims(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The kernels' view of a 0-d array: one dim of size 1 (``reshape(shape or (1,))``)."""
    return shape or (1,)


# Keyed by dtype, not by its name: str(dtype) is Python code in NumPy, µs per call.
_INDEX_NAMES = {np.dtype(np.int64): "int64", np.dtype(np.int32): "int32"}
_VALUE_NAMES = {np.dtype(np.float32): "float32", np.dtype(np.float16): "float16",
                NP["bfloat16"]: "bfloat16"}  # gather's; scatter_add's is float32 alone
_F32 = np.dtype(np.float32)


def _index_fits(x: Any, index: Any, dim: int) -> bool:
    """``index`` picks along ``x``'s last, non-empty dim, row for row, from one buffer."""
    xs, idx = _dims(x.shape), _dims(index.shape)
    return (index.dtype in _INDEX_NAMES and index.flags.c_contiguous
            and len(idx) == len(xs) and dim == len(xs) - 1
            and idx[:-1] == xs[:-1] and xs[-1] > 0)


def gather_is_fast(x: Any, index: Any, dim: int) -> bool:
    """Whether ``gather(x, dim, index)`` takes ``gather_last`` (NumPy or CuPy arrays, as
    the kernel receives them; ``dim`` non-negative, as the op's message holds it)."""
    return x.dtype in _VALUE_NAMES and x.flags.c_contiguous and _index_fits(x, index, dim)


def scatter_add_is_fast(x: Any, index: Any, src: Any, dim: int) -> bool:
    """Whether ``scatter_add(x, dim, index, src)`` takes ``scatter_add_last`` (``x`` may
    have any strides: it is copied)."""
    return (x.dtype == _F32 and src.dtype == _F32 and src.flags.c_contiguous
            and _dims(src.shape) == _dims(index.shape) and _index_fits(x, index, dim))


def _launch(op: str, dtype: np.dtype, index: Any, args: tuple) -> None:
    """Run ``op``'s kernel for values of ``dtype`` over every element of ``index`` (none: no
    launch)."""
    n = index.size
    if not n:
        return
    key = (op, dtype, index.dtype)
    kernel = _kernels.get(key)
    if kernel is None:
        import cupy  # here, not at import: source() renders on machines without CuPy

        spelled = (op, _VALUE_NAMES[dtype], _INDEX_NAMES[index.dtype])
        kernel = _kernels[key] = cupy.RawKernel(source(*spelled), kernel_name(*spelled))
    kernel(*launch_shape(n), args)


def gather_last(msg: Any, pool: Any, x: Any, index: Any) -> Any:
    """The ``gather`` kernel where ``gather_is_fast``: ``out[r, j] = x[r, index[r, j]]``
    over the rows ``r`` of the leading dims."""
    (dim,) = msg.attrs
    xs, idx = _dims(x.shape), _dims(index.shape)
    check_range(pool, "gather", index, 0, xs[-1], dim)
    out = pool.empty(index.shape, x.dtype)
    _launch("gather", x.dtype, index,
            (x, index, out, np.int64(math.prod(idx[:-1])), np.int64(xs[-1]), np.int64(idx[-1])))
    return out


def scatter_add_last(msg: Any, pool: Any, x: Any, index: Any, src: Any) -> Any:
    """The ``scatter_add`` kernel where ``scatter_add_is_fast``: a copy of ``x`` (never
    written) with ``out[r, index[r, j]] += src[r, j]``."""
    (dim,) = msg.attrs
    xs, idx = _dims(x.shape), _dims(index.shape)
    if x.flags.c_contiguous:
        # One cudaMemcpyAsync on the current stream: 7 µs of host time on the H200, where
        # x.copy() (an elementwise kernel) took 12.
        out = pool.empty(x.shape, x.dtype)
        if x.nbytes:
            out.data.copy_from_device_async(x.data, x.nbytes)
    else:
        out = x.copy(order="C")
    check_range(pool, "scatter_add", index, 0, xs[-1], dim)
    _launch("scatter_add", _F32, index,
            (index, src, out, np.int64(math.prod(idx[:-1])), np.int64(xs[-1]),
             np.int64(idx[-1])))
    return out
