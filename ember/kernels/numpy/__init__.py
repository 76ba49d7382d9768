"""The CPU backend: NumPy kernels, a buffer pool, zero-copy hand-over between CPU devices."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

# Importing each kernel module registers its kernels in the table.
import ember.kernels.numpy.conv  # noqa: F401
import ember.kernels.numpy.creation  # noqa: F401
import ember.kernels.numpy.elementwise  # noqa: F401
import ember.kernels.numpy.indexing  # noqa: F401
import ember.kernels.numpy.linalg  # noqa: F401
import ember.kernels.numpy.multi_update  # noqa: F401
import ember.kernels.numpy.pooling  # noqa: F401
import ember.kernels.numpy.reduction  # noqa: F401
import ember.kernels.numpy.scans  # noqa: F401
import ember.kernels.numpy.scatter  # noqa: F401
import ember.kernels.numpy.shape  # noqa: F401
import ember.kernels.numpy.sorting  # noqa: F401
from ember.kernels.fusion.planner import FusionPlanner
from ember.kernels.numpy import cores, fused
from ember.kernels.numpy.pool import BufferPool
from ember.kernels.numpy.quiet import quiet
from ember.kernels.numpy.table import KERNELS, NP, to_numpy


class NumpyBackend:
    name = "numpy"

    def __init__(self, index: int) -> None:
        self.index = index
        # Physical RAM: an output larger than this can never be allocated (ops/memory.py).
        self.total_memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        self.pool = BufferPool()
        # Bound directly so the pool's reference count test sees no extra frame.
        self.release = self.pool.release

    def run(self, msg: Any, inputs: list) -> Any:
        result = KERNELS[msg.op](msg, self.pool, *inputs)
        if type(result) is np.ndarray:
            self.pool.made(result)
            return result
        if isinstance(result, np.generic):
            # Some NumPy reductions return scalars; the environment holds arrays only.
            return np.asarray(result, dtype=NP[msg.dtype])
        if isinstance(result, np.ndarray):
            self.pool.made(result)
        elif isinstance(result, tuple | list):  # a kernel with several outputs
            for value in result:
                self.pool.made(value)
        return result

    # Tiny ops run on their caller's thread when the device is idle: at most this many
    # output bytes, below the planner's fusion threshold (float32 elements).
    at_once_bytes = fused.MIN_FUSED_ELEMENTS * 4

    # No GPU-style limit on kernel arguments; a guess that keeps chunk working sets small.
    MAX_FUSED_INPUTS = 16

    def fusion_planner(self) -> FusionPlanner:
        return FusionPlanner(fused.fusible, self.MAX_FUSED_INPUTS, reductions=True, views=True,
                             min_elements=fused.MIN_FUSED_ELEMENTS)

    def run_fused(self, group: Any, program: Any, inputs: list) -> list:
        outputs = fused.run_fused(group, program, inputs, self.pool)
        for _, value in outputs:
            self.pool.made(value)
        return outputs

    # Entered by a thread other than the worker to run batches (a reader): inf and nan
    # are results there too, not warnings.
    caller_context = staticmethod(quiet)

    def upload(self, data: np.ndarray) -> np.ndarray:
        self.pool.made(data)
        return data

    def to_host(self, value: np.ndarray) -> np.ndarray:
        """A read-only view: zero copy, and the pool never reuses a buffer a reader holds."""
        view = value.view()
        view.flags.writeable = False
        return view

    def export(self, value: np.ndarray) -> np.ndarray:
        return value

    def import_(self, exported: Any, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        # From another CPU device the array itself; from a GPU a copy to the host (its
        # worker finished writing it before handing it over).
        value = to_numpy(exported)
        self.pool.made(value)
        return value

    @staticmethod
    def owned_nbytes(value: np.ndarray) -> int:
        return value.nbytes if value.base is None else 0

    def working(self, running: bool) -> None:
        """Called as a batch starts (``running``) and ends on this device: the CPU devices
        at work share the cores (``cores.budget``)."""
        cores.budget.working(self.index, running)

    def statistics(self) -> dict[str, int]:
        return self.pool.statistics()
