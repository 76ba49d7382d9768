"""Module.to(dtype), to(device, dtype), to(tensor): floating parameters and buffers convert,
integer buffers stay, converted parameters are new tracked leaves."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn
from tests.nn.layer_check import copy_state, randn


def _model(device=None):
    return nn.Sequential(nn.Linear(4, 8, device=device), nn.BatchNorm1d(8, device=device),
                         nn.Linear(8, 2, device=device))


@pytest.mark.parametrize("dtype", [em.bfloat16, em.float16, em.float64, "float64"])
def test_to_dtype_converts_floating_slots_only(dtype):
    m = _model()
    before = m.state_dict()
    assert m.to(dtype) is m
    target = em.dtype.as_dtype(dtype) if isinstance(dtype, str) else dtype
    for name, slot in m.named_slots():
        if name.endswith("num_batches_tracked"):
            assert slot.dtype == em.int64
        else:
            assert slot.dtype == target, name
            np.testing.assert_allclose(slot.value.numpy().astype(np.float64), before[name],
                                       rtol=1e-2)
    assert m(em.randn(3, 4).to(target)).dtype == target


def test_to_device_and_dtype_together_and_from_a_tensor():
    d = em.cpu().autodiff()
    m = _model().to(d, em.float64)
    assert all(p.device == d and p.dtype == em.float64 and p.value.is_tracked
               for p in m.parameters())
    m.to(em.zeros(1, dtype="float32"))  # a tensor: its device and dtype
    assert all(p.device == em.cpu() and p.dtype == em.float32 for p in m.parameters())
    m.to(device=d, dtype=em.bfloat16)
    assert m[0].weight.dtype == em.bfloat16 and m[0].weight.value.is_tracked
    m.to("cpu")
    assert m[0].weight.device == em.cpu()


def test_converted_parameters_train_as_new_leaves():
    torch = pytest.importorskip("torch")
    d = em.cpu().autodiff()
    m = nn.Linear(3, 2, device=d).to(em.float64)
    tm = torch.nn.Linear(3, 2).double()
    copy_state(tm, m)
    x = randn(5, 3)
    grads = (m(em.tensor(x, device=d)) ** 2).sum().backward()
    (tm(torch.tensor(x)) ** 2).sum().backward()
    np.testing.assert_allclose(m.weight.grad(grads).numpy(), tm.weight.grad.numpy(), rtol=1e-12)
    assert m.weight.grad(grads).dtype == em.float64


def test_to_rejects_non_floating_dtypes():
    m = _model()
    with pytest.raises(em.DTypeError, match="Module.to"):
        m.to(em.int64)
    with pytest.raises(em.DTypeError, match="Module.to"):
        m.to("int32")
    with pytest.raises(TypeError, match="Module.to"):
        m.to("cpu", em.float32, "extra")
    assert m[0].weight.dtype == em.float32  # nothing changed
