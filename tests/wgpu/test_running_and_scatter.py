"""The WebGPU running ops (cumsum, cumprod, logcumsumexp, cummax, cummin) and scatter /
scatter_reduce against the CPU backend: every dtype the device holds, every dim (negative
too), empty, size-1 and 0-d tensors, strided inputs, ties, NaN, repeated indices, and
gradients through the backend-independent backward rules.

(Out-of-range indices: test_kernels_vs_cpu.py; lines long enough for the blocked scan:
test_runtime.py.)
"""

from __future__ import annotations

import numpy as np
import pytest

import ember as em

WGPU = em.available("wgpu")
pytestmark = pytest.mark.skipif(not WGPU, reason="no wgpu adapter")

RNG = np.random.default_rng(20261203)
SHAPES_AND_DIMS = [((7,), 0), ((3, 5), 1), ((3, 5), -2), ((2, 3, 4), -1), ((2, 3, 4), 1),
                   ((1, 5), 0), ((4, 1), 1), ((2, 0, 3), 1), ((2, 0, 3), 0), ((), 0), ((), -1)]


def _device_holds(dtype: str) -> None:
    if dtype == "float16" and not WGPU[0].actor.backend.rt.has_f16:
        pytest.skip("the adapter has no shader-f16")


def _values(shape: tuple[int, ...], dtype: str, low: int = -3, high: int = 4) -> np.ndarray:
    """Small integers (ties everywhere) as ``dtype``; floats get a fraction too."""
    ints = RNG.integers(low, high, shape)
    if dtype == "bool":
        return ints > 0
    if dtype in ("float32", "float16"):
        return (ints + RNG.integers(0, 4, shape) / 4).astype(dtype)
    return ints.astype(dtype)


