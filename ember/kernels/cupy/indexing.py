"""Index range checks the GPU needs and NumPy does for itself.

NumPy's ``take``, fancy assignment and ``add.at`` raise ``IndexError`` for an index
outside ``[-size, size)``; CuPy's wrap it silently into range. These kernels check
the index tensor first (on the device, read back later: range_checks.py), as the CPU
would (negatives wrap, as PyTorch's do), naming the value the user wrote, then run the
NumPy backend's kernel on the CuPy arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cupy

from ember.kernels.cupy.table import cuda_kernel
from ember.kernels.numpy.indexing import _numpy_key, check_range
from ember.kernels.numpy.table import KERNELS as NUMPY_KERNELS


def _checked(op: str) -> Callable:
    """``op``'s NumPy kernel behind a range check of its index tensor (the one after ``x``;
    ``attrs`` start with the key's entries and the indexed axis, None for none)."""
    run = NUMPY_KERNELS[op]

    def kernel(msg: Any, pool: Any, x: cupy.ndarray, *tensors: cupy.ndarray) -> cupy.ndarray:
        entries, axis = msg.attrs[0], msg.attrs[1]
        if axis is not None and tensors and tensors[0].dtype != cupy.bool_:
            size = x[_numpy_key(entries)].shape[axis]
            check_range(pool, op, tensors[0], -size, size, axis)
        return run(msg, pool, x, *tensors)

    return kernel


for _op in ("index", "index_put", "index_add"):
    cuda_kernel(_op)(_checked(_op))
