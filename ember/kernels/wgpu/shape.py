"""WebGPU kernels of the shape ops: views where the strides allow, strided copies otherwise.

Reshape (of dense data), permute, expand and split return zero-copy views of
their input (``WgpuArray.view``); repeat and cat write a fresh buffer through
the strided gather of ``strided.py``, as does reshape of a strided view.
"""

from __future__ import annotations

from ember.kernels.wgpu.strided import contiguous, copy_into
from ember.kernels.wgpu.table import contiguous_strides, kernel


@kernel("reshape")
def _reshape(msg, rt, x):
    dense = contiguous(rt, x)
    return dense.view(msg.shape, contiguous_strides(msg.shape), dense.offset)


@kernel("permute")
def _permute(msg, rt, x):
    (order,) = msg.attrs
    return x.view(msg.shape, tuple(x.strides[d] for d in order), x.offset)


@kernel("expand")
def _expand(msg, rt, x):
    return x.view(msg.shape, x.broadcast_strides(msg.shape), x.offset)


@kernel("repeat")
def _repeat(msg, rt, x):
    # Tiling is a broadcast copy: view the output as (reps[0], size[0], reps[1], size[1], ...)
    # and read x, seen as (1, size[0], 1, size[1], ...) with stride 0 on the repeats, into it.
    (reps,) = msg.attrs
    pad = len(reps) - x.ndim
    sizes = (1,) * pad + x.shape
    strides = (0,) * pad + x.strides
    tiles = tuple(n for pair in zip(reps, sizes) for n in pair)
    out = rt.empty(msg.shape, msg.dtype)
    source = x.view(tiles, tuple(n for s in strides for n in (0, s)), x.offset)
    copy_into(rt, out.view(tiles, contiguous_strides(tiles), 0), source)
    return out


@kernel("split")
def _split(msg, rt, x):
    dim, offsets = msg.attrs
    starts = (0,) + tuple(offsets)
    return tuple(x.view(shape, x.strides, x.offset + start * x.strides[dim])
                 for shape, start in zip(msg.shapes, starts))


@kernel("cat")
def _cat(msg, rt, *arrays):
    """Each input is copied (and converted to the joined dtype) into its slice of the output."""
    dim, new_axis = msg.attrs
    out = rt.empty(msg.shape, msg.dtype)
    step = out.strides[dim]
    start = 0
    for x in arrays:
        shape = x.shape[:dim] + (1,) + x.shape[dim:] if new_axis else x.shape
        copy_into(rt, out.view(shape, out.strides, start * step), x.view(
            shape, x.strides[:dim] + (0,) + x.strides[dim:] if new_axis else x.strides, x.offset))
        start += shape[dim]
    return out
