"""Runs fused groups as generated CUDA kernels: render once per structure, compile once
(CuPy caches the binary in memory and on disk), launch on the worker's stream.

A group's prologue (views of its inputs: reshape / permute / expand) is taken first,
as CuPy views; the kernel reads those views as strided inputs. Elementwise groups run
one thread per ``unroll`` vectors of ``vector`` elements (codegen.py); row groups one
block per row (rowgen.py).
"""

from __future__ import annotations

import math
from typing import Any

import cupy
import numpy as np

from ember._version import __version__
from ember.dtype import storage_name
from ember.kernels.autotune import Autotuner
from ember.kernels.cupy import codegen, rowgen, stores
from ember.kernels.cupy.table import KERNELS
from ember.kernels.fusion import cexpr
from ember.kernels.fusion.planner import Program
from ember.kernels.numpy.table import NP

# Threads per block and elements per thread when nothing better is known: 256 threads
# and float4 accesses ran at the copy limit on the H200 (h200-facts).
DEFAULT_BLOCK = 256
VECTOR = 4
# Blocks per SM for the grid-stride loops: enough to hide latency, few enough that
# each thread loops several times (a guess, within noise of 4..32 on copies).
_BLOCKS_PER_SM = 16
# A row group whose only row is this long runs unfused: one block would do the work
# CuPy's whole-chip reductions spread over every SM (a guess at where that wins).
_LONGEST_SINGLE_ROW = 1 << 20
# Reductions a single-row kernel takes at most: the planner chains independent whole-tensor
# steps (say (x + 1).sum() issued in a loop) into one group of one row, which one block
# would run serially, compiling a new huge kernel whenever the batch cuts the chain
# elsewhere (the H200's launch figure went from 108 to 299 us). Such a group runs
# unfused. Groups of many rows keep any number: independent softmaxes share phases.
_MAX_SINGLE_ROW_REDUCTIONS = 4
# "Blocks per SM" of a variant whose grid covers every element once (no grid-stride
# loop): the H200's plain float4 copy of 1 GiB ran at 4.28 TB/s so, 3.98 at 32 blocks
# per SM.
WHOLE_GRID = 0
# Vectors a thread loads before computing, with a grid that covers every element once:
# on the H200, custom_gelu ran at 3.88 / 4.16 TB/s (128 MB / 1 GiB) at 4 vectors and
# 3.78 / 4.10 at 8, against 3.73 / 3.85 for the default and 4.05 / 4.25 for a plain
# float4 copy of one vector per thread; with a grid-stride loop, or evict-first stores,
# more vectors per thread did not help.
UNROLLS = (4, 8)
# Below this many elements a kernel is launch-bound and every variant runs alike: no tuning.
_TUNE_FROM = 1 << 20
# Launches per timing in autotune, after one warm-up (CUDA events around them).
_TIMED_RUNS = 3


class _Part:
    """The members of a group after its prologue, as the renderers read a group."""

    __slots__ = ("members", "shape")

    def __init__(self, members: tuple, shape: tuple[int, ...]) -> None:
        self.members = members
        self.shape = shape


class _Launch:
    """A group's launch once planned for an input layout: the kernel, its grid, the
    outputs it writes and the arguments after the arrays (sizes, strides; the scalars
    come with each run)."""

    __slots__ = ("block", "grid", "kernel", "outputs", "shared", "tail")

    def __init__(self, kernel: Any, grid: int, block: int, outputs: list[tuple],
                 tail: tuple) -> None:
        self.kernel, self.grid, self.block = kernel, grid, block
        self.outputs = outputs  # (member position, shape, NumPy dtype)
        self.tail = tail
        self.shared: tuple[tuple[int, int], ...] = ()  # (alias, member whose buffer it is)

    def run(self, inputs: list, scalars: list) -> list[tuple[int, cupy.ndarray]]:
        made = [(j, cupy.empty(shape, dtype)) for j, shape, dtype in self.outputs]
        if self.kernel is not None:
            self.kernel((self.grid,), (self.block,),
                        (*inputs, *(array for _, array in made), *self.tail, *scalars))
        return self.with_shared(made)

    def with_shared(self, made: list[tuple[int, cupy.ndarray]]) -> list:
        """``made`` and the aliases that share a buffer of it."""
        if self.shared:
            arrays = dict(made)
            made += [(j, arrays[source]) for j, source in self.shared]
        return made


