"""C for a fused elementwise group on the CPU: one loop over the group's elements, every
member's value in a register, only the materialized members stored.

Pure Python, so the source can be rendered and checked anywhere. The members'
expressions are the CUDA renderer's (``kernels/fusion/cexpr.py``; C and CUDA C++
share them), with the exceptions the CPU needs to give the NumPy kernels' own bits:
erf and gelu are ``fast_erf``'s polynomial step for step; exp, log, tanh, sigmoid, silu
and gelu_tanh are ``float32_math``'s C, which their NumPy-table kernels run too; pow is
rendered only where ``fusion/powers.py`` lowers it to products and square roots; isinf
compares with ``INFINITY``. Only ops whose C is IEEE arithmetic the NumPy kernels also
do (compiled without contraction into FMAs and without fast-math) are rendered, so a
compiled group gives exactly the unfused results; ops that call a libm (sin, log1p,
pow by other exponents ...) differ from NumPy's own implementations in the last bit and
are left to the NumPy executor.

Layout: the output is contiguous over the group's shape, coalesced (``cexpr.coalesce``)
to ``rank`` dims. The innermost dim is the loop; each input walks it ``contiguous``
(stride 1), ``broadcast`` (stride 0: one load per row) or ``strided`` (a stride
passed at run time); the outer dims are run-time sizes and strides. The function
evaluates one range of flat indices, so threads split a group by ranges.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.kernels.fusion import cexpr, powers
from ember.kernels.numpy import fast_erf, float32_math

# Ops whose rendering computes what their NumPy kernel computes, bit for bit. (alias is
# left out: its value is its input's array, which a kept alias returns as it is.)
EXACT_OPS = frozenset({
    "add", "sub", "mul", "div", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "neg", "abs", "sign",
    "floor", "ceil", "round", "relu", "sqrt", "rsqrt", "reciprocal", "erf", "gelu",
    "isnan", "isinf", "clamp", "where", "cast", "pow",
})
STORAGE = {"float32": "float", "bool": "bool"}
# No contraction into FMAs and no fast-math: the IEEE operations NumPy does, rounded as
# NumPy rounds them. -fno-trapping-math changes no result; it lets gcc turn the
# comparisons of clamps and NaN tests into vector selects (no trap is ever observed).
FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math",
         "-fPIC", "-shared")


def _literal(value: np.float32) -> str:
    """A float32 constant, exactly, as a C hexadecimal literal."""
    return f"{float(value).hex()}f"


def _horner(name: str, coefficients: Sequence[np.float32]) -> list[str]:
    """``fast_erf._horner`` as C statements: the same operations in the same order."""
    lines = [f"  float {name} = t * {_literal(coefficients[-1])};"]
    for c in coefficients[-2:0:-1]:
        lines += [f"  {name} = {name} + {_literal(c)};", f"  {name} = {name} * t;"]
    lines.append(f"  {name} = {name} + {_literal(coefficients[0])};")
    return lines


def preamble() -> str:
    clamp = _literal(fast_erf._CLAMP)
    erf = [
        "static inline float ember_erf(float x) {",
        # np.clip: NaN stays NaN, which both comparisons let through.
        f"  float c = x < -{clamp} ? -{clamp} : (x > {clamp} ? {clamp} : x);",
        "  float t = c * c;",
        *_horner("p", fast_erf._P), *_horner("q", fast_erf._Q),
        "  p = p * c;",
        "  float r = p / q;",
        "  return r < -1.0f ? -1.0f : (r > 1.0f ? 1.0f : r);",
        "}",
    ]
    sqrt_half = _literal(np.float32(1.0 / np.sqrt(2.0)))
    return "\n".join([
        "#include <math.h>",
        "#include <stdbool.h>",
        float32_math.C_CODE,
        # NumPy's maximum / minimum: NaN in either operand wins, and of two equal
        # operands (+0 and -0) the second is the result.
        "static inline float nan_max(float a, float b) { return (a > b || a != a) ? a : b; }",
        "static inline float nan_min(float a, float b) { return (a < b || a != a) ? a : b; }",
        *erf,
        # The NumPy kernel's order: erf(x / sqrt 2), + 1, * x, * 0.5.
        "static inline float ember_gelu(float x) {",
        f"  float e = ember_erf(x * {sqrt_half});",
        "  return ((e + 1.0f) * x) * 0.5f;",
        "}",
        "",
    ])


class Renderer(cexpr.Renderer):
    """The CUDA renderer's expressions, with the CPU's own erf, gelu and isinf."""

    def expression(self, member: Any, args: tuple[int, ...]) -> str:
        op = member.op
        if op == "erf" or op == "gelu" or op in float32_math.OPS:
            return f"ember_{op}({self.operand(args[0], member.dtype)})"
        if op == "isinf" and self.dtypes[args[0]] != "bool":
            return f"(fabsf(v{args[0]}) == INFINITY)"
        return super().expression(member, args)


def compilable(member: Any, dtype_of: Any) -> bool:
    """Whether ``member`` renders to C with exactly its NumPy kernel's results: float32
    arithmetic and tests, bool logic, and casts and selects between the two."""
    op, dtype = member.op, member.dtype
    if op in float32_math.OPS:  # only once the unfused kernel runs the same C
        return (op in float32_math.READY and dtype == "float32"
                and all(dtype_of(i) in STORAGE for i in member.inputs))
    if op not in EXACT_OPS or dtype not in STORAGE:
        return False
    if any(dtype_of(i) not in STORAGE for i in member.inputs):
        return False
    if op in cexpr.LOGICAL or op == "bitwise_not":
        return dtype == "bool"
    if op in cexpr.COMPARISON:
        return member.attrs[0] == "float32"
    if op in cexpr.FLOAT_TESTS or op == "where" or op == "cast":
        return True
    if op == "pow":  # products and square roots only; powf differs from NumPy's power
        return dtype == "float32" and powers.lowered_exponent(member) is not None
    if op == "round" and member.attrs:  # decimals: a scaled rint NumPy does in three passes
        return False
    return dtype == "float32"


def row_inputs(slots: Sequence[int], slot_dtypes: Sequence[str], walks: Any, outer: int,
               stepped: Sequence[int] = ()) -> list[str]:
    """Statements giving input slot ``slots[p]`` its pointer ``in<k>`` at the row ``row``
    (``data[p]``, offset over the ``outer`` row dims ``size[0 .. outer-1]`` by
    ``stride[p * (outer + 1) + d]``), its value ``v<k>`` where it is the same along the
    row (``walks[k]`` "broadcast"), and its stride along the row ``step<k>`` (the slot's
    last stride) where it is "strided" or in ``stepped``."""
    per_slot = outer + 1
    lines = [f"    long long offset{k} = 0;" for k in slots]
    if outer:
        lines.append("    long long rest = row, c;")
        for d in range(outer - 1, -1, -1):
            lines.append(f"    c = rest % size[{d}]; rest /= size[{d}];")
            lines += [f"    offset{k} += c * stride[{p * per_slot + d}];"
                      for p, k in enumerate(slots)]
    for p, k in enumerate(slots):
        storage = STORAGE[slot_dtypes[k]]
        lines.append(f"    const {storage}* in{k} = (const {storage}*)data[{p}] + offset{k};")
        if walks[k] == "broadcast":
            lines.append(f"    const {storage} v{k} = in{k}[0];")
        elif walks[k] == "strided" or k in stepped:
            lines.append(f"    const long long step{k} = stride[{p * per_slot + outer}];")
    return lines


def scalar_declarations(scalars: Sequence[tuple[str, Any]]) -> list[str]:
    """The registers ``s0, s1 ...`` of a function's scalar arguments (passed as floats)."""
    lines = []
    for i, (dtype, _) in enumerate(scalars):
        value = f"scalars[{i}] != 0.0f" if dtype == "bool" else f"scalars[{i}]"
        lines.append(f"  const {cexpr.scalar_type(dtype)} s{i} = {value};")
    return lines


