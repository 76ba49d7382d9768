"""Bad input of the issue-24 ops raises on the caller's line, naming the op; and the
whole-array scan the GPU takes agrees with NumPy's accumulate."""

from __future__ import annotations

import types

import numpy as np
import pytest

import ember as em
from ember.kernels.numpy import scans

F = em.nn.functional


def test_running_ops_check_dim_and_dtype():
    x = em.ones(2, 3)
    with pytest.raises(IndexError, match=r"^cumprod: dim 2 is out of range"):
        x.cumprod(2)
    with pytest.raises(IndexError, match=r"^cummax: dim -3"):
        x.cummax(-3)
    with pytest.raises(em.DTypeError, match=r"^logcumsumexp: needs a floating-point tensor, got "
                                            r"int64"):
        em.tensor([1, 2]).logcumsumexp(0)


def test_scatter_checks_index_src_and_reduce():
    x, i = em.zeros(3, 4), em.tensor([[0, 1, 2, 0]])
    with pytest.raises(em.DTypeError, match=r"^scatter: the index must be an int32 or int64"):
        x.scatter(0, i.float(), 1.0)
    with pytest.raises(em.DTypeError, match=r"^scatter_reduce: src has dtype int64 but the "
                                            r"input has float32"):
        x.scatter_reduce(0, i, em.tensor([[1, 2, 3, 4]]), "sum")
    with pytest.raises(em.ShapeError, match=r"^scatter: index is too large in dim 1 \(input "
                                            r"\(3, 4\), index \(1, 5\), src \(1, 5\)\)"):
        x.scatter(0, em.tensor([[0, 0, 0, 0, 0]]), em.zeros(1, 5))
    with pytest.raises(em.ShapeError, match=r"same number of dims"):
        x.scatter(0, em.tensor([0, 1]), em.zeros(2))
    with pytest.raises(ValueError, match=r"^scatter_reduce: reduce must be one of"):
        x.scatter_reduce(0, i, em.ones(1, 4), "max")
    with pytest.raises(ValueError, match=r"^scatter: reduce must be None, 'add' or"):
        x.scatter(0, i, 1.0, reduce="sum")
    with pytest.raises(em.DTypeError, match=r"not defined for bool"):
        em.zeros(3, dtype=em.bool).scatter_reduce(0, em.tensor([0]), em.ones(1, dtype=em.bool),
                                                  "sum")
    # The range is checked at the read (at the call with EMBER_EAGER=1).
    with pytest.raises(em.KernelError, match="scatter"):
        x.scatter(0, em.tensor([[5, 0, 0, 0]]), 1.0).numpy()


def test_scatter_legacy_reduce_and_value_keyword():
    x, i = em.ones(3), em.tensor([0, 0, 2])
    np.testing.assert_array_equal(x.scatter(0, i, em.tensor([2.0, 3.0, 4.0]),
                                            reduce="multiply").numpy(), [6.0, 1.0, 4.0])
    np.testing.assert_array_equal(x.scatter(0, i, value=5.0).numpy(), [5.0, 1.0, 5.0])


def test_unfold_and_linspace_refusals():
    with pytest.raises(em.ShapeError, match=r"^unfold: size 4 does not fit dimension 0 of "
                                            r"size 3"):
        em.arange(3).unfold(0, 4, 1)
    with pytest.raises(ValueError, match=r"^unfold: step is 0 but must be > 0"):
        em.arange(3).unfold(0, 2, 0)
    with pytest.raises(em.DTypeError, match=r"^linspace: not defined for bool"):
        em.linspace(0, 1, 3, dtype=em.bool)


