"""C for a whole row group on the CPU: each row's members in loops over the row, its sums
and means as NumPy computes them, every other value in a register.

A row group (``fusion/planner.py``) reduces the trailing dims of its base shape S; per
row its members are *full* (a value per element of the row) or *scalar* (one value
per row: the reductions, and what is computed from them). The C walks a row in
loops: a run of full members is one loop; a reduction ends the loop before it and
sums a buffer of the row (or an input's row) with NumPy's own pairwise summation
(8 partial sums in blocks of at most 128, halves above, then added to 0.0), so sums
and means keep NumPy's bits. max and min compare the elements' bits as ordered
integers, -0 below +0, any NaN giving NaN: a rule that no visiting order changes,
which the unfused kernel (``reduction.py``) follows too. Full values a later loop or a
reduction reads live in a row buffer; the rest stay in registers.

logsumexp is the unfused kernel's steps with ``float32_math``'s exp and log, which that
kernel uses too.

Compiled only where the bits are certainly the unfused kernels': float32 sums, means
and logsumexps whose input is a member of the group or an input contiguous over the
row (NumPy's own iteration order for another layout is its business), float32 max and
min, members with an exact C form (``csource.EXACT_OPS``), views of the reduced values,
and aliases. var, std and prod are not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.kernels.fusion import cexpr
from ember.kernels.numpy import csource, float32_math

SUMS = ("sum", "mean")
EXTREMES = ("max", "min")
REDUCTIONS = (*SUMS, *EXTREMES, "logsumexp")
# Reductions that compute with ``float32_math``'s functions, and which.
MATH = {"logsumexp": ("exp", "log")}
# Members whose value per row element is their input's: the row-keeping views, aliases.
_IDENTITY = ("reshape", "expand", "alias")

_PAIRWISE = """
/* NumPy's pairwise summation of n floats at stride s (its FLOAT_pairwise_sum). */
static float ember_pairwise(const float* a, long long n, long long s) {
  if (n < 8) {
    float res = -0.0f;
    for (long long i = 0; i < n; ++i) res = res + a[i * s];
    return res;
  }
  if (n <= 128) {
    float r[8];
    for (int j = 0; j < 8; ++j) r[j] = a[j * s];
    long long i;
    for (i = 8; i < n - (n % 8); i += 8)
      for (int j = 0; j < 8; ++j) r[j] = r[j] + a[(i + j) * s];
    float res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res = res + a[i * s];
    return res;
  }
  long long n2 = n / 2;
  n2 -= n2 % 8;
  return ember_pairwise(a, n2, s) + ember_pairwise(a + n2 * s, n - n2, s);
}
/* A float's bits as an integer that orders as the floats do, -0 just below +0. */
static inline int32_t ember_ordered(float v) {
  int32_t b;
  memcpy(&b, &v, 4);
  return b ^ ((b >> 31) & 0x7fffffff);
}
static inline float ember_unordered(int32_t k) {
  k ^= (k >> 31) & 0x7fffffff;
  float v;
  memcpy(&v, &k, 4);
  return v;
}
"""

# The largest (max) or smallest (min) of n floats at stride s, as ``ember_<op>_row``.
_EXTREME = """
static float ember_OP_row(const float* a, long long n, long long s) {
  int32_t m = START;
  int nan = 0;
  if (s == 1) {
    for (long long i = 0; i < n; ++i) {
      const int32_t k = ember_ordered(a[i]);
      m = k CMP m ? k : m;
      nan |= a[i] != a[i];
    }
  } else {
    for (long long i = 0; i < n; ++i) {
      const int32_t k = ember_ordered(a[i * s]);
      m = k CMP m ? k : m;
      nan |= a[i * s] != a[i * s];
    }
  }
  return nan ? NAN : ember_unordered(m);
}
"""
_EXTREMES = "".join(_EXTREME.replace("OP", op).replace("START", start).replace("CMP", cmp)
                    for op, start, cmp in (("max", "INT32_MIN", ">"), ("min", "INT32_MAX", "<")))

# The unfused kernel's steps (``reduction.py``) on one row: shift by the max (0 where it
# is not finite), exponentials into ``e`` (a row buffer), their pairwise sum, its log,
# plus the shift. (The max's sign of zero, its one difference from np.max, changes no
# bit of the result: exp(±0) is 1, and log never gives -0.)
_LOGSUMEXP = """
static float ember_logsumexp_row(const float* a, long long n, long long s, float* e) {
  const float top = ember_max_row(a, n, s);
  const float shift = top - top == 0.0f ? top : 0.0f;
  #pragma GCC ivdep
  for (long long i = 0; i < n; ++i) e[i] = ember_exp(a[i * s] - shift);
  return ember_log(0.0f + ember_pairwise(e, n, 1)) + shift;
}
"""


class RowSource:
    """A rendered row function: its C name and text, and how many row buffers it needs."""

    __slots__ = ("buffers", "code", "name")

    def __init__(self, name: str, code: str, buffers: int) -> None:
        self.name = name
        self.code = code
        self.buffers = buffers


def kinds(members: Sequence[Any], prologue: int, shape: tuple[int, ...],
          dtype_of: Any) -> dict[int, str] | None:
    """Each member's kind after the prologue ("full" or "scalar"), or None if the group
    has a member the row C does not compute exactly."""
    out: dict[int, str] = {}
    for j in range(prologue, len(members)):
        m = members[j]
        if m.op in REDUCTIONS:
            if m.dtype != "float32" or dtype_of(m.inputs[0]) != "float32":
                return None
            if not set(MATH.get(m.op, ())) <= float32_math.READY:
                return None  # the unfused kernel computes it with NumPy's functions
            out[j] = "scalar"
        elif m.op in _IDENTITY or csource.compilable(m, dtype_of):
            if m.dtype not in csource.STORAGE:
                return None
            out[j] = "full" if m.shape == shape else "scalar"
        else:
            return None
    return out


def render(members: Sequence[Any], steps: Sequence[tuple[int, tuple[int, ...]]],
           slot_dtypes: Sequence[str], member_kinds: dict[int, str], n_inputs: int,
           inputs: dict[int, str], stores: Sequence[int], count: int,
           outer_rank: int) -> RowSource | None:
    """The C function running ``steps`` row by row, or None where a sum's input is not a
    layout whose summation order is NumPy's, or a reduction's input is a view.

    ``inputs``: how each read input slot walks a row ("contiguous", "strided" or
    "broadcast": one value per row); ``count``: the elements of a row (a mean divides by
    it). Signature::

        void name(long long begin, long long end, const long long* size,
                  const long long* stride, void* const* data, const float* scalars,
                  float* scratch)

    over rows [begin, end): ``size``: the ``outer_rank`` coalesced row dims, then the
    row length; ``stride``: per read input, ``outer_rank`` row strides and its stride
    along the row; ``data``: the read inputs' pointers, then the stores'; ``scratch``:
    ``buffers`` rows of floats for this call.
    """
    renderer = csource.Renderer(members, slot_dtypes)
    slot_kind = {k: ("scalar" if how == "broadcast" else "input") for k, how in inputs.items()}
    slot_kind.update((n_inputs + j, kind) for j, kind in member_kinds.items())
    loop_of: dict[int, int] = {}  # a full member's slot → the loop computing it
    loop = 0
    for j, _ in steps:
        if members[j].op in REDUCTIONS:
            loop += 1
        elif member_kinds[j] == "full":
            loop_of[n_inputs + j] = loop
    buffered = set()
    loop = 0
    for j, args in steps:
        reduction = members[j].op in REDUCTIONS
        if reduction:
            loop += 1
            source = args[0]
            if (slot_kind[source] == "input" and inputs[source] != "contiguous"
                    and members[j].op not in EXTREMES):
                return None
            if slot_kind[source] != "full" and slot_kind[source] != "input":
                return None
            if source >= n_inputs and members[source - n_inputs].op in _IDENTITY:
                return None  # a view (a broadcast row): NumPy walks it its own way
        for a in args:
            if slot_kind.get(a) == "full" and (reduction or loop_of[a] != loop):
                buffered.add(a)
    buffer_of = {slot: b for b, slot in enumerate(sorted(buffered))}
    read = sorted(inputs)
    store_at = {n_inputs + j: q for q, j in enumerate(stores)}
    name = cexpr.kernel_name(members, cexpr.digest((
        tuple((m.op, m.dtype, cexpr.attr_shape(m)) for m in members), tuple(steps),
        tuple(slot_dtypes), tuple(sorted(inputs.items())), tuple(stores), outer_rank)))
    lines = [float32_math.vector_width(op for m in members for op in MATH.get(m.op, (m.op,))),
             csource.preamble(), _PAIRWISE, _EXTREMES, _LOGSUMEXP,
             f"void {name}(long long begin, long long end, const long long* size,",
             "    const long long* stride, void* const* data, const float* scalars,",
             "    float* scratch) {",
             f"  const long long inner = size[{outer_rank}];"]
    body: list[str] = []  # the row's statements, in order
    loop_lines: list[str] = []  # the open loop's statements

    def close_loop() -> None:
        if not loop_lines:
            return
        body.append("    #pragma GCC ivdep")
        body.append("    for (long long e = 0; e < inner; ++e) {")
        body.extend("      " + line for line in loop_lines)
        body.append("    }")
        loop_lines.clear()

    def load(slot: int, into: list[str], loaded: set[int]) -> None:
        """Bring ``slot`` into this loop's registers (inputs, buffered values)."""
        if slot in loaded:
            return
        loaded.add(slot)
        storage = csource.STORAGE[slot_dtypes[slot]]
        if slot_kind.get(slot) == "input":
            index = "e" if inputs[slot] == "contiguous" else f"e * step{slot}"
            into.append(f"const {storage} v{slot} = in{slot}[{index}];")
        elif slot in buffer_of and slot_kind.get(slot) == "full":
            into.append(f"const float v{slot} = b{buffer_of[slot]}[e];")

    loaded: set[int] = set()
    computed_here: set[int] = set()
    for j, args in steps:
        member, slot, kind = members[j], n_inputs + j, member_kinds[j]
        if member.op in REDUCTIONS:
            close_loop()
            loaded, computed_here = set(), set()
            source = args[0]
            row = (f"b{buffer_of[source]}" if slot_kind[source] == "full"
                   else f"in{source}")
            stride = "1" if slot_kind[source] == "full" else f"step{source}"
            if member.op in EXTREMES:
                total = f"ember_{member.op}_row({row}, inner, {stride})"
            elif member.op == "logsumexp":
                total = f"ember_logsumexp_row({row}, inner, {stride}, b{len(buffer_of)})"
            else:
                total = f"(0.0f + ember_pairwise({row}, inner, {stride}))"
            if member.op == "mean":
                total = f"({total} / (float){count}LL)"
            body.append(f"    const float v{slot} = {total};")
        elif kind == "scalar":
            expression = (f"v{args[0]}" if member.op in _IDENTITY
                          else renderer.expression(member, args))
            body.append(f"    const {cexpr.scalar_type(member.dtype)} v{slot} = {expression};")
        else:
            for a in args:
                if a not in computed_here:
                    load(a, loop_lines, loaded)
            expression = (f"v{args[0]}" if member.op in _IDENTITY
                          else renderer.expression(member, args))
            loop_lines.append(f"const {cexpr.scalar_type(member.dtype)} v{slot} = {expression};")
            computed_here.add(slot)
            if slot in buffer_of:
                loop_lines.append(f"b{buffer_of[slot]}[e] = v{slot};")
        if slot in store_at:
            target = f"out{slot}[e]" if kind == "full" else f"out{slot}[0]"
            (loop_lines if kind == "full" else body).append(f"{target} = v{slot};")
    close_loop()
    lines += csource.scalar_declarations(renderer.scalars)
    lines.append("  for (long long row = begin; row < end; ++row) {")
    summed = [args[0] for j, args in steps if members[j].op in REDUCTIONS]
    lines += csource.row_inputs(read, slot_dtypes, inputs, outer_rank, summed)
    for q, j in enumerate(stores):
        slot = n_inputs + j
        storage = csource.STORAGE[members[j].dtype]
        width = "row * inner" if member_kinds[j] == "full" else "row"
        lines.append(f"    {storage}* out{slot} = ({storage}*)data[{len(read) + q}] + {width};")
    # logsumexp's exponentials: one more row buffer.
    buffers = len(buffer_of) + any(members[j].op == "logsumexp" for j, _ in steps)
    lines += [f"    float* b{b} = scratch + {b} * inner;" for b in range(buffers)]
    lines += body
    lines += ["  }", "}", ""]
    return RowSource(name, "\n".join(lines), buffers)
