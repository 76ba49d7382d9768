"""WebGPU kernels of sort, argsort and topk: a bitonic sort of (key, index) pairs per row.

Each row's values become u32 keys whose unsigned order is the value order
(floats: sign-magnitude flipped, -0 as +0, every NaN the largest, where NumPy
puts NaN; ints: sign bit flipped; bools as they are), complemented for a
descending sort. Pairs sort by (key, original index), so equal values keep
their index order in either direction: exactly the CPU backend's stable order.
Rows are padded to a power of two with pairs that sort last.

A workgroup sorts blocks of ``BLOCK`` pairs in shared memory; rows longer than
that merge in passes over global memory (one dispatch per step of the
bitonic network whose distance is a block or more), each followed by the
in-block rest of the step in shared memory. The values and indices of the
first ``k`` places (every place for sort and argsort) are then gathered.
"""

from __future__ import annotations

import math

from ember.kernels.wgpu import codegen
from ember.kernels.wgpu.scalar_ops import HELPERS
from ember.kernels.wgpu.strided import contiguous
from ember.kernels.wgpu.table import WgpuArray, kernel

# Pairs sorted in one workgroup's shared memory: 2048 pairs of 8 bytes fill the 16 KiB
# of workgroup storage every WebGPU adapter offers.
BLOCK = 2048
_THREADS = 256

_ORDER_KEY = {
    "f": """fn order_key(v: f32) -> u32 {
    if (isnan_f(v)) { return 0xFFFFFFFFu; }
    let b = bitcast<u32>(select(v, 0.0, v == 0.0));
    return select(b ^ 0x80000000u, ~b, (b >> 31u) == 1u);
}
""" + HELPERS["isnan_f"] + "\n",
    "i": "fn order_key(v: i32) -> u32 { return bitcast<u32>(v) ^ 0x80000000u; }\n",
    "b": "fn order_key(v: bool) -> u32 { return select(0u, 1u, v); }\n",
}
_BEFORE = ("fn before(a: vec2<u32>, b: vec2<u32>) -> bool "
           "{ return a.x < b.x || (a.x == b.x && a.y < b.y); }\n")
# A pair that sorts after every real one of its row (ties on the key break by index).
_PAD = "vec2<u32>(0xFFFFFFFFu, j)"


def _pairs(declarations: str) -> str:
    """Declarations with the pair buffer (bound as int32 storage) typed as vec2<u32>."""
    return declarations.replace("out0: array<i32>", "out0: array<vec2<u32>>", 1)


def _keys_source(dtype: str) -> str:
    # Params: n, P (n padded to a power of two), inner, flip (0 or ~0), rows, total pairs,
    # offset of x.
    return (codegen.header([dtype]) + _ORDER_KEY[codegen.kind(dtype)]
            + _pairs(codegen.bindings(["int32"], [dtype], 7))
            + codegen.ENTRY.format(size=_THREADS) + f"""
    let f = {codegen.LINEAR_INDEX.format(size=_THREADS)};
    if (f >= pu(5u)) {{ return; }}
    let n = pu(0u);
    let inner = pu(2u);
    let r = f / pu(1u);
    let j = f % pu(1u);
    if (r < pu(4u) && j < n) {{
        let at = pu(6u) + (r / inner) * n * inner + j * inner + r % inner;
        out0[f] = vec2<u32>(order_key({codegen.load("in0", "at", dtype)}) ^ pu(3u), j);
    }} else {{
        out0[f] = {_PAD};
    }}
}}
""")


# Params: P, k (0: every stage up to min(P, BLOCK)), blocks. The direction of a
# compare-exchange comes from the position in the row, so several short rows can share a block.
_LOCAL = (_BEFORE + _pairs(codegen.bindings(["int32"], [], 3)) + f"""
const B: u32 = {BLOCK}u;
var<workgroup> tile: array<vec2<u32>, B>;
""" + codegen.ENTRY.format(size=_THREADS) + f"""
    let base = (wid.x + wid.y * nwg.x) * B;
    let live = base < pu(2u) * B;
    if (live) {{
        for (var t = lid; t < B; t += {_THREADS}u) {{ tile[t] = out0[base + t]; }}
    }}
    workgroupBarrier();
    let row = pu(0u);
    var k_first = 2u;
    var k_last = min(row, B);
    if (pu(1u) != 0u) {{ k_first = pu(1u); k_last = pu(1u); }}
    for (var k = k_first; k <= k_last; k <<= 1u) {{
        for (var j = min(k >> 1u, B >> 1u); j > 0u; j >>= 1u) {{
            for (var s = lid; s < B / 2u; s += {_THREADS}u) {{
                let i = (s / j) * 2u * j + s % j;
                let ascending = ((base + i) & (row - 1u) & k) == 0u;
                let a = tile[i];
                let b = tile[i + j];
                if (before(b, a) == ascending) {{ tile[i] = b; tile[i + j] = a; }}
            }}
            workgroupBarrier();
        }}
    }}
    if (live) {{
        for (var t = lid; t < B; t += {_THREADS}u) {{ out0[base + t] = tile[t]; }}
    }}
}}
""")

