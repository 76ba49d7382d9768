"""Reductions reject bad calls on the caller's line, naming the op and the bad dim, shape, dtype."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ember as em

REDUCTIONS = ("sum", "mean", "prod", "max", "min", "any", "all", "logsumexp", "var", "std")


def _tensor(shape, dtype=em.float32):
    return em.zeros(shape, dtype=dtype)


@pytest.mark.parametrize("op", ["mean", "var", "std"])
@pytest.mark.parametrize("dtype", [em.int32, em.int64, em.bool])
def test_mean_var_std_need_floats(op, dtype):
    with pytest.raises(em.DTypeError, match=rf"^{op}: .*{dtype.name}"):
        getattr(_tensor((2, 3), dtype), op)(dim=1)


@pytest.mark.parametrize("op", REDUCTIONS + ("argmax", "argmin"))
@pytest.mark.parametrize("dim", [2, -3, 7])
def test_dim_out_of_range(op, dim):
    with pytest.raises(IndexError,
                       match=rf"^{op}: dim {dim} is out of range for a tensor of 2 dims"):
        getattr(_tensor((2, 3)), op)(dim=dim)


@pytest.mark.parametrize("op", REDUCTIONS)
def test_dim_out_of_range_inside_a_tuple(op):
    with pytest.raises(IndexError, match=rf"^{op}: dim 3 is out of range for a tensor of 3 dims"):
        getattr(_tensor((2, 3, 4)), op)(dim=(0, 3))


@pytest.mark.parametrize("op", REDUCTIONS + ("argmax", "argmin", "cumsum"))
def test_zero_dim_tensor_accepts_only_0_and_minus_1(op):
    with pytest.raises(IndexError, match=rf"^{op}: dim 1 is out of range for a tensor of 0 dims"):
        getattr(_tensor(()), op)(1)


@pytest.mark.parametrize("op", REDUCTIONS)
@pytest.mark.parametrize("dims", [(1, 1), (0, -3), (2, 0, -1)])
def test_duplicate_dims(op, dims):
    with pytest.raises(em.ShapeError, match=rf"^{op}: dim \d appears more than once in "
                                            rf"{re.escape(str(dims))}"):
        getattr(_tensor((2, 3, 4)), op)(dim=dims)


@pytest.mark.parametrize("op", ["max", "min", "argmax", "argmin"])
@pytest.mark.parametrize(("shape", "dim", "bad"), [
    ((0,), None, 0), ((2, 0), None, 1), ((2, 0), 1, 1), ((0, 3), 0, 0), ((0, 3), -2, 0),
    ((3, 0, 2), 1, 1),
])
def test_extremes_of_nothing(op, shape, dim, bad):
    with pytest.raises(em.ShapeError, match=rf"^{op}: cannot reduce over dim {bad}, of size 0 "
                                            rf"in shape {re.escape(str(shape))}"):
        getattr(_tensor(shape), op)(dim=dim)


@pytest.mark.parametrize("op", ["max", "min"])
def test_extremes_of_nothing_in_a_tuple(op):
    with pytest.raises(em.ShapeError, match=rf"^{op}: cannot reduce over dim 2, of size 0 "
                                            r"in shape \(2, 3, 0\)"):
        getattr(_tensor((2, 3, 0)), op)(dim=(0, 2))


@pytest.mark.parametrize("op", ["max", "min", "argmax", "argmin"])
def test_extremes_over_a_non_empty_dim_of_an_empty_tensor_are_fine(op):
    out = getattr(_tensor((0, 3)), op)(dim=1)
    assert out.shape == (0,) and out.numpy().shape == (0,)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_reductions_take_one_dim(op):
    with pytest.raises(TypeError, match=rf"^{op}: dim must be an int, got tuple"):
        getattr(_tensor((2, 3)), op)(dim=(0, 1))


@pytest.mark.parametrize("op", REDUCTIONS)
def test_dim_of_the_wrong_type(op):
    with pytest.raises(TypeError, match=rf"^{op}: dim must be an int, a tuple of ints or None, "
                                        r"got float"):
        getattr(_tensor((2, 3)), op)(dim=1.0)
    with pytest.raises(TypeError, match=rf"^{op}: dim must be an int, got bool"):
        getattr(_tensor((2, 3)), op)(dim=True)


@pytest.mark.parametrize("op", ["var", "std"])
@pytest.mark.parametrize("correction", ["1", None, True])
def test_correction_must_be_a_number(op, correction):
    with pytest.raises(TypeError, match=rf"^{op}: correction must be an int or a float"):
        getattr(_tensor((2, 3)), op)(correction=correction)


def test_cumsum_dim_is_checked():
    with pytest.raises(IndexError, match=r"^cumsum: dim -3 is out of range for a tensor of 2 dims"):
        _tensor((2, 3)).cumsum(-3)
    with pytest.raises(TypeError, match=r"^cumsum: dim must be an int, got NoneType"):
        _tensor((2, 3)).cumsum(None)


@pytest.mark.parametrize("bad", [
    lambda x, n: x.max(dim=1), lambda x, n: x.argmin(), lambda x, n: x.sum(dim=5),
    lambda x, n: n.mean(), lambda x, n: x.var(dim=(1, 1)), lambda x, n: x.cumsum(2),
    lambda x, n: n.topk(4), lambda x, n: n.sort(dim=2),
], ids=["max-empty", "argmin-empty", "sum-dim", "mean-int", "var-duplicate", "cumsum-dim",
        "topk-k", "sort-dim"])
def test_a_rejected_call_submits_nothing(bad):
    x, n = _tensor((2, 0)), _tensor((2, 3), em.int64)
    submitted = em.stats(x.device).ops_submitted
    with pytest.raises((em.EmberError, IndexError)):
        bad(x, n)
    assert em.stats(x.device).ops_submitted == submitted


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64", "bool"])
def test_kernels_leave_their_input_intact(dtype):
    data = (np.arange(12).reshape(3, 4) - 5.5).astype(em.dtype.as_dtype(dtype).np)
    x = em.tensor(data)
    outs = [x.sum(1), x.prod(), x.max(0), x.min(1), x.any(), x.all(1), x.logsumexp(1),
            x.argmax(1), x.argmin(), x.cumsum(1), x.sort(0, descending=True)[0],
            x.argsort(1), x.topk(2, 1)[1]]
    if x.dtype.is_floating_point:
        outs += [x.mean(0), x.var(1), x.std(correction=0)]
    for out in outs:
        out.numpy()
    np.testing.assert_array_equal(x.numpy(), data)
