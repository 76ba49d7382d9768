"""Sorting ops reject bad calls on the caller's line, naming the op and the bad dim, k or shape."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ember as em


@pytest.mark.parametrize("op", ["sort", "argsort", "topk"])
@pytest.mark.parametrize(("shape", "dim"), [((2, 3), 2), ((2, 3), -3), ((), 1), ((4,), -2)])
def test_dim_out_of_range(op, shape, dim):
    x = em.zeros(shape)
    call = (lambda: x.topk(0, dim)) if op == "topk" else (lambda: getattr(x, op)(dim))
    with pytest.raises(IndexError, match=rf"^{op}: dim {dim} is out of range for a tensor of "
                                         rf"{len(shape)} dims"):
        call()


@pytest.mark.parametrize("op", ["sort", "argsort"])
def test_dim_must_be_an_int(op):
    with pytest.raises(TypeError, match=rf"^{op}: dim must be an int, got tuple"):
        getattr(em.zeros((2, 3)), op)((0, 1))


@pytest.mark.parametrize(("shape", "k", "dim", "size"), [
    ((2, 3), 4, -1, 3), ((2, 3), -1, 1, 3), ((2, 3), 3, 0, 2), ((2, 0), 1, 1, 0), ((), 2, 0, 1),
])
def test_topk_k_out_of_range(shape, k, dim, size):
    with pytest.raises(em.ShapeError, match=rf"^topk: k={k} is out of range for dim {dim} of "
                                            rf"size {size} in shape {re.escape(str(shape))}"):
        em.zeros(shape).topk(k, dim)


@pytest.mark.parametrize("k", [1.0, "2", True, None])
def test_topk_k_must_be_an_int(k):
    with pytest.raises(TypeError, match=r"^topk: k must be an int"):
        em.zeros((2, 3)).topk(k)


def test_topk_k_may_be_a_numpy_integer():
    values, indices = em.tensor([3.0, 1.0, 2.0]).topk(np.int64(2))
    assert values.tolist() == [3.0, 2.0] and indices.tolist() == [0, 2]
