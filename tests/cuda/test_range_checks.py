"""Index range checks left on the device (kernels/cupy/range_checks.py): the kernel's
source compiles for Hopper (on the CPU, with nvcc); on a GPU, a bad index fails what was
computed from it when it is read, good ones never wait, and captured checks re-arm."""

from __future__ import annotations


import numpy as np
import pytest

import ember as em
from ember.kernels.cupy.range_checks import source
from tests.cuda.gpu import needs_gpu, needs_nvcc, ptx_of


@needs_nvcc
@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_check_source_compiles_to_ptx_for_hopper(tmp_path, dtype):
    ptx = ptx_of(tmp_path, source(dtype), f"ember_index_range_{dtype}")
    assert "atom.global.min.s64" in ptx and "atom.global.max.s64" in ptx


@needs_gpu
@pytest.mark.parametrize("dtype", [em.int64, em.int32])
def test_cuda_cross_entropy_with_a_bad_target_fails_at_the_read(dtype):
    device = em.cuda(0)
    logits = em.from_numpy(np.zeros((4, 3), np.float32), device=device.autodiff()).require_grad()
    good = em.tensor([0, 2, 1, 0], dtype=dtype, device=device)
    loss = em.nn.functional.cross_entropy(logits, good)
    grads = loss.backward()
    assert loss.item() == pytest.approx(np.log(3.0))
    np.testing.assert_allclose(logits.grad(grads).numpy()[0], [-0.25 + 1 / 12, 1 / 12, 1 / 12],
                               rtol=1e-5)
    bad = em.tensor([0, 3, 1, 0], dtype=dtype, device=device)
    loss = em.nn.functional.cross_entropy(logits, bad)
    with pytest.raises(em.KernelError, match="gather: index 3 is out of range for dim 1 of "
                                             "size 3"):
        loss.item()
    with pytest.raises(em.KernelError, match="index 3"):
        logits.grad(loss.backward()).numpy()
    assert (em.ones(2, device=device) + 1.0).numpy().tolist() == [2.0, 2.0]


@needs_gpu
def test_cuda_many_checks_in_flight_resolve_once_read():
    device = em.cuda(0)
    x = em.from_numpy(np.arange(20, dtype=np.float32).reshape(4, 5), device=device)
    picks = [x.gather(1, em.tensor([[k % 5]] * 4, device=device)) for k in range(600)]
    bad = x.index_select(1, em.tensor([0, 5], device=device))
    np.testing.assert_array_equal(picks[-1].numpy().ravel(), [4.0, 9.0, 14.0, 19.0])
    with pytest.raises(em.KernelError, match="index_select: index 5 is out of range"):
        bad.numpy()
    np.testing.assert_array_equal(picks[7].numpy().ravel(), [2.0, 7.0, 12.0, 17.0])


@needs_gpu
def test_cuda_graphed_step_checks_its_index_at_every_replay():
    device = em.cuda(0)
    x = em.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4), device=device)
    index = em.tensor([[1], [2], [3]], device=device)
    step = em.graphed(lambda: x.gather(1, index).sum() * 2.0, device)
    before = step.graph_stats()["replays"]  # the device's count: other tests' too
    for _ in range(4):
        assert step().item() == 2.0 * (1 + 6 + 11)
    assert step.graph_stats()["replays"] == before + 2
    index = em.tensor([[1], [7], [3]], device=device)
    with pytest.raises(em.KernelError, match="gather: index 7"):
        step().item()
    index = em.tensor([[0], [0], [-1]], device=device)
    with pytest.raises(em.KernelError, match="gather: index -1"):
        step().item()
    index = em.tensor([[0], [0], [0]], device=device)
    assert step().item() == 2.0 * (0 + 4 + 8)
    assert step.graph_stats()["replays"] == before + 5
