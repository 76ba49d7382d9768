"""pad, interpolate / Upsample, normalize, cosine_similarity and one_hot against torch."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.nn import functional as F
from tests.nn.layer_check import check_fn, check_pair, randn

torch = pytest.importorskip("torch")
TF = torch.nn.functional

PADS = [
    ((2, 3, 5, 6), (1, 2), "constant", None), ((2, 3, 5, 6), (1, 2, 0, 3), "constant", 1.5),
    ((2, 3, 5, 6), (-1, 2, 1, -2), "constant", None), ((4,), (2, 0), "constant", -1.0),
    ((2, 3, 5), (4, 2), "reflect", None), ((2, 3, 5, 6), (2, 1, 1, 3), "reflect", None),
    ((3, 5, 6), (2, 1, 1, 3), "replicate", None), ((1, 2, 3, 4, 5), (1, 2, 2, 1, 1, 1),
                                                   "replicate", None),
    ((2, 3, 5), (5, 2), "circular", None), ((2, 3, 5, 6), (2, 1, 1, 3), "circular", None),
    ((0, 3, 5), (1, 2), "reflect", None), ((1, 1, 4), (-1, 1), "replicate", None),
]


@pytest.mark.parametrize(("shape", "pad", "mode", "value"), PADS)
def test_pad_matches_torch(shape, pad, mode, value):
    kw = {} if value is None else {"value": value}
    check_fn(lambda x: TF.pad(x, pad, mode, **kw), lambda x: F.pad(x, pad, mode, **kw),
             [randn(*shape)], grad=0 not in shape)


def test_pad_float32_ints_and_errors():
    check_fn(lambda x: TF.pad(x, (1, 1, 2, 0), "reflect"),
             lambda x: F.pad(x, (1, 1, 2, 0), "reflect"),
             [randn(2, 2, 4, 4).astype(np.float32)], rtol=1e-6)
    got = F.pad(em.tensor([[1, 2]]), (1, 1), value=7)
    assert got.dtype == em.int64 and got.tolist() == [[7, 1, 2, 7]]
    x = em.zeros(2, 3, 4)
    with pytest.raises(ValueError, match="pad: padding length must be even"):
        F.pad(x, (1, 2, 3))
    with pytest.raises(em.ShapeError, match="pad"):
        F.pad(x, (1, 1) * 4)
    with pytest.raises(em.ShapeError, match="reflect"):
        F.pad(x, (4, 0), "reflect")
    with pytest.raises(em.ShapeError, match="circular"):
        F.pad(x, (5, 0), "circular")
    with pytest.raises(em.ShapeError, match="pad"):
        F.pad(em.zeros(4), (1, 1), "replicate")
    with pytest.raises(em.ShapeError, match="negative"):
        F.pad(x, (-3, -2))
    with pytest.raises(ValueError, match="mode"):
        F.pad(x, (1, 1), "wrap")


INTERPOLATIONS = [
    ((2, 3, 5, 6), dict(scale_factor=2)), ((2, 3, 5, 6), dict(size=(7, 11))),
    ((2, 3, 5, 6), dict(scale_factor=1.7)), ((2, 3, 5, 6), dict(size=(3, 4))),
    ((2, 3, 5, 6), dict(scale_factor=(2, 3), mode="nearest-exact")),
    ((2, 3, 5, 6), dict(scale_factor=2, mode="bilinear")),
    ((2, 3, 5, 6), dict(size=(7, 11), mode="bilinear")),
    ((2, 3, 5, 6), dict(size=(7, 11), mode="bilinear", align_corners=True)),
    ((2, 3, 5, 6), dict(scale_factor=0.6, mode="bilinear")),
    ((2, 3, 5, 6), dict(scale_factor=1.5, mode="bilinear", recompute_scale_factor=True)),
    ((2, 3, 6, 6), dict(size=(2, 3), mode="area")), ((1, 1, 5, 6), dict(size=1, mode="bilinear")),
    ((2, 3, 5), dict(scale_factor=3, mode="linear")), ((2, 3, 5), dict(size=8)),
    ((2, 3, 5), dict(size=8, mode="linear", align_corners=True)),
    ((1, 2, 3, 4, 2), dict(scale_factor=2, mode="trilinear")),
    ((1, 2, 3, 4, 2), dict(size=(4, 5, 3))), ((0, 3, 4, 4), dict(scale_factor=2)),
]


@pytest.mark.parametrize(("shape", "kw"), INTERPOLATIONS)
def test_interpolate_matches_torch(shape, kw):
    check_fn(lambda x: TF.interpolate(x, **kw), lambda x: F.interpolate(x, **kw),
             [randn(*shape)], rtol=1e-10, atol=1e-12, grad=0 not in shape)


def test_interpolate_float32_and_upsample_modules():
    x = randn(2, 3, 5, 6)
    check_pair(torch.nn.Upsample(scale_factor=2, mode="bilinear"),
               lambda d, t: nn.Upsample(scale_factor=2, mode="bilinear"), [x],
               dtype="float32", rtol=1e-5, atol=1e-6)
    for t_mod, e_mod in [(torch.nn.Upsample(size=(8, 9)), nn.Upsample(size=(8, 9))),
                         (torch.nn.UpsamplingNearest2d(scale_factor=3),
                          nn.UpsamplingNearest2d(scale_factor=3)),
                         (torch.nn.UpsamplingBilinear2d(size=(7, 7)),
                          nn.UpsamplingBilinear2d(size=(7, 7)))]:
        check_pair(t_mod, lambda d, t: e_mod, [x])


def test_interpolate_errors():
    x = em.zeros(1, 2, 4, 4)
    with pytest.raises(ValueError, match="exactly one"):
        F.interpolate(x)
    with pytest.raises(ValueError, match="exactly one"):
        F.interpolate(x, size=3, scale_factor=2)
    with pytest.raises(ValueError, match="align_corners"):
        F.interpolate(x, scale_factor=2, align_corners=True)
    with pytest.raises(em.ShapeError, match="linear"):
        F.interpolate(x, scale_factor=2, mode="linear")
    with pytest.raises(em.ShapeError, match="interpolate"):
        F.interpolate(em.zeros(4, 4), scale_factor=2)
    with pytest.raises(ValueError, match="mode"):
        F.interpolate(x, scale_factor=2, mode="bicubic")
    with pytest.raises(ValueError, match="size"):
        F.interpolate(x, size=(2, 3, 4))


@pytest.mark.parametrize(("p", "dim"), [(2.0, 1), (1.0, -1), (3.0, 0), (float("inf"), 1)])
def test_normalize_matches_torch(p, dim):
    x = randn(4, 5, 3)
    x[0, :, 0] = 0.0  # a zero vector along dim 1: stays zero, zero gradient
    check_fn(lambda t: TF.normalize(t, p, dim), lambda t: F.normalize(t, p, dim), [x])
    check_fn(lambda t: TF.normalize(t, p, dim), lambda t: F.normalize(t, p, dim),
             [x.astype(np.float32)], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("s1", "s2", "dim"), [((4, 5), (4, 5), 1), ((3, 1, 6), (4, 6), -1),
                                               ((2, 3, 4), (2, 3, 4), 0), ((0, 4), (0, 4), 1)])
def test_cosine_similarity_matches_torch(s1, s2, dim):
    check_fn(lambda a, b: TF.cosine_similarity(a, b, dim),
             lambda a, b: F.cosine_similarity(a, b, dim), [randn(*s1), randn(*s2, seed=1)],
             grad=0 not in s1)
    with pytest.raises(em.DTypeError, match="cosine_similarity"):
        F.cosine_similarity(em.zeros(2, 3, dtype="int64"), em.zeros(2, 3))
    with pytest.raises(em.ShapeError, match="cosine_similarity"):
        F.cosine_similarity(em.zeros(2, 3), em.zeros(4, 3))


def test_one_hot_matches_torch():
    idx = np.array([[0, 3], [2, 1], [1, 1]])
    for n in (-1, 4, 6):
        want = TF.one_hot(torch.tensor(idx), n).numpy()
        got = F.one_hot(em.tensor(idx), n)
        assert got.dtype == em.int64
        np.testing.assert_array_equal(got.numpy(), want)
    assert F.one_hot(em.tensor(np.zeros(0, np.int64)), 3).shape == (0, 3)
    assert F.one_hot(em.tensor(2), 3).tolist() == [0, 0, 1]
    with pytest.raises(em.DTypeError, match="one_hot"):
        F.one_hot(em.zeros(3), 2)
    with pytest.raises(em.ShapeError, match="one_hot"):
        F.one_hot(em.tensor(np.zeros(0, np.int64)))
