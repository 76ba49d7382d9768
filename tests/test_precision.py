"""``em.set_float32_matmul_precision``: the setting, its errors, and matmuls under it on
the CPU, whose float32 products are float32 at every precision (forward and backward)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import ember as em
from ember import precision


@pytest.fixture
def restore_precision() -> Iterator[None]:
    before = em.get_float32_matmul_precision()
    yield
    em.set_float32_matmul_precision(before)


def test_the_setting_round_trips_and_goes_into_float32_matmul_messages(restore_precision):
    for name in ("high", "medium", "highest"):
        em.set_float32_matmul_precision(name)
        assert em.get_float32_matmul_precision() == name
        assert precision.matmul_attrs() == (() if name == "highest" else (name,))


@pytest.mark.parametrize("bad", ["low", "HIGH", "", None, 1])
def test_an_unknown_precision_is_refused_and_the_setting_kept(restore_precision, bad):
    em.set_float32_matmul_precision("medium")
    with pytest.raises(ValueError, match=r"set_float32_matmul_precision: expected one of "
                                         r"'highest', 'high', 'medium', got"):
        em.set_float32_matmul_precision(bad)
    assert em.get_float32_matmul_precision() == "medium"


@pytest.mark.parametrize("name", ["highest", "high", "medium"])
def test_cpu_matmuls_and_their_gradients_are_float32_at_every_precision(restore_precision,
                                                                       name):
    rng = np.random.default_rng(3)
    a_np = rng.standard_normal((2, 5, 4)).astype(np.float32)
    w_np = rng.standard_normal((4, 3)).astype(np.float32)
    i_np = np.arange(6, dtype=np.int32).reshape(2, 3)
    em.set_float32_matmul_precision(name)
    device = em.cpu().autodiff()
    a = em.from_numpy(a_np, device=device).require_grad()
    w = em.from_numpy(w_np, device=device).require_grad()
    out = a @ w
    grads = out.sum().backward()
    np.testing.assert_array_equal(out.numpy(), a_np @ w_np)
    np.testing.assert_allclose(a.grad(grads).numpy(), np.broadcast_to(w_np.sum(1), a_np.shape),
                               rtol=1e-6)
    np.testing.assert_allclose(w.grad(grads).numpy(),
                               np.broadcast_to(a_np.sum((0, 1))[:, None], w_np.shape), rtol=1e-5)
    # Integer and mixed products are unaffected (no float32 GEMM to make faster).
    i = em.from_numpy(i_np)
    np.testing.assert_array_equal((i @ i.T).numpy(), i_np @ i_np.T)
