"""MaxPool1d, AvgPool1d, AdaptiveAvgPool1d, AdaptiveMaxPool1d/2d against torch: values,
gradients, indices, unbatched, batch 1 and empty batch, errors."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.nn import functional as F
from tests.nn.layer_check import check_pair, randn

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=3, dilation=2), dict(kernel_size=(2,),
                                                                      ceil_mode=True)])
@pytest.mark.parametrize("shape", [(2, 3, 9), (1, 2, 5), (3, 8)])
def test_max_pool1d(kw, shape):
    check_pair(torch.nn.MaxPool1d(**kw), lambda d, t: nn.MaxPool1d(**kw), [randn(*shape)])
    check_pair(torch.nn.MaxPool1d(**kw, return_indices=True),
               lambda d, t: nn.MaxPool1d(**kw, return_indices=True), [randn(*shape)], grad=False)


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=3, stride=2, padding=1,
                                     count_include_pad=False),
                                dict(kernel_size=2, ceil_mode=True)])
@pytest.mark.parametrize("shape", [(2, 3, 9), (1, 2, 5), (3, 8)])
def test_avg_pool1d(kw, shape):
    check_pair(torch.nn.AvgPool1d(**kw), lambda d, t: nn.AvgPool1d(**kw), [randn(*shape)])


@pytest.mark.parametrize("out", [1, 3, 4, 7, 9])
def test_adaptive_1d(out):
    x = randn(2, 3, 9)
    check_pair(torch.nn.AdaptiveAvgPool1d(out), lambda d, t: nn.AdaptiveAvgPool1d(out), [x])
    check_pair(torch.nn.AdaptiveMaxPool1d(out), lambda d, t: nn.AdaptiveMaxPool1d(out), [x])
    check_pair(torch.nn.AdaptiveMaxPool1d(out, True),
               lambda d, t: nn.AdaptiveMaxPool1d(out, True), [x[0]], grad=False)


@pytest.mark.parametrize("out", [1, (3, 2), (5, 7), (4, None), (10, 7), (6, 4)])
@pytest.mark.parametrize("shape", [(2, 3, 10, 7), (1, 1, 10, 7), (3, 10, 7)])
def test_adaptive_max_pool2d(out, shape):
    check_pair(torch.nn.AdaptiveMaxPool2d(out), lambda d, t: nn.AdaptiveMaxPool2d(out),
               [randn(*shape)])
    check_pair(torch.nn.AdaptiveMaxPool2d(out, return_indices=True),
               lambda d, t: nn.AdaptiveMaxPool2d(out, return_indices=True), [randn(*shape)],
               grad=False)


def test_float32_and_empty_batch():
    x = randn(0, 3, 10, 7)
    for t_mod, e_mod in [(torch.nn.AdaptiveMaxPool2d((3, 2)), nn.AdaptiveMaxPool2d((3, 2))),
                         (torch.nn.AdaptiveMaxPool2d(5), nn.AdaptiveMaxPool2d(5))]:
        check_pair(t_mod, lambda d, t: e_mod, [x], grad=False)
        check_pair(t_mod, lambda d, t: e_mod, [randn(2, 3, 10, 7)], dtype="float32",
                   rtol=1e-6, atol=1e-6)
    check_pair(torch.nn.MaxPool1d(2), lambda d, t: nn.MaxPool1d(2), [randn(0, 3, 8)],
               grad=False)
    check_pair(torch.nn.AvgPool1d(3), lambda d, t: nn.AvgPool1d(3), [randn(2, 3, 8)],
               dtype="float32", rtol=1e-6, atol=1e-6)


def test_errors_name_the_op():
    with pytest.raises(em.ShapeError, match="max_pool1d"):
        F.max_pool1d(em.zeros(2, 3, 4, 5), 2)
    with pytest.raises(em.ShapeError, match="avg_pool1d"):
        F.avg_pool1d(em.zeros(8), 2)
    with pytest.raises(em.ShapeError, match="adaptive_max_pool2d"):
        F.adaptive_max_pool2d(em.zeros(4, 5), 2)
    with pytest.raises(ValueError, match="adaptive_max_pool2d"):
        F.adaptive_max_pool2d(em.zeros(1, 4, 5), (0, 2))
    with pytest.raises(ValueError, match="max_pool1d"):
        F.max_pool1d(em.zeros(1, 2, 8), (2, 2))
    out = nn.AdaptiveMaxPool2d((2, 3))(em.zeros(1, 2, 5, 5))
    np.testing.assert_array_equal(out.numpy(), np.zeros((1, 2, 2, 3)))
