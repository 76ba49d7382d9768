"""Second-wave API (issue 24): errors in both conventions, gradient control, rebinding
updates, data-dependent ops, top-level functions, and bad input of the new ops."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em


def test_errors_are_also_runtime_and_index_errors():
    assert issubclass(em.ShapeError, RuntimeError) and issubclass(em.ShapeError, ValueError)
    assert issubclass(em.DTypeError, RuntimeError) and issubclass(em.DTypeError, TypeError)
    with pytest.raises(IndexError, match=r"shape \(2, 3\)") as info:
        em.ones(2, 3).sum(2)
    assert isinstance(info.value, em.EmberError)
    with pytest.raises(RuntimeError):
        em.ones(2, 3) @ em.ones(2, 3)


def test_no_grad_block_decorator_and_enable_grad():
    d = em.cpu().autodiff()
    w = em.tensor([1.0, 2.0], device=d).requires_grad_()
    with em.no_grad():
        assert not (w * 2).is_tracked and not em.is_grad_enabled()
        with em.enable_grad():
            assert (w * 2).is_tracked
        assert not (w * 3).is_tracked

    @em.no_grad()
    def step(x):
        return x * 2

    assert not step(w).is_tracked and (w * 2).is_tracked and em.is_grad_enabled()
    grads = (w * w).sum().backward()
    np.testing.assert_allclose(w.grad(grads).numpy(), [2.0, 4.0])


def test_rebinding_updates_keep_other_handles_and_views():
    t = em.tensor([1.0, 2.0, 3.0])
    same, view, copy = t, t[1:], t.clone()
    out = t.add_(1, alpha=2)
    assert out is t and same is t
    np.testing.assert_array_equal(t.numpy(), [3.0, 4.0, 5.0])
    np.testing.assert_array_equal(view.numpy(), [2.0, 3.0])
    np.testing.assert_array_equal(copy.numpy(), [1.0, 2.0, 3.0])
    before = t * 1
    t[0] = -1.0
    t.sub_(1).mul_(2).div_(4).clamp_(-0.75, 1.5)
    np.testing.assert_allclose(t.numpy(), [-0.75, 1.5, 1.5])
    np.testing.assert_array_equal(before.numpy(), [3.0, 4.0, 5.0])
    t.fill_(7)
    np.testing.assert_array_equal(t.numpy(), [7.0, 7.0, 7.0])
    t.copy_(em.tensor([1, 2, 3]))
    assert t.dtype == em.float32
    np.testing.assert_array_equal(t.zero_().numpy(), [0.0, 0.0, 0.0])
    m = em.zeros(3, 4)
    m[em.tensor([0, 2]), em.tensor([1, 3])] = em.tensor([5.0, 6.0])
    want = np.zeros((3, 4), np.float32)
    want[[0, 2], [1, 3]] = [5.0, 6.0]
    np.testing.assert_array_equal(m.numpy(), want)
    with pytest.raises(em.ShapeError):
        t.copy_(em.ones(2))


def test_rebinding_a_tracked_tensor_keeps_the_gradient_path():
    d = em.cpu().autodiff()
    w = em.tensor([1.0, 2.0], device=d).requires_grad_()
    y = w * 1
    y.mul_(3)
    grads = y.sum().backward()
    np.testing.assert_allclose(w.grad(grads).numpy(), [3.0, 3.0])


def test_data_dependent_ops():
    x = em.tensor([[0, 3, 0], [1, 0, 3]])
    np.testing.assert_array_equal(em.nonzero(x).numpy(), np.argwhere(x.numpy()))
    rows, cols = em.nonzero(x, as_tuple=True)
    np.testing.assert_array_equal(cols.numpy(), [1, 0, 2])
    values, inverse, counts = em.unique(x, return_inverse=True, return_counts=True)
    np.testing.assert_array_equal(values.numpy(), [0, 1, 3])
    np.testing.assert_array_equal(values.numpy()[inverse.numpy()], x.numpy())
    np.testing.assert_array_equal(counts.numpy(), [3, 1, 2])
    f = em.tensor([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(em.masked_select(f, em.tensor([False, True])).numpy(), [2.0, 4.0])
    assert em.allclose(f, f + 1e-7) and not em.allclose(f, f + 1e-3)
    assert em.nonzero(em.zeros(0, 2)).shape == (0, 2)


def test_top_level_functions_are_the_methods():
    x = em.tensor(np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(em.sum(x, 1).numpy(), [3.0, 12.0])
    np.testing.assert_array_equal(em.t(x).numpy(), np.arange(6.0).reshape(2, 3).T)
    np.testing.assert_array_equal(em.add(x, 1, alpha=2).numpy(), np.arange(6.0).reshape(2, 3) + 2)
    assert em.exp.__name__ == "exp" and em.float is em.float32 and em.long is em.int64
    assert em.int is em.int32 and em.double is em.float64 and em.half is em.float16
    with pytest.raises(TypeError, match="exp: expected a tensor"):
        em.exp([1.0])
    assert em.empty(2, 3).shape == (2, 3)
    n = em.normal(2.0, 0.5, (2000,)).numpy()
    assert abs(n.mean() - 2.0) < 0.05 and abs(n.std() - 0.5) < 0.05


def test_bad_input_of_the_new_ops():
    with pytest.raises(em.ShapeError, match="square"):
        em.linalg.inv(em.ones(2, 3))
    with pytest.raises(em.DTypeError, match="float32 or float64"):
        em.linalg.det(em.ones(2, 2, dtype=em.int64))
    with pytest.raises(em.ShapeError, match="rows"):
        em.linalg.solve(em.eye(3), em.ones(2, 2))
    with pytest.raises(em.ShapeError, match="at least 2 dims"):
        em.tril(em.ones(3))
    with pytest.raises(em.ShapeError, match="label"):
        em.einsum("ij,jk->ik", em.ones(2, 3), em.ones(4, 2))
    with pytest.raises(em.ShapeError, match="operands"):
        em.einsum("ij,jk->ik", em.ones(2, 3))
    with pytest.raises(em.DTypeError):
        em.ones(3, dtype=em.int64).norm()
    with pytest.raises(IndexError, match="shape"):
        em.ones(2, 3).flip(2)
    with pytest.raises(em.ShapeError):
        em.ones(2, 3).roll((1, 2), 0)
    with pytest.raises(ValueError):
        em.div(em.ones(2), 2, rounding_mode="round")
    with pytest.raises(em.ShapeError):
        em.ones(3, 4)[em.tensor([0, 1]), em.tensor([0, 1, 2])]
    with pytest.raises(em.KernelError):
        em.linalg.cholesky(-em.eye(2)).numpy()
    w = em.tensor(np.eye(2), device=em.cpu().autodiff()).requires_grad_()
    with pytest.raises(em.EmberError, match="linalg_qr"):
        em.linalg.qr(w)


def test_linalg_refused_at_the_call_on_wgpu():
    devices = em.available("wgpu")
    if not devices:
        pytest.skip("no wgpu adapter")
    with pytest.raises(em.DeviceError, match="linalg.inv"):
        em.linalg.inv(em.eye(2, device=devices[0]))
