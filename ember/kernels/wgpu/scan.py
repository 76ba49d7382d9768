"""WGSL cumsum: one invocation per line, or a blocked scan for a few long lines.

Many lines (or short ones): each invocation runs its line sequentially.
A few long lines would leave the GPU idle, so they are cut into blocks of
4096 elements, one workgroup each, in three passes: every block's total (a
workgroup tree), the running totals of the blocks along each line (the
sequential kernel, on a much shorter array), and the blocks again, each
invocation scanning its 64 elements from the offset its block and its
neighbours (a workgroup scan) give it. Floats accumulate in f32 (float16
rounds once on output), integers in i32.
"""

from __future__ import annotations

from typing import Any

from ember.kernels.wgpu import codegen, sources
from ember.kernels.wgpu.table import WgpuArray, check_dtype, contiguous_strides, kernel

_PER_INVOCATION = 64
_WORKGROUP = 64
_BLOCK = _PER_INVOCATION * _WORKGROUP
# Lines at most, and the least length, for the blocked scan (guesses: fewer lines than
# a GPU has cores to spare, more elements than one invocation should walk alone).
_BLOCKED_MAX_LINES = 1024
_BLOCKED_MIN_LENGTH = 2 * _BLOCK


def _line_start(rank: int, first: int) -> list[str]:
    """Statements setting ``src`` / ``dst`` to the input / output offsets of ``line``, with
    (size, in stride, out stride) per other dim in params ``first ..``."""
    lines = ["  var src: i32 = pi(2u); var dst: i32 = 0; var rest: u32 = line;"]
    for d in reversed(range(rank)):
        size, s_in, s_out = (f"p{k}({first + 3 * d + j}u)" for j, k in enumerate("uii"))
        lines.append(f"  src = src + i32(rest % {size}) * {s_in}; "
                     f"dst = dst + i32(rest % {size}) * {s_out}; rest = rest / {size};")
    return lines


def _accumulator(out_dtype: str) -> str:
    return "float32" if codegen.kind(out_dtype) == "f" else out_dtype


def _render_lines(in_dtype: str, out_dtype: str, rank: int) -> str:
    """One invocation per line. Params: n_lines, length, offset, in stride along the axis,
    then (size, in stride, out stride) per other dim, then the out stride along the axis."""
    acc = _accumulator(out_dtype)
    element = codegen.convert(codegen.load("in0", "src", in_dtype), in_dtype, acc)
    acc_type = codegen.register_type(acc)
    lines = [f"  let line: u32 = {codegen.LINEAR_INDEX.format(size=64)};",
             "  if (line >= pu(0u)) { return; }", *_line_start(rank, 4),
             f"  var total: {acc_type} = {acc_type}(0);",
             "  for (var k = 0u; k < pu(1u); k = k + 1u) {",
             f"    total = total + {element};",
             f"    out0[u32(dst) + k * pu({4 + 3 * rank}u)] = "
             f"{codegen.store(codegen.convert('total', acc, out_dtype), out_dtype)};",
             "    src = src + pi(3u);", "  }"]
    return (codegen.header([in_dtype, out_dtype])
            + codegen.bindings([out_dtype], [in_dtype], 5 + 3 * rank)
            + codegen.ENTRY.format(size=64) + "\n".join(lines) + "\n}\n")


