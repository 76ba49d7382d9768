"""WebGPU kernels of the indexing ops, on the strided gather of ``strided.py``.

A key's ints, slices and Nones make a zero-copy view; an index tensor adds an
index term to a gather (``index``, ``gather``, ``index_select``), a scatter
(``index_put``) or an atomic accumulation (``index_add``, ``scatter_add``).
Index values are checked on the device and reported as ``IndexError`` (the
reader sees ``KernelError``): ``t[idx]`` and ``index_put`` wrap negative values,
as PyTorch; ``gather``, ``scatter_add`` and ``index_select`` accept only
``[0, size)``. A bool mask index (only gradients ask for one) is read to the
host to find its true positions.

float16 accumulates in float32 and rounds once, as the CPU backend does.
"""

from __future__ import annotations

import math

import numpy as np

from ember.kernels.wgpu import codegen
from ember.kernels.wgpu.strided import (ACCUMULATOR, Index, contiguous, copy, copy_into, launch,
                                        walk)
from ember.kernels.wgpu.table import WgpuArray, contiguous_strides, kernel


def _view(x: WgpuArray, entries: tuple) -> WgpuArray:
    """The view ``x[key]`` of a key's entries; an index tensor's dims stay as full slices."""
    shape: list[int] = []
    strides: list[int] = []
    offset = x.offset
    d = 0
    for entry in entries:
        tag = entry[0]
        if tag == "i":
            offset += entry[1] * x.strides[d]
            d += 1
        elif tag == "s":
            start, stop, step = entry[1:]
            offset += start * x.strides[d]
            shape.append(len(range(start, stop, step)))
            strides.append(x.strides[d] * step)
            d += 1
        elif tag == "n":
            shape.append(1)
            strides.append(0)
        else:
            shape.extend(x.shape[d:d + entry[1]])
            strides.extend(x.strides[d:d + entry[1]])
            d += entry[1]
    return x.view(tuple(shape) + x.shape[d:], tuple(strides) + x.strides[d:], offset)


def _merge(view: WgpuArray, axis: int, count: int) -> WgpuArray:
    """``view`` with dims ``axis .. axis + count - 1`` merged into one (they must be dense)."""
    dims = view.shape[axis:axis + count]
    return view.view(view.shape[:axis] + (math.prod(dims),) + view.shape[axis + count:],
                     view.strides[:axis] + (view.strides[axis + count - 1],)
                     + view.strides[axis + count:], view.offset)


def _mask_positions(rt, view: WgpuArray, mask: WgpuArray, axis: int) -> tuple[WgpuArray,
                                                                                 WgpuArray]:
    """``view`` with the mask's dims merged, and the flat positions where the mask is true.

    Reads the mask: the number of positions decides the result's size.
    """
    positions = np.flatnonzero(rt.read(contiguous(rt, mask))).astype(np.int32)
    return _merge(view, axis, mask.ndim), rt.upload(positions)


def _index_over(out_shape: tuple[int, ...], index: WgpuArray, axis: int) -> tuple[int, ...]:
    """Strides reading ``index`` (contiguous) at output dims ``axis .. axis + index.ndim - 1``."""
    rest = len(out_shape) - axis - index.ndim
    return (0,) * axis + index.strides + (0,) * rest


def _fill_value(rt, value: bool | int | float, dtype: str) -> WgpuArray:
    """A 0-d array holding ``value`` as ``dtype`` (broadcast by the copies that read it)."""
    host = np.bool_ if dtype == "bool" else np.dtype(dtype)
    return rt.upload(np.array(value).astype(host))


def dense(rt, x: WgpuArray) -> WgpuArray:
    """A contiguous copy of an index (i32 on the device, whether int32 or int64)."""
    return contiguous(rt, x)


@kernel("index")
def _index(msg, rt, x, *index):
    entries, axis = msg.attrs
    view = _view(x, entries)
    if not index:
        return view
    picks = dense(rt, index[0])
    if picks.dtype == "bool":
        view, picks = _mask_positions(rt, _view(contiguous(rt, x), entries), picks, axis)
    out = rt.empty(msg.shape, msg.dtype)
    source = view.strides[:axis] + (0,) * picks.ndim + view.strides[axis + 1:]
    launch(rt, out.shape, out, out.strides, view, source,
           Index(picks, _index_over(out.shape, picks, axis), view.strides[axis],
                 view.shape[axis], ("index", axis), wrap=True))
    return out


@kernel("index_put")
def _index_put(msg, rt, x, *tensors):
    entries, axis, scalar = msg.attrs
    out = copy(rt, x)
    region = _view(out, entries)
    value = tensors[-1] if scalar is None else _fill_value(rt, scalar, msg.dtype)
    if axis is None:
        copy_into(rt, region, _squeezed(value, region.ndim))
        return out
    picks = dense(rt, tensors[0])
    if picks.dtype == "bool":
        region, picks = _mask_positions(rt, region, picks, axis)
    shape = region.shape[:axis] + picks.shape + region.shape[axis + 1:]
    value = _squeezed(value, len(shape))
    launch(rt, shape, region, region.strides[:axis] + (0,) * picks.ndim
           + region.strides[axis + 1:], value, value.broadcast_strides(shape),
           Index(picks, _index_over(shape, picks, axis), region.strides[axis], region.shape[axis],
                 ("index_put", axis), wrap=True, on_dst=True))
    return out


def _squeezed(value: WgpuArray, ndim: int) -> WgpuArray:
    """``value`` without the leading size-1 dims past ``ndim`` (they broadcast away)."""
    extra = value.ndim - ndim
    if extra <= 0:
        return value
    return value.view(value.shape[extra:], value.strides[extra:], value.offset)