class Source:
    """A rendered function: its C name and text. (Its scalar arguments, in order, are
    ``cexpr.scalar_arguments`` of the members it renders.)"""

    __slots__ = ("code", "name")

    def __init__(self, name: str, code: str) -> None:
        self.name = name
        self.code = code


def render(members: Sequence[Any], steps: Sequence[tuple[int, tuple[int, ...]]],
           slot_dtypes: Sequence[str], stores: Sequence[int], rank: int,
           inner: Sequence[str]) -> Source:
    """The C function evaluating ``steps`` (member index, argument slots) over inputs in
    slots ``0 .. len(slot_dtypes) - 1`` and storing members ``stores``.

    ``inner[k]``: how slot ``k`` walks the innermost dim ("contiguous", "broadcast",
    "strided"). Signature::

        void name(long long begin, long long end, const long long* size,
                  const long long* stride, void* const* data, const float* scalars)

    ``size``: the ``rank`` coalesced dims; ``stride``: ``rank`` element strides per input
    slot; ``data``: the input slots' pointers, then the stores'.
    """
    renderer = Renderer(members, slot_dtypes)
    body = renderer.render(steps)
    n_slots = len(slot_dtypes)
    slots = range(n_slots)
    register = {j: n_slots + position for position, (j, _) in enumerate(steps)}
    key = (tuple((m.op, m.dtype, cexpr.attr_shape(m)) for m in members), tuple(steps),
           tuple(slot_dtypes), tuple(stores), rank, tuple(inner))
    name = cexpr.kernel_name(members, cexpr.digest(key))
    last = rank - 1
    lines = [float32_math.vector_width(m.op for m in members), preamble(),
             f"void {name}(long long begin, long long end, const long long* size,",
             "    const long long* stride, void* const* data, const float* scalars) {"]
    lines += scalar_declarations(renderer.scalars)
    lines += [f"  const long long inner = size[{last}];", "  long long i = begin;",
              "  while (i < end) {",
              "    const long long row = i / inner, first = i - row * inner;",
              "    const long long stop = end - i < inner - first ? first + (end - i) : inner;"]
    lines += row_inputs(slots, slot_dtypes, inner, last)
    for q, j in enumerate(stores):
        storage = STORAGE[members[j].dtype]
        lines.append(f"    {storage}* out{j} = ({storage}*)data[{n_slots + q}]"
                     " + row * inner;")
    # An output may share memory with an input (a donated buffer) only element for
    # element, and each element loads every input before it stores: no dependence
    # crosses iterations, so the loop vectorizes without run-time alias checks.
    lines += ["    #pragma GCC ivdep", "    for (long long e = first; e < stop; ++e) {"]
    for k in slots:
        if inner[k] == "contiguous":
            lines.append(f"      const {STORAGE[slot_dtypes[k]]} v{k} = in{k}[e];")
        elif inner[k] == "strided":
            lines.append(f"      const {STORAGE[slot_dtypes[k]]} v{k} = in{k}[e * step{k}];")
    lines += ["      " + line for line in body]
    lines += [f"      out{j}[e] = v{register[j]};" for j in stores]
    lines += ["    }", "    i += stop - first;", "  }", "}", ""]
    return Source(name, "\n".join(lines))
