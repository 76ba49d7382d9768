"""The WebGPU data-movement, sorting, creation, convolution and pooling kernels against the CPU.

The op harness (tests/ops) checks forwards on every device; this file adds
what it does not reach on wgpu: backward kernels (the gradient harness runs
on the CPU only), sorts longer than one workgroup's block, index errors,
and bit-identical random numbers.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
import ember.nn.functional as F
from tests.runtime_mode import lazy_only

WGPU = em.available("wgpu")
pytestmark = pytest.mark.skipif(not WGPU, reason="no wgpu adapter")

RNG = np.random.default_rng(20261130)


def _gradients(fn, arrays: list[np.ndarray], device: em.Device) -> list[np.ndarray]:
    """The output and the gradient of sum(output · cotangent) wrt each array, on ``device``.

    ``fn`` gets the device (for the index tensors it makes) and the tracked inputs.
    """
    tracked = [em.tensor(a, device=device.autodiff()).require_grad() for a in arrays]
    out = fn(device, *tracked)
    cotangent = np.random.default_rng(1).standard_normal(out.shape).astype(np.float32)
    grads = out.backward(em.tensor(cotangent, device=device.autodiff()))
    return [out.numpy()] + [t.grad(grads).numpy() for t in tracked]


def _same_on_both(fn, arrays: list[np.ndarray], rtol: float = 1e-5, atol: float = 1e-5) -> None:
    want = _gradients(fn, arrays, em.cpu())
    got = _gradients(fn, arrays, WGPU[0])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def _floats(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("fn, shapes", [
    (lambda x, w: F.conv2d(x, w, stride=2, padding=1), [(2, 3, 7, 6), (4, 3, 3, 3)]),
    (lambda x, w: F.conv2d(x, w, dilation=2, groups=2), [(1, 4, 8, 8), (6, 2, 2, 3)]),
    (lambda x, w: F.conv1d(x, w, padding=2), [(2, 3, 9), (5, 3, 4)]),
    (lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1), [(2, 4, 4, 5), (4, 3, 3, 3)]),
    (lambda x, w: F.conv_transpose1d(x, w, stride=3, groups=2), [(1, 4, 5), (4, 1, 4)]),
], ids=["conv2d-stride-pad", "conv2d-dilation-groups", "conv1d", "conv_transpose2d",
        "conv_transpose1d-groups"])
def test_convolution_gradients(fn, shapes) -> None:
    _same_on_both(lambda d, *t: fn(*t), [_floats(*s) for s in shapes], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fn", [
    lambda x: F.max_pool2d(x, 3, stride=1, padding=1),         # overlapping windows
    lambda x: F.max_pool2d(x, 2, ceil_mode=True),
    lambda x: F.max_pool2d(x, (2, 3), stride=2, dilation=(2, 1)),
    lambda x: F.avg_pool2d(x, 3, stride=2, padding=1),
    lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False, ceil_mode=True),
    lambda x: F.avg_pool2d(x, 2, divisor_override=3),
    lambda x: F.adaptive_avg_pool2d(x, (3, 4)),                # overlapping adaptive windows
    lambda x: F.adaptive_avg_pool2d(x, 1),
], ids=["max-overlap", "max-ceil", "max-dilated", "avg-pad", "avg-exclude-pad-ceil",
        "avg-divisor", "adaptive-overlap", "adaptive-global"])
def test_pooling_gradients(fn) -> None:
    _same_on_both(lambda d, x: fn(x), [_floats(2, 3, 7, 9)])


def test_max_pool_ties_and_indices_match_the_cpu() -> None:
    x = RNG.integers(0, 3, (2, 2, 6, 6)).astype(np.float32)  # many ties
    x[0, 0, 1, 1] = np.nan
    for device in (em.cpu(), WGPU[0]):
        values, indices = F.max_pool2d(em.tensor(x, device=device), 3, stride=2, padding=1,
                                       return_indices=True)
        if device == em.cpu():
            want = (values.numpy(), indices.numpy())
        else:
            np.testing.assert_array_equal(values.numpy(), want[0])
            np.testing.assert_array_equal(indices.numpy(), want[1])
    _same_on_both(lambda d, t: F.max_pool2d(t, 3, stride=1, padding=1),
                  [RNG.integers(0, 3, (1, 2, 5, 5)).astype(np.float32)])


@pytest.mark.parametrize("fn, arrays", [
    (lambda d, x: x[1:, em.tensor([0, 2, 2, -1], device=d)], [_floats(3, 4, 2)]),
    (lambda d, x: x.index_select(1, em.tensor([3, 0, 3], device=d)), [_floats(2, 4)]),
    (lambda d, x: x.gather(1, em.tensor([[0, 0, 1], [2, 1, 1]], device=d)), [_floats(2, 3)]),
    (lambda d, x, s: x.scatter_add(0, em.tensor([[1, 0, 1], [1, 1, 0]], device=d), s),
     [_floats(2, 3), _floats(2, 3)]),
    (lambda d, x, v: x.index_put((slice(None), em.tensor([2, 0], device=d)), v),
     [_floats(3, 4), _floats(3, 2)]),
    (lambda d, x: x.masked_fill(em.tensor([True, False, True], device=d), 0.5), [_floats(2, 3)]),
    (lambda d, x: x.permute(2, 0, 1).reshape(4, 6).repeat(2, 1)[::2, 1:5], [_floats(2, 3, 4)]),
    (lambda d, x, y: em.cat([x, y.T], 1).split([1, 4], 1)[1], [_floats(3, 2), _floats(3, 3)]),
], ids=["getitem-index", "index_select", "gather", "scatter_add", "index_put", "masked_fill",
        "views-and-copies", "cat-split"])
def test_indexing_and_shape_gradients(fn, arrays) -> None:
    _same_on_both(fn, arrays)


def test_float16_accumulates_in_float32() -> None:
    x = np.zeros(1, np.float16)
    src = np.full(3000, 1.0, np.float16)  # a float16 running sum would stop at 2048
    index = np.zeros(3000, np.int64)
    got = em.tensor(x, device=WGPU[0]).scatter_add(0, em.tensor(index, device=WGPU[0]),
                                                     em.tensor(src, device=WGPU[0]))
    assert got.numpy().tolist() == [3000.0]


@pytest.mark.parametrize("n, descending", [(3000, False), (5000, True), (9000, False)])
def test_sort_rows_longer_than_a_block(n: int, descending: bool) -> None:
    x = RNG.integers(-50, 50, (2, n)).astype(np.float32)  # ties everywhere
    x[0, ::97] = np.nan
    got = em.tensor(x, device=WGPU[0]).sort(dim=1, descending=descending)
    want = em.tensor(x).sort(dim=1, descending=descending)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
    top = em.tensor(x.T.copy(), device=WGPU[0]).topk(7, dim=0)[1].numpy()
    np.testing.assert_array_equal(top, em.tensor(x.T.copy()).topk(7, dim=0)[1].numpy())


_TAKERS = {
    "gather": lambda x, i: x.gather(0, i),
    "index_select": lambda x, i: x.index_select(0, i),
    "index": lambda x, i: x[i],
    "scatter_add": lambda x, i: x.scatter_add(0, i, x),
    "scatter": lambda x, i: x.scatter(0, i, x),
    "scatter-value": lambda x, i: x.scatter(-1, i, 7.0),
    "scatter_reduce-prod": lambda x, i: x.scatter_reduce(0, i, x, "prod"),
    "scatter_reduce-mean": lambda x, i: x.scatter_reduce(0, i, x, "mean", include_self=False),
    "scatter_reduce-amax": lambda x, i: x.scatter_reduce(-1, i, x, "amax", include_self=False),
}


@pytest.mark.parametrize("name", list(_TAKERS))
@pytest.mark.parametrize("bad", [3, -1])
@lazy_only
def test_out_of_range_index_fails_at_the_read(name: str, bad: int) -> None:
    x = em.tensor(np.arange(3, dtype=np.float32), device=WGPU[0])
    result = _TAKERS[name](x, em.tensor([0, bad, 1], device=WGPU[0]))
    if name == "index" and bad < 0:  # t[idx] wraps negative indices, as PyTorch
        assert result.numpy().tolist() == [0.0, 2.0, 1.0]
        return
    op = name.split("-")[0]
    with pytest.raises(em.KernelError,
                       match=f"{op}: index {bad} is out of range for dim 0 of size 3"):
        result.numpy()


@lazy_only
def test_index_checks_wait_for_a_read_of_what_they_spoil() -> None:
    """A gather's fault buffer is read when a value computed from it is, not at once:
    unrelated values read without it, and the spoiled ones fail with the op's error."""
    device = WGPU[0]
    x = em.tensor(np.arange(3, dtype=np.float32), device=device)
    spoiled = (x.gather(0, em.tensor([0, 3], device=device)) * 2.0).sum()
    fine = x.gather(0, em.tensor([2, 1], device=device)) + 1.0
    em.sync(device)  # a sync resolves the pending checks too
    np.testing.assert_array_equal(fine.numpy(), [3.0, 2.0])
    with pytest.raises(em.KernelError, match="gather: index 3 is out of range for dim 0"):
        spoiled.item()
    later = x.gather(0, em.tensor([5], device=device))
    (x + 0.0).numpy()  # an unrelated read, queued after the gather: it ran, unresolved
    assert device.actor.executor.taints.pending
    with pytest.raises(em.KernelError, match="index 5"):
        later.numpy()
    assert not device.actor.executor.taints.pending


