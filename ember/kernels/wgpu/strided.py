"""The strided gather: the one WGSL kernel behind every data-movement op.

For every coordinate ``c`` of an iteration shape it does::

    dst[dst_offset + Σ c_d · dst_stride_d] = src[src_offset + Σ c_d · src_stride_d]

converting the value when the two dtypes differ. An optional index term adds
``index[index_offset + Σ c_d · index_stride_d] · axis_stride`` to the source
offset (a gather: gather, index_select, ``t[idx]``) or to the destination offset
(a scatter: index_put); the accumulating form adds into the destination with
atomics (scatter_add, index_add), or takes the max / min (scatter_reduce).
Contiguous copies, permutes, expands, repeats, cat and split pieces and slicing
are the plain form. Shape, strides and offsets are params, so one pipeline
serves every size and rank of a (source dtype, destination dtype, indexed,
accumulating) combination.

Accumulation order: atomics land in whatever order the device runs them, so
float sums over repeated indices may differ from the CPU's sequential
``np.add.at`` in the last bits, and from run to run; integer sums are exact, and
so are max and min (their answer does not depend on the order).

Index values: ``wrap`` adds the axis size to negative values first (``t[idx]``, as
PyTorch); any value still outside ``[0, axis size)`` skips the element and records
itself in a two-word fault buffer, read back only when a value computed from the op
is read (fault_checks.py): then it raises as ``IndexError`` (the reader sees
``KernelError``), without a round trip per gather.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ember.kernels.wgpu import codegen
from ember.kernels.wgpu.scalar_ops import HELPERS
from ember.kernels.wgpu.table import STORAGE, WgpuArray

if TYPE_CHECKING:
    from ember.kernels.wgpu.runtime import Runtime

# Params: count, rank, src_offset, dst_offset, index_offset, axis_stride, axis_size, flags
# (bit 0: wrap negative indices, bit 1: the index moves the destination, not the source),
# then four rank-long blocks: shape, src strides, dst strides, index strides.
_HEADER = 8
_WRAP, _INDEX_ON_DST = 1, 2
_SOURCES: dict[tuple, str] = {}

# The accumulating form adds into a buffer of this dtype through atomics.
ACCUMULATOR = {"float32": "float32", "float16": "float32", "int32": "int32",
               "int64": "int64", "bool": "bool"}
# How one value is combined atomically (combine, storage): floats by compare-exchange on
# their bits (WGSL has integer atomics only), bools by or / and (NumPy's bool sum
# saturates at True).
_FLOAT_LOOP = """loop {{
        let old = atomicLoad(&out0[u32(d)]);
        let updated = bitcast<u32>({combined});
        if (updated == old || atomicCompareExchangeWeak(&out0[u32(d)], old, updated).exchanged) {{
            break;
        }}
    }}"""
_ATOMIC = {
    ("add", "f32"): _FLOAT_LOOP.format(combined="bitcast<f32>(old) + value"),
    ("add", "i32"): "atomicAdd(&out0[u32(d)], value);",
    ("add", "u32"): "atomicOr(&out0[u32(d)], value);",
    ("max", "f32"): _FLOAT_LOOP.format(combined="max_ordered(bitcast<f32>(old), value)"),
    ("max", "i32"): "atomicMax(&out0[u32(d)], value);",
    ("max", "u32"): "atomicOr(&out0[u32(d)], value);",
    ("min", "f32"): _FLOAT_LOOP.format(combined="min_ordered(bitcast<f32>(old), value)"),
    ("min", "i32"): "atomicMin(&out0[u32(d)], value);",
    ("min", "u32"): "atomicAnd(&out0[u32(d)], value);",
}
# Max and min whose answer never depends on the order the atomics land in: any NaN gives
# the one NaN bit pattern, and +0 beats -0 in max (-0 in min), where WGSL's max leaves it.
_ORDERED = {
    "max": """fn max_ordered(a: f32, b: f32) -> f32 {
    if (isnan_f(a) || isnan_f(b)) { return bitcast<f32>(0x7fc00000u); }
    if (a == b) { return bitcast<f32>(bitcast<u32>(a) & bitcast<u32>(b)); }
    return max(a, b);
}
""",
    "min": """fn min_ordered(a: f32, b: f32) -> f32 {
    if (isnan_f(a) || isnan_f(b)) { return bitcast<f32>(0x7fc00000u); }
    if (a == b) { return bitcast<f32>(bitcast<u32>(a) | bitcast<u32>(b)); }
    return min(a, b);
}
""",
}
_ATOMIC_TYPE = {"f32": "u32", "i32": "i32", "u32": "u32"}


def _value(src_dtype: str, dst_dtype: str) -> str:
    if STORAGE[src_dtype][0] == STORAGE[dst_dtype][0]:
        return "in0[u32(s)]"  # the same storage: move the bits
    return codegen.store(codegen.convert(codegen.load("in0", "u32(s)", src_dtype), src_dtype,
                                         dst_dtype), dst_dtype)


def _declarations(src_dtype: str, dst_dtype: str, indexed: bool, accumulate: bool) -> str:
    """``codegen.bindings``, except that an accumulating destination is atomic."""
    writes = [dst_dtype] + (["int32"] if indexed else [])
    reads = [src_dtype] + (["int32"] if indexed else [])
    text = codegen.bindings(writes, reads, _HEADER)
    if accumulate:
        storage = STORAGE[dst_dtype][0]
        text = text.replace(f"out0: array<{storage}>",
                            f"out0: array<atomic<{_ATOMIC_TYPE[storage]}>>", 1)
    return text


def _source(src_dtype: str, dst_dtype: str, indexed: bool, accumulate: bool,
            combine: str) -> str:
    key = (src_dtype, dst_dtype, indexed, accumulate, combine)
    found = _SOURCES.get(key)
    if found is not None:
        return found
    pick = """
    var picked = in1[u32(at)];
    let flags = pu(7u);
    if (picked < 0 && (flags & 1u) != 0u) { picked += pi(6u); }
    if (picked < 0 || picked >= pi(6u)) {
        out1[0] = 1;
        out1[1] = in1[u32(at)];
        return;
    }
    if ((flags & 2u) != 0u) { d += picked * pi(5u); } else { s += picked * pi(5u); }""" \
        if indexed else ""
    if accumulate:
        storage = STORAGE[dst_dtype][0]
        value = _value(src_dtype, dst_dtype)
        if storage == "f32":
            value = f"f32({value})"
        write = f"let value = {value};\n    {_ATOMIC[combine, storage]}"
    else:
        write = f"out0[u32(d)] = {_value(src_dtype, dst_dtype)};"
    helpers = (HELPERS["isnan_f"] + "\n" + _ORDERED[combine]
               if accumulate and combine in _ORDERED and STORAGE[dst_dtype][0] == "f32" else "")
    found = _SOURCES[key] = (
        codegen.header([src_dtype, dst_dtype]) + helpers
        + _declarations(src_dtype, dst_dtype, indexed, accumulate)
        + codegen.ENTRY.format(size=256) + walk(("s", "d", "at"), _HEADER) + f"""{pick}
    {write}
}}
""")
    return found


def walk(names: tuple[str, str, str], header: int) -> str:
    """WGSL (a 256-wide entry point's first lines) setting i32 ``names`` to the element
    offsets of invocation ``i`` in three strided arrays of one shape.

    Params: 0 the element count, 1 the rank, 2..4 the arrays' offsets, then from
    ``header`` the shape and each array's strides (rank values each).
    """
    a, b, c = names
    return f"""
    let i = i32({codegen.LINEAR_INDEX.format(size=256)});
    if (i >= pi(0u)) {{ return; }}
    let rank = pi(1u);
    var rest = i;
    var {a} = pi(2u);
    var {b} = pi(3u);
    var {c} = pi(4u);
    for (var k = rank - 1; k >= 0; k--) {{
        let size = pi(u32({header} + k));
        let c = rest % size;
        rest = rest / size;
        {a} += c * pi(u32({header} + rank + k));
        {b} += c * pi(u32({header} + 2 * rank + k));
        {c} += c * pi(u32({header} + 3 * rank + k));
    }}"""


class Index:
    """The index term of a gather or scatter (see the module docstring).

    ``strides`` run over the iteration shape (0 on dims the index does not span);
    ``axis_stride`` / ``axis_size`` describe the dim it picks along, in the array it
    moves; ``where`` is (op, dim) for the out-of-range message.
    """

    __slots__ = ("array", "strides", "axis_stride", "axis_size", "wrap", "on_dst", "where")

    def __init__(self, array: WgpuArray, strides: Sequence[int], axis_stride: int,
                 axis_size: int, where: tuple[str, int], wrap: bool = False,
                 on_dst: bool = False) -> None:
        self.array = array
        self.strides = tuple(strides)
        self.axis_stride = axis_stride
        self.axis_size = axis_size
        self.wrap = wrap
        self.on_dst = on_dst
        self.where = where


def launch(rt: Runtime, shape: Sequence[int], dst: WgpuArray, dst_strides: Sequence[int],
           src: WgpuArray, src_strides: Sequence[int], index: Index | None = None,
           accumulate: bool = False, combine: str = "add") -> None:
    """For every coordinate of ``shape``: ``dst[...] = src[...]`` (when ``accumulate``,
    ``dst[...] = combine(dst[...], src[...])``, ``combine`` "add", "max" or "min").

    Offsets are the views' own; ``dst`` of an accumulating launch must have the dtype
    ``ACCUMULATOR[src.dtype]`` names.
    """
    count = math.prod(shape)
    if count == 0:
        return
    rank = len(shape)
    if index is None:
        head = [count, rank, src.offset, dst.offset, 0, 0, 0, 0]
        index_strides: Sequence[int] = (0,) * rank
    else:
        flags = (_WRAP if index.wrap else 0) | (_INDEX_ON_DST if index.on_dst else 0)
        head = [count, rank, src.offset, dst.offset, index.array.offset, index.axis_stride,
                index.axis_size, flags]
        index_strides = index.strides
    params = head + list(shape) + list(src_strides) + list(dst_strides) + list(index_strides)
    source = _source(src.dtype, dst.dtype, index is not None, accumulate, combine)
    if index is None:
        rt.dispatch(source, [dst], [src], params, rt.groups(count))
        return
    fault = rt.upload(np.zeros(2, np.int32))
    rt.dispatch(source, [dst, fault], [src, index.array], params, rt.groups(count))
    op, dim = index.where
    rt.faults.defer(fault, op, dim, index.axis_size)


def copy_into(rt: Runtime, dst: WgpuArray, src: WgpuArray) -> None:
    """Write ``src`` (any strided view, broadcast to ``dst``'s shape) into the view ``dst``."""
    launch(rt, dst.shape, dst, dst.strides, src, src.broadcast_strides(dst.shape))


def copy(rt: Runtime, src: WgpuArray, dtype: str | None = None) -> WgpuArray:
    """A fresh contiguous copy of ``src`` (converted to ``dtype`` when given)."""
    out = rt.empty(src.shape, dtype or src.dtype)
    copy_into(rt, out, src)
    return out


def contiguous(rt: Runtime, x: WgpuArray) -> WgpuArray:
    """``x`` itself when it is dense row-major, else a contiguous copy."""
    return x if x.contiguous else copy(rt, x)
