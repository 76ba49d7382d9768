"""Strided copies in 16-byte moves (kernels/cupy/strided_copy.py). On the CPU: the merged
dims and units ``layout`` picks, carried out the way the kernel walks them, copy every
view NumPy can make; ``reshapes_as_view`` agrees with NumPy; the sources compile for
Hopper. On a GPU: copies, reshapes that must copy and ``cat`` match NumPy."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import ember as em
from ember.kernels.cupy.strided_copy import UNITS, kernel_name, layout, reshapes_as_view, source
from tests.cuda.gpu import needs_gpu, needs_nvcc, ptx_of

DTYPES = [np.float32, np.float16, np.int64, np.bool_, np.uint8, ml_dtypes.bfloat16]


def _units(x: np.ndarray, unit: int, sizes: tuple, steps: tuple) -> np.ndarray:
    """The units the kernel reads or writes at ``x``'s address, as a (sizes..., unit)
    byte array (a view: writing it writes ``x``'s memory)."""
    base = x
    while base.base is not None:
        base = base.base
    memory = as_strided(base.reshape(-1).view(np.uint8), (base.nbytes,), (1,))
    offset = x.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return as_strided(memory[offset:], sizes + (unit,), tuple(s * unit for s in steps) + (1,))


def _copy_as_the_kernel(dst: np.ndarray, src: np.ndarray) -> bool:
    """Carry out ``layout``'s copy of ``src`` into ``dst``; False where it leaves the copy
    to CuPy."""
    found = layout(dst.shape, dst.itemsize, src.strides, dst.strides,
                   src.__array_interface__["data"][0], dst.__array_interface__["data"][0])
    if found is None:
        return False
    unit, sizes, src_steps, dst_steps = found
    assert unit in UNITS and math.prod(sizes) * unit == src.size * src.itemsize
    _units(dst, unit, sizes, dst_steps)[...] = _units(src, unit, sizes, src_steps)
    return True


rng = np.random.default_rng(0)


def _random_recipe():
    """A random way to view an array (slices with steps, a permutation, maybe a broadcast
    dim), as the base shape it needs and a function that views any array module's base."""
    rank = int(rng.integers(1, 5))
    shape = tuple(int(n) for n in rng.integers(1, 6, rank))
    steps = tuple(slice(int(rng.integers(0, 2)), None, int(rng.integers(1, 3))) for _ in shape)
    order = tuple(int(k) for k in rng.permutation(rank))
    broadcast = rng.random() < 0.2

    def view(base, xp=np):
        v = base[steps][tuple(slice(0, n) for n in shape)].transpose(order)
        return xp.broadcast_to(v[:1], (3,) + v.shape[1:]) if broadcast else v  # stride 0

    return tuple(2 * n + 1 for n in shape), view


def _random_view(dtype) -> np.ndarray:
    base_shape, view = _random_recipe()
    return view(rng.standard_normal(base_shape).astype(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_layout_copies_every_view_into_a_contiguous_array(dtype):
    for _ in range(300):
        src = _random_view(dtype)
        dst = np.zeros(src.shape, src.dtype)
        assert _copy_as_the_kernel(dst, src)
        np.testing.assert_array_equal(dst, src)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_layout_copies_into_a_strided_destination(dtype):
    for _ in range(200):
        src = _random_view(dtype)
        out = np.zeros(src.shape[:-1] + (src.shape[-1] + 3,), src.dtype)
        dst = out[..., 2:2 + src.shape[-1]]  # a piece of a cat along the last dim
        assert _copy_as_the_kernel(dst, src)
        np.testing.assert_array_equal(dst, src)
        assert not out[..., :2].any() and not out[..., 2 + src.shape[-1]:].any()


def test_head_views_move_16_bytes_per_thread():
    # q of an encoder layer: (8, 256, 3·768) projections seen as (8, 12, 256, 64) heads.
    qkv = np.zeros((8, 256, 3 * 768), np.float32)
    q = qkv[..., :768].reshape(8, 256, 12, 64).transpose(0, 2, 1, 3)
    unit, sizes, src_steps, dst_steps = layout(q.shape, 4, q.strides, (12 * 256 * 256,
                                               256 * 256, 256, 4), 0, 0)
    assert unit == 16 and sizes == (8, 12, 256, 16)
    assert src_steps == (256 * 3 * 768 // 4, 16, 3 * 768 // 4, 1)


@pytest.mark.parametrize("shape, itemsize, src, dst, addresses, expected", [
    ((4, 5), 4, (20, 4), (20, 4), (0, 0), (16, (5,), (1,), (1,))),  # one run
    ((4, 5), 4, (20, 4), (20, 4), (4, 0), (4, (20,), (1,), (1,))),  # misaligned source
    ((4, 5), 4, (4, 16), (20, 4), (0, 0), (4, (4, 5), (1, 4), (5, 1))),  # transposed
    ((3, 4), 4, (0, 4), (16, 4), (0, 0), (16, (3, 1), (0, 1), (1, 1))),  # broadcast rows
    ((4, 1, 6), 2, (12, 99, 2), (12, 12, 2), (0, 0), (16, (3,), (1,), (1,))),  # size-1 dim
    ((), 8, (), (), (0, 0), (8, (1,), (1,), (1,))),  # 0-d
    ((2, 0, 3), 4, (0, 12, 4), (0, 12, 4), (0, 0), None),  # nothing to copy
    ((4, 5), 4, (-20, 4), (20, 4), (0, 0), None),  # a negative stride: CuPy's copy
])
def test_layout_cases(shape, itemsize, src, dst, addresses, expected):
    assert layout(shape, itemsize, src, dst, *addresses) == expected


def test_reshapes_as_view_agrees_with_numpy():
    for _ in range(2000):
        x = _random_view(np.float32)
        sizes, rest = [], x.size
        while rest > 1:
            factor = int(rng.choice([d for d in range(1, rest + 1) if rest % d == 0]))
            sizes.append(factor)
            rest //= factor
            if rng.random() < 0.2:
                sizes.append(1)
        new = tuple(sizes) or (1,)
        try:
            np.reshape(x, new, copy=False)
            expected = True
        except ValueError:
            expected = False
        assert reshapes_as_view(x.shape, x.strides, new) is expected, (x.shape, x.strides, new)
    assert reshapes_as_view((2, 0, 3), (0, 12, 4), (3, 0))


@needs_nvcc
@pytest.mark.parametrize("rank", [1, 2, 4, 6])
@pytest.mark.parametrize("unit", list(UNITS))
@pytest.mark.parametrize("bits", [32, 64])
def test_source_compiles_to_ptx_for_hopper(tmp_path, rank, unit, bits):
    ptx = ptx_of(tmp_path, source(rank, unit, bits), kernel_name(rank, unit, bits))
    if unit == 16:
        assert "ld.global.nc.v4.u32" in ptx and "st.global.v4.u32" in ptx


@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_gpu_copies_match_numpy(dtype):
    import cupy

    from ember.kernels.cupy import strided_copy

    for _ in range(60):
        base_shape, view = _random_recipe()
        base = rng.standard_normal(base_shape).astype(dtype)
        src = view(cupy.asarray(base), cupy)
        out = strided_copy.contiguous(src)
        assert out.flags.c_contiguous
        np.testing.assert_array_equal(cupy.asnumpy(out), view(base))
    # A transposed and a sliced device view, then a piece of a destination.
    x = cupy.arange(6 * 8 * 10, dtype=np.float32).reshape(6, 8, 10)
    for src in (x.transpose(2, 0, 1), x[:, 1:7, 2:10], x[::2, :, 1:9].swapaxes(0, 1)):
        np.testing.assert_array_equal(cupy.asnumpy(strided_copy.contiguous(src)),
                                      cupy.asnumpy(src))
    out = cupy.zeros((6, 8, 13), np.float32)
    strided_copy.copy(out[..., 3:], x)
    np.testing.assert_array_equal(cupy.asnumpy(out[..., 3:]), cupy.asnumpy(x))
    assert not cupy.asnumpy(out[..., :3]).any()


@needs_gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64", "bool"])
def test_gpu_reshape_and_cat_of_head_views(dtype):
    dev = em.cuda(0)
    values = rng.standard_normal((2, 5, 3 * 24))
    x_np = values > 0 if dtype == "bool" else values.astype(
        ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    x = em.from_numpy(x_np, device=dev)
    heads = [t.reshape(2, 5, 4, 6).transpose(1, 2) for t in x.chunk(3, dim=-1)]
    merged = [h.transpose(1, 2).reshape(2, 5, 24) for h in heads]
    joined = em.cat(merged, dim=-1)
    stacked = em.stack(heads, dim=1)
    np.testing.assert_array_equal(joined.numpy(), x_np)
    expected = np.stack([p.reshape(2, 5, 4, 6).transpose(0, 2, 1, 3)
                         for p in np.split(x_np, 3, axis=-1)], axis=1)
    np.testing.assert_array_equal(stacked.numpy(), expected)
