"""Shape, indexing and matmul results checked against PyTorch itself, on a sample of calls.

The table-driven cases compare with NumPy references written to PyTorch's
semantics; this file makes sure those semantics are PyTorch's.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember as em

torch = pytest.importorskip("torch")

_rng = np.random.default_rng(7)


def _pair(shape, dtype=np.float32):
    data = _rng.standard_normal(shape).astype(dtype)
    return em.tensor(data), torch.from_numpy(data.copy())


def _same(got, want) -> None:
    if isinstance(want, (tuple, list)):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _same(g, w)
        return
    assert got.shape == tuple(want.shape)
    if want.dtype == torch.bfloat16:
        want = want.float()
        got = got.to(em.float32)
    np.testing.assert_allclose(got.numpy().astype(np.float64), want.numpy().astype(np.float64),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lhs, rhs", [((5,), (5,)), ((3, 5), (5,)), ((5,), (2, 5, 3)),
                                      ((2, 1, 3, 4), (5, 4, 2)), ((0, 3), (3, 2)),
                                      ((3, 0), (0, 2))])
def test_matmul(lhs, rhs) -> None:
    (a, ta), (b, tb) = _pair(lhs), _pair(rhs)
    _same(a @ b, ta @ tb)


def test_matmul_bfloat16_accumulates_like_torch() -> None:
    data = _rng.standard_normal((16, 512)).astype(np.float32)
    a, ta = em.tensor(data).to(em.bfloat16), torch.from_numpy(data).to(torch.bfloat16)
    got = (a @ a.T).to(em.float32).numpy()
    want = (ta @ ta.T).float().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-1)


SHAPE_CALLS = [
    ("reshape", (2, 3, 4), lambda t: t.reshape(4, -1)),
    ("flatten", (2, 3, 4), lambda t: t.flatten(1)),
    ("flatten_0d", (), lambda t: t.flatten()),
    ("squeeze", (1, 3, 1), lambda t: t.squeeze()),
    ("squeeze_tuple", (1, 3, 1), lambda t: t.squeeze((0, 1))),
    ("unsqueeze", (3, 4), lambda t: t.unsqueeze(-2)),
    ("permute", (2, 3, 4), lambda t: t.permute(2, 0, 1)),
    ("transpose", (2, 3, 4), lambda t: t.transpose(-1, 0)),
    ("T", (3, 4), lambda t: t.T),
    ("expand", (3, 1), lambda t: t.expand(2, -1, 4)),
    ("repeat", (2, 3), lambda t: t.repeat(2, 1, 3)),
    ("chunk", (5, 4), lambda t: t.chunk(3)),
    ("chunk_uneven", (6,), lambda t: t.chunk(4)),
    ("chunk_empty", (0, 2), lambda t: t.chunk(3)),
    ("split", (5, 4), lambda t: t.split(2, -1)),
    ("split_sizes", (5, 4), lambda t: t.split([1, 4])),
]


@pytest.mark.parametrize("name, shape, fn", SHAPE_CALLS, ids=[c[0] for c in SHAPE_CALLS])
def test_shape_ops(name, shape, fn) -> None:
    x, tx = _pair(shape)
    _same(fn(x), tuple(fn(tx)) if name.startswith(("chunk", "split")) else fn(tx))


def test_cat_and_stack() -> None:
    (a, ta), (b, tb) = _pair((2, 3)), _pair((2, 1), np.float64)
    _same(em.cat([a, b], -1), torch.cat([ta, tb], -1))
    (e, te) = _pair((0,), np.int32)
    got, want = em.cat([e, a]), torch.cat([te, ta])
    assert got.dtype.name == str(want.dtype)[6:]
    _same(got, want)
    _same(em.stack([a, a], dim=-1), torch.stack([ta, ta], dim=-1))


def _index_pair(values):
    data = np.asarray(values, np.int64)
    return em.tensor(data), torch.from_numpy(data.copy())


GETITEM_KEYS = [
    ("basic", lambda i, m: (1, slice(None, None, 2), None)),
    ("int_slice_tensor", lambda i, m: (0, slice(None), i)),
    ("tensor_first", lambda i, m: (i,)),
    ("tensor_after_none", lambda i, m: (None, slice(1, None), i)),
    ("ellipsis_tensor", lambda i, m: (Ellipsis, i)),
    ("mask", lambda i, m: (m,)),
    ("int_mask", lambda i, m: (1, m)),
    ("list", lambda i, m: ([2, 0],)),
    ("bool_scalar", lambda i, m: (True,)),
]


@pytest.mark.parametrize("name, make_key", GETITEM_KEYS, ids=[k[0] for k in GETITEM_KEYS])
def test_getitem(name, make_key) -> None:
    x, tx = _pair((3, 3, 4))
    i, ti = _index_pair([[2, -1], [0, 1]])
    mask = np.array([True, False, True])
    m, tm = em.tensor(mask), torch.from_numpy(mask.copy())
    _same(x[make_key(i, m)], tx[make_key(ti, tm)])


def test_index_put() -> None:
    x, tx = _pair((4, 3))
    v, tv = _pair((2, 3))
    i, ti = _index_pair([3, 0])
    _same(x.index_put(i, v), tx.index_put((ti,), tv))
    mask = np.array([True, False, True, False])
    _same(x.index_put(em.tensor(mask), v), tx.index_put((torch.from_numpy(mask),), tv))


def test_gather_scatter_add_index_select_masked_fill() -> None:
    x, tx = _pair((3, 4))
    i, ti = _index_pair([[0, 3, 3, 1, 2], [1, 0, 2, 2, 2]])
    _same(x.gather(1, i), tx.gather(1, ti))
    src, tsrc = _pair((2, 5))
    _same(x.scatter_add(1, i, src), tx.scatter_add(1, ti, tsrc))
    j, tj = _index_pair([[0, 2, 0, 0], [2, 2, 1, 0]])
    _same(x.scatter_add(0, j, src[:, :4]), tx.scatter_add(0, tj, tsrc[:, :4]))
    k, tk = _index_pair([2, 0, 2])
    _same(x.index_select(0, k), tx.index_select(0, tk))
    mask = np.array([[True], [False], [True]])
    _same(x.masked_fill(em.tensor(mask), -1.5), tx.masked_fill(torch.from_numpy(mask), -1.5))
    n, tn = _index_pair([1, 0, 3])
    ints = em.tensor(n.numpy())
    _same(ints.masked_fill(em.tensor([True, False, True]), 2.7),
          tn.masked_fill(torch.tensor([True, False, True]), 2.7))
