"""The strided gather: the one WGSL kernel behind every data-movement op.

For every coordinate ``c`` of an iteration shape it does::

    dst[dst_offset + Σ c_d · dst_stride_d] = src[src_offset + Σ c_d · src_stride_d
                                                  (+ index[index_offset + Σ c_d · index_stride_d]
                                                     · axis_stride)]

converting the value when the two dtypes differ. Contiguous copies, permutes,
expands, repeats, cat and split pieces, slicing and index_put's writes are the
plain form; gather, index_select and ``t[index]`` add the index term. Shape,
strides and offsets are params, so one pipeline serves every size and rank of a
(source dtype, destination dtype, indexed) triple.

Index values: ``wrap`` adds the axis size to negative values first (``t[idx]``, as
PyTorch); any value still outside ``[0, axis size)`` skips the element and records
itself in a two-word fault buffer that the host reads back and raises as
``IndexError`` (the reader sees ``KernelError``). That read waits for the device:
an indexed gather costs one round trip, the price of reporting bad indices at all.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ember.kernels.wgpu import codegen
from ember.kernels.wgpu.table import STORAGE, WgpuArray, contiguous_strides

# Params: count, rank, src_offset, dst_offset, index_offset, axis_stride, axis_size, wrap,
# then four rank-long blocks: shape, src strides, dst strides, index strides.
_HEADER = 8
_SOURCES: dict[tuple[str, str, bool], str] = {}


def _source(src_dtype: str, dst_dtype: str, indexed: bool) -> str:
    key = (src_dtype, dst_dtype, indexed)
    found = _SOURCES.get(key)
    if found is not None:
        return found
    writes = [dst_dtype] + (["int32"] if indexed else [])
    reads = [src_dtype] + (["int32"] if indexed else [])
    if STORAGE[src_dtype][0] == STORAGE[dst_dtype][0]:
        value = "in0[s]"  # the same storage: move the bits
    else:
        value = codegen.store(codegen.convert(codegen.load("in0", "s", src_dtype), src_dtype,
                                              dst_dtype), dst_dtype)
    pick = """
    var picked = in1[u32(at)];
    if (picked < 0 && pi(7u) != 0) { picked += pi(6u); }
    if (picked < 0 || picked >= pi(6u)) {
        out1[0] = 1;
        out1[1] = in1[u32(at)];
        return;
    }
    s += picked * pi(5u);""" if indexed else ""
    found = _SOURCES[key] = (
        codegen.header([src_dtype, dst_dtype]) + codegen.bindings(writes, reads, _HEADER)
        + codegen.ENTRY.format(size=256) + f"""
    let i = i32({codegen.LINEAR_INDEX.format(size=256)});
    if (i >= pi(0u)) {{ return; }}
    let rank = pi(1u);
    var rest = i;
    var s = pi(2u);
    var d = pi(3u);
    var at = pi(4u);
    for (var k = rank - 1; k >= 0; k--) {{
        let size = pi(u32({_HEADER} + k));
        let c = rest % size;
        rest = rest / size;
        s += c * pi(u32({_HEADER} + rank + k));
        d += c * pi(u32({_HEADER} + 2 * rank + k));
        at += c * pi(u32({_HEADER} + 3 * rank + k));
    }}{pick}
    out0[u32(d)] = {value};
}}
""")
    return found


def _launch(rt, shape: Sequence[int], dst: WgpuArray, dst_offset: int, dst_strides: Sequence[int],
            src: WgpuArray, src_offset: int, src_strides: Sequence[int],
            index: tuple | None = None) -> None:
    count = math.prod(shape)
    if count == 0:
        return
    rank = len(shape)
    if index is None:
        head = [count, rank, src_offset, dst_offset, 0, 0, 0, 0]
        index_strides: Sequence[int] = (0,) * rank
    else:
        array, index_strides, axis_stride, axis_size, wrap, _ = index
        head = [count, rank, src_offset, dst_offset, array.offset, axis_stride, axis_size,
                int(wrap)]
    params = head + list(shape) + list(src_strides) + list(dst_strides) + list(index_strides)
    if index is None:
        rt.dispatch(_source(src.dtype, dst.dtype, False), [dst], [src], params,
                    rt.groups(count))
        return
    fault = rt.upload(np.zeros(2, np.int32))
    rt.dispatch(_source(src.dtype, dst.dtype, True), [dst, fault], [src, index[0]], params,
                rt.groups(count))
    hit, bad = rt.read(fault).tolist()
    if hit:
        op, dim = index[5]
        raise IndexError(f"{op}: index {bad} is out of range for dim {dim} of size {index[3]}")


def copy_into(rt, dst: WgpuArray, src: WgpuArray) -> None:
    """Write ``src`` (any strided view, broadcast to ``dst``'s shape) into the view ``dst``."""
    _launch(rt, dst.shape, dst, dst.offset, dst.strides, src, src.offset,
            src.broadcast_strides(dst.shape))


def copy(rt, src: WgpuArray, dtype: str | None = None) -> WgpuArray:
    """A fresh contiguous copy of ``src`` (converted to ``dtype`` when given)."""
    out = rt.empty(src.shape, dtype or src.dtype)
    copy_into(rt, out, src)
    return out


def contiguous(rt, x: WgpuArray) -> WgpuArray:
    """``x`` itself when it is dense row-major, else a contiguous copy."""
    return x if x.contiguous else copy(rt, x)


def gather(rt, out: WgpuArray, src: WgpuArray, src_strides: Sequence[int], index: WgpuArray,
           index_strides: Sequence[int], axis_stride: int, axis_size: int, wrap: bool,
           where: tuple[str, int]) -> None:
    """Fill contiguous ``out`` from ``src`` with one index term (see the module docstring).

    ``src_strides`` and ``index_strides`` run over ``out``'s dims (0 where a dim does not
    move that operand); ``where`` is (op, dim) for the out-of-range message.
    """
    _launch(rt, out.shape, out, out.offset, contiguous_strides(out.shape), src, src.offset,
            src_strides, (index, index_strides, axis_stride, axis_size, wrap, where))

