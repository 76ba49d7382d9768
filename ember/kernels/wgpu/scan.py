"""WGSL running ops: one scan kernel, parameterized by its combine.

cumsum, cumprod, logcumsumexp, cummax and cummin each fold a line with an
associative ``combine`` of states ``(v, i)``: a running value and, for cummax /
cummin, the index it came from (the others carry a position they never use).
An ``i`` of -1 marks the identity, so no op needs an identity value of its own.

Many lines (or short ones): each invocation runs its line sequentially.
A few long lines would leave the GPU idle (and lines past 65535 elements would
outrun lavapipe's loop limit), so they are cut into blocks of 4096 elements,
one workgroup each, in three passes: every block's total (a workgroup tree),
the running totals of the blocks along each line (the sequential kernel, on a
much shorter array), and the blocks again, each invocation scanning its 64
elements from the state its block and its neighbours (a workgroup scan) give it.
The workgroup tree combines in no fixed left-to-right order, so every combine
is commutative: cummax / cummin break ties by the larger index (PyTorch's last
index of equal values; NaN beats every number and, among NaNs, the later one
wins). Floats accumulate in f32 (float16
rounds once on output), integers in i32; logcumsumexp adds in log space from the
larger term, so nothing overflows.
"""

from __future__ import annotations

from typing import Any

from ember.kernels.wgpu import codegen, sources
from ember.kernels.wgpu.scalar_ops import HELPERS
from ember.kernels.wgpu.table import WgpuArray, check_dtype, contiguous_strides, kernel

_PER_INVOCATION = 64
_WORKGROUP = 64
_BLOCK = _PER_INVOCATION * _WORKGROUP
# Lines at most, and the least length, for the blocked scan (guesses: fewer lines than
# a GPU has cores to spare, more elements than one invocation should walk alone).
_BLOCKED_MAX_LINES = 1024
_BLOCKED_MIN_LENGTH = 2 * _BLOCK
# lavapipe (Mesa's gallivm) ends any loop after 65535 iterations: longer lines scan in blocks.
_LONGEST_LOOP = 65535

_INDEXED = ("cummax", "cummin")
# The value part of combine(a, b) of the arithmetic scans.
_ARITHMETIC = {"cumsum": "a.v + b.v", "cumprod": "a.v * b.v",
               "logcumsumexp": "logaddexp_f(a.v, b.v)"}

# log(1 + x) for x in [0, 1] as 2 atanh(x / (2 + x)), a series in z**2 <= 1/9 (terms to
# z**17: below f32's rounding): WGSL's log is only absolutely accurate (2**-21) near 1,
# too coarse when the running value is near 0 and the term added is small.
_TERMS = " + w * (".join(f"{1 / (2 * k + 1)!r}" for k in range(1, 9))
_LOGADDEXP = f"""fn log1p_unit(x: f32) -> f32 {{
  let z = x / (2.0 + x); let w = z * z;
  return 2.0 * z * (1.0 + w * ({_TERMS}{")" * 8});
}}
fn logaddexp_f(a: f32, b: f32) -> f32 {{
  if (isnan_f(a) || isnan_f(b)) {{ return a + b; }}
  if (a == b) {{ return a + 0.6931471805599453; }}  // also both infinite: a - b would be NaN
  return max(a, b) + log1p_unit(exp(-abs(a - b)));
}}
"""


def _accumulator(op: str, out_dtype: str) -> str:
    """The dtype a scan's running value has in registers and between passes."""
    if op in _INDEXED:  # bools compare as 0 / 1
        return "float32" if codegen.kind(out_dtype) == "f" else "int32"
    return "float32" if codegen.kind(out_dtype) == "f" else out_dtype


def _state(op: str, acc: str) -> str:
    """The ``State`` struct, ``combine`` and the helpers they need."""
    value = codegen.register_type(acc)
    floats = value == "f32"
    text = f"struct State {{ v: {value}, i: i32 }}\n"
    if floats:
        text += HELPERS["isnan_f"] + "\n"
    body = ["  if (a.i < 0) { return b; }", "  if (b.i < 0) { return a; }"]
    if op in _INDEXED:
        beats = ">" if op == "cummax" else "<"
        if floats:
            body += ["  let a_nan = isnan_f(a.v); let b_nan = isnan_f(b.v);",
                     "  if (a_nan || b_nan) {",
                     "    if (b_nan && (!a_nan || b.i > a.i)) { return b; }", "    return a;",
                     "  }"]
        body += [f"  if (b.v {beats} a.v || (b.v == a.v && b.i > a.i)) {{ return b; }}",
                 "  return a;"]
    else:
        if op == "logcumsumexp":
            text += _LOGADDEXP
        body.append(f"  return State({_ARITHMETIC[op]}, max(a.i, b.i));")
    return text + "fn combine(a: State, b: State) -> State {\n" + "\n".join(body) + "\n}\n"