# Launch plans a device keeps (each a few hundred bytes); past it they are planned again.
_MAX_LAUNCHES = 8192


class FusedKernels:
    """The generated kernels of one device, by structure key."""

    def __init__(self, index: int, pool: Any) -> None:
        self.index = index
        self.pool = pool
        self._kernels: dict[tuple, tuple[cupy.RawKernel, codegen.Source]] = {}
        self._stores = stores.StoreChoice()
        # Per group structure and input layout: how to launch it (planning renders keys,
        # lays out strides and asks the tuner: 0.2-0.6 ms of host time per group).
        self._launches: dict[tuple, _Launch] = {}
        self._sms = 0
        self.compiled = 0
        self.launched = 0
        self._tuner: Autotuner | None = None
        self.last_error: BaseException | None = None  # a render/compile failure, for tests

    def run(self, group: Any, program: Any, inputs: list) -> list[tuple[int, cupy.ndarray]]:
        try:
            return self._run(group, program, inputs)
        except Exception as exc:
            self.last_error = exc  # the actor then runs the members unfused
            raise

    def _run(self, group: Any, program: Any, inputs: list) -> list[tuple[int, cupy.ndarray]]:
        members = group.members
        p = group.prologue
        inputs = list(inputs)
        for j, args in program.steps[:p]:
            inputs.append(KERNELS[members[j].op](members[j], self.pool,
                                                 *[inputs[a] for a in args]))
        # Taken views that must exist are the views themselves, as on the CPU.
        views = [(members[j].out, inputs[len(group.inputs) + j])
                 for j in range(p) if program.materialize[j]]
        needed = program.materialize[p:]
        structure = codegen.group_structure(group)
        stored = self._stores.stored(structure, needed, _capturing)
        scalars = [cexpr.scalar_value(dtype, value)
                   for dtype, value in cexpr.scalar_arguments(members, program.steps)]
        # The layout of every input (prologue views included) and its alignment for
        # vector loads (at most 8 elements of 4 bytes).
        launch_key = (structure, stored, group.shape,
                      tuple((a.shape, a.strides, a.dtype.char, a.data.ptr % 32)
                            for a in inputs))
        launch = self._launches.get(launch_key)
        if launch is not None:
            made = launch.run(inputs, scalars)
        else:
            part = _Part(members[p:], group.shape)
            steps = tuple((j - p, args) for j, args in program.steps[p:])
            shared = stores.shared_aliases(part.members, steps, len(inputs), stored)
            rest = Program(steps, tuple(keep and j not in shared
                                        for j, keep in enumerate(stored)))
            if group.rows is None:
                launch, made = self._elementwise(part, rest, inputs, scalars)
            else:
                launch, made = self._rows(part, rest, inputs, group.rows, scalars)
            launch.shared = tuple(shared.items())
            made = launch.with_shared(made)
            if len(self._launches) >= _MAX_LAUNCHES:
                self._launches.clear()
            self._launches[launch_key] = launch
        self.launched += 1
        return views + [(members[p + j].out, array) for j, array in made if needed[j]]

    def _elementwise(self, group: _Part, program: Program, inputs: list,
                     scalars: list) -> tuple[_Launch, list]:
        """Plan (tuning on first use) and run an elementwise group: (its launch, outputs)."""
        shape = group.shape
        members = group.members
        outputs = {j: cupy.empty(shape, NP[members[j].dtype])
                   for j, keep in enumerate(program.materialize) if keep}
        specs = [(j, shape, array.dtype) for j, array in outputs.items()]
        n = math.prod(shape)
        if n == 0:
            return _Launch(None, 0, 0, specs, ()), list(outputs.items())
        kinds, strided = [], []
        for array in inputs:
            if array.size == 1:
                kinds.append("scalar")
            elif array.shape == shape and array.flags.c_contiguous:
                kinds.append("full")
            else:
                kinds.append("strided")
                strided.append(cexpr.broadcast_strides(shape, array.shape, array.strides,
                                                         array.itemsize))
        sizes, strides = cexpr.coalesce(shape, strided) if strided else ((), [])
        # 32-bit index math when the flat index and every strided input's farthest
        # element fit.
        narrow = n < 2**31 and all(
            sum(abs(st) * (size - 1) for st, size in zip(per_input, sizes)) < 2**31
            for per_input in strides)
        layout = codegen.Layout(tuple(kinds), len(sizes), narrow)
        dtypes = [storage_name(a.dtype) for a in inputs]
        tail: list = [np.int64(n)]
        if strided:
            tail += [np.int64(s) for s in sizes]
            tail += [np.int64(s) for per_input in strides for s in per_input]
        args = (*inputs, *outputs.values(), *tail, *scalars)

        def plan(variant: tuple[int, int, int, int]) -> tuple[Any, int, int]:
            block, vector, unroll, per_sm = variant
            key = codegen.structure_key(group, program, dtypes, layout, vector, block, unroll)
            kernel, _ = self._kernel(key, lambda: codegen.render(
                group, program, dtypes, layout, vector, block, unroll))
            blocks = -(-n // (vector * block * unroll))
            if per_sm != WHOLE_GRID:
                blocks = min(blocks, self._sms_count() * per_sm)
            return kernel, blocks, block

        def launch(variant: tuple[int, int, int, int]) -> None:
            kernel, blocks, block = plan(variant)
            kernel((blocks,), (block,), args)

        full = [a for a, kind in zip(inputs, kinds) if kind == "full"]
        chosen = plan(self.tuner().pick("fused_elementwise", codegen.structure_key(
            group, program, dtypes, layout, 0, 0), (n,), _variants(n, full), launch))
        found = _Launch(*chosen, specs, tuple(tail))
        chosen[0]((chosen[1],), (chosen[2],), args)
        return found, list(outputs.items())

    def _rows(self, group: _Part, program: Program, inputs: list, r: int,
              scalars: list) -> tuple[_Launch, list]:
        """Plan (tuning on first use) and run a row group: (its launch, outputs)."""
        shape = group.shape
        members = group.members
        rows, length = math.prod(shape[:r]), math.prod(shape[r:])
        if rows == 0 or length == 0 or length >= 2**31 or (
                rows == 1 and length > _LONGEST_SINGLE_ROW):
            raise ValueError(f"row kernel: rows of {shape} split after dim {r} run unfused")
        reductions = sum(1 for m in members if m.op in rowgen.REDUCTIONS)
        if rows == 1 and reductions > _MAX_SINGLE_ROW_REDUCTIONS:
            raise ValueError(f"row kernel: {reductions} reductions in one group of one row "
                             f"{shape} (at most {_MAX_SINGLE_ROW_REDUCTIONS}) run unfused")
        full = tuple(m.shape == shape for m in members)
        vector = VECTOR if length % VECTOR == 0 else 1
        aligned = [a.data.ptr % (vector * a.itemsize) == 0 for a in inputs]
        layout, row_strides, col_sizes, col_strides = rowgen.row_layout(
            shape, r, members, program.steps,
            [(a.shape, a.strides, a.itemsize) for a in inputs], aligned, vector)
        dtypes = [storage_name(a.dtype) for a in inputs]
        outputs = {j: cupy.empty(members[j].shape, NP[members[j].dtype])
                   for j, keep in enumerate(program.materialize) if keep}
        tail: list = [np.int64(rows), np.int32(length)]
        row_sizes, located = row_strides
        tail += [np.int64(s) for s in row_sizes]
        tail += [np.int64(s) for per_input in located for s in per_input]
        if col_strides:
            tail += [np.int32(s) for s in col_sizes]
            tail += [np.int32(s) for per_input in col_strides for s in per_input]
        args = (*inputs, *outputs.values(), *tail, *scalars)

        def kernel_for(variant: tuple[int, bool]) -> Any:
            key = rowgen.structure_key(members, program.steps, program.materialize, full,
                                       dtypes, layout, vector, *variant)
            return self._kernel(key, lambda: rowgen.render(
                members, program.steps, program.materialize, full, dtypes, layout, vector,
                *variant))[0]

        def grid_of(variant: tuple[int, bool]) -> int:
            block, warp_rows = variant
            return min(-(-rows // (block // 32)) if warp_rows else rows,
                       self._sms_count() * _BLOCKS_PER_SM)

        def launch(variant: tuple[int, bool]) -> None:
            kernel_for(variant)((grid_of(variant),), (variant[0],), args)

        variant = self.tuner().pick("rows", rowgen.structure_key(
            members, program.steps, program.materialize, full, dtypes, layout, vector, 0),
            (rows, length), rowgen.variants(length, vector, rows * length >= _TUNE_FROM),
            launch)
        found = _Launch(kernel_for(variant), grid_of(variant), variant[0],
                        [(j, members[j].shape, array.dtype) for j, array in outputs.items()],
                        tuple(tail))
        launch(variant)
        return found, list(outputs.items())

    def _kernel(self, key: tuple, render: Any) -> tuple[cupy.RawKernel, codegen.Source]:
        found = self._kernels.get(key)
        if found is None:
            source = render()
            code = f"// ember {__version__}\n{source.code}"
            kernel = cupy.RawKernel(code, source.name, options=("--std=c++17",))
            kernel.compile()
            found = self._kernels[key] = (kernel, source)
            self.compiled += 1
        return found

    def _sms_count(self) -> int:
        if not self._sms:
            self._sms = cupy.cuda.Device(self.index).attributes["MultiProcessorCount"]
        return self._sms

    def tuner(self) -> Autotuner:
        """This device's autotuner (made on the worker thread, which owns the stream)."""
        if self._tuner is None:
            name = cupy.cuda.runtime.getDeviceProperties(self.index)["name"].decode()
            scope = (f"cupy {name} driver {cupy.cuda.runtime.driverGetVersion()} "
                     f"nvrtc {cupy.cuda.nvrtc.getVersion()} ember {__version__}")
            self._tuner = Autotuner(scope, _time_on_stream)
        return self._tuner


def _capturing() -> bool:
    return cupy.cuda.get_current_stream().is_capturing()


def _time_on_stream(run: Any) -> float:
    """Seconds per ``run()`` on the current stream, after a warm-up (compiles there)."""
    stream = cupy.cuda.get_current_stream()
    run()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record(stream)
    for _ in range(_TIMED_RUNS):
        run()
    end.record(stream)
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) / 1e3 / _TIMED_RUNS


def _variants(n: int, full: list) -> list[tuple[int, int, int, int]]:
    """The fused-elementwise kernels autotune times for ``n`` elements whose contiguous
    inputs are ``full``: (threads per block, elements per vector, vectors per thread
    loaded before computing, blocks per SM or WHOLE_GRID); the default first."""

    def aligned(elements: int) -> bool:
        return n % elements == 0 and all(a.data.ptr % (elements * a.itemsize) == 0
                                         for a in full)

    if not aligned(VECTOR):
        return [(DEFAULT_BLOCK, 1, 1, _BLOCKS_PER_SM)]
    variants = [(DEFAULT_BLOCK, VECTOR, 1, _BLOCKS_PER_SM)]
    if n < _TUNE_FROM:
        return variants
    variants += [(512, VECTOR, 1, 8), (128, VECTOR, 1, 32), (DEFAULT_BLOCK, VECTOR, 1, 4),
                 (DEFAULT_BLOCK, VECTOR, 1, WHOLE_GRID)]
    variants += [(DEFAULT_BLOCK, VECTOR, unroll, WHOLE_GRID) for unroll in UNROLLS]
    if aligned(2 * VECTOR):
        variants.append((DEFAULT_BLOCK, 2 * VECTOR, 1, _BLOCKS_PER_SM))
    return variants
