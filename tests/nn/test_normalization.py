"""LayerNorm, RMSNorm, BatchNorm1d/2d, GroupNorm against torch.nn, values and gradients."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.nn import F
from tests.nn.layer_check import assert_same_layout, check_fn, check_pair, copy_state, randn

torch = pytest.importorskip("torch")


def _perturb(torch_module, seed=1):
    """Non-trivial affine parameters, so the gradient checks see them."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in torch_module.parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5)
    return torch_module


# ----- LayerNorm ----------------------------------------------------------------------------


@pytest.mark.parametrize("shape, normalized", [((2, 3, 5), 5), ((2, 3, 4), (3, 4)), ((7,), 7)])
@pytest.mark.parametrize("affine, bias", [(True, True), (True, False), (False, True)])
def test_layer_norm_matches_torch(shape, normalized, affine, bias):
    tm = _perturb(torch.nn.LayerNorm(normalized, eps=1e-4, elementwise_affine=affine, bias=bias))
    em_ = check_pair(tm, lambda d, dt: nn.LayerNorm(normalized, eps=1e-4, elementwise_affine=affine,
                                                    bias=bias, device=d, dtype=dt),
                     [randn(*shape)])
    assert_same_layout(tm, em_)


def test_layer_norm_float32_forward_and_defaults():
    tm = torch.nn.LayerNorm(6)
    m = nn.LayerNorm(6)
    assert_same_layout(tm, m)
    np.testing.assert_array_equal(m.weight.value.numpy(), np.ones(6, np.float32))
    np.testing.assert_array_equal(m.bias.value.numpy(), np.zeros(6, np.float32))
    check_pair(_perturb(tm), lambda d, dt: nn.LayerNorm(6, device=d, dtype=dt),
               [randn(4, 6) * 3 + 1], dtype="float32", grad=False, rtol=1e-5, atol=1e-6)


def test_layer_norm_functional_numpy_reference():
    x = randn(3, 4, 5)
    w, b = randn(4, 5, seed=1), randn(4, 5, seed=2)
    y = F.layer_norm(em.tensor(x), (4, 5), em.tensor(w), em.tensor(b), eps=1e-3).numpy()
    mean = x.mean(axis=(1, 2), keepdims=True)
    var = x.var(axis=(1, 2), keepdims=True)
    np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + 1e-3) * w + b, rtol=1e-12)


def test_layer_norm_half_precision_matches_torch():
    x = randn(3, 8).astype(np.float16)
    tm = torch.nn.LayerNorm(8).half()
    m = nn.LayerNorm(8, dtype=em.float16)
    y = m(em.tensor(x))
    assert y.dtype is em.float16
    np.testing.assert_allclose(y.numpy().astype(np.float32),
                               tm(torch.tensor(x)).detach().numpy().astype(np.float32),
                               atol=2e-3)


def test_layer_norm_errors():
    with pytest.raises(em.ShapeError, match="layer_norm.*normalized_shape"):
        F.layer_norm(em.ones(2, 3), 4)
    with pytest.raises(em.ShapeError, match="weight"):
        F.layer_norm(em.ones(2, 3), 3, weight=em.ones(4))
    with pytest.raises(em.DTypeError):
        F.layer_norm(em.ones(2, 3, dtype=em.int64), 3)


# ----- RMSNorm ------------------------------------------------------------------------------


@pytest.mark.parametrize("eps", [None, 1e-6])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape, normalized", [((2, 3, 5), 5), ((2, 3, 4), (3, 4))])
def test_rms_norm_matches_torch(shape, normalized, eps, affine):
    tm = _perturb(torch.nn.RMSNorm(normalized, eps=eps, elementwise_affine=affine))
    em_ = check_pair(tm, lambda d, dt: nn.RMSNorm(normalized, eps=eps, elementwise_affine=affine,
                                                  device=d, dtype=dt),
                     [randn(*shape)])
    assert_same_layout(tm, em_)