def _both(fn, *arrays: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(wgpu, cpu) results of ``fn(device, *tensors)``, output by output."""
    results = []
    for device in (WGPU[0], em.cpu()):
        out = fn(device, *[em.tensor(a, device=device) for a in arrays])
        results.append([t.numpy() for t in (out if isinstance(out, tuple) else (out,))])
    return list(zip(*results))


def _assert_same(pairs, exact: bool, dtype: str = "float32") -> None:
    for got, want in pairs:
        assert got.dtype == want.dtype and got.shape == want.shape
        if exact:
            np.testing.assert_array_equal(got, want)
        else:
            rtol = 2e-3 if dtype == "float16" else 2e-6
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                       rtol=rtol, atol=rtol, equal_nan=True)


# ----- running ops --------------------------------------------------------------------------


@pytest.mark.parametrize("shape, dim", SHAPES_AND_DIMS, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int64", "bool"])
@pytest.mark.parametrize("op", ["cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"])
def test_running_ops_match_the_cpu(op: str, dtype: str, shape, dim: int) -> None:
    _device_holds(dtype)
    if op == "logcumsumexp" and dtype not in ("float32", "float16"):
        with pytest.raises(em.DTypeError, match="logcumsumexp: needs a floating-point"):
            em.tensor(_values(shape, dtype), device=WGPU[0]).logcumsumexp(dim)
        return
    x = _values(shape, dtype, -2, 3) if op == "cumprod" else _values(shape, dtype)
    pairs = _both(lambda d, t: getattr(t, op)(dim), x)
    # Integer results, and the extremes (which compute nothing), are exact.
    _assert_same(pairs, exact=op in ("cummax", "cummin") or dtype not in ("float32", "float16"),
                 dtype=dtype)


@pytest.mark.parametrize("op", ["cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"])
def test_running_ops_read_strided_views(op: str) -> None:
    x = _values((6, 5, 4), "float32")
    pairs = _both(lambda d, t: getattr(t.permute(2, 0, 1)[:, ::2, 1:], op)(1), x)
    _assert_same(pairs, exact=op in ("cummax", "cummin"))


@pytest.mark.parametrize("op", ["cummax", "cummin"])
def test_extremes_take_the_last_tie_and_let_nan_win(op: str) -> None:
    x = np.array([[1.0, 3.0, 3.0, 2.0, 3.0, -1.0, -1.0],
                  [2.0, np.nan, 5.0, np.nan, 0.0, 9.0, -9.0],
                  [-np.inf, -np.inf, np.inf, np.inf, 0.0, -0.0, np.nan]], np.float32)
    (values, want_values), (indices, want_indices) = _both(lambda d, t: getattr(t, op)(1), x)
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(indices, want_indices)
    if op == "cummax":  # PyTorch's answer, written out
        assert indices.tolist() == [[0, 1, 2, 2, 4, 4, 4], [0, 1, 1, 3, 3, 3, 3],
                                    [0, 1, 2, 3, 3, 3, 6]]


def test_logcumsumexp_is_stable_and_propagates_specials() -> None:
    x = np.array([[-1000.0, 0.0, -1e30, 50.0, 88.0, 89.0],
                  [np.inf, 1.0, np.inf, -np.inf, 0.0, 2.0],
                  [-np.inf, -np.inf, 3.0, np.nan, 1.0, 2.0]], np.float32)
    ((got, want),) = _both(lambda d, t: t.logcumsumexp(1), x)
    np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)
    with np.errstate(invalid="ignore"):  # inf - inf inside NumPy's logaddexp
        want64 = np.logaddexp.accumulate(x.astype(np.float64), 1)
    np.testing.assert_allclose(got, want64, rtol=1e-6)
    assert np.isfinite(got[0]).all() and got[0, -1] > 89.0  # exp(89) overflows f32


def test_cumprod_of_ints_wraps_at_32_bits_and_bools_count() -> None:
    x = np.array([[True, True, False, True]])
    pairs = _both(lambda d, t: t.cumprod(1), x)
    _assert_same(pairs, exact=True)
    assert pairs[0][0].dtype == np.int64 and pairs[0][0].tolist() == [[1, 1, 0, 0]]


# ----- scatter and scatter_reduce ----------------------------------------------------------

REDUCES = ["sum", "prod", "mean", "amax", "amin"]
# (input shape, index shape, src shape, dim): index smaller than src, dims negative too.
LAYOUTS = [((5,), (8,), (9,), 0), ((3, 5), (4, 5), (4, 6), 0), ((4, 3), (4, 5), (5, 6), 1),
           ((2, 3, 4), (2, 2, 4), (3, 2, 4), -2), ((2, 3, 4), (1, 3, 6), (2, 3, 7), -1),
           ((1, 1), (1, 1), (1, 1), 0), ((3, 4), (0, 4), (2, 4), 0), ((3, 4), (2, 0), (2, 2), 1),
           ((), (), (), 0), ((), (1,), (1,), -1)]


def _index(x_shape: tuple[int, ...], shape: tuple[int, ...], dim: int) -> np.ndarray:
    size = x_shape[dim] if x_shape else 1
    return RNG.integers(0, size, shape)


def _scatter_inputs(x_shape, index_shape, src_shape, dim, dtype):
    return _values(x_shape, dtype), _index(x_shape, index_shape, dim), _values(src_shape, dtype)


@pytest.mark.parametrize("x_shape, index_shape, src_shape, dim", LAYOUTS, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int64", "bool"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", REDUCES)
def test_scatter_reduce_matches_the_cpu(reduce, include_self, dtype, x_shape, index_shape,
                                        src_shape, dim) -> None:
    _device_holds(dtype)
    x, index, src = _scatter_inputs(x_shape, index_shape, src_shape, dim, dtype)
    if dtype == "bool" and reduce in ("sum", "prod", "mean"):
        return  # refused on the caller's line (tests/ops/test_moreops_errors.py)
    if reduce == "prod" and dtype in ("float32", "float16"):
        src = np.where(np.abs(src) > 2, src / 4, src).astype(dtype)  # keep float16 finite
    pairs = _both(lambda d, t, i, s: t.scatter_reduce(dim, i, s, reduce,
                                                      include_self=include_self),
                  x, index, src)
    # One invocation per line combines in index order, as the CPU's ufunc.at: bit for bit.
    _assert_same(pairs, exact=True)


@pytest.mark.parametrize("x_shape, index_shape, src_shape, dim", LAYOUTS, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int64", "bool"])
@pytest.mark.parametrize("by", ["bids", "lines"])
def test_scatter_matches_the_cpu_with_repeated_indices(by, dtype, x_shape, index_shape,
                                                       src_shape, dim, monkeypatch) -> None:
    """Either way ``scatter`` runs (few index lines bid by atomics, many walk their lines),
    the last write along dim wins, as on the CPU."""
    _device_holds(dtype)
    if by == "lines":
        from ember.kernels.wgpu import scatter

        monkeypatch.setattr(scatter, "_MANY_LINES", 0)
    x, index, src = _scatter_inputs(x_shape, index_shape, src_shape, dim, dtype)
    pairs = _both(lambda d, t, i, s: t.scatter(dim, i, s), x, index, src)
    _assert_same(pairs, exact=True)  # the last write of a repeated index wins on both
    pairs = _both(lambda d, t, i: t.scatter(dim, i, value=True if dtype == "bool" else 2),
                  x, index)
    _assert_same(pairs, exact=True)


@pytest.mark.parametrize("dim", [0, -1])
def test_scatter_with_many_lines_walks_them_as_the_cpu(dim: int) -> None:
    shape, index_shape = ((8, 1100), (6, 1100)) if dim == 0 else ((1100, 8), (1100, 6))
    x, src = _values(shape, "float32"), _values(index_shape, "float32")
    pairs = _both(lambda d, t, i, s: t.scatter(dim, i, s), x, _index(shape, index_shape, dim),
                  src)
    _assert_same(pairs, exact=True)


def test_scatter_keeps_the_last_write_and_reads_strided_operands() -> None:
    x = np.zeros((4, 3), np.float32)
    index = np.array([[1, 1, 0], [1, 3, 0], [2, 1, 0]])
    src = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
    got = em.tensor(x, device=WGPU[0]).scatter(0, em.tensor(index, device=WGPU[0]),
                                               em.tensor(src, device=WGPU[0]))
    assert got.numpy().tolist() == [[0, 0, 11], [5, 10, 0], [9, 0, 0], [0, 6, 0]]
    xt = _values((5, 4), "float32")
    srct = _values((8, 6), "float32")
    index = _index((4, 5), (3, 4), 0)
    pairs = _both(lambda d, t, i, s: t.T.scatter_reduce(0, i, s.T[1:, ::2], "amax"),
                  xt, index, srct)
    _assert_same(pairs, exact=True)


@pytest.mark.parametrize("reduce", ["amax", "amin", "sum", "prod", "mean"])
def test_scatter_reduce_propagates_nan_and_infinities(reduce: str) -> None:
    x = np.array([1.0, np.nan, 2.0, -np.inf, 5.0], np.float32)
    src = np.array([np.nan, 3.0, np.inf, 4.0, -1.0, 0.0], np.float32)
    index = np.array([0, 1, 2, 2, 3, 4])
    for include_self in (True, False):
        pairs = _both(lambda d, t, i, s, inc=include_self: t.scatter_reduce(
            0, i, s, reduce, include_self=inc), x, index, src)
        _assert_same(pairs, exact=True)


def test_scatter_reduce_with_one_long_line_is_deterministic_and_the_cpus() -> None:
    """A 1-D scatter is one line: every bin adds its many float sources in index order."""
    src = RNG.standard_normal(40_000).astype(np.float32)
    index = RNG.integers(0, 37, 40_000)
    x = RNG.standard_normal(37).astype(np.float32)
    for reduce in ("sum", "mean", "amax"):
        runs = [em.tensor(x, device=WGPU[0]).scatter_reduce(
            0, em.tensor(index, device=WGPU[0]), em.tensor(src, device=WGPU[0]),
            reduce).numpy() for _ in range(2)]
        want = em.tensor(x).scatter_reduce(0, em.tensor(index), em.tensor(src), reduce).numpy()
        np.testing.assert_array_equal(runs[0], runs[1])
        np.testing.assert_array_equal(runs[0], want)


def test_integer_mean_floors_and_counts_include_self() -> None:
    x = np.array([7, 7, 7, -7], np.int32)
    index = np.array([0, 0, 2, 3, 3])
    src = np.array([-3, 4, 5, 4, 2], np.int32)
    for include_self in (True, False):
        pairs = _both(lambda d, t, i, s, inc=include_self: t.scatter_reduce(
            0, i, s, "mean", include_self=inc), x, index, src)
        _assert_same(pairs, exact=True)
    assert pairs[0][0].tolist() == [0, 7, 5, 3]  # include_self=False: floor(1 / 2) = 0


# ----- gradients, through the backward rules, on wgpu against the CPU ----------------------


def _gradients(fn, arrays: list[np.ndarray], device: em.Device) -> list[np.ndarray]:
    tracked = [em.tensor(a, device=device.autodiff()).require_grad() for a in arrays]
    out = fn(device, *tracked)
    cotangent = np.random.default_rng(1).standard_normal(out.shape).astype(np.float32)
    grads = out.backward(em.tensor(cotangent, device=device.autodiff()))
    return [out.numpy()] + [t.grad(grads).numpy() for t in tracked]


def _index_on(device: em.Device, index: np.ndarray) -> em.Tensor:
    return em.tensor(index, device=device)


_SCATTER_INDEX = np.array([[1, 0, 1, 2], [1, 1, 0, 2]])
_WITH_ZEROS = np.array([[2.0, 0.0, 3.0, 0.5], [0.0, 0.0, 1.5, -1.0], [1.0, 2.0, -0.5, 0.0]],
                       np.float32)


@pytest.mark.parametrize("fn, arrays", [
    (lambda d, x: x.cumsum(-1), [_values((3, 5), "float32")]),
    (lambda d, x: x.cumprod(1), [_WITH_ZEROS]),
    (lambda d, x: x.cumprod(0), [_values((4, 3), "float32") + 0.5]),
    (lambda d, x: x.logcumsumexp(0), [_values((4, 3), "float32")]),
    (lambda d, x: x.cummax(1)[0], [_values((3, 6), "float32")]),
    (lambda d, x: x.cummin(-2)[0], [_values((5, 2), "float32")]),
    (lambda d, x, s: x.scatter(0, _index_on(d, np.array([[2, 0, 1, 1]])), s),
     [_values((3, 4), "float32"), _values((2, 4), "float32")]),
    *[(lambda d, x, s, r=r, inc=inc: x.scatter_reduce(0, _index_on(d, _SCATTER_INDEX), s, r,
                                                      include_self=inc),
       [_values((3, 4), "float32") + (1.0 if r == "prod" else 0.0),
        _values((2, 5), "float32") + (1.0 if r == "prod" else 0.0)])
      for r in REDUCES for inc in (True, False)],
], ids=["cumsum", "cumprod-zeros", "cumprod", "logcumsumexp", "cummax", "cummin", "scatter",
        *[f"scatter_reduce-{r}-{inc}" for r in REDUCES for inc in (True, False)]])
def test_gradients_match_the_cpu(fn, arrays) -> None:
    want = _gradients(fn, arrays, em.cpu())
    got = _gradients(fn, arrays, WGPU[0])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_forwards_match_torch() -> None:
    torch = pytest.importorskip("torch")
    x = np.array([[1.0, 3.0, 3.0, np.nan, 2.0, np.nan, 0.0, -0.0],
                  [0.0, -0.0, -1.0, -1.0, 4.0, 4.0, -np.inf, 5.0]], np.float32)
    t = em.tensor(x, device=WGPU[0])
    for op in ("cummax", "cummin"):
        values, indices = getattr(t, op)(1)
        want = getattr(torch.from_numpy(x), op)(1)
        np.testing.assert_array_equal(values.numpy(), want.values.numpy())
        np.testing.assert_array_equal(indices.numpy(), want.indices.numpy())
    finite = np.nan_to_num(x, nan=0.5, neginf=-3.0)
    for op in ("cumprod", "logcumsumexp", "cumsum"):
        np.testing.assert_allclose(getattr(em.tensor(finite, device=WGPU[0]), op)(1).numpy(),
                                   getattr(torch.from_numpy(finite), op)(1).numpy(), rtol=1e-6)
    base, src = _values((3, 5), "float32"), _values((4, 6), "float32")
    index = _index((3, 5), (4, 5), 0)
    for reduce in REDUCES:
        for include_self in (True, False):
            got = em.tensor(base, device=WGPU[0]).scatter_reduce(
                0, em.tensor(index, device=WGPU[0]), em.tensor(src, device=WGPU[0]), reduce,
                include_self=include_self).numpy()
            want = torch.from_numpy(base).scatter_reduce(
                0, torch.from_numpy(index), torch.from_numpy(src), reduce,
                include_self=include_self).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("reduce", ["amax", "amin"])
def test_extremes_by_atomics_are_order_free_to_the_bit(reduce: str) -> None:
    """amax / amin land in any order: NaN and signed zeros have rules of their own, so
    every run gives the same bits (+0 beats -0 in amax, -0 beats +0 in amin)."""
    src = np.where(RNG.random(200_000) < 0.5, 0.0, -0.0).astype(np.float32)
    src[RNG.integers(0, src.size, 50)] = np.nan
    index = RNG.integers(0, 40, src.size)
    index[np.isnan(src)] = RNG.integers(0, 20, int(np.isnan(src).sum()))  # bins 20.. no NaN
    x = np.zeros(40, np.float32)
    runs = [em.tensor(x, device=WGPU[0]).scatter_reduce(
        0, em.tensor(index, device=WGPU[0]), em.tensor(src, device=WGPU[0]), reduce,
        include_self=False).numpy() for _ in range(3)]
    assert all(np.array_equal(r.view(np.uint32), runs[0].view(np.uint32)) for r in runs)
    want = em.tensor(x).scatter_reduce(0, em.tensor(index), em.tensor(src), reduce,
                                       include_self=False).numpy()
    np.testing.assert_array_equal(runs[0], want)
    has_nan = np.zeros(40, bool)
    has_nan[index[np.isnan(src)]] = True
    assert np.isnan(runs[0][has_nan]).all() and not np.isnan(runs[0][~has_nan]).any()
    assert (np.signbit(runs[0][20:]) == (reduce == "amin")).all()
