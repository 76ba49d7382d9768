"""Indexing errors: bad keys raise at the call; bad index *values* surface at the read."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from tests.runtime_mode import lazy_only


def test_int_out_of_range_names_dim_and_size() -> None:
    x = em.zeros(3, 4)
    with pytest.raises(IndexError, match=r"getitem: index 4 is out of range for dim 1 of size 4 "
                                         r"\(shape \(3, 4\)\)"):
        x[0, 4]
    with pytest.raises(IndexError, match="getitem: index -4 is out of range for dim 0 of size 3"):
        x[-4]


def test_too_many_indices() -> None:
    with pytest.raises(IndexError, match=r"getitem: too many indices for a tensor of shape "
                                         r"\(3, 4\)"):
        em.zeros(3, 4)[0, 0, 0]
    with pytest.raises(IndexError, match=r"too many indices for a tensor of shape \(\)"):
        em.tensor(1.0)[0]


def test_slice_steps_must_be_positive() -> None:
    with pytest.raises(ValueError, match="getitem: slice step must be greater than zero, got -1"):
        em.zeros(3)[::-1]
    with pytest.raises(ValueError, match="got 0"):
        em.zeros(3)[::0]


def test_bad_key_items() -> None:
    x = em.zeros(3, 4)
    with pytest.raises(em.ShapeError, match="getitem: incompatible shapes"):
        x[em.tensor([0, 1]), em.tensor([1, 2, 3])]  # several index tensors must broadcast
    with pytest.raises(IndexError, match="getitem: an index can only have a single ellipsis"):
        x[..., ...]
    with pytest.raises(IndexError, match="getitem: nested lists are not supported"):
        x[[[0, 1], [1, 2]]]
    with pytest.raises(TypeError, match="getitem: cannot index with str"):
        x["a"]
    with pytest.raises(TypeError, match="getitem: slice bounds must be ints or None, got 1.5"):
        x[1.5:]
    with pytest.raises(em.DTypeError, match="getitem: an index tensor must be int32, int64 or "
                                            "bool, got float32"):
        x[em.tensor([0.0])]
    with pytest.raises(em.DTypeError, match="getitem: an index array must hold ints or bools"):
        x[np.array([0.5])]


def test_mask_shape_mismatch() -> None:
    with pytest.raises(IndexError, match=r"getitem: a mask of shape \(2,\) does not match dims "
                                         r"0..0 of the indexed tensor of shape \(3, 4\)"):
        em.zeros(3, 4)[em.tensor([True, False])]
    with pytest.raises(IndexError, match=r"mask of shape \(3, 3\) does not match dims 0..1 .* "
                                         r"\(3, 4\)"):
        em.zeros(3, 4)[em.ones(3, 3, dtype=em.bool)]


def test_index_on_another_device() -> None:
    with pytest.raises(em.DeviceError, match="getitem: tensors are on different devices"):
        em.zeros(3, device="cpu:0")[em.tensor([0], device="cpu:1")]


@lazy_only
def test_index_values_out_of_range_surface_at_the_read() -> None:
    out = em.zeros(3)[em.tensor([0, 3])]  # no error at the call: the values are on the device
    assert out.shape == (2,)
    with pytest.raises(em.KernelError, match="index failed: IndexError") as info:
        out.numpy()
    assert "test_indexing_errors.py" in str(info.value)
    for bad in (lambda: em.zeros(3, 2).gather(0, em.tensor([[3, 0]])),
                lambda: em.zeros(3).gather(0, em.tensor([-1])),
                lambda: em.zeros(3).scatter_add(0, em.tensor([5]), em.ones(1)),
                lambda: em.zeros(3).index_select(0, em.tensor([-1])),
                lambda: em.zeros(3).index_put(em.tensor([7]), 1.0)):
        with pytest.raises(em.KernelError, match="out of (range|bounds)"):
            bad().numpy()


def test_index_put_value_does_not_fit() -> None:
    with pytest.raises(em.ShapeError, match=r"index_put: a value of shape \(4,\) does not "
                                            r"broadcast to the indexed region of shape \(2, 3\) "
                                            r"\(indexing a tensor of shape \(2, 3\)\)"):
        em.zeros(2, 3).index_put(slice(None), em.ones(4))
    with pytest.raises(em.ShapeError, match=r"region of shape \(N, 3\)"):
        em.zeros(2, 3).index_put(em.tensor([True, False]), em.ones(2, 2))
    with pytest.raises(TypeError, match="index_put: the value must be a tensor or a Python "
                                        "scalar, got list"):
        em.zeros(2).index_put(0, [1.0])


def test_setitem_rebinds_and_checks_like_index_put() -> None:
    x = em.zeros(3)
    old = x * 1
    x[0] = 1.0  # second wave: the handle takes the updated value
    assert x.tolist() == [1.0, 0.0, 0.0] and old.tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(em.ShapeError, match="index_put"):
        x[0:2] = em.ones(3)


def test_gather_errors() -> None:
    x = em.zeros(3, 4)
    with pytest.raises(em.ShapeError, match=r"gather: index of shape \(2,\) needs as many dims as "
                                            r"the input of shape \(3, 4\)"):
        x.gather(1, em.tensor([0, 1]))
    with pytest.raises(em.ShapeError, match=r"gather: index of shape \(4, 1\) is larger than the "
                                            r"input of shape \(3, 4\) in dim 0"):
        x.gather(1, em.zeros(4, 1, dtype=em.int64))
    with pytest.raises(em.DTypeError, match="gather: the index must be an int32 or int64 tensor, "
                                            "got float32"):
        x.gather(1, em.zeros(3, 1))
    with pytest.raises(TypeError, match="gather: expected a tensor as index, got list"):
        x.gather(1, [[0]])
    with pytest.raises(IndexError, match="gather: dim 2 is out of range"):
        x.gather(2, em.zeros(3, 1, dtype=em.int64))


def test_scatter_add_errors() -> None:
    x = em.zeros(3, 4)
    index = em.zeros(2, 4, dtype=em.int64)
    with pytest.raises(em.DTypeError, match="scatter_add: src has dtype float64 but the input has "
                                            "float32; help: convert with src.to\\(em.float32\\)"):
        x.scatter_add(0, index, em.ones(2, 4, dtype=em.float64))
    with pytest.raises(em.ShapeError, match=r"scatter_add: index is too large in dim 1 \(input "
                                            r"\(3, 4\), index \(2, 4\), src \(2, 3\)\)"):
        x.scatter_add(0, index, em.ones(2, 3))
    with pytest.raises(em.ShapeError, match=r"index is too large in dim 1 \(input \(3, 4\), index "
                                            r"\(1, 5\), src \(2, 5\)\)"):
        x.scatter_add(0, em.zeros(1, 5, dtype=em.int64), em.ones(2, 5))
    with pytest.raises(em.ShapeError, match=r"scatter_add: input, index and src need the same "
                                            r"number of dims, got input \(3, 4\), index \(4,\)"):
        x.scatter_add(0, em.zeros(4, dtype=em.int64), em.ones(4))
    with pytest.raises(em.DeviceError, match="scatter_add: tensors are on different devices"):
        x.scatter_add(0, index, em.ones(2, 4, device="cpu:1"))


def test_index_select_errors() -> None:
    x = em.zeros(3, 4)
    with pytest.raises(em.ShapeError, match=r"index_select: the index must be 1-D, got shape "
                                            r"\(1, 2\)"):
        x.index_select(0, em.zeros(1, 2, dtype=em.int64))
    with pytest.raises(em.DTypeError, match="index_select: the index must be an int32 or int64 "
                                            "tensor, got bool"):
        x.index_select(0, em.tensor([True]))
    with pytest.raises(em.ShapeError, match="index_select: indexing a 0-d tensor needs exactly "
                                            "one index"):
        em.tensor(1.0).index_select(0, em.tensor([0, 0]))


def test_masked_fill_errors() -> None:
    x = em.zeros(2, 3)
    with pytest.raises(em.DTypeError, match="masked_fill: the mask must be a bool tensor, got "
                                            "int64"):
        x.masked_fill(em.tensor([1, 0, 1]), 1.0)
    with pytest.raises(em.ShapeError, match=r"masked_fill: incompatible shapes for broadcasting: "
                                            r"\(2, 3\), \(2,\)"):
        x.masked_fill(em.tensor([True, False]), 1.0)
    with pytest.raises(em.ShapeError, match=r"masked_fill: the value must be a scalar or a 0-d "
                                            r"tensor, got shape \(3,\)"):
        x.masked_fill(em.tensor([True, False, True]), em.ones(3))
    with pytest.raises(TypeError, match="masked_fill: the value must be a tensor or a Python "
                                        "scalar, got str"):
        x.masked_fill(em.tensor([True, False, True]), "a")