def _identity(acc: str) -> str:
    return f"State({codegen.register_type(acc)}(0), -1)"


def _line_start(rank: int, first: int) -> list[str]:
    """Statements setting ``src`` / ``dst`` to the input / output offsets of ``line``, with
    (size, in stride, out stride) per other dim in params ``first ..``."""
    lines = ["  var src: i32 = pi(2u); var dst: i32 = 0; var rest: u32 = line;"]
    for d in reversed(range(rank)):
        size, s_in, s_out = (f"p{k}({first + 3 * d + j}u)" for j, k in enumerate("uii"))
        lines.append(f"  src = src + i32(rest % {size}) * {s_in}; "
                     f"dst = dst + i32(rest % {size}) * {s_out}; rest = rest / {size};")
    return lines


def _render_lines(op: str, in_dtype: str, out_dtype: str, rank: int, carried: bool) -> str:
    """One invocation per line. Params: n_lines, length, offset, in stride along the axis,
    then (size, in stride, out stride) per other dim, then the out stride along the axis.
    ``carried``: the input is (value, index) pairs, ``in0`` / ``in1`` (the blocks' states),
    not elements whose index is their position."""
    acc = _accumulator(op, out_dtype)
    indexed = op in _INDEXED
    value = codegen.convert(codegen.load("in0", "u32(src)", in_dtype), in_dtype, acc)
    position = "in1[u32(src)]" if carried else "i32(k)"
    at = f"u32(dst) + k * pu({4 + 3 * rank}u)"
    lines = [f"  let line: u32 = {codegen.LINEAR_INDEX.format(size=64)};",
             "  if (line >= pu(0u)) { return; }", *_line_start(rank, 4),
             f"  var total = {_identity(acc)};",
             "  for (var k = 0u; k < pu(1u); k = k + 1u) {",
             f"    total = combine(total, State({value}, {position}));",
             (f"    out0[{at}] = "
              f"{codegen.store(codegen.convert('total.v', acc, out_dtype), out_dtype)};"),
             *([f"    out1[{at}] = total.i;"] if indexed else []),
             "    src = src + pi(3u);", "  }"]
    writes = [out_dtype] + (["int64"] if indexed else [])
    reads = [in_dtype] + (["int32"] if carried else [])
    return (codegen.header([in_dtype, out_dtype]) + _state(op, acc)
            + codegen.bindings(writes, reads, 5 + 3 * rank)
            + codegen.ENTRY.format(size=64) + "\n".join(lines) + "\n}\n")


def _render_blocks(op: str, in_dtype: str, out_dtype: str, rank: int, finish: bool) -> str:
    """A pass over the blocks. Params: n_lines * n_blocks, length, offset, in stride along
    the axis, n_blocks, then (size, in stride, out stride) per other dim, then the out
    stride along the axis. ``finish``: write the scan (reading the running states of the
    blocks before as ``in1`` / ``in2``); else write each block's state."""
    acc = _accumulator(op, out_dtype)
    indexed = op in _INDEXED
    identity = _identity(acc)
    value = codegen.convert(codegen.load("in0", "src + i32(e) * pi(3u)", in_dtype), in_dtype,
                            acc)
    lines = [f"  let w: u32 = {codegen.LINEAR_INDEX.format(size=1).replace('gid', 'wid')};",
             "  if (w >= pu(0u)) { return; }",
             "  let line = w / pu(4u); let block = w % pu(4u);", *_line_start(rank, 5),
             f"  let first = block * {_BLOCK}u + lid * {_PER_INVOCATION}u;",
             f"  var own = {identity};",
             f"  for (var k = 0u; k < {_PER_INVOCATION}u; k = k + 1u) {{",
             "    let e = first + k;",
             f"    if (e < pu(1u)) {{ own = combine(own, State({value}, i32(e))); }}", "  }",
             "  sh[lid] = own;", "  workgroupBarrier();"]
    if not finish:
        lines += [f"  for (var s = {_WORKGROUP // 2}u; s > 0u; s = s >> 1u) {{",
                  "    if (lid < s) { sh[lid] = combine(sh[lid], sh[lid + s]); }",
                  "    workgroupBarrier();", "  }",
                  f"  if (lid == 0u) {{ out0[w] = {codegen.store('sh[0].v', acc)};"
                  + (" out1[w] = sh[0].i;" if indexed else "") + " }"]
        writes = [acc] + (["int32"] if indexed else [])
        reads = [in_dtype]
    else:
        before = codegen.load("in1", "w - 1u", acc)
        before_index = "in2[w - 1u]" if indexed else "0"
        at = f"u32(dst) + e * pu({5 + 3 * rank}u)"
        lines += [f"  for (var s = 1u; s < {_WORKGROUP}u; s = s << 1u) {{",  # inclusive scan
                  f"    var left = {identity};",
                  "    if (lid >= s) { left = sh[lid - s]; }",
                  "    workgroupBarrier();",
                  "    sh[lid] = combine(left, sh[lid]);",
                  "    workgroupBarrier();", "  }",
                  f"  var running = {identity};",
                  "  if (lid > 0u) { running = sh[lid - 1u]; }",
                  (f"  if (block > 0u) {{ running = combine(State({before}, {before_index}), "
                   "running); }"),
                  f"  for (var k = 0u; k < {_PER_INVOCATION}u; k = k + 1u) {{",
                  "    let e = first + k;",
                  "    if (e < pu(1u)) {",
                  f"      running = combine(running, State({value}, i32(e)));",
                  (f"      out0[{at}] = "
                   f"{codegen.store(codegen.convert('running.v', acc, out_dtype), out_dtype)};"),
                  *([f"      out1[{at}] = running.i;"] if indexed else []),
                  "    }", "  }"]
        writes = [out_dtype] + (["int64"] if indexed else [])
        reads = [in_dtype, acc] + (["int32"] if indexed else [])
    return (codegen.header([in_dtype, out_dtype]) + _state(op, acc)
            + codegen.bindings(writes, reads, 6 + 3 * rank)
            + f"var<workgroup> sh: array<State, {_WORKGROUP}>;\n"
            + codegen.ENTRY.format(size=_WORKGROUP) + "\n".join(lines) + "\n}\n")


