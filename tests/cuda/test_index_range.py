"""Index values out of range raise on CUDA as on the CPU (CuPy alone wraps them), naming
the value as written; negatives in range wrap, as PyTorch's do."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from tests.cuda.gpu import needs_gpu

pytestmark = needs_gpu

DEVICES = [em.cpu(), pytest.param(em.cuda(0) if em.available("cuda") else None, id="cuda")]


@pytest.mark.parametrize("device", DEVICES)
def test_tensor_index_wraps_negatives_and_refuses_out_of_range(device):
    x = em.arange(5, device=device)
    np.testing.assert_array_equal(x[em.tensor([-1, -5, 0], device=device)].numpy(), [4, 0, 0])
    for bad in (-6, 5):
        with pytest.raises(em.KernelError, match=f"index {bad} is out of range|index {bad} is "
                                                 f"out of bounds"):
            x[em.tensor([0, bad], device=device)].numpy()


@pytest.mark.parametrize("device", DEVICES)
def test_index_put_refuses_out_of_range(device):
    x = em.zeros((3, 4), device=device)
    got = x.index_put((slice(None), em.tensor([-1], device=device)), 1.0).numpy()
    np.testing.assert_array_equal(got[:, 3], [1, 1, 1])
    with pytest.raises(em.KernelError, match="index 4 is out of"):
        x.index_put((slice(None), em.tensor([4], device=device)), 1.0).numpy()


def test_index_add_refuses_out_of_range_on_cuda():
    from ember.ops._core import call

    x = em.zeros((5,), device=em.cuda(0))
    index = em.tensor([7], device=em.cuda(0))
    src = em.ones((1,), device=em.cuda(0))
    out = call("index_add", (x, index, src), (5,), em.float32, (((("t", 1),)), 0))
    with pytest.raises(em.KernelError, match="index_add: index 7 is out of range"):
        out.numpy()
