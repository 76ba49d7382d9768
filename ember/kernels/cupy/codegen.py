"""CUDA C++ for a fused elementwise group: one kernel per group, rendered from its members.

Pure Python (no CuPy), so rendering, the cache key and the source can be tested on
machines without a GPU.

Every value lives in a register as ``float`` (float32, float16 and bfloat16) or
``bool``; each member's result is rounded to its own dtype, so a chain in float16
gives what the unfused kernels give (they compute in float32 and round once per
op). Operands are first converted to the op's compute dtype, as the NumPy
kernels' ``_cast`` does. Scalars travel as kernel arguments, not literals, so a
learning rate that changes every step does not compile a new kernel.

Layout: the output is contiguous; an input is ``full`` (contiguous, the output's
shape: indexed by the flat index), ``scalar`` (one element, loaded once) or
``strided`` (broadcast or a view: its offset is computed from the output's
coordinates and the input's strides, both passed at launch over ``rank`` dims).
With ``vector`` > 1 each thread loads and stores ``vector`` consecutive elements of
every full input and every output with one aligned access (``ld.global.v4`` for
float32): one scalar per thread leaves too few bytes in flight to reach the
H200's bandwidth (h200-facts: 1.7 TB/s vs 4.2 TB/s). With ``unroll`` > 1 a thread
issues ``unroll`` such loads (a block's ``unroll`` consecutive tiles of ``block`` vectors,
so a warp's accesses stay contiguous) before it computes and stores any of them: more
bytes in flight per thread for the same grid (on the H200, custom_gelu over 1 GiB:
3.85 TB/s at one vector per thread, 4.16 at four with a grid covering every element
once; evict-first stores, ``st.global.cs``, ran 0.02-0.1 TB/s slower). Each element's
expression is the same in every variant, so every variant gives the same bits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.kernels.fusion.cexpr import (
    COMPARISON,
    FLOATS,
    LOGICAL,
    OPS,
    Renderer,
    attr_shape,
    digest,
    kernel_name,
    scalar_type,
)
from ember.kernels.fusion.planner import REDUCTIONS, VIEWS

# Dtypes a generated kernel reads and writes, with their storage type in C++.
STORAGE = {"float32": "float", "float16": "unsigned short", "bfloat16": "unsigned short",
           "bool": "bool"}

_PREAMBLE = r"""
template <typename T, int N> struct __align__(sizeof(T) * N) Vec { T v[N]; };
__device__ __forceinline__ float f16_load(unsigned short h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
__device__ __forceinline__ unsigned short f16_store(float f) {
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
__device__ __forceinline__ float bf16_load(unsigned short h) {
  return __uint_as_float(((unsigned int)h) << 16);
}
// Round to nearest even, NaN to a quiet NaN: one instruction from sm_80 on, integer
// steps before.
__device__ __forceinline__ unsigned short bf16_store(float f) {
#if __CUDA_ARCH__ >= 800
  unsigned short h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
#else
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
#endif
}
__device__ __forceinline__ float f16_round(float f) { return f16_load(f16_store(f)); }
__device__ __forceinline__ float bf16_round(float f) { return bf16_load(bf16_store(f)); }
// NumPy's maximum / minimum: NaN in either operand gives NaN (fmaxf would drop it).
__device__ __forceinline__ float nan_max(float a, float b) { return (a > b || a != a) ? a : b; }
__device__ __forceinline__ float nan_min(float a, float b) { return (a < b || a != a) ? a : b; }
"""



def fusible(call: Any, dtype_of: Any) -> bool:
    """Whether a generated kernel computes ``call`` exactly as its unfused kernel (row
    kernels take float reductions, and views of any stored dtype)."""
    if call.op in REDUCTIONS:
        return call.dtype in FLOATS and all(dtype_of(i) in FLOATS for i in call.inputs)
    if call.op in VIEWS:
        return call.dtype in STORAGE
    if call.op not in OPS or call.dtype not in STORAGE:
        return False
    if call.op == "round" and call.attrs:
        return False
    if call.op in LOGICAL or call.op == "bitwise_not":
        if call.dtype != "bool":
            return False
    elif call.op in COMPARISON:
        if call.attrs[0] not in FLOATS:
            return False
    elif call.op not in ("where", "cast") and call.dtype not in FLOATS:
        return False
    for i in call.inputs:
        if dtype_of(i) not in STORAGE:
            return False
    return True


_LOAD = {"float32": "{}", "float16": "f16_load({})", "bfloat16": "bf16_load({})", "bool": "{}"}
_STORE = {"float32": "{}", "float16": "f16_store({})", "bfloat16": "bf16_store({})",
          "bool": "{}"}


class Layout:
    """How each input is read: ``full``, ``scalar`` or ``strided`` (over ``rank`` dims).

    ``narrow``: every index fits 32 bits, so strided offsets use 32-bit division (a
    64-bit one is a long software sequence on the GPU).
    """

    __slots__ = ("kinds", "narrow", "rank")

    def __init__(self, kinds: tuple[str, ...], rank: int, narrow: bool = True) -> None:
        self.kinds = kinds
        self.rank = rank
        self.narrow = narrow

    def key(self) -> tuple:
        return (self.kinds, self.rank, self.narrow)


class Source:
    """A rendered kernel: its name, CUDA C++ text, and scalar arguments in order."""

    __slots__ = ("code", "name", "outputs", "scalars")

    def __init__(self, name: str, code: str, scalars: list[tuple[str, Any]],
                 outputs: list[int]) -> None:
        self.name = name
        self.code = code
        self.scalars = scalars
        self.outputs = outputs  # member indices stored, in parameter order


def group_structure(group: Any) -> tuple:
    """A fused group's structure: its planner key (which leaves scalar values out: they
    are kernel arguments) without which members it stores (timing decides that: see
    ``stores.py``)."""
    key = group.key
    return (key[0], key[1], *key[3:])


def structure_key(group: Any, program: Any, input_dtypes: Sequence[str], layout: Layout,
                  vector: int, block: int, unroll: int = 1) -> tuple:
    """What the source depends on: ops, dtypes, wiring, layout, vector width, block size,
    vectors per thread; never the sizes or the scalars' values (both
    travel as arguments)."""
    members = tuple((m.op, m.dtype, attr_shape(m)) for m in group.members)
    return (members, tuple(program.steps), tuple(program.materialize), tuple(input_dtypes),
            layout.key(), vector, block, unroll)


def render(group: Any, program: Any, input_dtypes: Sequence[str], layout: Layout,
           vector: int, block: int, unroll: int = 1) -> Source:
    """The CUDA C++ of ``group`` for inputs of ``input_dtypes`` laid out as ``layout``.

    Args:
        vector: elements per load / store of a full input or an output (1: scalar).
        block: threads per block (the launch must use it: it is compiled in).
        unroll: vectors a thread loads before computing (vector > 1 only).
    """
    if unroll > 1 and vector == 1:
        raise ValueError(f"render: unroll {unroll} needs vector loads (vector is 1)")
    renderer = Renderer(group.members, input_dtypes)
    body = renderer.render(program.steps)
    n_inputs = len(input_dtypes)
    outputs = [j for j, keep in enumerate(program.materialize) if keep]
    name = kernel_name(group.members,
                       digest(structure_key(group, program, input_dtypes, layout, vector, block,
                                            unroll)))
    params = []
    for k, dtype in enumerate(input_dtypes):
        params.append(f"const {STORAGE[dtype]}* __restrict__ in{k}")
    for j in outputs:
        params.append(f"{STORAGE[group.members[j].dtype]}* __restrict__ out{j}")
    params.append("long long n")
    rank = layout.rank
    offset_type = "long long" if not layout.narrow else "int"
    strided = [k for k, kind in enumerate(layout.kinds) if kind == "strided"]
    if strided:
        params += [f"long long size{d}" for d in range(rank)]
        params += [f"long long stride{k}_{d}" for k in strided for d in range(rank)]
    params += [f"{scalar_type(dtype)} s{i}" for i, (dtype, _) in enumerate(renderer.scalars)]

    def load(k: int, index: str, vector_name: str | None) -> str:
        kind = layout.kinds[k]
        if kind == "scalar":
            return f"r{k}"
        raw = f"{vector_name}.v[e]" if vector_name else (
            f"in{k}[{index}]" if kind == "full" else f"in{k}[offset{k}]")
        return _LOAD[input_dtypes[k]].format(raw)

    def element(index: str, vectorized: bool) -> list[str]:
        lines = []
        if strided:
            lines.append(f"{offset_type} rest = ({offset_type}){index};")
            for k in strided:
                lines.append(f"{offset_type} offset{k} = 0;")
            for d in range(rank - 1, -1, -1):
                coordinate = "rest" if d == 0 else f"rest % ({offset_type})size{d}"
                lines.append(f"{{ {offset_type} c = {coordinate};")
                lines += [f"  offset{k} += c * stride{k}_{d};" for k in strided]
                lines.append(f"  rest /= ({offset_type})size{d}; }}" if d else "}")
        for k in range(n_inputs):
            vec = f"a{k}[t]" if vectorized and layout.kinds[k] == "full" else None
            register = "float" if input_dtypes[k] in FLOATS else "bool"
            lines.append(f"{register} v{k} = {load(k, index, vec)};")
        lines += body
        for j in outputs:
            value = f"v{n_inputs + j}"
            stored = _STORE[group.members[j].dtype].format(value)
            lines.append(f"o{j}.v[e] = {stored};" if vectorized else f"out{j}[{index}] = {stored};")
        return lines

    indent = "      "
    scalar_loads = [f"  const {'float' if input_dtypes[k] in FLOATS else 'bool'} r{k} = "
                    + _LOAD[input_dtypes[k]].format(f"in{k}[0]") + ";"
                    for k in range(n_inputs) if layout.kinds[k] == "scalar"]
    code = [_PREAMBLE, f'extern "C" __global__ void __launch_bounds__({block})',
            f"{name}({', '.join(params)}) {{",
            "  long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;",
            "  long long step = (long long)gridDim.x * blockDim.x;", *scalar_loads]
    tail_start = "0"
    if vector > 1:
        # Tile t of block b: vectors (b * unroll + t) * block + threadIdx.x; a thread loads
        # every tile's vector (those past the end skipped) before computing any.
        code.append(f"  long long chunks = n / {vector};")
        code.append(f"  for (long long base = (long long)blockIdx.x * {block * unroll}"
                    f" + threadIdx.x; base < chunks; base += step * {unroll}) {{")
        vectors = [k for k in range(n_inputs) if layout.kinds[k] == "full"]
        guard = "if (j < chunks) " if unroll > 1 else ""
        for k in vectors:
            code.append(f"    Vec<{STORAGE[input_dtypes[k]]}, {vector}> a{k}[{unroll}];")
        code.append("    #pragma unroll")
        code.append(f"    for (int t = 0; t < {unroll}; ++t) {{")
        code.append(f"      long long j = base + t * {block};")
        for k in vectors:
            storage = STORAGE[input_dtypes[k]]
            code.append(f"      {guard}a{k}[t] = reinterpret_cast<const Vec<{storage}, "
                        f"{vector}>*>(in{k})[j];")
        code.append("    }")
        code.append("    #pragma unroll")
        code.append(f"    for (int t = 0; t < {unroll}; ++t) {{")
        code.append(f"      long long j = base + t * {block};")
        if unroll > 1:  # base < chunks holds for tile 0
            code.append("      if (j >= chunks) break;")
        for j in outputs:
            code.append(f"      Vec<{STORAGE[group.members[j].dtype]}, {vector}> o{j};")
        code.append("      #pragma unroll")
        code.append(f"      for (int e = 0; e < {vector}; ++e) {{")
        code.append(f"{indent}  long long i = j * {vector} + e;")
        code += [indent + "  " + line for line in element("i", True)]
        code.append("      }")
        for j in outputs:
            vec = f"Vec<{STORAGE[group.members[j].dtype]}, {vector}>"
            code.append(f"      *(reinterpret_cast<{vec}*>(out{j}) + j) = o{j};")
        code += ["    }", "  }"]
        tail_start = f"chunks * {vector}"
    code.append(f"  for (long long i = {tail_start} + tid; i < n; i += step) {{")
    code += ["    " + line for line in element("i", False)]
    code += ["  }", "}", ""]
    return Source(name, "\n".join(code), renderer.scalars, outputs)