def _accumulator(rt, x: WgpuArray) -> WgpuArray:
    """A contiguous copy of ``x`` in the dtype atomics add into."""
    return copy(rt, x, ACCUMULATOR[x.dtype])


def _rounded(rt, total: WgpuArray, dtype: str) -> WgpuArray:
    return total if total.dtype == dtype else copy(rt, total, dtype)


@kernel("index_add")
def _index_add(msg, rt, x, *tensors):
    """``x`` with ``src`` (the last input) added at ``x[key]``; repeated indices accumulate."""
    entries, axis = msg.attrs
    total = _accumulator(rt, x)
    region = _view(total, entries)
    src = tensors[-1]
    if axis is None:
        launch(rt, region.shape, region, region.strides, src, src.broadcast_strides(region.shape),
               accumulate=True)
        return _rounded(rt, total, msg.dtype)
    picks = dense(rt, tensors[0])
    shape = region.shape[:axis] + picks.shape + region.shape[axis + 1:]
    launch(rt, shape, region, region.strides[:axis] + (0,) * picks.ndim
           + region.strides[axis + 1:], src, src.broadcast_strides(shape),
           Index(picks, _index_over(shape, picks, axis), region.strides[axis], region.shape[axis],
                 ("index_add", axis), wrap=True, on_dst=True), accumulate=True)
    return _rounded(rt, total, msg.dtype)


def along(x: WgpuArray, dim: int) -> tuple[int, ...]:
    """``x``'s strides with the one of ``dim`` zeroed (the index supplies that move)."""
    return x.strides[:dim] + (0,) + x.strides[dim + 1:]


def at_least_1d(x: WgpuArray) -> WgpuArray:
    """PyTorch's gather/scatter view of a 0-d tensor: one dim of size 1."""
    return x if x.ndim else x.view((1,), (0,), x.offset)


@kernel("gather")
def _gather(msg, rt, x, index):
    (dim,) = msg.attrs
    x = at_least_1d(x)
    picks = at_least_1d(dense(rt, index))
    out = rt.empty(picks.shape, msg.dtype)
    launch(rt, picks.shape, out, out.strides, x, along(x, dim),
           Index(picks, picks.strides, x.strides[dim], x.shape[dim], ("gather", dim)))
    return out.view(msg.shape, contiguous_strides(msg.shape), 0)


@kernel("scatter_add")
def _scatter_add(msg, rt, x, index, src):
    (dim,) = msg.attrs
    total = _accumulator(rt, at_least_1d(x))
    picks = at_least_1d(dense(rt, index))
    src = at_least_1d(src)
    launch(rt, picks.shape, total, along(total, dim), src, src.strides,
           Index(picks, picks.strides, total.strides[dim], total.shape[dim],
                 ("scatter_add", dim), on_dst=True), accumulate=True)
    out = _rounded(rt, total, msg.dtype)
    return out.view(msg.shape, contiguous_strides(msg.shape), out.offset)


@kernel("index_select")
def _index_select(msg, rt, x, index):
    (dim,) = msg.attrs
    x = at_least_1d(x)
    picks = dense(rt, index)
    picks = picks.view((picks.size,), (1,), picks.offset)
    shape = x.shape[:dim] + (picks.size,) + x.shape[dim + 1:]
    out = rt.empty(shape, msg.dtype)
    launch(rt, shape, out, out.strides, x, along(x, dim),
           Index(picks, _index_over(shape, picks, dim), x.strides[dim], x.shape[dim],
                 ("index_select", dim)))
    return out.view(msg.shape, contiguous_strides(msg.shape), 0)


_SELECT: dict[tuple, str] = {}


def _select_source(dtype: str, mask_dtype: str, value_dtype: str | None) -> str:
    """``out = mask ? value : x`` over broadcast strides; value a tensor or a param."""
    key = (dtype, mask_dtype, value_dtype)
    found = _SELECT.get(key)
    if found is not None:
        return found
    reads = [dtype, mask_dtype] + ([value_dtype] if value_dtype else [])
    if value_dtype is None:
        value = {"f": "pf(5u)", "i": "pi(5u)", "b": "(pu(5u) != 0u)"}[codegen.kind(dtype)]
    else:
        value = codegen.convert(codegen.load("in2", "u32(v)", value_dtype), value_dtype, dtype)
    mask = codegen.convert(codegen.load("in1", "u32(m)", mask_dtype), mask_dtype, "bool")
    found = _SELECT[key] = (
        codegen.header(reads) + codegen.bindings([dtype], reads, 8)
        + codegen.ENTRY.format(size=256) + walk(("s", "m", "v"), 8) + f"""
    let x = {codegen.load("in0", "u32(s)", dtype)};
    out0[u32(i)] = {codegen.store(f"select(x, {value}, {mask})", dtype)};
}}
""")
    return found


@kernel("masked_fill")
def _masked_fill(msg, rt, x, mask, *value):
    (scalar,) = msg.attrs
    shape = msg.shape
    out = rt.empty(shape, msg.dtype)
    count = math.prod(shape)
    if count == 0:
        return out
    if value:
        filler = value[0]
        fill_param: bool | int | float = 0
        value_strides = filler.broadcast_strides(shape)
        value_offset = filler.offset
    else:
        filler = None
        fill_param = float(scalar) if codegen.kind(msg.dtype) == "f" else int(scalar)
        value_strides = (0,) * len(shape)
        value_offset = 0
    params = ([count, len(shape), x.offset, mask.offset, value_offset, fill_param, 0, 0]
              + list(shape) + list(x.broadcast_strides(shape))
              + list(mask.broadcast_strides(shape)) + list(value_strides))
    reads = [x, mask] + ([filler] if filler is not None else [])
    rt.dispatch(_select_source(msg.dtype, mask.dtype, filler.dtype if filler else None),
                [out], reads, params, rt.groups(count))
    return out

