"""The NumPy kernel table: IR op name → kernel.

A kernel is called as ``kernel(msg, pool, *inputs)`` with the message (op,
attrs, output shape and dtype) and the input arrays, and returns the output
array (a tuple of them for a ``MultiCall``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember import dtype as _dtype

KERNELS: dict[str, Callable[..., Any]] = {}

# IR dtype name → NumPy dtype.
NP: dict[str, np.dtype] = {d.name: d.np for d in _dtype.ALL}


def kernel(*names: str) -> Callable:
    """Register a function as the kernel of one or more IR ops."""

    def register(fn: Callable) -> Callable:
        for name in names:
            if name in KERNELS:
                raise RuntimeError(f"kernel {name!r} registered twice")
            KERNELS[name] = fn
        return fn

    return register
