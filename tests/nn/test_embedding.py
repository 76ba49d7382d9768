"""Embedding against torch.nn.Embedding: lookups, gradients, padding_idx, init."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.nn import F
from tests.nn.layer_check import assert_same_layout, check_fn, check_pair

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("padding_idx", [None, 0, 3, -1])
@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
def test_embedding_matches_torch(padding_idx, index_dtype):
    tm = torch.nn.Embedding(10, 4, padding_idx=padding_idx)
    with torch.no_grad():  # a non-zero padding row: its value is still returned, not trained
        tm.weight.add_(1.0)
    # repeated ids accumulate gradient; the padding rows appear too
    ids = np.array([[1, 3, 3, 9], [0, 9, 3, 2], [5, 5, 5, 0]], dtype=index_dtype)
    m = check_pair(tm, lambda d, dt: nn.Embedding(10, 4, padding_idx=padding_idx, device=d,
                                                  dtype=dt), [ids])
    assert_same_layout(tm, m)


def test_embedding_float32_and_shapes():
    tm = torch.nn.Embedding(7, 3)
    for ids in (np.array(4), np.arange(7), np.arange(24).reshape(2, 3, 4) % 7):
        check_pair(tm, lambda d, dt: nn.Embedding(7, 3, device=d, dtype=dt), [ids],
                   dtype="float32", grad=False, rtol=0, atol=0)


def test_embedding_init_is_standard_normal_with_zero_padding_row():
    em.manual_seed(0)
    m = nn.Embedding(2000, 50, padding_idx=7)
    w = m.weight.value.numpy()
    assert w.dtype == np.float32 and w.shape == (2000, 50)
    np.testing.assert_array_equal(w[7], 0.0)
    rest = np.delete(w, 7, axis=0)
    assert abs(rest.mean()) < 0.01 and abs(rest.std() - 1.0) < 0.01
    assert m.padding_idx == 7 and nn.Embedding(5, 2, padding_idx=-2).padding_idx == 3


def test_embedding_init_is_reproducible_with_manual_seed():
    em.manual_seed(3)
    a = nn.Embedding(5, 4).weight.value.numpy()
    em.manual_seed(3)
    b = nn.Embedding(5, 4).weight.value.numpy()
    np.testing.assert_array_equal(a, b)


def test_embedding_functional_numpy_reference_and_lists():
    w = np.random.default_rng(0).standard_normal((6, 3))
    ids = [[0, 5], [2, 2]]
    out = F.embedding(ids, em.tensor(w)).numpy()
    np.testing.assert_array_equal(out, w[np.array(ids)])


def test_embedding_functional_padding_gradient():
    w = np.random.default_rng(1).standard_normal((5, 2))
    ids = np.array([1, 2, 1, 4])
    check_fn(lambda i, w: torch.nn.functional.embedding(i, w, padding_idx=1),
             lambda i, w: F.embedding(i, w, padding_idx=1), [ids, w])


def test_embedding_from_pretrained():
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    frozen = nn.Embedding.from_pretrained(em.tensor(table))
    assert frozen.num_params() == 0 and list(frozen.state_dict()) == ["weight"]
    np.testing.assert_array_equal(frozen(em.tensor([3, 0])).numpy(), table[[3, 0]])
    trainable = nn.Embedding.from_pretrained(table, freeze=False)
    assert trainable.num_params() == 12


def test_embedding_errors():
    w = em.ones(4, 2)
    with pytest.raises(em.DTypeError, match="int"):
        F.embedding(em.tensor([0.0, 1.0]), w)
    with pytest.raises(em.ShapeError, match="2-D"):
        F.embedding(em.tensor([0]), em.ones(4))
    with pytest.raises(em.ShapeError, match="padding_idx"):
        F.embedding(em.tensor([0]), w, padding_idx=4)
    with pytest.raises(ValueError, match="padding_idx"):
        nn.Embedding(4, 2, padding_idx=4)
    with pytest.raises(em.KernelError):
        F.embedding(em.tensor([4]), w).numpy()
