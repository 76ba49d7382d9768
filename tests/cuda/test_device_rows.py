"""Row kernels on a real GPU: softmax and layer_norm from primitives as one kernel each,
every reduction with a prologue and an epilogue, low precision, strided inputs and the
backward passes, each against the CPU backend."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
import ember.nn.functional as F
from tests.cuda.gpu import needs_gpu
from tests.fusion.batching import _hold_kernel, one_batch
from tests.fusion.composites import layer_norm, softmax

pytestmark = needs_gpu

SHAPE = (6, 40, 256)


@pytest.fixture
def cuda() -> em.Device:
    from ember.kernels.cupy.table import KERNELS

    KERNELS.setdefault("test_fusion_hold", _hold_kernel)  # one_batch's hold, on the GPU
    return em.cuda(0)


def _fused(device: em.Device):
    return device.actor.backend.fused


def _launches(device: em.Device, build) -> tuple[int, np.ndarray]:
    """Generated kernels launched for ``build()`` submitted as one batch, and its result."""
    em.sync(device)
    fused = _fused(device)
    fused.last_error = None
    before = fused.launched
    with one_batch(device):
        y = build()
    out = y.numpy()
    assert fused.last_error is None, fused.last_error
    return fused.launched - before, out


def _data(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def test_softmax_from_primitives_is_one_kernel(cuda):
    (x,) = _data(SHAPE)
    t = em.from_numpy(x, device=cuda)
    launched, got = _launches(cuda, lambda: softmax(t))
    assert launched == 1
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_layer_norm_from_primitives_is_one_kernel(cuda):
    x, w, b = _data(SHAPE, SHAPE[-1:], SHAPE[-1:], seed=1)
    tx, tw, tb = (em.from_numpy(a, device=cuda) for a in (x, w, b))
    launched, got = _launches(cuda, lambda: layer_norm(tx, tw, tb))
    assert launched == 1
    c = x - x.mean(-1, keepdims=True)
    ref = c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "var", "std", "logsumexp", "prod"])
@pytest.mark.parametrize("keepdim", [True, False])
def test_each_reduction_with_prologue_and_epilogue_matches_the_cpu(cuda, name, keepdim):
    x, w = _data((5, 7, 48), (48,), seed=2)
    x = x / 3  # a product of 48 values of about 1/3 stays in float32's range

    def build(device):
        tx, tw = em.from_numpy(x, device=device), em.from_numpy(w, device=device)
        r = getattr(tx * tw + 0.5, name)(dim=-1, keepdim=keepdim)
        return (r * 2.0 - 1.0).exp()

    _, got = _launches(cuda, lambda: build(cuda))
    np.testing.assert_allclose(got, build(em.cpu()).numpy(), rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_softmax_rounds_as_the_cpu(cuda, dtype):
    (x,) = _data(SHAPE, seed=3)
    dt = getattr(em, dtype)

    def build(device):
        return F.softmax(em.from_numpy(x, device=device).astype(dt)).astype(em.float32)

    _, got = _launches(cuda, lambda: build(cuda))
    tol = 1e-2 if dtype == "float16" else 3e-2
    np.testing.assert_allclose(got, build(em.cpu()).numpy(), rtol=tol, atol=1e-3)


def test_permuted_and_broadcast_inputs_reach_the_row_kernel(cuda):
    x, bias = _data((256, 40, 6), (40, 1), seed=4)

    def build(device):
        t = em.from_numpy(x, device=device).permute(2, 1, 0)  # (6, 40, 256), strided
        return softmax(t + em.from_numpy(bias, device=device))

    _, got = _launches(cuda, lambda: build(cuda))
    np.testing.assert_allclose(got, build(em.cpu()).numpy(), rtol=1e-5, atol=1e-7)


def test_rows_of_odd_length_run_without_vectors(cuda):
    (x,) = _data((33, 1001), seed=5)
    _, got = _launches(cuda, lambda: F.log_softmax(em.from_numpy(x, device=cuda)))
    np.testing.assert_allclose(got, F.log_softmax(em.from_numpy(x)).numpy(), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("which", ["softmax", "layer_norm"])
def test_backward_matches_the_cpu(cuda, which):
    x, w, b, g = _data(SHAPE, SHAPE[-1:], SHAPE[-1:], SHAPE, seed=6)

    def grads(device):
        d = device.autodiff()
        tx, tw, tb = (em.from_numpy(a, device=d).require_grad() for a in (x, w, b))
        y = F.softmax(tx) if which == "softmax" else F.layer_norm(tx, SHAPE[-1], tw, tb)
        found = (y * em.from_numpy(g, device=d)).sum().backward()
        return [found.get(t).numpy() for t in ((tx,) if which == "softmax" else (tx, tw, tb))]

    fused = _fused(cuda)
    fused.last_error = None
    for got, ref in zip(grads(cuda), grads(em.cpu())):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    assert fused.last_error is None, fused.last_error


def test_a_chain_of_independent_whole_tensor_reductions_runs_unfused(cuda):
    x = em.zeros((16,), device=cuda)
    em.sync(cuda)
    with one_batch(cuda):
        results = [(x + float(k)).sum() for k in range(8)]
    assert [r.item() for r in results] == [16.0 * k for k in range(8)]
    assert "reductions in one group of one row" in str(_fused(cuda).last_error)


@pytest.mark.parametrize("variant", [(64, False), (256, False), (256, True), (128, True)])
@pytest.mark.parametrize("length", [256, 768, 1001])
def test_each_row_kernel_variant_matches_numpy(cuda, monkeypatch, variant, length):
    """A block per row or a warp per row (autotune picks one per size): the same rows."""
    from ember.kernels.cupy import rowgen

    monkeypatch.setattr(rowgen, "variants", lambda *args: [variant])
    monkeypatch.setattr(_fused(cuda), "_launches", {})  # no launch planned before
    x, w, b = _data((50, 3, length), (length,), (length,), seed=7)
    tx, tw, tb = (em.from_numpy(a, device=cuda) for a in (x, w, b))
    launched, got = _launches(cuda, lambda: softmax(tx))
    assert launched == 1
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
    launched, got = _launches(cuda, lambda: layer_norm(tx, tw, tb))
    assert launched == 1
    c = x - x.mean(-1, keepdims=True)
    ref = c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
