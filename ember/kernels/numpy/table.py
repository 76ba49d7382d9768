"""The NumPy kernel table: IR op name → kernel.

A kernel is called as ``kernel(msg, pool, *inputs)`` with the message (op,
attrs, output shape and dtype) and the input arrays, and returns the output
array (a tuple of them for a ``MultiCall``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.dtype import NUMPY_BY_NAME
from ember.kernels.registry import refuse, registrar

KERNELS: dict[str, Callable[..., Any]] = {}

# IR dtype name → NumPy dtype (bfloat16's imports ml_dtypes on its first lookup).
NP: dict[str, np.dtype] = NUMPY_BY_NAME


kernel = registrar(KERNELS, "NumPy")

# Declared ops (ember/op_kinds.py) this backend does not run: op -> why, with the fix.
REFUSED_OPS: dict[str, str] = {
    "collective_all_reduce": "collectives run over NCCL between CUDA devices; help: "
                             "replicate onto em.cuda(i) devices",
    "collective_broadcast": "collectives run over NCCL between CUDA devices; help: "
                            "replicate onto em.cuda(i) devices",
    "collective_world_all_reduce": "collectives run over NCCL between CUDA devices; "
                                   "help: a RayCluster of device='cuda'",
}
refuse(KERNELS, "CPU", REFUSED_OPS)


# Array type → the module that computes on it. Kernels written against this table's
# NumPy names run on any registered module that mirrors NumPy (a GPU backend registers
# its own array type), so each op's kernel is written once.
MODULES: dict[type, Any] = {np.ndarray: np}
_ARRAY_TYPES: tuple[type, ...] = (np.ndarray,)
_TO_NUMPY: dict[type, Callable[[Any], np.ndarray]] = {np.ndarray: lambda array: array}


def register_array_type(array_type: type, module: Any,
                        to_numpy: Callable[[Any], np.ndarray]) -> None:
    """Let kernels compute on ``array_type`` through ``module`` (NumPy's API, e.g. CuPy);
    ``to_numpy`` copies one to the host (a transfer to a CPU device)."""
    global _ARRAY_TYPES
    MODULES[array_type] = module
    _TO_NUMPY[array_type] = to_numpy
    _ARRAY_TYPES = tuple(MODULES)


def to_numpy(value: Any) -> np.ndarray:
    """A host array of ``value``, an array of any registered module."""
    return _TO_NUMPY[type(value)](value)


def namespace(*values: Any) -> Any:
    """The array module of the first array among ``values`` (NumPy if there is none)."""
    for value in values:
        module = MODULES.get(type(value))
        if module is not None:
            return module
    return np


def is_array(value: Any) -> bool:
    """Whether ``value`` is an array of a registered module (not a Python or NumPy scalar)."""
    return isinstance(value, _ARRAY_TYPES)
