"""The CUDA backend on CuPy: ``cuda:i`` devices.

Importing this package does not import CuPy; ``available_indices`` does, once, and
answers ``[]`` quickly where CuPy, the driver or a GPU is missing.
"""

from __future__ import annotations

import functools
from typing import Any

from ember.errors import DeviceError


@functools.cache
def available_indices() -> list[int]:
    """Indices of the CUDA devices CuPy can use; empty (never an exception) without one."""
    try:
        import cupy
    except Exception:  # not installed, or a broken install: no CUDA devices
        return []
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception:  # no driver, or no GPU
        return []
    return list(range(count))


def create_backend(index: int) -> Any:
    found = available_indices()
    if index not in found:
        raise DeviceError(f"cuda:{index}: no such CUDA device (this machine has {len(found)}; "
                          f"em.available('cuda') lists them)")
    from ember.kernels.cupy.backend import CupyBackend

    return CupyBackend(index)
