"""Float32 matmul precisions on CUDA (gemm.py, tf32_split.py).

On the CPU: the split kernel compiles for Hopper (nvcc), and an operand's memory span,
written with its gaps, reads back through the operand's own strides. On a GPU: the split
parts bit for bit against a NumPy model, each precision's error against float64 for every
layout gemm.py hands to cuBLAS, the precision a matmul was issued at, gradients, and a
graphed step's replay."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import ember as em
from ember.kernels.cupy import tf32_split
from tests.cuda.gpu import needs_gpu, needs_nvcc, ptx_of

rng = np.random.default_rng(7)


def _r(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


@pytest.fixture
def restore_precision() -> Iterator[None]:
    before = em.get_float32_matmul_precision()
    yield
    em.set_float32_matmul_precision(before)


@needs_nvcc
def test_split_source_compiles_to_ptx_for_hopper(tmp_path):
    ptx = ptx_of(tmp_path, tf32_split.SOURCE, "split_tf32", "split_tf32_x4")
    assert "ld.global.v4.f32" in ptx  # the float4 kernel's vector loads


VIEWS = {
    "row-major": lambda: _r(5, 7),
    "transposed": lambda: _r(4, 8).T,
    "sliced rows (gaps)": lambda: _r(5, 10)[:, 2:6],
    "batched, transposed": lambda: _r(2, 3, 6, 4).swapaxes(-1, -2),
    "batch expanded (stride 0)": lambda: np.broadcast_to(_r(1, 5, 6), (3, 5, 6)),
    "one element": lambda: _r(1, 1),
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_a_span_written_with_its_gaps_reads_back_through_the_operands_strides(name):
    x = VIEWS[name]()
    length = tf32_split.span(x.shape, tuple(s // x.itemsize for s in x.strides))
    memory = as_strided(x, (length,), (x.itemsize,)).copy()  # from x's first element on
    np.testing.assert_array_equal(as_strided(memory, x.shape, x.strides), x)


def _split_model(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """NumPy's statement of tf32_split's rule (its module docstring), with CuPy's
    flush-to-zero of float32 subnormals in ``x - hi``."""

    def round_tf32(v):
        bits = v.view(np.uint32).astype(np.uint64)
        rounded = ((bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000).astype(np.uint32)
        overflow = (rounded & 0x7F800000) == 0x7F800000
        return np.where(overflow, v.view(np.uint32) & 0xFFFFE000, rounded).view(np.float32)

    def flush(v):
        return np.where(np.abs(v) < np.finfo(np.float32).tiny, np.copysign(0, v), v)

    finite = np.isfinite(x)
    safe = np.where(finite, x, 0).astype(np.float32)
    hi = np.where(finite, round_tf32(safe), np.where(np.isnan(x), np.float32(np.nan), x))
    with np.errstate(invalid="ignore", over="ignore"):
        residual = flush(flush(safe) - flush(np.where(finite, hi, 0))).astype(np.float32)
    lo = np.where(finite, round_tf32(residual), 0)
    return hi.astype(np.float32), lo.astype(np.float32)


EDGES = np.array([0.0, -0.0, 1.0, -2.5, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -11 + 2 ** -20,
                  1 - 2 ** -24, 3.4028235e38, -3.4028235e38, 1e-45, 1.1754942e-38, 2e-38,
                  6.1e-5, np.inf, -np.inf, np.nan], np.float32)


@needs_gpu
def test_split_parts_match_the_model_bit_for_bit_and_sum_to_the_operand():
    import cupy

    nan_low_payload = np.array([0x7F800001], np.uint32).view(np.float32)
    values = np.concatenate([EDGES, nan_low_payload, _r(4096)])
    matrix = _r(64, 48)
    with cupy.cuda.Device(0):
        # The second operand a transposed view with gaps (every other row of its memory).
        b = cupy.asarray(np.repeat(matrix, 2, axis=0))[::2].T
        parts, pointers = tf32_split.split(cupy.asarray(values), b)
        got = parts.get()
    assert [p - pointers[0] for p in pointers] == [0, 4 * len(values), 8 * len(values),
                                                   8 * len(values) + 4 * 127 * 48]
    got_hi, got_lo = got[:len(values)], got[len(values):2 * len(values)]
    want_hi, want_lo = _split_model(values)
    np.testing.assert_array_equal(got_hi.view(np.uint32), want_hi.view(np.uint32))
    np.testing.assert_array_equal(got_lo.view(np.uint32), want_lo.view(np.uint32))
    # b's parts, read through b's own strides, are the model's parts of the matrix's .T.
    b_parts = got[2 * len(values):]
    length = 127 * 48
    for part, want in zip((b_parts[:length], b_parts[length:]), _split_model(matrix.T.copy())):
        np.testing.assert_array_equal(as_strided(part, (48, 64), (4, 8 * 48)), want)
    assert not (got.view(np.uint32) & 0x1FFF).any()
    # Whole float4s at 16-byte addresses take the vector kernel: the same bits.
    aligned = values[:4096]
    with cupy.cuda.Device(0):
        operand = cupy.asarray(aligned)
        parts, _ = tf32_split.split(operand, operand[:2048])
        vector_parts = parts.get()
    for got_part, want in zip((vector_parts[:4096], vector_parts[4096:8192]),
                              _split_model(aligned)):
        np.testing.assert_array_equal(got_part.view(np.uint32), want.view(np.uint32))
    np.testing.assert_array_equal(vector_parts[8192:], np.concatenate(
        [part[:2048] for part in _split_model(aligned)]))
    finite = np.isfinite(values)
    residual = np.abs(values[finite].astype(np.float64) - got_hi[finite] - got_lo[finite])
    assert (residual <= 2.0 ** -23 * np.abs(values[finite]) + 2.0 ** -126).all()
    assert np.isnan(got_hi[np.isnan(values)]).all()


# At least 2^30 multiply-adds each, so that "high" splits (gemm.SPLIT_FROM_MACS), but the
# vectors (never split) and the small product (in float32 below the threshold).
CASES = {
    "square": lambda: (_r(1024, 1024), _r(1024, 1024)),
    "weight transposed": lambda: (_r(1024, 1024), _r(1024, 1024).T),
    "lhs transposed": lambda: (_r(1024, 1024).T, _r(1024, 1024)),
    "batched, keys transposed": lambda: (_r(2, 4, 512, 512),
                                         _r(2, 4, 512, 512).swapaxes(-1, -2)),
    "batch broadcast": lambda: (_r(4, 512, 1024), _r(1024, 512)),
    "batch expanded (stride 0)": lambda: (np.broadcast_to(_r(1, 512, 1024), (4, 512, 1024)),
                                          _r(4, 1024, 512)),
    "sliced rows": lambda: (_r(1024, 1536)[:, 256:1280], _r(1024, 1024)),
    "every other column (copied)": lambda: (_r(1024, 2048)[:, ::2], _r(1024, 1024)),
    "vector @ matrix": lambda: (_r(512), _r(512, 64)),
    "matrix @ vector": lambda: (_r(64, 512), _r(512)),
    "small (float32 at high)": lambda: (_r(64, 96), _r(96, 40)),
}


def _relative_error(got: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """Max |error| over the product of magnitudes (the scale float32 rounding has)."""
    exact = np.matmul(a.astype(np.float64), b.astype(np.float64))
    scale = np.matmul(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))
    return float((np.abs(got - exact) / np.maximum(scale, 1e-30)).max())


@needs_gpu
@pytest.mark.parametrize("case", list(CASES))
def test_each_precision_errs_within_its_bound_for_every_layout(restore_precision, case):
    a_np, b_np = CASES[case]()
    device = em.cuda(0)
    a, b = em.from_numpy(np.ascontiguousarray(a_np), device=device), em.from_numpy(
        np.ascontiguousarray(b_np), device=device)
    if case == "weight transposed":  # the view itself, as Linear hands it over
        b = em.from_numpy(np.ascontiguousarray(b_np.T), device=device).T
    errors = {}
    for name in ("highest", "high", "medium"):
        em.set_float32_matmul_precision(name)
        got = (a @ b).numpy()
        assert got.shape == np.matmul(a_np, b_np).shape and got.dtype == np.float32
        errors[name] = _relative_error(got, a_np, b_np)
    # Measured on an H200 at K = 4096: 4e-7, 1.6e-6 and 4.4e-5
    # (benchmarks/probes/probe_precision.py).
    assert errors["highest"] < 2e-6
    assert errors["high"] < 1e-5
    assert errors["medium"] < 1e-3
    if "vector" in case or "small" in case:  # float32 products at "high"
        assert errors["high"] < 2e-6
    if "vector" not in case:  # cuBLAS multiplies a vector in float32 (no tensor cores)
        assert errors["high"] * 5 < errors["medium"]


@needs_gpu
def test_the_precision_a_matmul_was_issued_at_holds_when_it_runs(restore_precision):
    device = em.cuda(0)
    a_np, b_np = _r(128, 256), _r(256, 64)
    a, b = em.from_numpy(a_np, device=device), em.from_numpy(b_np, device=device)
    em.set_float32_matmul_precision("medium")
    coarse = a @ b
    em.set_float32_matmul_precision("highest")
    fine = a @ b  # both issued before either runs
    assert _relative_error(fine.numpy(), a_np, b_np) < 2e-6
    assert _relative_error(coarse.numpy(), a_np, b_np) > 1e-5


@needs_gpu
def test_operands_exact_in_tf32_multiply_exactly_at_high(restore_precision):
    device = em.cuda(0)
    a_np = rng.integers(-8, 8, (1024, 1024)).astype(np.float32)
    b_np = rng.integers(-8, 8, (1024, 1024)).astype(np.float32)
    em.set_float32_matmul_precision("high")
    got = (em.from_numpy(a_np, device=device) @ em.from_numpy(b_np, device=device)).numpy()
    np.testing.assert_array_equal(got, a_np @ b_np)


@needs_gpu
@pytest.mark.parametrize("dtype", [em.float16, em.bfloat16, em.float64])
def test_other_dtypes_give_the_same_bits_at_every_precision(restore_precision, dtype):
    device = em.cuda(0)
    a = em.from_numpy(_r(64, 256), device=device).to(dtype)
    b = em.from_numpy(_r(256, 32), device=device).to(dtype)
    results = []
    for name in ("highest", "high", "medium"):
        em.set_float32_matmul_precision(name)
        results.append((a @ b).to(em.float64).numpy())
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], results[2])


@needs_gpu
def test_gradients_at_high_precision_match_float64(restore_precision):
    # tanh, not relu: a relu's mask flips where a product's rounding crosses zero.
    device = em.cuda(0).autodiff()
    x_np, w_np, v_np = _r(1024, 1024), _r(1024, 1024) * 0.03, _r(1024, 10) * 0.03
    em.set_float32_matmul_precision("high")
    x = em.from_numpy(x_np, device=device)
    w = em.from_numpy(w_np, device=device).require_grad()
    v = em.from_numpy(v_np, device=device).require_grad()
    out_em = (x @ w).tanh() @ v
    loss = (out_em * out_em).sum()
    grads = loss.backward()
    x64, w64, v64 = (t.astype(np.float64) for t in (x_np, w_np, v_np))
    hidden = np.tanh(x64 @ w64)
    out = hidden @ v64
    grad_v = hidden.T @ (2 * out)
    grad_w = x64.T @ ((2 * out @ v64.T) * (1 - hidden ** 2))
    np.testing.assert_allclose(loss.item(), (out ** 2).sum(), rtol=1e-4)
    for got, want in ((v.grad(grads), grad_v), (w.grad(grads), grad_w)):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@needs_gpu
def test_a_graphed_step_at_high_precision_replays_the_eager_bits(restore_precision):
    device = em.cuda(0)
    em.set_float32_matmul_precision("high")
    w = em.from_numpy(_r(1024, 1024), device=device)

    def step(x):
        return (x @ w).relu() @ w.T

    graphed = em.graphed(step, device)
    inputs = [em.from_numpy(_r(1024, 1024), device=device) for _ in range(4)]
    eager = [step(x).numpy() for x in inputs]
    before = graphed.graph_stats()["replays"]  # the device's count: its tests share it
    replayed = [graphed(x).numpy() for x in inputs]
    assert graphed.graph_stats()["replays"] - before == 2  # run, capture, then replays
    for want, got in zip(eager, replayed):
        np.testing.assert_array_equal(got, want)
