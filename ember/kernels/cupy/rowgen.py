"""CUDA C++ for a fused row group: one block (or one warp) per row, reductions in shared
memory (or warp shuffles).

Pure Python (no CuPy), so the source and its cache key can be tested without a GPU.

A row group (see the fusion planner) works on the rows of a base shape S: R rows
(the leading ``rows`` dims) of L elements (the trailing dims). Each block takes a
row at a time; its threads stride over the row's columns. Every slot is either
*row-level* (one value per row: row inputs, reductions, and anything computed from
those alone) or *element-level* (one value per column).

The kernel runs in phases. A reduction whose input needs only the row values known
at the start of phase p accumulates in phase p's loop over the columns; the block
then combines the per-thread partials (warp shuffles, then one float per warp in
shared memory) and every thread holds the result from phase p + 1 on. var / std
(mean, then squared deviations) and logsumexp (max, then the shifted exponentials)
take two phases, as the NumPy kernels take two passes. Short rows (attention's scores:
256 columns) may run a warp per row instead, several rows to a block, combining partials
by shuffles alone, without barriers (autotune decides). Element-level values are
recomputed in each loop that needs them rather than kept: a row re-read by the
block that just read it comes from L1, and recomputation keeps the kernel size
generic (no per-row-length register arrays). The last loop stores the outputs of
the group's full shape; thread 0 stores the row-level outputs.

Arithmetic is float32 for every float dtype (the NumPy reductions accumulate
float16 / bfloat16 in float32 and round once), each member rounded to its dtype.
Summation order differs from NumPy's pairwise sums: results agree to rounding.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ember.kernels.cupy import codegen
from ember.kernels.cupy.codegen import FLOATS, STORAGE
from ember.kernels.fusion import cexpr

# Reductions by (combine function, identity); two-pass ones name their first pass.
_COMBINE = {"sum": ("add_op", "0.0f"), "mean": ("add_op", "0.0f"), "prod": ("mul_op", "1.0f"),
            "max": ("nan_max", "-__int_as_float(0x7f800000)"),
            "min": ("nan_min", "__int_as_float(0x7f800000)")}
TWO_PASS = {"var": "mean", "std": "mean", "logsumexp": "max"}
REDUCTIONS = frozenset(_COMBINE) | frozenset(TWO_PASS)
# Members that pass their input's value on unchanged (index maps of a row value).
PASS_THROUGH = frozenset({"reshape", "expand"})

_ROW_PREAMBLE = r"""
__device__ __forceinline__ float add_op(float a, float b) { return a + b; }
__device__ __forceinline__ float mul_op(float a, float b) { return a * b; }
// Every lane of a warp gets the combination of the warp's v (a warp per row needs no
// more: no shared memory, no barrier).
template <float (*Op)(float, float)>
__device__ __forceinline__ float warp_reduce(float v) {
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = Op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Every thread of the block gets the combination of every thread's v. blockDim.x is a
// multiple of 32; shared holds one float per warp and is reused by the next call, hence
// the barrier before it is written.
template <float (*Op)(float, float)>
__device__ __forceinline__ float block_reduce(float v, float identity, float* shared) {
  v = warp_reduce<Op>(v);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < (int)(blockDim.x >> 5) ? shared[lane] : identity;
  return warp_reduce<Op>(v);
}
"""


# Threads per block of a row kernel that runs a warp per row (8 rows at a time), and the
# vectors per lane up to which autotune tries that against a block per row (a guess: past
# it a lane's serial loop outweighs the barriers saved).
_WARP_ROW_BLOCK = 256
_WARP_ROW_VECTORS = 8


def _threads_per_row(length: int, vector: int) -> int:
    """One vector per thread up to 1024 threads (the one-pass softmax that ran at 3.3 TB/s
    on the H200 used 1024 threads per row), at least a warp."""
    needed = -(-length // vector)
    return min(1024, max(32, 1 << (needed - 1).bit_length()))


def variants(length: int, vector: int, tune: bool) -> list[tuple[int, bool]]:
    """The row kernels for rows of ``length``: (threads per block, a warp per row), the
    default first; with ``tune``, the others autotune times against it.

    A row one warp covers with a vector per lane takes a warp by default (a block of one
    warp per row left most of an SM's warp slots empty); rows of up to
    ``_WARP_ROW_VECTORS`` vectors per lane try a warp each against a block each."""
    default = _threads_per_row(length, vector)
    found = [(_WARP_ROW_BLOCK, True)] if default == 32 else [(default, False)]
    if not tune:
        return found
    if default > 32:
        found += [(b, False) for b in (default // 2, default // 4, default * 2)
                  if 32 <= b <= 1024]
    if length <= 32 * vector * _WARP_ROW_VECTORS:
        found += [v for v in ((_WARP_ROW_BLOCK, True), (_WARP_ROW_BLOCK // 2, True))
                  if v not in found]
    return found


class RowLayout:
    """How each input is read, by kind:

    - ``scalar``: one element, loaded once;
    - ``row``: one value per row (it broadcasts over the columns);
    - ``contig``: the columns are contiguous (offset = row offset + column);
      ``contig_v`` the same, loaded ``vector`` elements at a time;
    - ``strided``: column offsets from the column's coordinates over ``col_rank``
      coalesced dims;
    - ``unused``: read only through a prologue view (which is an input of its own).

    Row offsets come from the row index over ``row_rank`` coalesced dims.
    """

    __slots__ = ("kinds", "row_rank", "col_rank")

    def __init__(self, kinds: tuple[str, ...], row_rank: int, col_rank: int) -> None:
        self.kinds = kinds
        self.row_rank = row_rank
        self.col_rank = col_rank

    def key(self) -> tuple:
        return (self.kinds, self.row_rank, self.col_rank)


def structure_key(members: Sequence[Any], steps: Sequence[tuple[int, tuple[int, ...]]],
                  materialize: Sequence[bool], full: Sequence[bool],
                  input_dtypes: Sequence[str], layout: RowLayout, vector: int,
                  block: int, warp_rows: bool = False) -> tuple:
    """What the source depends on; never the sizes or the scalars' values."""
    described = tuple((m.op, m.dtype, _attr_shape(m)) for m in members)
    return ("rows", described, tuple(steps), tuple(materialize), tuple(full),
            tuple(input_dtypes), layout.key(), vector, block, warp_rows)


def _attr_shape(member: Any) -> tuple:
    if member.op in REDUCTIONS:
        return tuple(member.attrs[2:])  # var/std's correction; dims are the trailing ones
    if member.op in PASS_THROUGH or member.op == "alias":
        return ()
    return cexpr.attr_shape(member)


class _Slots:
    """Per slot: its dtype, whether it is row-level, and the phase it is known from."""

    def __init__(self, input_dtypes: Sequence[str], kinds: Sequence[str]) -> None:
        self.dtypes = list(input_dtypes)
        self.row = [kind in ("scalar", "row") for kind in kinds]  # unused: never reached
        self.phase = [0] * len(kinds)


def render(members: Sequence[Any], steps: Sequence[tuple[int, tuple[int, ...]]],
           materialize: Sequence[bool], full: Sequence[bool], input_dtypes: Sequence[str],
           layout: RowLayout, vector: int, block: int,
           warp_rows: bool = False) -> codegen.Source:
    """The CUDA C++ of a row group (its prologue already taken as inputs).

    ``full[j]``: whether member j has the base shape S (else the rows' shape).
    ``warp_rows``: each warp of the ``block`` threads takes a row of its own (else the
    whole block takes each row).
    Kernel parameters: inputs, outputs (in member order), R, L, the row sizes and each
    non-scalar input's row strides, the column sizes and each strided input's column
    strides, then the scalars.
    """
    n_inputs = len(input_dtypes)
    kinds = layout.kinds
    slots = _Slots(input_dtypes, kinds)
    renderer = cexpr.Renderer(members, input_dtypes)
    renderer.dtypes = slots.dtypes  # one list: operands find members' dtypes as they join
    expressions: dict[int, str] = {}  # slot -> C++ expression of an element/row member
    reductions: list[tuple[int, int, int]] = []  # (slot, argument slot, first phase)
    for j, args in steps:
        member = members[j]
        slot = n_inputs + j
        known = max((slots.phase[a] for a in args), default=0)
        if member.op in REDUCTIONS:
            arg = args[0]
            reductions.append((slot, arg, known))
            passes = 2 if member.op in TWO_PASS else 1
            slots.row.append(True)
            slots.phase.append(known + passes)
        else:
            if member.op in PASS_THROUGH:
                expr = f"v{args[0]}"
            else:
                expr = renderer.expression(member, args)
                if member.dtype in cexpr.ROUND:
                    expr = f"{cexpr.ROUND[member.dtype]}({expr})"
            expressions[slot] = expr
            slots.row.append(all(slots.row[a] for a in args))
            slots.phase.append(known)
        slots.dtypes.append(member.dtype)
    args_of = {n_inputs + j: args for j, args in steps}
    outputs = [j for j, keep in enumerate(materialize) if keep]
    phases = max((p for _, _, p in reductions), default=-1) + 1
    for slot, _, p in reductions:
        if members[slot - n_inputs].op in TWO_PASS:
            phases = max(phases, p + 2)

    name = cexpr.kernel_name(members, cexpr.digest(structure_key(
        members, steps, materialize, full, input_dtypes, layout, vector, block, warp_rows)))
    params = [f"const {STORAGE[d]}* __restrict__ in{k}" for k, d in enumerate(input_dtypes)]
    params += [f"{STORAGE[members[j].dtype]}* __restrict__ out{j}" for j in outputs]
    params += ["long long R", "int L"]
    located = [k for k, kind in enumerate(kinds) if kind not in ("scalar", "unused")]
    strided = [k for k, kind in enumerate(kinds) if kind == "strided"]
    params += [f"long long rsize{d}" for d in range(layout.row_rank)]
    params += [f"long long rstride{k}_{d}" for k in located for d in range(layout.row_rank)]
    if strided:
        params += [f"int csize{d}" for d in range(layout.col_rank)]
        params += [f"int cstride{k}_{d}" for k in strided for d in range(layout.col_rank)]
    params += [f"{cexpr.scalar_type(d)} s{i}" for i, (d, _) in enumerate(renderer.scalars)]

    thread, team = ("lane", "32") if warp_rows else ("threadIdx.x", "blockDim.x")

    def register(slot: int) -> str:
        return "bool" if slots.dtypes[slot] == "bool" else "float"

    def needed(roots: Sequence[int]) -> list[int]:
        """Element-level slots ``roots`` depend on, in evaluation order."""
        found: set[int] = set()
        stack = [r for r in roots if not slots.row[r]]
        while stack:
            s = stack.pop()
            if s in found:
                continue
            found.add(s)
            stack += [a for a in args_of.get(s, ()) if not slots.row[a]]
        return sorted(found)

    def element(roots: Sequence[int], col: str, e: str | None) -> list[str]:
        """Statements computing ``roots`` at column ``col`` (lane ``e`` of a vector)."""
        lines = []
        for s in needed(roots):
            if s < n_inputs:
                kind = kinds[s]
                if kind == "contig_v":
                    raw = f"a{s}.v[{e}]"
                elif kind == "contig":
                    raw = f"in{s}[base{s} + {col}]"
                else:
                    raw = f"in{s}[base{s} + coff{s}]"
                    lines += _column_offset(s, col, layout.col_rank)
                lines.append(f"{register(s)} v{s} = {codegen._LOAD[input_dtypes[s]].format(raw)};")
            else:
                lines.append(f"{register(s)} v{s} = {expressions[s]};")
        return lines

    def loop(roots: Sequence[int], accumulate: list[str], stores: list[int]) -> list[str]:
        """A loop over the row's columns computing ``roots``."""
        inputs_used = [s for s in needed(list(roots) + [n_inputs + j for j in stores])
                       if s < n_inputs]
        out = []
        if vector > 1:
            out.append(f"    for (int c0 = {thread} * {vector}; c0 < L; "
                       f"c0 += {team} * {vector}) {{")
            for k in inputs_used:
                if kinds[k] == "contig_v":
                    storage = STORAGE[input_dtypes[k]]
                    out.append(f"      const Vec<{storage}, {vector}> a{k} = *reinterpret_cast"
                               f"<const Vec<{storage}, {vector}>*>(in{k} + base{k} + c0);")
            for j in stores:
                out.append(f"      Vec<{STORAGE[members[j].dtype]}, {vector}> o{j};")
            out.append("      #pragma unroll")
            out.append(f"      for (int e = 0; e < {vector}; ++e) {{")
            if any(kinds[k] in ("contig", "strided") for k in inputs_used):
                out.append("        const int c = c0 + e;")
            body = element(list(roots) + [n_inputs + j for j in stores], "c", "e")
            body += accumulate
            body += [f"o{j}.v[e] = {codegen._STORE[members[j].dtype].format(f'v{n_inputs + j}')};"
                     for j in stores]
            out += ["        " + line for line in body]
            out.append("      }")
            for j in stores:
                storage = STORAGE[members[j].dtype]
                out.append(f"      *reinterpret_cast<Vec<{storage}, {vector}>*>"
                           f"(out{j} + row * L + c0) = o{j};")
            out.append("    }")
            return out
        out.append(f"    for (int c = {thread}; c < L; c += {team}) {{")
        body = element(list(roots) + [n_inputs + j for j in stores], "c", None)
        body += accumulate
        body += [f"out{j}[row * L + c] = "
                 f"{codegen._STORE[members[j].dtype].format(f'v{n_inputs + j}')};"
                 for j in stores]
        out += ["      " + line for line in body]
        out.append("    }")
        return out

    code = [codegen._PREAMBLE, _ROW_PREAMBLE, f'extern "C" __global__ void __launch_bounds__({block})',
            f"{name}({', '.join(params)}) {{"]
    if warp_rows:
        code.append("  const int lane = threadIdx.x & 31;")
    else:
        code.append("  __shared__ float shared[32];")
    code += [f"  const float v{k} = {codegen._LOAD[input_dtypes[k]].format(f'in{k}[0]')};"
             if input_dtypes[k] in FLOATS else f"  const bool v{k} = in{k}[0];"
             for k in range(n_inputs) if kinds[k] == "scalar"]
    if warp_rows:
        code.append("  const long long warps = blockDim.x >> 5;")
        code.append("  for (long long row = blockIdx.x * warps + (threadIdx.x >> 5); row < R; "
                    "row += gridDim.x * warps) {")
    else:
        code.append("  for (long long row = blockIdx.x; row < R; row += gridDim.x) {")
    code += _row_offsets(located, layout.row_rank)
    emitted: set[int] = set(k for k in range(n_inputs) if kinds[k] == "scalar")

    def row_values(phase: int) -> list[str]:
        """Row-level members (and row inputs) known from ``phase`` on, not yet computed."""
        lines = []
        for s in range(len(slots.dtypes)):
            if s in emitted or not slots.row[s] or slots.phase[s] > phase:
                continue
            if s < n_inputs:
                raw = f"in{s}[base{s}]"
                lines.append(f"    const {register(s)} v{s} = "
                             f"{codegen._LOAD[input_dtypes[s]].format(raw)};")
            elif s in expressions:
                lines.append(f"    const {register(s)} v{s} = {expressions[s]};")
            else:
                continue  # a reduction: _finish assigns it after its last pass
            emitted.add(s)
        return lines

    for phase in range(phases):
        code += row_values(phase)
        # The reductions with a pass in this phase: (slot, pass, combine, identity, input).
        passes = []
        for slot, arg, first in reductions:
            op = members[slot - n_inputs].op
            value = renderer.operand(arg, "float32")
            if phase == first:
                pass_op = TWO_PASS.get(op, op)
                combine, identity = _COMBINE[pass_op]
                passes.append((slot, 0, combine, identity, value))
            elif phase == first + 1 and op in TWO_PASS:
                if op == "logsumexp":
                    value = f"expf({value} - shift{slot})"
                    passes.append((slot, 1, "add_op", "0.0f", value))
                else:
                    passes.append((slot, 1, "add_op", "0.0f",
                                   f"(({value} - mean{slot}) * ({value} - mean{slot}))"))
        if not passes:
            continue
        for slot, step, _, identity, _ in passes:
            code.append(f"    float acc{slot}_{step} = {identity};")
        accumulate = [f"acc{slot}_{step} = {combine}(acc{slot}_{step}, {value});"
                      for slot, step, combine, _, value in passes]
        code += loop([arg for slot, arg, _ in reductions
                      if any(p[0] == slot for p in passes)], accumulate, [])
        for slot, step, combine, identity, _ in passes:
            reduce = (f"warp_reduce<{combine}>(acc{slot}_{step})" if warp_rows else
                      f"block_reduce<{combine}>(acc{slot}_{step}, {identity}, shared)")
            code.append(f"    const float red{slot}_{step} = {reduce};")
            code += _finish(members[slot - n_inputs], slot, step)
    code += row_values(phases)
    full_stores = [j for j in outputs if full[j]]
    row_stores = [j for j in outputs if not full[j]]
    if full_stores:
        code += loop([], [], full_stores)
    if row_stores:
        code.append(f"    if ({thread} == 0) {{")
        code += [f"      out{j}[row] = "
                 f"{codegen._STORE[members[j].dtype].format(f'v{n_inputs + j}')};"
                 for j in row_stores]
        code.append("    }")
    code += ["  }", "}", ""]
    return codegen.Source(name, "\n".join(code), renderer.scalars, outputs)


def _finish(member: Any, slot: int, step: int) -> list[str]:
    """The statements after a reduction pass: the row value, or the first pass's result."""
    op = member.op
    red = f"red{slot}_{step}"
    rounding = cexpr.ROUND.get(member.dtype)

    def result(expr: str) -> list[str]:
        return [f"    const float v{slot} = {rounding}({expr});" if rounding
                else f"    const float v{slot} = {expr};"]

    if op in TWO_PASS and step == 0:
        if op == "logsumexp":
            # An infinite max (all -inf, or a +inf) shifts by 0, as the NumPy kernel does.
            return [f"    const float shift{slot} = isinf({red}) ? 0.0f : {red};"]
        return [f"    const float mean{slot} = {red} / (float)L;"]
    if op == "mean":
        return result(f"{red} / (float)L")
    if op == "logsumexp":
        return result(f"logf({red}) + shift{slot}")
    if op in ("var", "std"):
        correction = member.attrs[2] if len(member.attrs) > 2 else 1
        divisor = f"(float)max(L - {int(correction)}, 0)"
        return result(f"sqrtf({red} / {divisor})" if op == "std" else f"{red} / {divisor}")
    return result(red)


def _row_offsets(located: Sequence[int], rank: int) -> list[str]:
    """Each non-scalar input's offset of this row, from the row index over ``rank`` dims."""
    if not located:
        return []
    lines = [f"    long long base{k} = 0;" for k in located]
    if rank == 0:
        return lines
    lines.append("    { long long rest = row;")
    for d in range(rank - 1, -1, -1):
        coordinate = "rest" if d == 0 else f"rest % rsize{d}"
        lines.append(f"      {{ const long long r = {coordinate};")
        lines += [f"        base{k} += r * rstride{k}_{d};" for k in located]
        lines.append(f"        rest /= rsize{d}; }}" if d else "      }")
    lines.append("    }")
    return lines


def _column_offset(k: int, col: str, rank: int) -> list[str]:
    lines = [f"int coff{k} = 0;", f"{{ int rest = {col};"]
    for d in range(rank - 1, -1, -1):
        coordinate = "rest" if d == 0 else f"rest % csize{d}"
        lines.append(f"  coff{k} += ({coordinate}) * cstride{k}_{d};")
        if d:
            lines.append(f"  rest /= csize{d};")
    lines.append("}")
    return lines


def row_layout(shape: tuple[int, ...], r: int, members: Sequence[Any],
               steps: Sequence[tuple[int, tuple[int, ...]]],
               inputs: Sequence[tuple[tuple[int, ...], tuple[int, ...], int]],
               aligned: Sequence[bool], vector: int) -> tuple:
    """How a row kernel reads ``inputs`` ((shape, byte strides, itemsize) each) in a
    group over ``shape`` whose rows are its first ``r`` dims.

    Returns the layout, (row sizes, each non-scalar input's row strides), column
    sizes and each strided input's column strides (strides in elements, coalesced).
    A contiguous input is loaded ``vector`` elements at a time where its pointer is
    ``aligned`` and every row starts on a multiple of ``vector``.
    """
    n = len(shape)
    n_inputs = len(inputs)
    consumers: dict[int, set[int]] = {}
    for j, args in steps:
        for a in args:
            if a < n_inputs:
                # A reduction reads S whatever shape it gives.
                rank = n if members[j].op in REDUCTIONS else len(members[j].shape)
                consumers.setdefault(a, set()).add(rank)
    kinds: list[str] = []
    strides: list[list[int] | None] = []
    for k, (a_shape, a_strides, itemsize) in enumerate(inputs):
        if k not in consumers:  # read only through a prologue view (taken as an input too)
            kinds.append("unused")
            strides.append(None)
            continue
        if math.prod(a_shape) == 1:
            kinds.append("scalar")
            strides.append(None)
            continue
        # An input lines up with the right end of its reader's shape: S, or the rows' shape
        # without the reduced dims (then it lies over S's leading dims).
        ends = {n if rank == n else r for rank in consumers[k]}
        if len(ends) != 1 or len(a_shape) > min(ends):
            raise ValueError(f"row kernel: input {k} of shape {a_shape} is read at two "
                             f"alignments in a group over {shape}")
        first = min(ends) - len(a_shape)
        per_dim = [0] * n
        for i, (size, stride) in enumerate(zip(a_shape, a_strides)):
            if size != 1 and shape[first + i] != 1:
                per_dim[first + i] = stride // itemsize
        strides.append(per_dim)
        columns = per_dim[r:]
        if not any(columns):
            kinds.append("row")
        elif all(s == c or shape[r + d] == 1
                 for d, (s, c) in enumerate(zip(columns, _c_strides(shape[r:])))):
            vectorized = vector > 1 and aligned[k] and all(s % vector == 0 for s in per_dim[:r])
            kinds.append("contig_v" if vectorized else "contig")
        else:
            kinds.append("strided")
    located = [s for s in strides if s is not None]
    row_sizes, row_per_input = cexpr.coalesce(shape[:r], [s[:r] for s in located]) \
        if r else ((), [() for _ in located])
    strided = [s[r:] for s, kind in zip(strides, kinds) if kind == "strided"]
    col_sizes, col_per_input = cexpr.coalesce(shape[r:], strided) if strided else ((), [])
    layout = RowLayout(tuple(kinds), len(row_sizes), len(col_sizes))
    return layout, (row_sizes, row_per_input), col_sizes, col_per_input


def _c_strides(shape: tuple[int, ...]) -> list[int]:
    out, step = [], 1
    for size in reversed(shape):
        out.append(step)
        step *= size
    return out[::-1]
