"""The WebGPU backend: WGSL compute shaders through wgpu-py, one device actor per adapter.

``em.wgpu(i)`` is the i-th compute-capable adapter (Vulkan, Metal or D3D12;
``em.available("wgpu")`` lists them). The device actor's worker owns the
adapter's wgpu device and queue (``runtime.Runtime``); kernels are looked up
by IR op in ``table.KERNELS`` — see ``table.py`` for the contract a kernel
module follows. Elementwise runs (single ops and fused groups) go through one
renderer (``elementwise.py``); the fusion planner's input cap comes from the
adapter's storage buffers per shader stage.

Dtypes: float32, int32, bool (as u32), int64 (stored as int32: uploads must
fit, reads widen back), float16 where the adapter has ``shader-f16``.
float64, bfloat16, uint8, int8 and int16 raise ``DTypeError`` (WGSL has none of them)
at the call that makes them (``WgpuBackend.check_dtype``, which ops run as they are
submitted).
"""

from __future__ import annotations

import importlib
import math
from functools import partial
from typing import Any

import numpy as np

from ember.errors import DeviceError
from ember.kernels.fusion.planner import REDUCTIONS, FusionPlanner
from ember.kernels.wgpu import elementwise, rows, strided
from ember.kernels.wgpu.runtime import Runtime, adapters
from ember.kernels.wgpu.table import (KERNELS, REFUSED_OPS, STORAGE, WgpuArray, check_dtype,
                                      check_values)

# Kernel modules: importing one registers its kernels. Modules still being written
# are skipped until their file exists, so the package works while it grows.
_KERNEL_MODULES = ("reduction", "scan", "linalg", "shape", "indexing", "sorting", "creation",
                   "conv", "pooling", "multi_update", "scatter")
for _name in _KERNEL_MODULES:
    try:
        importlib.import_module(f"ember.kernels.wgpu.{_name}")
    except ModuleNotFoundError as _missing:
        if _missing.name != f"ember.kernels.wgpu.{_name}":
            raise


# Rows a row group needs to keep a GPU busy with one workgroup per row (a guess).
_MIN_GROUP_ROWS = 64


def available_indices() -> list[int]:
    return list(range(len(adapters())))


class WgpuBackend:
    name = "wgpu"
    # Published so that an op without a kernel here fails at the call (ops/decompositions.py).
    kernels = KERNELS

    def __init__(self, index: int) -> None:
        self.index = index
        self.rt = Runtime(index)
        self.deferred = self.rt.faults  # index checks resolved by the actor on a read

    def check_dtype(self, dtype: str, op: str, values: np.ndarray | None = None) -> None:
        """Raise ``DTypeError`` on the caller's thread when ``op`` makes a ``dtype`` this
        adapter cannot hold, or uploads host ``values`` it cannot hold (int64 past int32);
        ``DeviceError`` for an op this backend refuses."""
        check_dtype(dtype, op, self.rt.name, self.rt.has_f16)
        if op in REFUSED_OPS:
            raise DeviceError(f"{op}: not supported on wgpu devices ({self.rt.name}): "
                              f"{REFUSED_OPS[op]}")
        if values is not None:
            check_values(values, op, self.rt.name)

    def run(self, msg: Any, inputs: list) -> Any:
        found = KERNELS.get(msg.op)
        if found is None:
            raise NotImplementedError(f"{msg.op}: no wgpu kernel yet ({self.rt.name}); "
                                      f"help: move the tensor to em.cpu() for this op")
        return found(msg, self.rt, *inputs)

    def fusion_planner(self) -> FusionPlanner:
        # One storage binding per external input plus at least one output.
        return FusionPlanner(self._fusible, self.rt.max_storage_buffers - 1, reductions=True,
                             views=True)

    def _fusible(self, call: Any, dtype_of: Any) -> bool:
        if call.dtype not in STORAGE or not all(dtype_of(i) in STORAGE for i in call.inputs):
            return False
        if call.op in REDUCTIONS:
            # A row group runs one workgroup per row, so a reduction to a handful of
            # values (a loss's mean) runs alone, split across many workgroups.
            return call.dtype != "bool" and math.prod(call.shape) >= _MIN_GROUP_ROWS
        return True

    def run_fused(self, group: Any, program: Any, inputs: list) -> list:
        members = group.members
        args = [()] * len(members)
        for j, slots in program.steps:
            args[j] = slots
        # Prologue views (reshape / permute / expand of inputs) are index maps: their
        # arrays join the inputs, so the members' slot numbers stay as they are.
        arrays = list(inputs)
        for m, slots in zip(members[:group.prologue], args):
            arrays.append(KERNELS[m.op](m, self.rt, *[arrays[s] for s in slots]))
        start = group.prologue
        evaluate = (elementwise.evaluate if group.rows is None
                    else partial(rows.evaluate_rows, rows=group.rows))
        values = arrays[len(inputs):] + evaluate(self.rt, members[start:], args[start:], arrays,
                                                 program.materialize[start:], group.shape)
        return [(m.out, a) for m, a, keep in zip(members, values, program.materialize)
                if keep and a is not None]

    def upload(self, data: np.ndarray) -> WgpuArray:
        return self.rt.upload(data)

    def to_host(self, value: WgpuArray) -> np.ndarray:
        host = self.rt.read(value, strided.contiguous(self.rt, value))
        host.flags.writeable = False
        return host

    def export(self, value: WgpuArray) -> np.ndarray:
        return self.to_host(value)

    def import_(self, exported: Any, shape: tuple[int, ...], dtype: str) -> WgpuArray:
        check_dtype(dtype, "to", self.rt.name, self.rt.has_f16)
        return self.rt.upload(np.asarray(exported).reshape(shape))

    def release(self, value: WgpuArray) -> int:
        return self.owned_nbytes(value)

    @staticmethod
    def owned_nbytes(value: WgpuArray) -> int:
        return value.nbytes if value.base is None else 0

    def synchronize(self) -> None:
        """Wait until the GPU has run everything submitted (``em.sync`` calls this)."""
        self.rt.finish()

    def statistics(self) -> dict[str, int]:
        return self.rt.statistics()
