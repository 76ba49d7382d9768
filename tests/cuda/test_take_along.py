"""gather and scatter_add along the last dim in one CUDA kernel (kernels/cupy/take_along.py):
its sources compile for Hopper and its fast-path decision holds (on the CPU); on a GPU, the
public ops match NumPy on the fast path and off it, cross_entropy's step matches a float64
reference, and a bad index still fails at the read, naming the op."""

from __future__ import annotations


import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember.kernels.cupy.take_along import (
    GATHER_TYPES,
    INDEX_TYPES,
    gather_is_fast,
    kernel_name,
    scatter_add_is_fast,
    source,
)
from tests.cuda.gpu import needs_gpu, needs_nvcc, ptx_of

KERNELS = ([("gather", dtype, index) for dtype in GATHER_TYPES for index in INDEX_TYPES]
           + [("scatter_add", "float32", index) for index in INDEX_TYPES])


@needs_nvcc
@pytest.mark.parametrize("op, dtype, index", KERNELS)
def test_source_compiles_to_ptx_for_hopper(tmp_path, op, dtype, index):
    ptx = ptx_of(tmp_path, source(op, dtype, index), kernel_name(op, dtype, index))
    assert ("atom.global.add.f32" in ptx) == (op == "scatter_add")


def test_float16_and_bfloat16_share_a_16_bit_gather():
    assert kernel_name("gather", "float16", "int64") == kernel_name("gather", "bfloat16", "int64")
    assert kernel_name("gather", "float32", "int32") != kernel_name("gather", "float16", "int32")


def _x(shape, dtype="float32"):
    return np.zeros(shape, np.dtype(dtype))


def _i(shape, dtype="int64"):
    return np.zeros(shape, np.dtype(dtype))


@pytest.mark.parametrize("x, index, dim, fast", [
    (_x((4, 5)), _i((4, 3)), 1, True),
    (_x((4, 5)), _i((4, 3)), 0, False),  # not the last dim
    (_x((2, 3, 5)), _i((2, 3, 7)), 2, True),
    (_x((2, 3, 5)), _i((2, 3, 1)), 1, False),
    (_x((5,)), _i((7,)), 0, True),
    (_x(()), _i(()), 0, True),  # 0-d: one dim of size 1
    (_x(()), _i((2,)), 0, True),
    (_x((4, 5)), _i((2, 3)), 1, False),  # index rows do not line up with x's
    (_x((4, 5)), _i((4, 3, 1)), 1, False),
    (_x((4, 5)), _i((4, 0)), 1, True),  # an empty index: no launch
    (_x((0, 5)), _i((0, 3)), 1, True),
    (_x((4, 0)), _i((4, 0)), 1, False),  # nothing to pick from
    (_x((5, 4)).T, _i((4, 3)), 1, False),  # x not C-contiguous
    (_x((4, 5)), _i((4, 6))[:, ::2], 1, False),  # index not C-contiguous
    (_x((4, 5), "float16"), _i((4, 3)), 1, True),
    (_x((4, 5), ml_dtypes.bfloat16), _i((4, 3), "int32"), 1, True),
    (_x((4, 5), "float64"), _i((4, 3)), 1, False),
    (_x((4, 5), "int32"), _i((4, 3)), 1, False),
    (_x((4, 5)), _i((4, 3), "int16"), 1, False),
])
def test_gather_takes_the_kernel_only_in_the_common_case(x, index, dim, fast):
    assert gather_is_fast(x, index, dim) is fast