def test_rms_norm_default_eps_is_torch_s():
    # A tiny input makes eps dominate, so the default eps must be finfo(dtype).eps.
    x = randn(2, 4) * 1e-5
    for dtype in ("float32", "float64"):
        want = torch.nn.functional.rms_norm(torch.tensor(x.astype(dtype)), (4,)).numpy()
        got = F.rms_norm(em.tensor(x.astype(dtype)), 4).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_rms_norm_float32_forward():
    check_pair(_perturb(torch.nn.RMSNorm(8)), lambda d, dt: nn.RMSNorm(8, device=d, dtype=dt),
               [randn(5, 8)], dtype="float32", grad=False, rtol=1e-5, atol=1e-6)


# ----- BatchNorm ----------------------------------------------------------------------------


def _bn_steps(tm, m, shapes, train=True, grad=True, dtype="float64"):
    """Several steps: outputs, gradients and every buffer equal torch's after each."""
    tm.train(train)
    m.train(train)
    for step, shape in enumerate(shapes):
        x = (randn(*shape, seed=10 + step) * (step + 1) + step).astype(dtype)
        tol = {"rtol": 1e-7, "atol": 1e-9} if dtype == "float64" else {"rtol": 1e-5, "atol": 1e-6}
        check_fn(tm, m, [x], torch_module=tm, ember_module=m, grad=grad, **tol)
        t_state = tm.state_dict()
        for name, value in m.state_dict().items():
            np.testing.assert_allclose(value, t_state[name].numpy(), rtol=tol["rtol"] / 100,
                                       atol=tol["atol"] / 100,
                                       err_msg=f"step {step}: {name}")
            assert value.dtype == t_state[name].numpy().dtype, name


@pytest.mark.parametrize("momentum", [0.1, 0.3, None])
def test_batch_norm2d_training_steps_then_eval_match_torch(momentum):
    tm = _perturb(torch.nn.BatchNorm2d(3, momentum=momentum)).double()
    m = nn.BatchNorm2d(3, momentum=momentum, device=em.cpu().autodiff(), dtype=em.float64)
    copy_state(tm, m)
    assert_same_layout(tm, m)
    _bn_steps(tm, m, [(4, 3, 5, 5), (2, 3, 4, 6), (3, 3, 2, 2)], train=True)
    assert m.num_batches_tracked.value.dtype is em.int64
    assert m.num_batches_tracked.value.item() == 3
    _bn_steps(tm, m, [(2, 3, 4, 4)], train=False)  # eval: running statistics, nothing moves
    assert m.num_batches_tracked.value.item() == 3


@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm2d_without_running_stats(affine):
    tm = torch.nn.BatchNorm2d(4, affine=affine, track_running_stats=False).double()
    m = nn.BatchNorm2d(4, affine=affine, track_running_stats=False,
                       device=em.cpu().autodiff(), dtype=em.float64)
    assert_same_layout(tm, m)
    copy_state(tm, m)
    _bn_steps(tm, m, [(3, 4, 3, 3)], train=True)
    _bn_steps(tm, m, [(3, 4, 3, 3)], train=False)  # still batch statistics


def test_batch_norm1d_2d_and_3d_inputs():
    tm = _perturb(torch.nn.BatchNorm1d(5)).double()
    m = nn.BatchNorm1d(5, device=em.cpu().autodiff(), dtype=em.float64)
    copy_state(tm, m)
    assert_same_layout(tm, m)
    _bn_steps(tm, m, [(8, 5), (4, 5, 7)], train=True)
    _bn_steps(tm, m, [(3, 5)], train=False)


def test_batch_norm2d_default_state_and_float32():
    tm = torch.nn.BatchNorm2d(6)
    m = nn.BatchNorm2d(6)
    assert_same_layout(tm, m)
    for name, value in m.state_dict().items():
        np.testing.assert_array_equal(value, tm.state_dict()[name].numpy())
        assert value.dtype == tm.state_dict()[name].numpy().dtype, name
    _bn_steps(tm, m, [(2, 6, 3, 3), (4, 6, 2, 2)], train=True, grad=False, dtype="float32")


