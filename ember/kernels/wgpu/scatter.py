"""WGSL ``scatter`` and ``scatter_reduce``, deterministic: the same answer every run.

Both write into a copy of the input through ``index``'s grid: position ``c`` of
``index`` sends ``src[c]`` to the output at ``c`` with its ``dim`` coordinate
replaced by ``index[c]``. The positions sharing every coordinate but ``dim`` (a
line) write only among themselves.

``sum``, ``prod`` and ``mean`` round by their order, and WGSL has no float
atomics (a compare-and-swap loop, scatter_add's, lands in whatever order the
device runs it). So they walk the index one line per invocation, in order:
every destination combines its sources in index order, as the CPU's
``ufunc.at`` does, and the results equal the CPU's bit for bit. The cost: a
tensor with few lines (a 1-D one is one line) runs on few invocations.

``scatter`` keeps, of the elements writing one position, the last along ``dim``
(the CPU's choice; PyTorch leaves it unspecified): with many lines by the same
walk, with few by a bid: each element bids its position by an atomic max, then
the winner alone writes. ``amax`` / ``amin`` give the same answer in any order,
so they are atomics (strided.py: integer max / min, bool or / and, floats by
compare-exchange with NaN and signed-zero rules of their own). Bids and atomics
run one invocation per index element.

Index values outside ``[0, size)`` skip their element and fail the read with
``scatter`` / ``scatter_reduce``'s ``IndexError``, through the same fault buffer
as ``gather`` and ``scatter_add`` (fault_checks.py). float16 combines in f32 and
rounds once; ``mean`` of integers floors, as the CPU's.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember.kernels.wgpu import codegen, sources
from ember.kernels.wgpu.indexing import along, at_least_1d, dense
from ember.kernels.wgpu.scalar_ops import HELPERS
from ember.kernels.wgpu.strided import Index, copy, copy_into, launch, walk
from ember.kernels.wgpu.table import WgpuArray, check_dtype, contiguous_strides, kernel

_HEADER = 12  # params before the four per-dim blocks; see _render
# Positions of a line one dispatch walks: lavapipe (Mesa's gallivm) ends any loop after
# 65535 iterations, so a long line runs as consecutive dispatches, which keep its order.
_CHUNK = 1 << 14
_RESET_PHASE, _COMBINE_PHASE, _DIVIDE_PHASE = 0, 1, 2
# The per-line walk's identities and combines (WGSL, by register kind).
_IDENTITY = {("sum", "f"): "0.0", ("sum", "i"): "0", ("mean", "f"): "0.0", ("mean", "i"): "0",
             ("prod", "f"): "1.0", ("prod", "i"): "1"}
_COMBINE = {("sum", "f"): "a + b", ("sum", "i"): "a + b", ("mean", "f"): "a + b",
            ("mean", "i"): "a + b", ("prod", "f"): "a * b", ("prod", "i"): "a * b"}
# Reductions whose answer no order changes run as atomics (strided.py's combine), with the
# value a position nothing but src writes starts from (include_self=False).
_ORDER_FREE = {"amax": "max", "amin": "min"}
# Index lines enough to keep a GPU busy one per invocation (a guess, as the scan's): more
# run ``scatter`` by the line walk, which needs no atomics; fewer bid by atomics.
_MANY_LINES = 1024
_START = {("amax", "f"): -np.inf, ("amax", "i"): np.iinfo(np.int32).min, ("amax", "b"): False,
          ("amin", "f"): np.inf, ("amin", "i"): np.iinfo(np.int32).max, ("amin", "b"): True}


def _render(reduce: str | None, src_dtype: str, acc: str, include_self: bool,
            rank: int) -> str:
    """One invocation per line of ``index``, combining by ``reduce`` (sum, prod, mean; None
    overwrites).

    Params: n_lines, line length, the output's size along dim, the index / src / output
    offsets, their strides along dim, the first and last + 1 positions to walk, the phase
    (reset the positions written to the identity, combine, divide the means), then (size,
    index stride, src stride, output stride) per other dim. Bindings: the output (in
    ``acc``), the fault buffer and, for ``mean``, a count per output element (written only
    where an index points); index, src.
    """
    k = codegen.kind(acc)
    mean = reduce == "mean"
    walk = ["  var at = pi(3u); var s = pi(4u); var d = pi(5u); var rest: u32 = line;"]
    for j in reversed(range(rank)):
        size, *strides = (f"p{t}({_HEADER + 4 * j + n}u)" for n, t in enumerate("uiii"))
        walk.append(f"  {{ let c = i32(rest % {size}); rest = rest / {size}; "
                    f"at = at + c * {strides[0]}; s = s + c * {strides[1]}; "
                    f"d = d + c * {strides[2]}; }}")

    def each(phase: int, body: list[str]) -> list[str]:
        """A loop over the dispatch's positions, ``p`` the output offset of each."""
        bad = ["      out1[0] = 1;", "      out1[1] = picked;"] if phase == _COMBINE_PHASE else []
        return [f"  if (pu(11u) == {phase}u) {{",
                "  for (var j = pi(9u); j < pi(10u); j = j + 1) {",
                "    let picked = in0[u32(at + j * pi(6u))];",
                "    if (picked < 0 || picked >= pi(2u)) {", *bad, "      continue;", "    }",
                "    let p = u32(d + picked * pi(8u));", *body, "  }", "  }"]

    if reduce is None:  # move the bits
        main = each(_COMBINE_PHASE, ["    out0[p] = in1[u32(s + j * pi(7u))];"])
        helpers, before, after = "", [], []
    else:
        value = codegen.convert(codegen.load("in1", "u32(s + j * pi(7u))", src_dtype),
                                src_dtype, acc)
        register = codegen.register_type(acc)
        helpers = (f"fn combine(a: {register}, b: {register}) -> {register} "
                   f"{{ return {_COMBINE[reduce, k]}; }}\n")
        old = codegen.load("out0", "p", acc)
        main = each(_COMBINE_PHASE,
                    [f"    out0[p] = {codegen.store(f'combine({old}, {value})', acc)};",
                     *(["    out2[p] = out2[p] + 1;"] if mean else [])])
        reset = [f"    out0[p] = {codegen.store(_IDENTITY[reduce, k], acc)};"] \
            if not include_self else []
        before = each(_RESET_PHASE, reset + (["    out2[p] = 0;"] if mean else [])) \
            if reset or mean else []
        after = []
        if mean:
            helpers += HELPERS["floordiv_i"] + "\n" if k == "i" else ""
            divisor = "(count + 1)" if include_self else "count"
            divided = (f"floordiv_i(out0[p], {divisor})" if k == "i"
                       else codegen.store(f"{old} / f32({divisor})", acc))
            after = each(_DIVIDE_PHASE, [
                "    let count = out2[p];",
                f"    if (count > 0) {{ out0[p] = {divided}; out2[p] = 0; }}"])
    writes = [acc, "int32"] + (["int32"] if mean else [])
    reads = ["int32", src_dtype]
    lines = [f"  let line: u32 = {codegen.LINEAR_INDEX.format(size=64)};",
             "  if (line >= pu(0u)) { return; }", *walk, *before, *main, *after]
    return (codegen.header([src_dtype, acc]) + helpers
            + codegen.bindings(writes, reads, _HEADER + 4 * rank)
            + codegen.ENTRY.format(size=64) + "\n".join(lines) + "\n}\n")