@pytest.mark.parametrize("x, index, src, dim, fast", [
    (_x((4, 5)), _i((4, 3)), _x((4, 3)), 1, True),
    (_x((4, 5)), _i((4, 3), "int32"), _x((4, 3)), 1, True),
    (_x((4, 5)), _i((4, 3)), _x((4, 3)), 0, False),  # not the last dim
    (_x((2, 3, 5)), _i((2, 3, 2)), _x((2, 3, 2)), 2, True),
    (_x((5,)), _i((3,)), _x((3,)), 0, True),
    (_x(()), _i(()), _x(()), 0, True),
    (_x(()), _i(()), _x((1,)), 0, True),  # 0-d index and src: both one element
    (_x((4, 5)), _i((4, 3)), _x((4, 4)), 1, False),  # src larger than the index
    (_x((4, 5)), _i((2, 3)), _x((2, 3)), 1, False),  # rows do not line up
    (_x((4, 5)), _i((4, 0)), _x((4, 0)), 1, True),
    (_x((4, 0)), _i((4, 0)), _x((4, 0)), 1, False),
    (_x((5, 4)).T, _i((4, 3)), _x((4, 3)), 1, True),  # x is copied, whatever its strides
    (_x((4, 5)), _i((4, 3)), _x((3, 4)).T, 1, False),  # src not C-contiguous
    (_x((4, 5)), _i((3, 4)).T, _x((4, 3)), 1, False),  # index not C-contiguous
    (_x((4, 5), "float16"), _i((4, 3)), _x((4, 3), "float16"), 1, False),  # atomics: float32
    (_x((4, 5), ml_dtypes.bfloat16), _i((4, 3)), _x((4, 3), ml_dtypes.bfloat16), 1, False),
    (_x((4, 5), "float64"), _i((4, 3)), _x((4, 3), "float64"), 1, False),
    (_x((4, 5)), _i((4, 3), "int16"), _x((4, 3)), 1, False),
])
def test_scatter_add_takes_the_kernel_only_in_the_common_case(x, index, src, dim, fast):
    assert scatter_add_is_fast(x, index, src, dim) is fast


# ----- on a GPU ------------------------------------------------------------------------------

_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _values(shape, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(_DTYPES[dtype])


def _picks(shape, size, dtype, seed=1):
    return np.random.default_rng(seed).integers(0, size, shape).astype(dtype)


def _grid(index, dim):
    grid = list(np.indices(index.shape, sparse=True))
    grid[dim] = index
    return tuple(grid)


def _gather_ref(x, dim, index):
    return x.reshape(x.shape or (1,))[_grid(index.reshape(index.shape or (1,)), dim)]


def _scatter_add_ref(x, dim, index, src):
    out = x.astype(np.float64).reshape(x.shape or (1,))
    index = index.reshape(index.shape or (1,))
    part = src.reshape(src.shape or (1,))[tuple(slice(0, n) for n in index.shape)]
    np.add.at(out, _grid(index, dim), part)
    return out.reshape(x.shape)


# (x's shape, dim as the caller spells it, index's shape); the last dim unless said.
SHAPES = [
    ((4, 5), 1, (4, 3)),
    ((4, 5), -1, (4, 8)),  # more picks than columns: duplicates
    ((7,), 0, (12,)),
    ((2, 3, 5), 2, (2, 3, 4)),
    ((2, 3, 5), -1, (2, 3, 1)),
    ((4, 5), 1, (4, 0)),  # an empty index
    ((4, 5), 0, (3, 5)),  # the fallback: not the last dim
    ((4, 5), 1, (2, 3)),  # the fallback: index rows do not line up
    ((2, 3, 5), 1, (2, 2, 5)),
]


@needs_gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("index_dtype", ["int64", "int32"])
@pytest.mark.parametrize("x_shape, dim, index_shape", SHAPES)
def test_cuda_gather_matches_numpy(cuda, dtype, index_dtype, x_shape, dim, index_shape):
    x = _values(x_shape, dtype)
    index = _picks(index_shape, x_shape[dim], index_dtype)
    got = em.from_numpy(x, device=cuda).gather(dim, em.from_numpy(index, device=cuda)).numpy()
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got.view(np.uint8), _gather_ref(x, dim, index).view(np.uint8))


