"""The CPU's ``optimizer_update``: one compiled C loop over every tensor of the group.

The program (``kernels/multi_update.py``) renders to one C function per program and
dtype (float32, float64), compiled and cached as fused groups are (``compiled.py``), that
walks a range of the group's elements laid end to end, tensor by tensor: the ranges are
split between the cores. The C is IEEE arithmetic without contraction, so it computes
what the NumPy fallback below computes, operation for operation; the fallback runs
where no C compiler is found (or ``EMBER_CPU_COMPILE=0``).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
from typing import Any, NamedTuple

import numpy as np

from ember.kernels import multi_update
from ember.kernels.multi_update import Program
from ember.kernels.numpy import compiled, cores
from ember.kernels.numpy.table import NP, kernel

# Elements per thread at least: below this a thread's hand-over costs more than it saves
# (a guess, as compiled.py's).
_PER_THREAD = 1 << 15
_CTYPE = {"float32": "float", "float64": "double"}
_MATH = {"float": {"sqrt": "sqrtf", "pow": "powf", "max": "ember_max"},
         "double": {"sqrt": "sqrt", "pow": "pow", "max": "ember_max"}}
# (begin, end, tensors, offsets, data pointers, host numbers, write scalar outputs)
_FUNCTION = ctypes.CFUNCTYPE(None, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_longlong,
                             ctypes.POINTER(ctypes.c_longlong), ctypes.POINTER(ctypes.c_void_p),
                             ctypes.c_void_p, ctypes.c_int)


class Source(NamedTuple):
    name: str
    code: str


def render(program: Program, dtype: str) -> Source:
    """The C function running ``program`` over a range of a group's elements."""
    ctype = _CTYPE[dtype]
    math = _MATH[ctype]
    digest = hashlib.sha256(repr(program).encode()).hexdigest()[:12]
    name = f"ember_update_{program.name}_{dtype}_{digest}"
    n_tensors = len(program.tensors)
    per_tensor = program.inputs_per_tensor + program.outputs_per_tensor
    n_outputs = len(program.outputs)

    def prologue(indent: str) -> tuple[list[str], dict[str, str]]:
        names = {h: f"h[{k}]" for k, h in enumerate(program.host)}
        lines = [f"const {ctype}* h = host + t * {max(len(program.host), 1)};",
                 f"void** d = data + t * {per_tensor};"]
        for j, role in enumerate(program.scalars):
            lines.append(f"const {ctype} c{j} = *(const {ctype}*)d[{n_tensors + j}];")
            names[role] = f"c{j}"
        lines += multi_update.render_steps(program.prologue, names, ctype, math, "q")
        return [indent + line for line in lines], names

    scalar_lines, scalar_names = prologue("      ")
    first_scalar_out = program.inputs_per_tensor + n_outputs
    writes = [f"      *({ctype}*)d[{first_scalar_out + k}] = {scalar_names[out]};"
              for k, out in enumerate(program.scalar_outputs)]
    body_prologue, names = prologue("    ")
    loads, stores = [], []
    for j, role in enumerate(program.tensors):
        body_prologue.append(f"    const {ctype}* restrict x{j} = (const {ctype}*)d[{j}];")
        loads.append(f"      const {ctype} in{j} = x{j}[i];")
        names[role] = f"in{j}"
    steps = multi_update.render_steps(program.body, names, ctype, math, "s")
    for k, out in enumerate(program.outputs):
        slot = program.inputs_per_tensor + k
        body_prologue.append(f"    {ctype}* restrict y{k} = ({ctype}*)d[{slot}];")
        stores.append(f"      y{k}[i] = {names[out]};")
    code = "\n".join([
        "#include <math.h>",
        # NumPy's maximum: NaN in either operand wins.
        f"static inline {ctype} ember_max({ctype} a, {ctype} b) "
        "{ return (a > b || a != a) ? a : b; }",
        f"void {name}(long long begin, long long end, long long n, const long long* offsets,",
        f"          void** data, const {ctype}* host, int write_scalars) {{",
        "  if (write_scalars) {",
        "    for (long long t = 0; t < n; t++) {",
        *scalar_lines, *writes,
        "    }",
        "  }",
        "  for (long long t = 0; t < n; t++) {",
        "    const long long lo = offsets[t], hi = offsets[t + 1];",
        "    if (hi <= begin || lo == hi) continue;",
        "    if (lo >= end) break;",
        "    const long long a = (begin > lo ? begin : lo) - lo;",
        "    const long long b = (end < hi ? end : hi) - lo;",
        *body_prologue,
        "    for (long long i = a; i < b; i++) {",
        *loads, *[f"      {line}" for line in steps], *stores,
        "    }",
        "  }",
        "}",
        "",
    ])
    return Source(name, code)