def test_batch_norm_functional_reads_plain_tensors_and_updates_buffers():
    x = randn(4, 3, 2, 2)
    mean, var = em.zeros(3, dtype=em.float64), em.ones(3, dtype=em.float64)
    y = F.batch_norm(em.tensor(x), mean, var, training=True)
    ref = (x - x.mean(axis=(0, 2, 3), keepdims=True)) / np.sqrt(
        x.var(axis=(0, 2, 3), keepdims=True) + 1e-5)
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-10)
    np.testing.assert_array_equal(mean.numpy(), np.zeros(3))  # plain tensors are only read
    buf_mean, buf_var = nn.Buffer(mean), nn.Buffer(var)
    F.batch_norm(em.tensor(x), buf_mean, buf_var, training=True, momentum=0.5)
    np.testing.assert_allclose(buf_mean.value.numpy(), 0.5 * x.mean(axis=(0, 2, 3)), rtol=1e-12)
    np.testing.assert_allclose(buf_var.value.numpy(),
                               0.5 + 0.5 * x.var(axis=(0, 2, 3), ddof=1), rtol=1e-12)
    y = F.batch_norm(em.tensor(x), buf_mean, buf_var, training=False)  # eval: running stats
    ref = (x - buf_mean.value.numpy().reshape(1, 3, 1, 1)) / np.sqrt(
        buf_var.value.numpy().reshape(1, 3, 1, 1) + 1e-5)
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-10)


def test_batch_norm_errors():
    with pytest.raises(em.ShapeError, match="4D"):
        nn.BatchNorm2d(3)(em.ones(2, 3, 4))
    with pytest.raises(em.ShapeError, match="channels"):
        nn.BatchNorm2d(3)(em.ones(2, 4, 2, 2))
    with pytest.raises(em.ShapeError, match="more than 1 value"):
        nn.BatchNorm1d(3)(em.ones(1, 3))


def test_batch_norm_on_autodiff_device_keeps_buffers_untracked():
    m = nn.BatchNorm2d(2, device=em.cpu().autodiff())
    x = em.randn(3, 2, 2, 2, device=em.cpu().autodiff()).require_grad()
    grads = m(x).sum().backward()
    assert not m.running_mean.value.is_tracked and not m.running_var.value.is_tracked
    assert [n for n, _ in m.named_parameters()] == ["weight", "bias"]
    assert m.weight.grad(grads) is not None


# ----- GroupNorm ----------------------------------------------------------------------------


@pytest.mark.parametrize("groups", [1, 2, 6])
@pytest.mark.parametrize("shape", [(2, 6, 3, 4), (3, 6, 5), (4, 6)])
def test_group_norm_matches_torch(groups, shape):
    tm = _perturb(torch.nn.GroupNorm(groups, 6, eps=1e-4))
    m = check_pair(tm, lambda d, dt: nn.GroupNorm(groups, 6, eps=1e-4, device=d, dtype=dt),
                   [randn(*shape)])
    assert_same_layout(tm, m)


def test_group_norm_without_affine_and_float32():
    tm = torch.nn.GroupNorm(3, 6, affine=False)
    m = check_pair(tm, lambda d, dt: nn.GroupNorm(3, 6, affine=False, device=d, dtype=dt),
                   [randn(2, 6, 4, 4)])
    assert_same_layout(tm, m)
    check_pair(_perturb(torch.nn.GroupNorm(2, 4)), lambda d, dt: nn.GroupNorm(2, 4, device=d,
                                                                                dtype=dt),
               [randn(2, 4, 3, 3) * 2], dtype="float32", grad=False, rtol=1e-5, atol=1e-6)


def test_group_norm_errors():
    with pytest.raises(ValueError, match="divisible"):
        nn.GroupNorm(4, 6)
    with pytest.raises(em.ShapeError, match="groups"):
        F.group_norm(em.ones(2, 6, 3), 4)