def _scan(op: str, rt: Any, x: WgpuArray, axis: int, out_dtype: str) -> list[WgpuArray]:
    """The running ``op`` of ``x`` along ``axis``: [values] (and [values, indices] of
    cummax / cummin), contiguous, of ``x``'s shape."""
    check_dtype(x.dtype, op, rt.name, rt.has_f16)
    indexed = op in _INDEXED
    outs = [rt.empty(x.shape, out_dtype)] + ([rt.empty(x.shape, "int64")] if indexed else [])
    if x.size == 0:
        return outs
    if x.ndim == 0:  # a 0-d tensor is a line of one
        x = x.view((1,), (0,), x.offset)
        axis = 0
    out_strides = contiguous_strides(x.shape)
    others = [d for d in range(x.ndim) if d != axis]
    length = x.shape[axis]
    n_lines = x.size // length
    per_dim: list[int] = []
    for d in others:
        per_dim.extend((x.shape[d], x.strides[d], out_strides[d]))
    key = (op, x.dtype, out_dtype, len(others))
    if length < _BLOCKED_MIN_LENGTH or (n_lines > _BLOCKED_MAX_LINES
                                        and length <= _LONGEST_LOOP):
        params = [n_lines, length, x.offset, x.strides[axis], *per_dim, out_strides[axis]]
        source = sources.source("scan-lines", (*key, False), _render_lines)
        rt.dispatch(source, outs, [x], params, rt.groups(n_lines, 64))
        return outs
    blocks = -(-length // _BLOCK)
    params = [n_lines * blocks, length, x.offset, x.strides[axis], blocks, *per_dim,
              out_strides[axis]]
    acc = _accumulator(op, out_dtype)
    totals = [rt.empty((n_lines, blocks), acc)]
    running = [rt.empty((n_lines, blocks), acc)]
    if indexed:
        totals.append(rt.empty((n_lines, blocks), "int32"))
        running.append(rt.empty((n_lines, blocks), "int32"))
    rt.dispatch(sources.source("scan-blocks", (*key, False), _render_blocks), totals, [x],
                params, rt.groups(n_lines * blocks, 1))
    rt.dispatch(sources.source("scan-lines", (op, acc, acc, 1, indexed), _render_lines),
                running, totals, [n_lines, blocks, 0, 1, n_lines, blocks, blocks, 1],
                rt.groups(n_lines, 64))
    rt.dispatch(sources.source("scan-blocks", (*key, True), _render_blocks), outs,
                [x, *running], params, rt.groups(n_lines * blocks, 1))
    return outs


@kernel("cumsum", "cumprod", "logcumsumexp")
def _running(msg: Any, rt: Any, x: WgpuArray) -> WgpuArray:
    (axis,) = msg.attrs
    return _scan(msg.op, rt, x, axis, msg.dtype)[0]


@kernel("cummax", "cummin")
def _running_extreme(msg: Any, rt: Any, x: WgpuArray) -> tuple[WgpuArray, WgpuArray]:
    (axis,) = msg.attrs
    values, indices = _scan(msg.op, rt, x, axis, msg.dtypes[0])
    return values, indices