# Params: P, k, j, pairs: one step of the network at a distance j of a block or more.
_GLOBAL = (_BEFORE + _pairs(codegen.bindings(["int32"], [], 4))
           + codegen.ENTRY.format(size=_THREADS) + f"""
    let s = {codegen.LINEAR_INDEX.format(size=_THREADS)};
    if (s >= pu(3u)) {{ return; }}
    let j = pu(2u);
    let i = (s / j) * 2u * j + s % j;
    let ascending = (i & (pu(0u) - 1u) & pu(1u)) == 0u;
    let a = out0[i];
    let b = out0[i + j];
    if (before(b, a) == ascending) {{ out0[i] = b; out0[i + j] = a; }}
}}
""")


def _take_source(dtype: str) -> str:
    # Params: n, P, inner, k, count (rows · k), offset of x. Reads the pairs as int32
    # storage: word 2i + 1 is pair i's index.
    return (codegen.header([dtype]) + codegen.bindings([dtype, "int64"], [dtype, "int32"], 6)
            + codegen.ENTRY.format(size=_THREADS) + f"""
    let f = {codegen.LINEAR_INDEX.format(size=_THREADS)};
    if (f >= pu(4u)) {{ return; }}
    let n = pu(0u);
    let inner = pu(2u);
    let k = pu(3u);
    let r = f / k;
    let j = f % k;
    let picked = in1[2u * (r * pu(1u) + j) + 1u];
    let outer = r / inner;
    let lane = r % inner;
    let at = outer * k * inner + j * inner + lane;
    out0[at] = in0[pu(5u) + outer * n * inner + u32(picked) * inner + lane];
    out1[at] = picked;
}}
""")


_KEYS: dict[str, str] = {}
_TAKE: dict[str, str] = {}


def _sorted(rt, x: WgpuArray, axis: int, descending: bool, k: int,
            shape: tuple[int, ...], dtype: str) -> tuple[WgpuArray, WgpuArray]:
    """The first ``k`` values and int64 indices of each lane along ``axis``, sorted."""
    if x.ndim == 0:  # one value, sorted whatever k asks (as the CPU backend)
        x, k = x.view((1,), (1,), x.offset), 1
    x = contiguous(rt, x)
    n = x.shape[axis]
    inner = math.prod(x.shape[axis + 1:])
    rows = x.size // n if n else 0
    values, indices = rt.empty(shape, dtype), rt.empty(shape, "int64")
    if rows * k == 0:
        return values, indices
    width = 1 << (n - 1).bit_length()
    total = -(-rows * width // BLOCK) * BLOCK  # whole blocks; the tail is padding
    pairs = rt.empty((2 * total,), "int32")
    source = _KEYS.get(x.dtype) or _KEYS.setdefault(x.dtype, _keys_source(x.dtype))
    rt.dispatch(source, [pairs], [x],
                [n, width, inner, 0xFFFFFFFF if descending else 0, rows, total, x.offset],
                rt.groups(total, _THREADS))
    blocks = total // BLOCK
    spread = rt.groups(blocks * _THREADS, _THREADS)
    rt.dispatch(_LOCAL, [pairs], [], [width, 0, blocks], spread)
    stage = 2 * BLOCK
    while stage <= width:
        distance = stage // 2
        while distance >= BLOCK:
            rt.dispatch(_GLOBAL, [pairs], [], [width, stage, distance, total // 2],
                        rt.groups(total // 2, _THREADS))
            distance //= 2
        rt.dispatch(_LOCAL, [pairs], [], [width, stage, blocks], spread)
        stage *= 2
    take = _TAKE.get(x.dtype) or _TAKE.setdefault(x.dtype, _take_source(x.dtype))
    rt.dispatch(take, [values, indices], [x, pairs], [n, width, inner, k, rows * k, x.offset],
                rt.groups(rows * k, _THREADS))
    return values, indices


@kernel("sort")
def _sort(msg, rt, x):
    axis, descending = msg.attrs
    n = x.shape[axis] if x.ndim else 1
    return _sorted(rt, x, axis, descending, n, msg.shapes[0], msg.dtypes[0])


@kernel("argsort")
def _argsort(msg, rt, x):
    axis, descending = msg.attrs
    n = x.shape[axis] if x.ndim else 1
    return _sorted(rt, x, axis, descending, n, msg.shape, x.dtype)[1]


@kernel("topk")
def _topk(msg, rt, x):
    k, axis, largest = msg.attrs
    return _sorted(rt, x, axis, largest, k, msg.shapes[0], msg.dtypes[0])
