"""Index range checks the GPU needs and NumPy does for itself.

NumPy's ``take``, fancy assignment and ``add.at`` raise ``IndexError`` for an index
outside ``[-size, size)``; CuPy's wrap it silently into range. These kernels check
the index tensor first, as the CPU would (negatives wrap, as PyTorch's do), naming
the value the user wrote, then run the NumPy backend's kernel on the CuPy arrays.
Each check reads two numbers back, so it waits for the stream once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cupy

from ember.kernels.cupy.table import cuda_kernel
from ember.kernels.numpy.indexing import _numpy_key
from ember.kernels.numpy.table import KERNELS as NUMPY_KERNELS


def check_wrapping_range(op: str, index: cupy.ndarray, size: int, dim: int) -> None:
    """Raise ``IndexError`` unless every value of ``index`` is in ``[-size, size)``."""
    if not index.size:
        return
    low, high = (int(v) for v in cupy.stack((index.min(), index.max())).get())
    if low < -size or high >= size:
        bad = low if low < -size else high
        raise IndexError(f"{op}: index {bad} is out of range for dim {dim} of size {size}")


def _checked(op: str) -> Callable:
    """``op``'s NumPy kernel behind a range check of its index tensor (the one after ``x``;
    ``attrs`` start with the key's entries and the indexed axis, None for none)."""
    run = NUMPY_KERNELS[op]

    def kernel(msg: Any, pool: Any, x: cupy.ndarray, *tensors: cupy.ndarray) -> cupy.ndarray:
        entries, axis = msg.attrs[0], msg.attrs[1]
        if axis is not None and tensors and tensors[0].dtype != cupy.bool_:
            size = x[_numpy_key(entries)].shape[axis]
            check_wrapping_range(op, tensors[0], size, axis)
        return run(msg, pool, x, *tensors)

    return kernel


for _op in ("index", "index_put", "index_add"):
    cuda_kernel(_op)(_checked(_op))
