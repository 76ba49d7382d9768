"""The CUDA backend on a real GPU: worker-owned stream, transfers, generated fused kernels,
seeded random numbers. The op and gradient harnesses cover every op on ``cuda:0`` too
(tests/conftest.py adds it to DEVICES)."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from tests.cuda.gpu import needs_gpu

pytestmark = needs_gpu


def _backend(device: em.Device):
    return device.actor.backend


def test_worker_thread_owns_the_stream_and_pool(cuda):
    x = em.tensor([1.0, 2.0, 3.0], device=cuda)
    np.testing.assert_array_equal((x * 2).numpy(), [2.0, 4.0, 6.0])
    backend = _backend(cuda)
    assert backend.stream is not None and backend.memory is not None
    import cupy

    # This (the caller's) thread never had the device's stream made current.
    assert cupy.cuda.get_current_stream() != backend.stream


def test_round_trips_between_cpu_and_cuda():
    data = np.random.default_rng(0).standard_normal((33, 17)).astype(np.float32)
    on_gpu = em.from_numpy(data).to(em.cuda(0))
    assert on_gpu.device == em.cuda(0)
    back = (on_gpu + 1).to(em.cpu())
    np.testing.assert_allclose(back.numpy(), data + 1, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_fused_chain_runs_one_generated_kernel(cuda, dtype):
    rng = np.random.default_rng(1)
    x, w = (rng.standard_normal((256, 512)).astype(np.float32) for _ in range(2))
    b = rng.standard_normal((512,)).astype(np.float32)
    dt = getattr(em, dtype)
    tx, tw, tb = (em.from_numpy(a, device=cuda).astype(dt) for a in (x, w, b))
    em.sync(cuda)
    backend = _backend(cuda)
    launched = backend.fused.launched
    y = ((tx * tw + tb).gelu() * 0.5 - 1.0).clamp(min=-0.9)
    got = y.astype(em.float32).numpy()
    assert backend.fused.last_error is None
    assert backend.fused.launched > launched
    xr, wr, br = (em.from_numpy(a).astype(dt).astype(em.float32).numpy() for a in (x, w, b))
    ref = xr * wr + br
    import scipy.special

    ref = np.maximum(0.5 * ref * (1 + scipy.special.erf(ref / np.sqrt(2))) * 0.5 - 1.0, -0.9)
    tol = {"float32": 1e-5, "float16": 2e-2, "bfloat16": 5e-2}[dtype]
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


def test_broadcast_and_strided_inputs_in_a_group(cuda):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((64, 3, 96)).astype(np.float32)
    row = rng.standard_normal((64, 1)).astype(np.float32)
    tx = em.from_numpy(x, device=cuda)
    t = tx.permute(2, 0, 1)  # a strided view
    y = (t * em.from_numpy(row, device=cuda) + 2.0).exp().sqrt()
    ref = np.sqrt(np.exp(x.transpose(2, 0, 1) * row + 2.0))
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-6)
    assert _backend(cuda).fused.last_error is None


def test_seeded_random_repeats_on_the_device(cuda):
    em.manual_seed(7)
    a = em.randn((1000,), device=cuda).numpy()
    em.manual_seed(7)
    b = em.randn((1000,), device=cuda).numpy()
    np.testing.assert_array_equal(a, b)
    assert abs(a.mean()) < 0.2 and 0.8 < a.std() < 1.2


def test_kernel_failure_reaches_the_reader(cuda):
    x = em.tensor([1.0, 2.0], device=cuda)
    bad = x[em.tensor([5], device=cuda)]
    with pytest.raises(em.KernelError, match="index"):
        bad.numpy()
    np.testing.assert_array_equal((x + 1).numpy(), [2.0, 3.0])


def test_sync_waits_for_the_gpu(cuda):
    a = em.randn((4096, 4096), device=cuda)
    products = [a @ a for _ in range(8)]
    em.sync(cuda)
    assert _backend(cuda).stream.done
    assert products[-1].shape == (4096, 4096)


def test_groups_differing_only_in_scalars_share_one_kernel_and_launch_plan(cuda):
    """An optimizer's per-step scalars (learning rate schedules, Adam's bias corrections)
    are kernel arguments: other values compile nothing new and give their own results."""
    x_np = np.linspace(-2.0, 2.0, 4096, dtype=np.float32)
    x = em.from_numpy(x_np, device=cuda)
    fused = _backend(cuda).fused
    for scale in (0.5, 1.5):  # the first run of the structure may compile and tune
        ((x * scale + 1.0).relu() - scale).numpy()
    compiled, launched = fused.compiled, fused.launched
    for scale in (0.25, 2.0, -3.0, 7.5):
        got = ((x * scale + 1.0).relu() - scale).numpy()
        np.testing.assert_allclose(got, np.maximum(x_np * np.float32(scale) + 1, 0) - scale,
                                   rtol=1e-6, atol=1e-6)
    assert fused.compiled == compiled and fused.launched == launched + 4