def _compiles() -> bool:
    return (os.environ.get("EMBER_CPU_COMPILE", "1") not in ("", "0")
            and compiled.compiler().error is None)


_functions: dict[tuple, Any] = {}


def _function(program: Program, dtype: str) -> Any:
    key = (program, dtype)
    found = _functions.get(key)
    if found is None:
        found = _functions[key] = compiled.compiler().function(render(program, dtype),
                                                               _FUNCTION)
    return found


@kernel(multi_update.OP)
def optimizer_update(msg: Any, pool: Any, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
    program, host = msg.attrs
    dtype = msg.dtypes[0]
    if dtype not in multi_update.DTYPES:
        raise TypeError(f"{multi_update.OP}: {dtype} parameters are not supported "
                        f"(float32 and float64 are)")
    outs = [pool.empty(shape, NP[d]) for shape, d in zip(msg.shapes, msg.dtypes)]
    function = _function(program, dtype) if _compiles() else None
    if function is None:
        run_numpy(program, host, inputs, outs)
    else:
        _run_compiled(function, program, host, dtype, inputs, outs)
    return tuple(outs)


def _run_compiled(function: Any, program: Program, host: tuple, dtype: str,
                  inputs: tuple, outs: list) -> None:
    n_in, n_out = program.inputs_per_tensor, program.outputs_per_tensor
    n = len(host)
    arrays = []
    sizes = [0]
    for t in range(n):
        tensor_inputs = [np.ascontiguousarray(a) for a in inputs[t * n_in:(t + 1) * n_in]]
        arrays += tensor_inputs + outs[t * n_out:(t + 1) * n_out]
        sizes.append(sizes[-1] + (tensor_inputs[0].size if program.tensors else 0))
    offsets = (ctypes.c_longlong * (n + 1))(*sizes)
    data = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
    values = np.array(host, dtype=NP[dtype]).reshape(n, -1) if program.host else \
        np.zeros(n, NP[dtype])
    total = sizes[-1]
    parts = min(cores.share(), max(1, total // _PER_THREAD))
    bounds = [total * p // parts for p in range(parts + 1)]
    compiled.in_parallel([
        lambda p=p: function(bounds[p], bounds[p + 1], n, offsets, data,
                             values.ctypes.data, int(p == 0))
        for p in range(parts)])


def run_numpy(program: Program, host: tuple, inputs: tuple, outs: list) -> None:
    """``program`` tensor by tensor in NumPy: the C's operations in the C's order, each
    rounded to the dtype (the fallback, and the reference the tests hold the C to)."""
    n_in, n_out = program.inputs_per_tensor, program.outputs_per_tensor
    n_tensors = len(program.tensors)
    for t, numbers in enumerate(host):
        tensor_inputs = inputs[t * n_in:(t + 1) * n_in]
        tensor_outs = outs[t * n_out:(t + 1) * n_out]
        kind = tensor_outs[0].dtype.type
        env: dict[str, Any] = {h: kind(v) for h, v in zip(program.host, numbers)}
        env.update((role, kind(a[()])) for role, a in zip(program.scalars,
                                                          tensor_inputs[n_tensors:]))
        with np.errstate(all="ignore"):
            _evaluate(program.prologue, env, kind)
            for k, out in enumerate(program.scalar_outputs):
                tensor_outs[len(program.outputs) + k][()] = env[out]
            env.update(zip(program.tensors, tensor_inputs[:n_tensors]))
            _evaluate(program.body, env, kind)
        for k, out in enumerate(program.outputs):
            np.copyto(tensor_outs[k], env[out], casting="unsafe")


_UFUNCS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
           "maximum": np.maximum, "pow": np.power, "neg": np.negative, "sqrt": np.sqrt}


def _evaluate(steps: tuple, env: dict, kind: type) -> None:
    for name, op, *args in steps:
        operands = [env[a] if isinstance(a, str) else kind(a) for a in args]
        env[name] = _UFUNCS[op](*operands, dtype=kind)