@pytest.mark.parametrize("make", [
    lambda d: em.rand(1000, device=d),
    lambda d: em.rand(37, 5, dtype=em.float16, device=d),
    lambda d: em.randint(-7, 1000, (999,), device=d),
    lambda d: em.randint(0, 2, (31,), dtype=em.bool, device=d),
], ids=["rand", "rand-float16", "randint", "randint-bool"])
def test_random_numbers_equal_the_cpu(make) -> None:
    em.manual_seed(1234)
    em.rand(3)  # a later stream, not the first
    want = make(em.cpu()).numpy()
    em.manual_seed(1234)
    em.rand(3)
    np.testing.assert_array_equal(make(WGPU[0]).numpy(), want)


def test_randn_is_reproducible_and_standard_normal() -> None:
    em.manual_seed(7)
    first = em.randn(20000, device=WGPU[0]).numpy()
    em.manual_seed(7)
    np.testing.assert_array_equal(em.randn(20000, device=WGPU[0]).numpy(), first)
    assert abs(first.mean()) < 0.03 and abs(first.std() - 1) < 0.03


def test_ranges_match_the_cpu() -> None:
    for make in (lambda d: em.arange(0, 1, 0.1, device=d),
                 lambda d: em.linspace(-1.3, 7.7, 1001, device=d),
                 lambda d: em.arange(-5, 40, 3, device=d),
                 lambda d: em.eye(3, 5, dtype=em.int32, device=d),
                 lambda d: em.full((2, 3), 0.1, dtype=em.float16, device=d)):
        got, want = make(WGPU[0]).numpy(), make(em.cpu()).numpy()
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1.2e-7, atol=0)