def _scatter(op: str, rt: Any, x: WgpuArray, index: WgpuArray, src: WgpuArray, dim: int,
             reduce: str | None, include_self: bool, shape: tuple[int, ...]) -> WgpuArray:
    check_dtype(x.dtype, op, rt.name, rt.has_f16)
    acc = "float32" if reduce is not None and x.dtype == "float16" else x.dtype
    out = copy(rt, at_least_1d(x), acc)
    picks = at_least_1d(dense(rt, index))
    src = at_least_1d(src)
    lines = picks.size // max(picks.shape[dim], 1)
    if picks.size and reduce is None and lines < _MANY_LINES:
        _last_writes(op, rt, out, picks, src, dim)
    elif picks.size and reduce in _ORDER_FREE:
        _extremes(op, rt, out, picks, src, dim, reduce, include_self)
    elif picks.size:
        _lines(op, rt, out, picks, src, dim, reduce, include_self)
    if acc != x.dtype:
        out = copy(rt, out, x.dtype)
    return out.view(shape, contiguous_strides(shape), out.offset)


def _lines(op: str, rt: Any, out: WgpuArray, picks: WgpuArray, src: WgpuArray, dim: int,
           reduce: str | None, include_self: bool) -> None:
    """Combine ``src`` into ``out`` one index line per invocation, in index order."""
    length = picks.shape[dim]
    others = [d for d in range(picks.ndim) if d != dim]
    per_dim: list[int] = []
    for d in others:
        per_dim.extend((picks.shape[d], picks.strides[d], src.strides[d], out.strides[d]))
    n_lines = picks.size // length
    head = [n_lines, length, out.shape[dim], picks.offset, src.offset, out.offset,
            picks.strides[dim], src.strides[dim], out.strides[dim]]
    fault = rt.upload(np.zeros(2, np.int32))
    writes = [out, fault] + ([rt.empty(out.shape, "int32")] if reduce == "mean" else [])
    source = sources.source("scatter", (reduce, src.dtype, out.dtype, include_self,
                                        len(others)), _render)
    reset = reduce is not None and (reduce == "mean" or not include_self)
    phases = ([_RESET_PHASE] if reset else []) \
        + [_COMBINE_PHASE] + ([_DIVIDE_PHASE] if reduce == "mean" else [])
    for phase in phases:
        for begin in range(0, length, _CHUNK):
            rt.dispatch(source, writes, [picks, src],
                        [*head, begin, min(length, begin + _CHUNK), phase, *per_dim],
                        rt.groups(n_lines, 64))
    rt.faults.defer(fault, op, dim, out.shape[dim])