@needs_gpu
@pytest.mark.parametrize("index_dtype", ["int64", "int32"])
@pytest.mark.parametrize("x_shape, dim, index_shape", SHAPES)
def test_cuda_scatter_add_matches_numpy(cuda, index_dtype, x_shape, dim, index_shape):
    x = _values(x_shape, "float32")
    index = _picks(index_shape, x_shape[dim], index_dtype)
    src = _values(index_shape, "float32", seed=2)
    tx = em.from_numpy(x, device=cuda)
    got = tx.scatter_add(dim, em.from_numpy(index, device=cuda), em.from_numpy(src, device=cuda))
    np.testing.assert_allclose(got.numpy(), _scatter_add_ref(x, dim, index, src), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_array_equal(tx.numpy(), x)  # the op never writes x


@needs_gpu
def test_cuda_0d_gather_and_scatter_add(cuda):
    x = em.from_numpy(np.array(2.5, np.float32), device=cuda)
    index = em.from_numpy(np.array(0, np.int64), device=cuda)
    assert x.gather(0, index).numpy().tolist() == 2.5
    picks = em.from_numpy(np.zeros(3, np.int64), device=cuda)
    assert x.gather(0, picks).numpy().tolist() == [2.5, 2.5, 2.5]
    src = em.from_numpy(np.array(1.5, np.float32), device=cuda)
    assert x.scatter_add(0, index, src).numpy().tolist() == 4.0


@needs_gpu
def test_cuda_scatter_add_accumulates_every_duplicate(cuda):
    x = np.zeros((3, 4), np.float32)
    index = np.full((3, 1000), 2, np.int64)
    index[1] = 0
    src = np.ones((3, 1000), np.float32)
    got = em.from_numpy(x, device=cuda).scatter_add(
        1, em.from_numpy(index, device=cuda), em.from_numpy(src, device=cuda)).numpy()
    np.testing.assert_array_equal(got, [[0, 0, 1000, 0], [1000, 0, 0, 0], [0, 0, 1000, 0]])


@needs_gpu
def test_cuda_strided_inputs_match_numpy(cuda):
    x = _values((5, 4), "float32")
    index = _picks((4, 3), 5, "int64")
    src = _values((4, 3), "float32", seed=3)
    tx = em.from_numpy(x, device=cuda).T  # gather falls back; scatter_add copies it
    ti = em.from_numpy(index, device=cuda)
    np.testing.assert_array_equal(tx.gather(1, ti).numpy(), _gather_ref(x.T, 1, index))
    got = tx.scatter_add(1, ti, em.from_numpy(src, device=cuda)).numpy()
    np.testing.assert_allclose(got, _scatter_add_ref(x.T, 1, index, src), rtol=1e-5, atol=1e-5)


def _cross_entropy_ref(logits, target):
    """Mean cross entropy of float64 logits (N, C) and its gradient."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    rows = np.arange(len(target))
    grad = np.exp(log_p)
    grad[rows, target] -= 1.0
    return -log_p[rows, target].mean(), grad / len(target)


@needs_gpu
@pytest.mark.parametrize("index_dtype", ["int64", "int32"])
def test_cuda_cross_entropy_step_matches_float64(cuda, index_dtype):
    logits = _values((64, 10), "float32")
    target = _picks((64,), 10, index_dtype)
    x = em.from_numpy(logits, device=cuda.autodiff()).require_grad()
    loss = em.nn.functional.cross_entropy(x, em.from_numpy(target, device=cuda))
    grads = loss.backward()
    want_loss, want_grad = _cross_entropy_ref(logits.astype(np.float64), target)
    assert loss.item() == pytest.approx(want_loss, rel=1e-5)
    np.testing.assert_allclose(x.grad(grads).numpy(), want_grad, rtol=1e-4, atol=1e-7)


@needs_gpu
def test_cuda_cross_entropy_over_a_class_dim_not_last_matches_float64(cuda):
    logits = _values((8, 5, 3), "float32")  # classes in dim 1: the fallback kernels
    target = _picks((8, 3), 5, "int64")
    x = em.from_numpy(logits, device=cuda.autodiff()).require_grad()
    loss = em.nn.functional.cross_entropy(x, em.from_numpy(target, device=cuda))
    grads = loss.backward()
    flat = logits.astype(np.float64).transpose(0, 2, 1).reshape(-1, 5)
    want_loss, want_grad = _cross_entropy_ref(flat, target.reshape(-1))
    assert loss.item() == pytest.approx(want_loss, rel=1e-5)
    np.testing.assert_allclose(x.grad(grads).numpy(),
                               want_grad.reshape(8, 3, 5).transpose(0, 2, 1), rtol=1e-4,
                               atol=1e-7)


@needs_gpu
@pytest.mark.parametrize("index_dtype", [em.int64, em.int32])
def test_cuda_bad_index_fails_at_the_read_naming_the_op(cuda, index_dtype):
    x = em.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4), device=cuda)
    bad = em.tensor([[1], [4], [0]], dtype=index_dtype, device=cuda)
    with pytest.raises(em.KernelError, match="gather: index 4 is out of range for dim 1 of "
                                             "size 4"):
        x.gather(1, bad).numpy()
    negative = em.tensor([[1], [-1], [0]], dtype=index_dtype, device=cuda)
    ones = em.ones((3, 1), device=cuda)
    with pytest.raises(em.KernelError, match="scatter_add: index -1 is out of range for dim 1 "
                                             "of size 4"):
        x.scatter_add(1, negative, ones).numpy()
    np.testing.assert_array_equal(x.numpy(), np.arange(12).reshape(3, 4))
    good = em.tensor([[3], [0], [2]], dtype=index_dtype, device=cuda)
    assert x.gather(1, good).numpy().ravel().tolist() == [3.0, 4.0, 10.0]
