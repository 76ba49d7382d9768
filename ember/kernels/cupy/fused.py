"""Runs fused groups as generated CUDA kernels: render once per structure, compile once
(CuPy caches the binary in memory and on disk), launch on the worker's stream."""

from __future__ import annotations

import math
from typing import Any

import cupy
import numpy as np

import ember
from ember.kernels.cupy import codegen
from ember.kernels.numpy.table import NP

# Threads per block and elements per thread when nothing better is known: 256 threads
# and float4 accesses ran at the copy limit on the H200 (h200-facts).
DEFAULT_BLOCK = 256
VECTOR = 4
# Blocks per SM for the grid-stride loop: enough to hide latency, few enough that
# each thread loops several times (a guess, within noise of 4..32 on copies).
_BLOCKS_PER_SM = 16


class FusedKernels:
    """The generated kernels of one device, by structure key."""

    def __init__(self, index: int) -> None:
        self.index = index
        self._kernels: dict[tuple, tuple[cupy.RawKernel, codegen.Source]] = {}
        self._sms = 0
        self.compiled = 0
        self.launched = 0
        self.last_error: BaseException | None = None  # a render/compile failure, for tests

    def run(self, group: Any, program: Any, inputs: list) -> list[tuple[int, cupy.ndarray]]:
        try:
            return self._run(group, program, inputs)
        except Exception as exc:
            self.last_error = exc  # the actor then runs the members unfused
            raise

    def _run(self, group: Any, program: Any, inputs: list) -> list[tuple[int, cupy.ndarray]]:
        shape = group.shape
        members = group.members
        outputs = {j: cupy.empty(shape, NP[members[j].dtype])
                   for j, keep in enumerate(program.materialize) if keep}
        n = math.prod(shape)
        if n == 0:
            return [(members[j].out, array) for j, array in outputs.items()]
        kinds, strided = [], []
        for array in inputs:
            if array.size == 1:
                kinds.append("scalar")
            elif array.shape == shape and array.flags.c_contiguous:
                kinds.append("full")
            else:
                kinds.append("strided")
                strided.append(codegen.broadcast_strides(shape, array.shape, array.strides,
                                                         array.itemsize))
        sizes, strides = codegen.coalesce(shape, strided) if strided else ((), [])
        # 32-bit index math when the flat index and every strided input's farthest
        # element fit.
        narrow = n < 2**31 and all(
            sum(abs(st) * (size - 1) for st, size in zip(per_input, sizes)) < 2**31
            for per_input in strides)
        layout = codegen.Layout(tuple(kinds), len(sizes), narrow)
        aligned = n % VECTOR == 0 and all(
            a.data.ptr % (VECTOR * a.itemsize) == 0
            for a, kind in zip(inputs, kinds) if kind == "full")
        vector = VECTOR if aligned else 1
        dtypes = [str(a.dtype) for a in inputs]
        kernel, source = self._kernel(group, program, dtypes, layout, vector, DEFAULT_BLOCK)
        args: list = list(inputs)
        args += [outputs[j] for j in source.outputs]
        args.append(np.int64(n))
        if strided:
            args += [np.int64(s) for s in sizes]
            args += [np.int64(s) for per_input in strides for s in per_input]
        args += [codegen.scalar_value(dtype, value)
                 for dtype, value in codegen.scalar_arguments(members, program.steps)]
        blocks = min(-(-n // (vector * DEFAULT_BLOCK)), self._max_blocks())
        kernel((blocks,), (DEFAULT_BLOCK,), tuple(args))
        self.launched += 1
        return [(members[j].out, outputs[j]) for j in source.outputs]

    def _kernel(self, group: Any, program: Any, dtypes: list[str], layout: codegen.Layout,
                vector: int, block: int) -> tuple[cupy.RawKernel, codegen.Source]:
        key = codegen.structure_key(group, program, dtypes, layout, vector, block)
        found = self._kernels.get(key)
        if found is None:
            source = codegen.render(group, program, dtypes, layout, vector, block)
            code = f"// ember {ember.__version__}\n{source.code}"
            kernel = cupy.RawKernel(code, source.name, options=("--std=c++17",))
            kernel.compile()
            found = self._kernels[key] = (kernel, source)
            self.compiled += 1
        return found

    def _max_blocks(self) -> int:
        if not self._sms:
            self._sms = cupy.cuda.Device(self.index).attributes["MultiProcessorCount"]
        return self._sms * _BLOCKS_PER_SM
