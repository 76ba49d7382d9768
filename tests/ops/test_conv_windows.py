"""The compiled window loops (``ember/kernels/numpy/windows.py``) against NumPy and PyTorch.

im2col is checked entry for entry against the strided-view columns the NumPy path
builds, col2im as its exact transpose (⟨im2col x, y⟩ = ⟨x, col2im y⟩ in float64),
the max pool's values, indices and gradient against torch's CPU kernels (ties, NaN,
-inf, ceil_mode, padding, dilation); then the ops through a device, with the C path
and the NumPy path (``EMBER_CPU_COMPILE=0``) against torch and each other.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.kernels.numpy import conv, windows
from ember.nn import functional as F

torch = pytest.importorskip("torch")

if not windows.run_max_pool(np.zeros((1, 1, 2, 2), np.float32),
                            np.zeros((1, 1, 1, 1), np.float32), None, (2, 2), (2, 2), (0, 0),
                            (1, 1)):
    pytest.skip("no C compiler: the window loops do not compile here", allow_module_level=True)

# (batch, channels, H, W, kernel, stride, padding, dilation)
GEOMETRIES = [
    (2, 3, 7, 9, (3, 2), (1, 2), (1, 0), (1, 2)),
    (3, 4, 10, 10, (3, 3), (2, 2), (1, 1), (1, 1)),
    (1, 2, 5, 6, (2, 3), (3, 1), (0, 2), (2, 1)),
    (1, 1, 1, 8, (1, 3), (1, 1), (0, 1), (1, 1)),       # a 1-D problem as height 1
    (2, 5, 4, 3, (4, 3), (1, 1), (0, 0), (1, 1)),       # the kernel covers the input
    (0, 3, 6, 6, (3, 3), (1, 1), (1, 1), (1, 1)),       # empty batch
]


def _out(size: int, k: int, s: int, p: int, d: int) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batch_major", [True, False])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_im2col_matches_the_strided_view_and_col2im_is_its_transpose(geometry, batch_major,
                                                                       dtype) -> None:
    n, c, h, w, k, s, p, d = geometry
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    out = tuple(_out(*a) for a in zip((h, w), k, s, p, d))
    want = conv._columns(conv._pad(x, tuple((q, q) for q in p)), out, k, s, d, 1, batch_major)
    cols = np.full(want.shape, np.nan, dtype)  # every entry must be written
    assert windows.run_im2col(x, cols, out, k, s, p, d, batch_major)
    np.testing.assert_array_equal(cols, want)

    y = rng.standard_normal(want.shape)
    back = np.full(x.shape, np.nan)
    assert windows.run_col2im(y, back, out, k, s, p, d, batch_major)
    lhs, rhs = float((want.astype(np.float64) * y).sum()), float((x * back).sum())
    assert lhs == pytest.approx(rhs, rel=1e-12, abs=1e-12)


def test_col2im_sums_overlapping_windows() -> None:
    """All-ones columns of 3×3 windows, stride 1, padding 1: each cell counts its windows."""
    cols = np.ones((1, 9, 16), np.float32)
    back = np.empty((1, 1, 4, 4), np.float32)
    assert windows.run_col2im(cols, back, (4, 4), (3, 3), (1, 1), (1, 1), (1, 1), True)
    edge = np.array([2, 3, 3, 2], np.float32)
    np.testing.assert_array_equal(back[0, 0], edge[:, None] * edge[None, :])


def _pool_cases():
    # (shape, kernel, stride, padding, dilation, ceil_mode)
    return [
        ((2, 3, 8, 8), (2, 2), (2, 2), (0, 0), (1, 1), False),
        ((2, 3, 7, 9), (3, 3), (2, 2), (1, 1), (1, 1), True),
        ((1, 2, 9, 7), (3, 2), (1, 2), (1, 1), (2, 1), False),
        ((1, 1, 5, 11), (2, 3), (3, 2), (1, 0), (1, 2), True),
        ((3, 2, 6, 6), (3, 3), (1, 1), (1, 1), (1, 1), False),  # overlapping windows
        ((0, 2, 6, 6), (2, 2), (2, 2), (0, 0), (1, 1), False),  # empty batch
    ]


def _ties_and_specials(shape, dtype, rng) -> np.ndarray:
    """Few distinct values (many ties), and for floats some NaN and -inf cells."""
    x = rng.integers(-3, 3, shape).astype(dtype)
    if np.dtype(dtype).kind == "f" and x.size:
        flat = x.reshape(-1)
        flat[rng.choice(flat.size, max(1, flat.size // 20), replace=False)] = np.nan
        flat[rng.choice(flat.size, max(1, flat.size // 20), replace=False)] = -np.inf
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("case", _pool_cases())
def test_max_pool_values_and_indices_match_torch(case, dtype) -> None:
    shape, k, s, p, d, ceil_mode = case
    x = _ties_and_specials(shape, dtype, np.random.default_rng(1))
    # torch's CPU max pool takes no integer input: its choice on the same values in float64.
    values, indices = torch.nn.functional.max_pool2d(
        torch.from_numpy(x.astype(np.float64)), k, s, p, d, ceil_mode=ceil_mode,
        return_indices=True)
    got_values = np.empty(values.shape, dtype)
    got_indices = np.empty(values.shape, np.int64)
    assert windows.run_max_pool(x, got_values, got_indices, k, s, p, d)
    np.testing.assert_array_equal(got_values, values.numpy().astype(dtype))
    np.testing.assert_array_equal(got_indices, indices.numpy())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", _pool_cases())
def test_max_pool_gradient_matches_torch(case, dtype) -> None:
    shape, k, s, p, d, ceil_mode = case
    rng = np.random.default_rng(2)
    x = _ties_and_specials(shape, dtype, rng)
    tx = torch.from_numpy(x).requires_grad_()
    y = torch.nn.functional.max_pool2d(tx, k, s, p, d, ceil_mode=ceil_mode)
    g = rng.standard_normal(tuple(y.shape)).astype(dtype)
    (want,) = torch.autograd.grad(y, tx, torch.from_numpy(g))
    got = np.full(x.shape, np.nan, dtype)
    assert windows.run_max_pool_backward(x, g, got, k, s, p, d)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, atol=1e-6)


def test_the_c_path_declines_what_it_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.ones((1, 1, 4, 4), np.float32)
    geometry = ((2, 2), (2, 2), (0, 0), (1, 1))
    assert not windows.run_max_pool(x.astype(np.float16), np.empty((1, 1, 2, 2), np.float16),
                                    None, *geometry)           # no float16 rendering
    assert not windows.run_max_pool(x, np.empty((1, 1, 2, 2), np.float64), None, *geometry)
    strided = np.empty((1, 1, 2, 4), np.float32)[..., ::2]     # an output that is not contiguous
    assert not windows.run_max_pool(x, strided, None, *geometry)
    monkeypatch.setenv("EMBER_CPU_COMPILE", "0")
    assert not windows.run_max_pool(x, np.empty((1, 1, 2, 2), np.float32), None, *geometry)
    # A non-contiguous input is copied, not refused.
    monkeypatch.delenv("EMBER_CPU_COMPILE")
    wide = np.arange(32, dtype=np.float32).reshape(1, 1, 4, 8)[..., ::2]
    values = np.empty((1, 1, 2, 2), np.float32)
    assert windows.run_max_pool(wide, values, None, *geometry)
    np.testing.assert_array_equal(values[0, 0], [[10, 14], [26, 30]])


# ----- the ops, C path and NumPy path --------------------------------------------------------

CONV_CASES = [
    # (x shape, weight shape, kwargs)
    ((4, 3, 12, 10), (8, 3, 3, 3), {"padding": 1}),
    ((2, 6, 11, 9), (4, 3, 3, 2), {"stride": (2, 1), "padding": (1, 0), "groups": 2}),
    ((1, 4, 9, 9), (5, 4, 3, 3), {"dilation": 2, "padding": 2, "stride": 2}),
    ((3, 4, 7), (6, 4, 3), {"padding": 1, "stride": 2}),                 # conv1d
    ((4, 5, 6), (2, 4, 2, 2), {}),                                       # unbatched
    ((0, 3, 8, 8), (4, 3, 3, 3), {"padding": 1}),                        # empty batch
]


def _conv_grads(x_np, w_np, b_np, kwargs, upstream):
    device = em.cpu().autodiff()
    x = em.tensor(x_np, device=device).require_grad()
    w = em.tensor(w_np, device=device).require_grad()
    b = em.tensor(b_np, device=device).require_grad()
    fn = F.conv1d if w_np.ndim == 3 else F.conv2d
    y = fn(x, w, b, **kwargs)
    grads = y.backward(em.tensor(upstream, device=device))
    return [y.numpy()] + [t.grad(grads).numpy() for t in (x, w, b)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x_shape, w_shape, kwargs", CONV_CASES)
def test_conv_and_its_gradients_match_torch_on_both_paths(x_shape, w_shape, kwargs, dtype,
                                                          monkeypatch) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    b = rng.standard_normal(w_shape[0]).astype(dtype)
    tx, tw, tb = (torch.from_numpy(a).requires_grad_() for a in (x, w, b))
    fn = torch.nn.functional.conv1d if len(w_shape) == 3 else torch.nn.functional.conv2d
    ty = fn(tx, tw, tb, **kwargs)
    upstream = rng.standard_normal(tuple(ty.shape)).astype(dtype)
    want = [ty.detach().numpy()] + [g.numpy() for g in torch.autograd.grad(
        ty, (tx, tw, tb), torch.from_numpy(upstream))]
    tolerance = 1e-4 if dtype == np.float32 else 1e-10
    compiled_path = _conv_grads(x, w, b, kwargs, upstream)
    monkeypatch.setenv("EMBER_CPU_COMPILE", "0")
    numpy_path = _conv_grads(x, w, b, kwargs, upstream)
    for got_c, got_np, expected in zip(compiled_path, numpy_path, want):
        np.testing.assert_allclose(got_c, expected, rtol=tolerance, atol=tolerance)
        np.testing.assert_allclose(got_np, expected, rtol=tolerance, atol=tolerance)


def test_conv_weight_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 2, 6, 5))
    w = rng.standard_normal((3, 2, 3, 2))
    kwargs = {"stride": (2, 1), "padding": 1, "dilation": (1, 2)}
    device = em.cpu().autodiff()
    tw = em.tensor(w, device=device).require_grad()
    loss = (F.conv2d(em.tensor(x, device=device), tw, **kwargs) ** 2).sum()
    got = tw.grad(loss.backward()).numpy()

    def value(weight):
        y = F.conv2d(em.tensor(x), em.tensor(weight), **kwargs).numpy()
        return float((y ** 2).sum())

    eps = 1e-6
    for index in [(0, 0, 0, 0), (1, 1, 2, 1), (2, 0, 1, 0)]:
        up, down = w.copy(), w.copy()
        up[index] += eps
        down[index] -= eps
        assert got[index] == pytest.approx((value(up) - value(down)) / (2 * eps), rel=1e-6)


@pytest.mark.parametrize("case", _pool_cases())
def test_max_pool_op_and_gradient_match_torch_on_both_paths(case, monkeypatch) -> None:
    shape, k, s, p, d, ceil_mode = case
    rng = np.random.default_rng(5)
    x = _ties_and_specials(shape, np.float32, rng)
    tx = torch.from_numpy(x).requires_grad_()
    ty, t_indices = torch.nn.functional.max_pool2d(tx, k, s, p, d, ceil_mode=ceil_mode,
                                                   return_indices=True)
    g = rng.standard_normal(tuple(ty.shape)).astype(np.float32)
    (want,) = torch.autograd.grad(ty, tx, torch.from_numpy(g))

    def ours():
        device = em.cpu().autodiff()
        ex = em.tensor(x, device=device).require_grad()
        y, indices = F.max_pool2d(ex, k, s, p, d, ceil_mode=ceil_mode, return_indices=True)
        grad = ex.grad(y.backward(em.tensor(g, device=device))).numpy()
        return y.numpy(), indices.numpy(), grad

    for path in ("1", "0"):
        monkeypatch.setenv("EMBER_CPU_COMPILE", path)
        y, indices, grad = ours()
        np.testing.assert_array_equal(y, ty.detach().numpy())
        np.testing.assert_array_equal(indices, t_indices.numpy())
        np.testing.assert_allclose(grad, want.numpy(), rtol=1e-6, atol=1e-6)


def test_max_pool_op_on_integers_and_unbatched_input() -> None:
    x = np.random.default_rng(6).integers(-50, 50, (3, 7, 8)).astype(np.int32)
    got = F.max_pool2d(em.tensor(x), 3, 2, 1, ceil_mode=True).numpy()
    want = torch.nn.functional.max_pool2d(torch.from_numpy(x.astype(np.float64)), 3, 2, 1,
                                          ceil_mode=True).numpy()
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want.astype(np.int32))
