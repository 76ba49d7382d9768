"""How gemm.py hands a product to cuBLAS, checked on the CPU: ``layout``'s (op, ld,
batch stride) for each operand, read back the way column-major cuBLAS reads memory,
must give NumPy's product."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

from ember.kernels.cupy import gemm


def _column_major(x: np.ndarray, how: tuple[int, int, int], rows: int, cols: int,
                  count: int) -> np.ndarray:
    """op(M) of the stored matrix at ``x``'s data as cuBLAS sees it: (count, rows, cols)."""
    op, ld, stride = how
    item = x.itemsize
    # op N: M[i, j] at i + j·ld; op T: op(M)[i, j] = M[j, i] at j + i·ld.
    strides = (item, ld * item) if op == 0 else (ld * item, item)
    return as_strided(x, (count, rows, cols), (stride * item, *strides), writeable=False)


def _through_layout(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    count = int(np.prod(batch, dtype=int))
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    how_a, how_b = gemm.layout(batch, a.shape, tuple(s // a.itemsize for s in a.strides),
                               b.shape, tuple(s // b.itemsize for s in b.strides))
    if how_a is None or how_b is None:
        return None
    # Column-major Cᵀ (n × m) = op(B') op(A'), B' being b's memory and A' a's.
    first = _column_major(b, how_b, n, k, count)
    second = _column_major(a, how_a, k, m, count)
    return np.matmul(first, second).transpose(0, 2, 1).reshape(batch + (m, n))


rng = np.random.default_rng(0)


def _r(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


CASES = {
    "row-major": (_r(5, 7), _r(7, 3)),
    "weight transposed": (_r(6, 8), _r(4, 8).T),
    "lhs transposed": (_r(8, 6).T, _r(8, 5)),
    "batched, keys transposed": (_r(2, 3, 5, 4), _r(2, 3, 6, 4).swapaxes(-1, -2)),
    "batch broadcast (missing dims)": (_r(4, 5, 6), _r(6, 2)),
    "batch expanded (stride 0)": (np.broadcast_to(_r(1, 5, 6), (3, 5, 6)), _r(3, 6, 2)),
    "sliced rows (ld > cols)": (_r(5, 10)[:, :4], _r(4, 3)),
    "one row": (_r(1, 6), _r(6, 3)),
    "one column out": (_r(4, 6), _r(6, 1)),
    "permuted batch dims": (_r(3, 2, 4, 5).swapaxes(0, 1), _r(2, 3, 5, 2)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_layout_reads_operands_as_their_product(name: str) -> None:
    a, b = CASES[name]
    got = _through_layout(a, b)
    if got is None:  # gemm.py copies such an operand first; the copy must then be readable
        a, b = (np.ascontiguousarray(x) for x in (a, b))
        got = _through_layout(a, b)
    np.testing.assert_allclose(got, np.matmul(a, b), rtol=1e-5, atol=1e-5)


def test_operands_without_one_batch_stride_are_copied() -> None:
    a = _r(3, 2, 4, 5).swapaxes(0, 1)  # batch strides (20, 40): no single stride
    how_a, how_b = gemm.layout((2, 3), a.shape, tuple(s // 4 for s in a.strides),
                               (2, 3, 5, 2), (30, 10, 2, 1))
    assert how_a is None and how_b == (0, 2, 10)
    partly_broadcast = (1, 3, 5, 2), (0, 10, 2, 1)  # broadcast in dim 0, not in dim 1
    assert gemm.layout((2, 3), (2, 3, 4, 5), (60, 20, 5, 1), *partly_broadcast)[1] is None


def test_layout_of_plain_and_transposed_operands() -> None:
    # (2, 3) row-major: op N, ld 3; its transpose view (3, 2) with strides (1, 3): op T, ld 3.
    assert gemm.layout((), (2, 3), (3, 1), (3, 2), (1, 3)) == ((0, 3, 0), (1, 3, 0))


def test_compute_types() -> None:
    assert gemm.compute_type("float32", False) == 68  # CUBLAS_COMPUTE_32F
    assert gemm.compute_type("float32", True) == 77  # 32F_FAST_TF32
    assert gemm.compute_type("bfloat16", True) == 68  # TF32 is float32's alone
    assert gemm.compute_type("float64", True) == 70


@pytest.mark.parametrize("precision", ["highest", "high", "medium"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
def test_only_large_float32_products_at_high_precision_are_split(precision, dtype):
    square = np.empty((1024, 1024), np.float32)  # 2^30 multiply-adds: the smallest split
    plan = gemm._Plan(square, square.T, dtype, precision)
    assert plan.split == (dtype == "float32" and precision == "high")
    if dtype == "float32":  # the split's parts multiply in TF32
        assert plan.compute == (68 if precision == "highest" else 77)
    small = gemm._Plan(_r(1023, 1024), square, dtype, precision)
    assert not small.split
    if dtype == "float32":  # what is not split multiplies in float32 at "high"
        assert small.compute == (77 if precision == "medium" else 68)
    # A vector product is never split (cuBLAS multiplies vectors without tensor cores).
    row, column = (np.broadcast_to(np.float32(0), shape) for shape in ((1, 1 << 30),
                                                                        (1 << 30, 1)))
    assert not gemm._Plan(row, column, dtype, precision).split


def _through_plan(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The product as a cached ``_Plan`` hands it to cuBLAS (copies made as it says)."""
    plan = gemm._Plan(a, b, "float32", "highest")
    def copied(x, how):  # gemm._copied with NumPy
        x = np.broadcast_to(x, plan.batch + x.shape[-2:])
        if how == gemm._COPY_COLUMNS:
            return np.ascontiguousarray(x.swapaxes(-1, -2)).swapaxes(-1, -2)
        return np.ascontiguousarray(x)

    if plan.copy_a:
        a = copied(a, plan.copy_a)
    if plan.copy_b:
        b = copied(b, plan.copy_b)
    first = _column_major(b, (plan.op_b, plan.ldb, plan.stride_b), plan.n, plan.k, plan.count)
    second = _column_major(a, (plan.op_a, plan.lda, plan.stride_a), plan.k, plan.m, plan.count)
    out = np.matmul(first, second).transpose(0, 2, 1)
    return out.reshape(plan.out_shape)


@pytest.mark.parametrize("case", ["plain", "weight_t", "batched", "broadcast", "strided"])
def test_a_plan_gives_numpys_product_and_copies_only_what_cublas_cannot_read(case):
    a = rng.standard_normal((3, 5, 4)).astype(np.float32)
    b = rng.standard_normal((3, 4, 6)).astype(np.float32)
    if case == "plain":
        a, b = a[0], b[0]
    elif case == "weight_t":
        a, b = a[0], np.ascontiguousarray(b[0].T).T  # a weight's .T view
    elif case == "broadcast":
        b = b[0]
    elif case == "strided":
        a = np.repeat(a, 2, axis=2)[..., ::2]  # every other column: no layout cuBLAS reads
    plan = gemm._Plan(a, b, "float32", "highest")
    assert bool(plan.copy_a) == (case == "strided") and not plan.copy_b
    assert plan.count == (1 if case in ("plain", "weight_t") else 3)
    np.testing.assert_allclose(_through_plan(a, b), np.matmul(a, b), rtol=1e-5, atol=1e-6)


def test_head_views_are_copied_in_their_own_memory_order():
    # q @ k.T of attention heads cut from one (2, 5, 3·(3·4)) projection: (batch, heads)
    # have no single stride, so both are copied; the key, read transposed, in column order.
    qkv = rng.standard_normal((2, 5, 36)).astype(np.float32)
    q, k, _ = (t.reshape(2, 5, 3, 4).transpose(0, 2, 1, 3) for t in np.split(qkv, 3, -1))
    plan = gemm._Plan(q, k.swapaxes(-1, -2), "float32", "highest")
    assert (plan.copy_a, plan.copy_b) == (gemm._COPY_ROWS, gemm._COPY_COLUMNS)
    assert plan.op_b == gemm._OP_T and plan.ldb == 4  # the (4, 5) key read as (5, 4)ᵀ
    np.testing.assert_allclose(_through_plan(q, k.swapaxes(-1, -2)), q @ k.swapaxes(-1, -2),
                               rtol=1e-5, atol=1e-6)
    plan = gemm._Plan(k.swapaxes(-1, -2).swapaxes(-1, -2), q.swapaxes(-1, -2), "float32",
                      "highest")
    assert (plan.copy_a, plan.copy_b) == (gemm._COPY_ROWS, gemm._COPY_COLUMNS)


def test_a_plan_of_nothing_to_multiply():
    plan = gemm._Plan(np.ones((2, 0), np.float32), np.ones((0, 3), np.float32), "float32",
                      "highest")
    assert plan.empty and plan.zero and plan.out_shape == (2, 3)
    plan = gemm._Plan(np.ones((0, 4), np.float32), np.ones((4, 3), np.float32), "float32",
                      "medium")
    assert plan.empty and not plan.zero
    assert plan.compute == gemm.compute_type("float32", True)