def _render_blocks(in_dtype: str, out_dtype: str, rank: int, finish: bool) -> str:
    """A pass over the blocks. Params: n_lines * n_blocks, length, offset, in stride along
    the axis, n_blocks, then (size, in stride, out stride) per other dim, then the out
    stride along the axis. ``finish``: write the scan (reading the blocks' running
    totals as ``in1``); else write each block's total."""
    acc = _accumulator(out_dtype)
    acc_type = codegen.register_type(acc)
    zero = f"{acc_type}(0)"
    element = codegen.convert(codegen.load("in0", "src + i32(e) * pi(3u)", in_dtype),
                              in_dtype, acc)
    lines = [f"  let w: u32 = {codegen.LINEAR_INDEX.format(size=1).replace('gid', 'wid')};",
             "  if (w >= pu(0u)) { return; }",
             "  let line = w / pu(4u); let block = w % pu(4u);", *_line_start(rank, 5),
             f"  let first = block * {_BLOCK}u + lid * {_PER_INVOCATION}u;",
             f"  var own = {zero};",
             f"  for (var k = 0u; k < {_PER_INVOCATION}u; k = k + 1u) {{",
             "    let e = first + k;", f"    if (e < pu(1u)) {{ own = own + {element}; }}", "  }",
             "  sh[lid] = own;", "  workgroupBarrier();"]
    if not finish:
        lines += [f"  for (var s = {_WORKGROUP // 2}u; s > 0u; s = s >> 1u) {{",
                  "    if (lid < s) { sh[lid] = sh[lid] + sh[lid + s]; }",
                  "    workgroupBarrier();", "  }",
                  f"  if (lid == 0u) {{ out0[w] = {codegen.store('sh[0]', acc)}; }}"]
        writes = [acc]
    else:
        before = codegen.load("in1", "w - 1u", acc)
        lines += [f"  for (var s = 1u; s < {_WORKGROUP}u; s = s << 1u) {{",  # inclusive scan
                  f"    var left = {zero};",
                  "    if (lid >= s) { left = sh[lid - s]; }",
                  "    workgroupBarrier();",
                  "    sh[lid] = sh[lid] + left;",
                  "    workgroupBarrier();", "  }",
                  "  var running = sh[lid] - own;",
                  f"  if (block > 0u) {{ running = running + {before}; }}",
                  f"  for (var k = 0u; k < {_PER_INVOCATION}u; k = k + 1u) {{",
                  "    let e = first + k;",
                  "    if (e < pu(1u)) {",
                  f"      running = running + {element};",
                  f"      out0[u32(dst) + e * pu({5 + 3 * rank}u)] = "
                  f"{codegen.store(codegen.convert('running', acc, out_dtype), out_dtype)};",
                  "    }", "  }"]
        writes = [out_dtype]
    reads = [in_dtype, acc] if finish else [in_dtype]
    return (codegen.header([in_dtype, out_dtype])
            + codegen.bindings(writes, reads, 6 + 3 * rank)
            + f"var<workgroup> sh: array<{acc_type}, {_WORKGROUP}>;\n"
            + codegen.ENTRY.format(size=_WORKGROUP) + "\n".join(lines) + "\n}\n")


@kernel("cumsum")
def _cumsum(msg: Any, rt: Any, x: WgpuArray) -> WgpuArray:
    (axis,) = msg.attrs
    check_dtype(x.dtype, "cumsum", rt.name, rt.has_f16)
    out = rt.empty(msg.shape, msg.dtype)
    if x.size == 0:
        return out
    if x.ndim == 0:  # a 0-d tensor is its own running sum
        x = x.view((1,), (0,), x.offset)
        axis = 0
    out_strides = contiguous_strides(x.shape)
    others = [d for d in range(x.ndim) if d != axis]
    length = x.shape[axis]
    n_lines = x.size // length
    per_dim: list[int] = []
    for d in others:
        per_dim.extend((x.shape[d], x.strides[d], out_strides[d]))
    key = (x.dtype, msg.dtype, len(others))
    if n_lines > _BLOCKED_MAX_LINES or length < _BLOCKED_MIN_LENGTH:
        params = [n_lines, length, x.offset, x.strides[axis], *per_dim, out_strides[axis]]
        source = sources.source("cumsum-lines", key, _render_lines)
        rt.dispatch(source, [out], [x], params, rt.groups(n_lines, 64))
        return out
    blocks = -(-length // _BLOCK)
    params = [n_lines * blocks, length, x.offset, x.strides[axis], blocks, *per_dim,
              out_strides[axis]]
    acc = _accumulator(msg.dtype)
    totals = rt.empty((n_lines, blocks), acc)
    rt.dispatch(sources.source("cumsum-blocks", (*key, False), _render_blocks), [totals], [x],
                params, rt.groups(n_lines * blocks, 1))
    running = rt.empty((n_lines, blocks), acc)
    rt.dispatch(sources.source("cumsum-lines", (acc, acc, 1), _render_lines), [running],
                [totals], [n_lines, blocks, 0, 1, n_lines, blocks, blocks, 1],
                rt.groups(n_lines, 64))
    rt.dispatch(sources.source("cumsum-blocks", (*key, True), _render_blocks), [out],
                [x, running], params, rt.groups(n_lines * blocks, 1))
    return out
