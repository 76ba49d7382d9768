"""InstanceNorm1d / InstanceNorm2d and F.instance_norm against torch."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.nn import functional as F
from tests.nn.layer_check import assert_same_layout, check_pair, randn

torch = pytest.importorskip("torch")


def _pair(cls_t, cls_e, c=3, **kw):
    tm = cls_t(c, **kw)
    if kw.get("affine"):
        with torch.no_grad():
            tm.weight.add_(torch.randn(c) * 0.3)
            tm.bias.add_(torch.randn(c) * 0.3)
    return tm, lambda device, dtype: cls_e(c, device=device, dtype=dtype, **kw)


@pytest.mark.parametrize("kw", [{}, {"affine": True}, {"track_running_stats": True},
                                {"affine": True, "track_running_stats": True, "momentum": 0.3}])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 3, 2, 2), (3, 4, 5)])
def test_instance_norm2d_matches_torch(kw, shape):
    tm, make = _pair(torch.nn.InstanceNorm2d, nn.InstanceNorm2d, **kw)
    x = randn(*shape) * 2 + 1
    m = check_pair(tm, make, [x], train=True)
    assert_same_layout(tm, m)
    for name, want in tm.state_dict().items():  # running statistics moved as torch's
        np.testing.assert_allclose(m.state_dict()[name], want.numpy(), rtol=1e-10, err_msg=name)
    if kw.get("track_running_stats"):  # eval: the running statistics normalize
        check_pair(tm, lambda device, dtype: m, [x], train=False, grad=False)


def test_instance_norm1d_and_float32():
    tm, make = _pair(torch.nn.InstanceNorm1d, nn.InstanceNorm1d, affine=True)
    check_pair(tm, make, [randn(2, 3, 7)], train=True)
    check_pair(tm, make, [randn(3, 7)], train=True)
    tm, make = _pair(torch.nn.InstanceNorm2d, nn.InstanceNorm2d, c=4, affine=True)
    check_pair(tm, make, [randn(2, 4, 6, 6)], dtype="float32", rtol=1e-5, atol=1e-5)


def test_empty_batch_and_errors():
    out = nn.InstanceNorm2d(3)(em.zeros(0, 3, 4, 4))
    assert out.shape == (0, 3, 4, 4)
    with pytest.raises(em.ShapeError, match="InstanceNorm2d"):
        nn.InstanceNorm2d(3)(em.zeros(4, 4))
    with pytest.raises(em.ShapeError, match="InstanceNorm2d"):
        nn.InstanceNorm2d(3, affine=True)(em.zeros(2, 4, 5, 5))
    with pytest.raises(em.ShapeError, match="instance_norm"):
        F.instance_norm(em.zeros(2, 3, 1, 1))
    with pytest.raises(em.DTypeError, match="instance_norm"):
        F.instance_norm(em.zeros(2, 3, 4, dtype="int64"))
    # without affine or running stats the channel count is free, as torch's
    assert nn.InstanceNorm2d(3)(em.randn(2, 5, 4, 4)).shape == (2, 5, 4, 4)
