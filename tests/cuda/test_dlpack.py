"""DLPack on the GPU: zero copy to and from CuPy and PyTorch on the same device, with the
producer's pending writes waited for."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from tests.cuda.gpu import needs_gpu

pytestmark = needs_gpu


def test_cuda_tensors_export_device_memory(cuda):
    assert em.tensor([1.0], device=cuda).__dlpack_device__() == (2, 0)
    assert em.tensor([1.0]).__dlpack_device__() == (1, 0)


def test_cupy_round_trip_shares_memory(cuda):
    import cupy

    with cupy.cuda.Device(0):
        source = cupy.arange(12, dtype=cupy.float32).reshape(3, 4)
    t = em.from_dlpack(source)
    assert t.device == cuda and t.shape == (3, 4)
    back = cupy.from_dlpack(t)
    assert back.data.ptr == source.data.ptr  # the same memory, never copied
    np.testing.assert_array_equal((t * 2).numpy(), np.arange(12).reshape(3, 4) * 2)


def test_an_ember_result_read_by_cupy_is_finished(cuda):
    import cupy

    x = em.randn((2048, 2048), device=cuda)
    y = (x @ x).exp().sum(dim=-1)  # queued work the export must wait for
    got = cupy.from_dlpack(y)
    np.testing.assert_allclose(cupy.asnumpy(got), y.numpy(), rtol=1e-6)


def test_torch_both_ways(cuda):
    torch = pytest.importorskip("torch")
    source = torch.randn(4096, 1024, device="cuda:0")
    written = source.mul_(3.0).add_(1.0)  # torch's stream is still writing when we import
    t = em.from_dlpack(written)
    np.testing.assert_array_equal(t.numpy(), written.cpu().numpy())
    out = torch.from_dlpack(t * 2.0)
    assert out.device.type == "cuda"
    np.testing.assert_allclose(out.cpu().numpy(), written.cpu().numpy() * 2.0, rtol=1e-6)
    shared = torch.from_dlpack(t)
    assert shared.data_ptr() == written.data_ptr()


def test_torch_bfloat16_and_a_move_to_the_cpu(cuda):
    torch = pytest.importorskip("torch")
    source = torch.randn(64, device="cuda:0").to(torch.bfloat16)
    t = em.from_dlpack(source, device="cpu")
    assert t.device == em.cpu() and t.dtype == em.bfloat16
    np.testing.assert_array_equal(t.astype(em.float32).numpy(),
                                  source.float().cpu().numpy())
    back = torch.from_dlpack(em.from_dlpack(source))
    assert back.dtype == torch.bfloat16 and torch.equal(back, source)
