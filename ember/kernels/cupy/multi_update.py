"""CUDA's ``optimizer_update``: one generated kernel per program and dtype, launched once
per ``SLOTS`` tensors of the group (a multi-tensor apply).

The pointers, sizes and host numbers of up to ``SLOTS`` tensors travel as kernel
parameters (no table to upload, so a captured step replays with nothing to copy); one
row of blocks per tensor (``blockIdx.y``) walks it with a grid-stride loop after
computing the program's prologue (the first thread of the row's first block stores the
scalar outputs). Compiled without FMA contraction, the steps round as the CPU's do.

``source`` and ``launches`` are pure Python: the kernel can be rendered and compiled
(``nvcc -ptx``) without a GPU.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

import numpy as np

from ember.kernels import multi_update
from ember.kernels.multi_update import Program

SLOTS = 16
BLOCK = 256
# Blocks per tensor at most; each thread then loops (a guess: 4 per SM of a 132-SM GPU).
_MAX_BLOCKS = 528
# CUDA's limit on a kernel's parameters (bytes), before Volta's larger one.
_PARAMETER_BYTES = 4096
_CTYPE = {"float32": "float", "float64": "double"}
_MATH = {"float": {"sqrt": "sqrtf", "pow": "powf", "max": "ember_max"},
         "double": {"sqrt": "sqrt", "pow": "pow", "max": "ember_max"}}
OPTIONS = ("--std=c++17", "--fmad=false")


def source(program: Program, dtype: str) -> tuple[str, str]:
    """(kernel name, CUDA C++) of ``program`` over ``SLOTS`` tensors at most."""
    ctype = _CTYPE[dtype]
    math = _MATH[ctype]
    digest = hashlib.sha256(repr(program).encode()).hexdigest()[:12]
    name = f"ember_update_{program.name}_{dtype}_{digest}"
    pointers = ([("const", f"x{j}") for j in range(len(program.tensors))]
                + [("const", f"c{j}p") for j in range(len(program.scalars))]
                + [("", f"y{k}") for k in range(len(program.outputs))]
                + [("", f"z{k}") for k in range(len(program.scalar_outputs))])
    per_slot = 8 * len(pointers) + 8 + len(program.host) * (4 if ctype == "float" else 8)
    if per_slot * SLOTS > _PARAMETER_BYTES:
        raise ValueError(f"{multi_update.OP}: program {program.name} needs {per_slot} bytes "
                         f"of kernel parameters a tensor, too many for {SLOTS} tensors")
    params, cases = [], []
    for s in range(SLOTS):
        params += [f"{const} {ctype}* __restrict__ {p}_{s}".strip() for const, p in pointers]
        params.append(f"long long n_{s}")
        params += [f"{ctype} h{k}_{s}" for k in range(len(program.host))]
        moves = [f"{p} = {p}_{s};" for _, p in pointers] + [f"n = n_{s};"]
        moves += [f"h{k} = h{k}_{s};" for k in range(len(program.host))]
        cases.append(f"    case {s}: {' '.join(moves)} break;")
    locals_ = [f"  {f'{const} {ctype}'.strip()}* {p} = nullptr;" for const, p in pointers]
    locals_ += ["  long long n = 0;"] + [f"  {ctype} h{k} = 0;" for k in range(len(program.host))]
    names = {h: f"h{k}" for k, h in enumerate(program.host)}
    scalar_loads = []
    for j, role in enumerate(program.scalars):
        scalar_loads.append(f"  const {ctype} c{j} = *c{j}p;")
        names[role] = f"c{j}"
    prologue = multi_update.render_steps(program.prologue, names, ctype, math, "q")
    writes = [f"    *z{k} = {names[out]};" for k, out in enumerate(program.scalar_outputs)]
    body_names = dict(names)
    loads = []
    for j, role in enumerate(program.tensors):
        loads.append(f"    const {ctype} in{j} = x{j}[i];")
        body_names[role] = f"in{j}"
    steps = multi_update.render_steps(program.body, body_names, ctype, math, "s")
    stores = [f"    y{k}[i] = {body_names[out]};" for k, out in enumerate(program.outputs)]
    code = "\n".join([
        # NumPy's maximum: NaN in either operand wins.
        f"__device__ __forceinline__ {ctype} ember_max({ctype} a, {ctype} b) "
        "{ return (a > b || a != a) ? a : b; }",
        f'extern "C" __global__ void __launch_bounds__({BLOCK}) {name}(',
        "    " + ",\n    ".join(params) + ") {",
        *locals_,
        "  switch (blockIdx.y) {",
        *cases,
        "  }",
        *scalar_loads,
        *[f"  {line}" for line in prologue],
        *(["  if (blockIdx.x == 0 && threadIdx.x == 0) {", *writes, "  }"] if writes else []),
        "  const long long stride = (long long)gridDim.x * blockDim.x;",
        "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;"
        " i += stride) {",
        *loads, *[f"    {line}" for line in steps], *stores,
        "  }",
        "}",
        "",
    ])
    return name, code


def launches(program: Program, sizes: list[int]) -> list[tuple[int, list[int]]]:
    """(blocks per tensor, tensor indices) of each launch over tensors of ``sizes``."""
    found = []
    for start in range(0, len(sizes), SLOTS):
        chunk = list(range(start, min(start + SLOTS, len(sizes))))
        most = max(sizes[t] for t in chunk)
        found.append((max(1, min(_MAX_BLOCKS, -(-most // BLOCK))), chunk))
    return found


@functools.cache
def _kernel(program: Program, dtype: str) -> Any:
    import cupy

    name, code = source(program, dtype)
    return cupy.RawKernel(code, name, options=OPTIONS)


def optimizer_update(msg: Any, pool: Any, *inputs: Any) -> tuple:
    import cupy

    program, host = msg.attrs
    dtype = msg.dtypes[0]
    if dtype not in multi_update.DTYPES:
        raise TypeError(f"{multi_update.OP}: {dtype} parameters are not supported "
                        f"(float32 and float64 are)")
    outs = [pool.empty(shape, np.dtype(d)) for shape, d in zip(msg.shapes, msg.dtypes)]
    n_in, n_out = program.inputs_per_tensor, program.outputs_per_tensor
    kind = np.dtype(dtype).type
    sizes = multi_update.group_sizes(msg)
    kernel = _kernel(program, dtype)
    per_slot = n_in + n_out + 1 + len(program.host)
    for blocks, chunk in launches(program, sizes):
        args: list = []
        held = []  # contiguous copies, alive until the launch is queued
        for t in chunk:
            arrays = [cupy.ascontiguousarray(a) for a in inputs[t * n_in:(t + 1) * n_in]]
            held += arrays
            arrays += outs[t * n_out:(t + 1) * n_out]
            args += [np.uint64(a.data.ptr) for a in arrays]
            args.append(np.int64(sizes[t]))
            args += [kind(v) for v in host[t]]
        unused = [np.uint64(0)] * (n_in + n_out) + [np.int64(0)] + [kind(0)] * len(program.host)
        args += unused * (SLOTS - len(chunk))
        assert len(args) == per_slot * SLOTS
        kernel((blocks, len(chunk)), (BLOCK,), tuple(args))
        del held
    return tuple(outs)
