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
H200's bandwidth (h200-facts: 1.7 TB/s vs 4.2 TB/s).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np

from ember.kernels.fusion.planner import REDUCTIONS, VIEWS

# Dtypes a generated kernel reads and writes, with their storage type in C++.
STORAGE = {"float32": "float", "float16": "unsigned short", "bfloat16": "unsigned short",
           "bool": "bool"}
FLOATS = ("float32", "float16", "bfloat16")
# Not the NumPy backend's NP table: the CPU backend renders C from this module, so
# importing that package here would be circular.
_LOW_PRECISION = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}

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
__device__ __forceinline__ unsigned short bf16_store(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN stays a quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                      // round to nearest even
  return (unsigned short)(u >> 16);
}
__device__ __forceinline__ float f16_round(float f) { return f16_load(f16_store(f)); }
__device__ __forceinline__ float bf16_round(float f) { return bf16_load(bf16_store(f)); }
// NumPy's maximum / minimum: NaN in either operand gives NaN (fmaxf would drop it).
__device__ __forceinline__ float nan_max(float a, float b) { return (a > b || a != a) ? a : b; }
__device__ __forceinline__ float nan_min(float a, float b) { return (a < b || a != a) ? a : b; }
"""

# Ops the generated kernels cover, by their rendering below. Integer dtypes, floor
# division and remainder (Python's sign rules) and round with decimals run unfused.
_BINARY = {
    "add": "({a} + {b})", "sub": "({a} - {b})", "mul": "({a} * {b})", "div": "({a} / {b})",
    "pow": "powf({a}, {b})", "maximum": "nan_max({a}, {b})", "minimum": "nan_min({a}, {b})",
}
_COMPARISON = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_LOGICAL = {"bitwise_and": "&&", "bitwise_or": "||", "bitwise_xor": "!="}
_UNARY = {
    "neg": "(-{x})", "abs": "fabsf({x})", "floor": "floorf({x})", "ceil": "ceilf({x})",
    "round": "rintf({x})", "exp": "expf({x})", "log": "logf({x})", "log1p": "log1pf({x})",
    "sqrt": "sqrtf({x})", "rsqrt": "(1.0f / sqrtf({x}))", "sin": "sinf({x})",
    "cos": "cosf({x})", "tanh": "tanhf({x})", "erf": "erff({x})",
    "reciprocal": "(1.0f / {x})", "alias": "{x}",
    "sign": "((float)(0.0f < {x}) - (float)({x} < 0.0f))",
    "relu": "(({x} > 0.0f || {x} != {x}) ? {x} : 0.0f)",
    "sigmoid": "(1.0f / (1.0f + expf(-{x})))",
    "silu": "({x} / (1.0f + expf(-{x})))",
    "gelu": "(0.5f * {x} * (1.0f + erff({x} * 0.70710678118654752f)))",
    "gelu_tanh": ("(0.5f * {x} * (1.0f + tanhf(0.79788456080286536f * "
                  "({x} + 0.044715f * {x} * {x} * {x}))))"),
}
_FLOAT_TESTS = {"isnan": "({x} != {x})", "isinf": "(fabsf({x}) == __int_as_float(0x7f800000))"}
OPS = frozenset(_BINARY) | frozenset(_COMPARISON) | frozenset(_LOGICAL) | frozenset(_UNARY) \
    | frozenset(_FLOAT_TESTS) | {"bitwise_not", "clamp", "where", "cast"}


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
    if call.op in _LOGICAL or call.op == "bitwise_not":
        if call.dtype != "bool":
            return False
    elif call.op in _COMPARISON:
        if call.attrs[0] not in FLOATS:
            return False
    elif call.op not in ("where", "cast") and call.dtype not in FLOATS:
        return False
    for i in call.inputs:
        if dtype_of(i) not in STORAGE:
            return False
    return True


def scalar_arguments(members: Sequence[Any], steps: Sequence[tuple[int, tuple[int, ...]]]
                     ) -> list[tuple[str, Any]]:
    """(dtype to round to, value) of each scalar argument, in the kernel's parameter order.

    Arithmetic meets a scalar in float32 (NumPy's kernels widen only arrays), a
    comparison rounds it to its compute dtype, ``where`` to its output dtype.
    """
    scalars: list[tuple[str, Any]] = []
    for j, args in steps:
        member = members[j]
        op, attrs = member.op, member.attrs
        if op in _BINARY and len(args) == 1:
            scalars.append(("float32", attrs[1]))
        elif op in _COMPARISON and len(args) == 1:
            scalars.append((attrs[0], attrs[1]))
        elif op in _LOGICAL and len(args) == 1:
            scalars.append(("bool", attrs[1]))
        elif op == "clamp":
            scalars += [("float32", v) for v in attrs if v is not None]
        elif op == "where":
            scalars += [(member.dtype, v) for v in attrs if v is not None]
    return scalars


def _convert(expr: str, source: str, target: str) -> str:
    """``expr`` (a register value of dtype ``source``) as a value of dtype ``target``."""
    if source == target:
        return expr
    if target == "bool":
        return f"({expr} != 0.0f)"
    if source == "bool":
        return f"({expr} ? 1.0f : 0.0f)"
    if target == "float32":
        return expr  # float16 / bfloat16 values are already exact floats
    return f"{_ROUND[target]}({expr})"


_ROUND = {"float16": "f16_round", "bfloat16": "bf16_round"}
_LOAD = {"float32": "{}", "float16": "f16_load({})", "bfloat16": "bf16_load({})", "bool": "{}"}
_STORE = {"float32": "{}", "float16": "f16_store({})", "bfloat16": "bf16_store({})",
          "bool": "{}"}


def _scalar_type(dtype: str) -> str:
    return "bool" if dtype == "bool" else "float"


class _Renderer:
    """Builds the statements of one element: member by member, into registers ``v<slot>``."""

    def __init__(self, members: Sequence[Any], input_dtypes: Sequence[str]) -> None:
        self.members = members
        self.dtypes = list(input_dtypes)  # dtype per slot, members appended as rendered
        self.scalars: list[tuple[str, Any]] = []  # (compute dtype, value) per scalar argument
        self.lines: list[str] = []

    def scalar(self, value: Any, dtype: str) -> str:
        self.scalars.append((dtype, value))
        return f"s{len(self.scalars) - 1}"

    def operand(self, slot: int, target: str) -> str:
        return _convert(f"v{slot}", self.dtypes[slot], target)

    def render(self, steps: Sequence[tuple[int, tuple[int, ...]]]) -> list[str]:
        for j, args in steps:
            member = self.members[j]
            slot = len(self.dtypes)
            expr = self.expression(member, args)
            if member.dtype in _ROUND:
                expr = f"{_ROUND[member.dtype]}({expr})"
            self.lines.append(f"{_scalar_type(member.dtype)} v{slot} = {expr};")
            self.dtypes.append(member.dtype)
        return self.lines

    def binary_operands(self, member: Any, args: tuple[int, ...], compute: str,
                        scalar_dtype: str) -> list[str]:
        if len(args) == 2:
            return [self.operand(args[0], compute), self.operand(args[1], compute)]
        _, value, scalar_is_lhs = member.attrs
        tensor = self.operand(args[0], compute)
        scalar = self.scalar(value, scalar_dtype)
        return [scalar, tensor] if scalar_is_lhs else [tensor, scalar]

    def expression(self, member: Any, args: tuple[int, ...]) -> str:
        op, dtype = member.op, member.dtype
        if op in _BINARY:
            # Arithmetic kernels widen array operands only: a scalar meets them in float32.
            a, b = self.binary_operands(member, args, dtype, "float32")
            return _BINARY[op].format(a=a, b=b)
        if op in _COMPARISON:
            # ... where comparisons round the scalar to the compute dtype first.
            compute = member.attrs[0]
            a, b = self.binary_operands(member, args, compute, compute)
            return f"({a} {_COMPARISON[op]} {b})"
        if op in _LOGICAL:
            a, b = self.binary_operands(member, args, "bool", "bool")
            return f"({a} {_LOGICAL[op]} {b})"
        if op == "bitwise_not":
            return f"(!{self.operand(args[0], 'bool')})"
        if op in _UNARY:
            return _UNARY[op].format(x=self.operand(args[0], dtype))
        if op in _FLOAT_TESTS:
            source = self.dtypes[args[0]]
            if source == "bool":
                return "false"
            return _FLOAT_TESTS[op].format(x=f"v{args[0]}")
        if op == "clamp":
            x = self.operand(args[0], dtype)
            low, high = member.attrs
            if low is not None:
                x = f"nan_max({x}, {self.scalar(low, 'float32')})"
            if high is not None:
                x = f"nan_min({x}, {self.scalar(high, 'float32')})"
            return x
        if op == "where":
            tensors = iter(args[1:])
            a, b = (self.operand(next(tensors), dtype) if v is None else self.scalar(v, dtype)
                    for v in member.attrs)
            return f"({self.operand(args[0], 'bool')} ? {a} : {b})"
        if op == "cast":
            return self.operand(args[0], dtype)
        raise ValueError(f"no CUDA rendering for op {op!r}")


class Layout:
    """How each input is read: ``full``, ``scalar`` or ``strided`` (over ``rank`` dims).

    ``narrow``: every index fits 32 bits, so strided offsets use 32-bit division (a
    64-bit one is a long software sequence on the GPU).
    """

    __slots__ = ("kinds", "rank", "narrow")

    def __init__(self, kinds: tuple[str, ...], rank: int, narrow: bool = True) -> None:
        self.kinds = kinds
        self.rank = rank
        self.narrow = narrow

    def key(self) -> tuple:
        return (self.kinds, self.rank, self.narrow)


class Source:
    """A rendered kernel: its name, CUDA C++ text, and scalar arguments in order."""

    __slots__ = ("name", "code", "scalars", "outputs")

    def __init__(self, name: str, code: str, scalars: list[tuple[str, Any]],
                 outputs: list[int]) -> None:
        self.name = name
        self.code = code
        self.scalars = scalars
        self.outputs = outputs  # member indices stored, in parameter order


def kernel_name(members: Sequence[Any], digest: str) -> str:
    """A readable, unique C identifier: the source ops in order, then a digest."""
    ops = "_".join(m.op for m in members[:6])
    more = f"_and{len(members) - 6}" if len(members) > 6 else ""
    return f"ember_{ops}{more}_{digest[:10]}"


def structure_key(group: Any, program: Any, input_dtypes: Sequence[str], layout: Layout,
                  vector: int, block: int) -> tuple:
    """What the source depends on: ops, dtypes, wiring, layout, vector width, block size;
    never the sizes or the scalars' values (both travel as arguments)."""
    members = tuple((m.op, m.dtype, _attr_shape(m)) for m in group.members)
    return (members, tuple(program.steps), tuple(program.materialize), tuple(input_dtypes),
            layout.key(), vector, block)


def _attr_shape(member: Any) -> tuple:
    """A member's attrs with scalar values replaced by their place (they are arguments)."""
    op, attrs = member.op, member.attrs
    if op in _BINARY or op in _COMPARISON or op in _LOGICAL:
        return (attrs[0], len(attrs) > 1 and attrs[2]) if len(attrs) > 1 else (attrs[0],)
    if op == "clamp" or op == "where":
        return tuple(v is None for v in attrs)
    return tuple(attrs)


def digest(key: tuple) -> str:
    return hashlib.sha256(repr(key).encode()).hexdigest()


def render(group: Any, program: Any, input_dtypes: Sequence[str], layout: Layout,
           vector: int, block: int) -> Source:
    """The CUDA C++ of ``group`` for inputs of ``input_dtypes`` laid out as ``layout``."""
    renderer = _Renderer(group.members, input_dtypes)
    body = renderer.render(program.steps)
    n_inputs = len(input_dtypes)
    outputs = [j for j, keep in enumerate(program.materialize) if keep]
    name = kernel_name(group.members,
                       digest(structure_key(group, program, input_dtypes, layout, vector, block)))
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
    params += [f"{_scalar_type(dtype)} s{i}" for i, (dtype, _) in enumerate(renderer.scalars)]

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
            vec = f"a{k}" if vectorized and layout.kinds[k] == "full" else None
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
        code.append(f"  long long chunks = n / {vector};")
        code.append("  for (long long j = tid; j < chunks; j += step) {")
        for k in range(n_inputs):
            if layout.kinds[k] == "full":
                storage = STORAGE[input_dtypes[k]]
                code.append(f"    Vec<{storage}, {vector}> a{k} = "
                            f"reinterpret_cast<const Vec<{storage}, {vector}>*>(in{k})[j];")
        for j in outputs:
            code.append(f"    Vec<{STORAGE[group.members[j].dtype]}, {vector}> o{j};")
        code.append("    #pragma unroll")
        code.append(f"    for (int e = 0; e < {vector}; ++e) {{")
        code.append(f"{indent}long long i = j * {vector} + e;")
        code += [indent + line for line in element("i", True)]
        code.append("    }")
        for j in outputs:
            storage = STORAGE[group.members[j].dtype]
            code.append(f"    reinterpret_cast<Vec<{storage}, {vector}>*>(out{j})[j] = o{j};")
        code.append("  }")
        tail_start = f"chunks * {vector}"
    code.append(f"  for (long long i = {tail_start} + tid; i < n; i += step) {{")
    code += ["    " + line for line in element("i", False)]
    code += ["  }", "}", ""]
    return Source(name, "\n".join(code), renderer.scalars, outputs)


def coalesce(shape: tuple[int, ...], strides: Sequence[tuple[int, ...]]
             ) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """Merge adjacent dims that every input walks as one (strides in elements, 0 where an
    input broadcasts), so index math runs over as few dims as possible."""
    if not shape:
        return (), [() for _ in strides]
    dims = [d for d, size in enumerate(shape) if size != 1] or [len(shape) - 1]
    sizes = [shape[d] for d in dims]
    per_input = [[s[d] for d in dims] for s in strides]
    out_sizes = [sizes[0]]
    out_strides = [[p[0]] for p in per_input]
    for k in range(1, len(sizes)):
        if all(p[k - 1] == p[k] * sizes[k] for p in per_input):
            out_sizes[-1] *= sizes[k]
            for o, p in zip(out_strides, per_input):
                o[-1] = p[k]
        else:
            out_sizes.append(sizes[k])
            for o, p in zip(out_strides, per_input):
                o.append(p[k])
    return tuple(out_sizes), [tuple(o) for o in out_strides]


def broadcast_strides(shape: tuple[int, ...], array_shape: tuple[int, ...],
                      array_strides: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """An input's element strides over the output's dims (0 where it broadcasts)."""
    pad = len(shape) - len(array_shape)
    out = []
    for d in range(len(shape)):
        if d < pad or array_shape[d - pad] == 1:
            out.append(0)
        else:
            out.append(array_strides[d - pad] // itemsize)
    return tuple(out)


def scalar_value(dtype: str, value: Any) -> np.generic:
    """A scalar argument as the kernel takes it: a bool, or a float32 rounded to ``dtype``."""
    if dtype == "bool":
        return np.bool_(value)
    rounded = np.asarray(value, np.float32)
    if dtype != "float32":
        rounded = rounded.astype(_LOW_PRECISION[dtype]).astype(np.float32)
    return np.float32(rounded.item())