def test_conv3d_and_pool3d_shapes_are_checked():
    with pytest.raises(em.ShapeError, match=r"^conv3d: expected a 4-D \(C, D, H, W\) or 5-D"):
        F.conv3d(em.ones(3, 4, 4), em.ones(1, 3, 1, 1, 1))
    with pytest.raises(em.ShapeError, match=r"^conv3d: input \(1, 3, 4, 4, 4\) and weight "
                                            r"\(2, 2, 1, 1, 1\) do not agree with groups=1"):
        F.conv3d(em.ones(1, 3, 4, 4, 4), em.ones(2, 2, 1, 1, 1))
    with pytest.raises(em.ShapeError, match=r"^conv3d: kernel depth 5"):
        F.conv3d(em.ones(1, 1, 3, 4, 4), em.ones(1, 1, 5, 1, 1))
    with pytest.raises(em.ShapeError, match=r"^max_pool3d: padding 2 must be at most half"):
        F.max_pool3d(em.ones(1, 1, 4, 4, 4), 2, padding=2)
    with pytest.raises(em.ShapeError, match=r"^avg_pool3d: divisor_override must be a non-zero"):
        F.avg_pool3d(em.ones(1, 1, 4, 4, 4), 2, divisor_override=0)
    with pytest.raises(NotImplementedError, match="return_indices"):
        em.nn.MaxPool3d(2, return_indices=True)


@pytest.mark.parametrize("ufunc", ["maximum", "minimum", "logaddexp", "add"])
@pytest.mark.parametrize("n", [0, 1, 2, 5, 8, 13])
def test_whole_array_scan_matches_numpy_accumulate(ufunc, n):
    # A stand-in module that is not NumPy itself takes the scan path, as CuPy does.
    mirror = types.SimpleNamespace(**{ufunc: getattr(np, ufunc)})
    lines = np.random.default_rng(n).standard_normal((3, n))
    lines[0, n // 2:n // 2 + 1] = np.nan
    got = scans._accumulate(mirror, ufunc, lines)
    np.testing.assert_allclose(got, getattr(np, ufunc).accumulate(lines, axis=-1), rtol=1e-12)


def test_view_dtype_bitcasts_with_torchs_shape_rules():
    torch = pytest.importorskip("torch")
    x = (np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5)
    for ember_dtype, torch_dtype in ((em.int32, torch.int32), (em.float16, torch.float16),
                                     (em.float32, torch.float32)):
        got, want = em.tensor(x).view(ember_dtype), torch.tensor(x).view(torch_dtype)
        assert got.dtype is ember_dtype and got.shape == tuple(want.shape)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    halves = em.tensor(np.full((2, 4), 1.5, np.float16))
    np.testing.assert_array_equal(halves.view(em.float32).numpy(),
                                  np.full((2, 4), 1.5, np.float16).view(np.float32))
    assert halves.view(em.int64).shape == (2, 1) and em.ones(2, 3).view(3, 2).shape == (3, 2)
    with pytest.raises(em.ShapeError, match=r"^view: a 0-d tensor has no last dim"):
        em.tensor(1.0).view(em.float16)
    with pytest.raises(em.ShapeError, match=r"^view: the last dim of shape \(2, 3\) must hold"):
        em.ones(2, 3, dtype=em.float16).view(em.float32)
    tracked = em.ones(3, device=em.cpu().autodiff()).require_grad()
    assert not tracked.view(em.int32).is_tracked


@pytest.mark.parametrize("ufunc", ["multiply", "maximum", "minimum"])
def test_reductions_in_rounds_match_ufunc_at(ufunc):
    # The path a module without multiply.at (CuPy), or whose maximum.at / minimum.at round
    # float64, takes, through a stand-in module.
    from ember.kernels.numpy import scatter

    mirror = types.SimpleNamespace(**{name: getattr(np, name) for name in (
        "ravel_multi_index", "broadcast_arrays", "argsort", "concatenate", "ones", "arange",
        "maximum", "where")})
    rng = np.random.default_rng(5)
    out = rng.standard_normal((3, 4))
    index = rng.integers(0, 3, (6, 4))
    part = rng.standard_normal((6, 4))
    key = (index, np.arange(4).reshape(1, 4))
    want = out.copy()
    getattr(np, ufunc).at(want, key, part)
    scatter._reduce_in_rounds(mirror, getattr(np, ufunc), out, key, part)
    np.testing.assert_array_equal(out, want)