def _extremes(op: str, rt: Any, out: WgpuArray, picks: WgpuArray, src: WgpuArray, dim: int,
              reduce: str, include_self: bool) -> None:
    """amax / amin of ``src`` into ``out``: one invocation per index element, by atomics."""
    target = Index(picks, picks.strides, out.strides[dim], out.shape[dim], (op, dim),
                   on_dst=True)
    if not include_self:  # every writer of a position writes the same start
        start = _START[reduce, codegen.kind(out.dtype)]
        filler = rt.upload(np.array(start, np.bool_ if out.dtype == "bool" else out.dtype))
        launch(rt, picks.shape, out, along(out, dim), filler, (0,) * picks.ndim, target)
    launch(rt, picks.shape, out, along(out, dim), src, src.strides, target, accumulate=True,
           combine=_ORDER_FREE[reduce])


@kernel("scatter")
def _scatter_kernel(msg: Any, rt: Any, x: WgpuArray, index: WgpuArray,
                    src: WgpuArray) -> WgpuArray:
    (dim,) = msg.attrs
    return _scatter("scatter", rt, x, index, src, dim, None, True, msg.shape)


@kernel("scatter_reduce")
def _scatter_reduce(msg: Any, rt: Any, x: WgpuArray, index: WgpuArray,
                    src: WgpuArray) -> WgpuArray:
    dim, reduce, include_self = msg.attrs
    return _scatter("scatter_reduce", rt, x, index, src, dim, reduce, include_self, msg.shape)


_WRITE_WINNERS: dict[tuple, str] = {}


def _write_winners_source(dtype: str) -> str:
    """Each index element writes its src value where it won the bid. Params: walk's
    (count, rank, src / output / index offsets), the output's stride and size along dim,
    the elements after dim in ``index`` and its length along dim, then the shape and the
    src, output and index strides."""
    found = _WRITE_WINNERS.get(dtype)
    if found is None:
        found = _WRITE_WINNERS[dtype] = (
            codegen.header([dtype]) + codegen.bindings([dtype], [dtype, "int32", "int32"], 9)
            + codegen.ENTRY.format(size=256) + walk(("s", "d", "at"), 9) + """
    let picked = in1[u32(at)];
    if (picked < 0 || picked >= pi(6u)) { return; }  // the bid recorded the fault
    let p = u32(d + picked * pi(5u));
    if (in2[p] == (i / pi(7u)) % pi(8u)) { out0[p] = in0[u32(s)]; }
}
""")
    return found


def _last_writes(op: str, rt: Any, out: WgpuArray, picks: WgpuArray, src: WgpuArray,
                 dim: int) -> None:
    """``scatter``: of the elements that write one position, the last along ``dim`` wins,
    as the CPU's sequential writes: each bids its position along ``dim`` by an atomic max,
    then only the winner writes. Both passes run one invocation per index element."""
    length = picks.shape[dim]
    bids = rt.empty(out.shape, "int32")
    copy_into(rt, bids, rt.upload(np.array(-1, np.int32)))
    positions = rt.upload(np.arange(length, dtype=np.int32))
    launch(rt, picks.shape, bids, along(bids, dim), positions,
           tuple(1 if d == dim else 0 for d in range(picks.ndim)),
           Index(picks, picks.strides, bids.strides[dim], bids.shape[dim], (op, dim),
                 on_dst=True), accumulate=True, combine="max")
    inner = math.prod(picks.shape[dim + 1:])
    params = [picks.size, picks.ndim, src.offset, out.offset, picks.offset, out.strides[dim],
              out.shape[dim], inner, length, *picks.shape, *src.strides[:picks.ndim],
              *along(out, dim), *picks.strides]
    rt.dispatch(_write_winners_source(out.dtype), [out], [src, picks, bids], params,
                rt.groups(picks.size))
