"""The activations of the second wave, functional and as modules, against torch: values and
gradients in float64 and float32, PyTorch's subgradients at the kinks, dtype errors."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.nn import functional as F
from tests.nn.layer_check import check_fn, check_pair

torch = pytest.importorskip("torch")
TF = torch.nn.functional

# (ember name, torch function, extra arguments)
FUNCTIONS = [
    ("leaky_relu", TF.leaky_relu, ()), ("leaky_relu", TF.leaky_relu, (0.2,)),
    ("elu", TF.elu, ()), ("elu", TF.elu, (0.5,)), ("selu", TF.selu, ()),
    ("celu", TF.celu, ()), ("celu", TF.celu, (2.0,)), ("hardtanh", TF.hardtanh, ()),
    ("hardtanh", TF.hardtanh, (-2.0, 0.5)), ("relu6", TF.relu6, ()),
    ("hardsigmoid", TF.hardsigmoid, ()), ("hardswish", TF.hardswish, ()),
    ("softplus", TF.softplus, ()), ("softplus", TF.softplus, (2.0, 5.0)),
    ("softsign", TF.softsign, ()), ("logsigmoid", TF.logsigmoid, ()), ("mish", TF.mish, ()),
    ("sigmoid", torch.sigmoid, ()), ("tanh", torch.tanh, ()),
    ("softmin", TF.softmin, (1,)),
]
IDS = [f"{name}{args}" for name, _, args in FUNCTIONS]


def _inputs(dtype: str) -> np.ndarray:
    """Random values, the kinks of every function here (0, ±1, ±3, 6, the thresholds),
    and large values on both sides (overflow guards)."""
    rng = np.random.default_rng(7)
    special = [0.0, 1.0, -1.0, 3.0, -3.0, 6.0, -2.0, 0.5, 2.5, 10.0, 25.0, -25.0, -80.0, 80.0,
               1e-3, -1e-3]
    x = np.concatenate([rng.standard_normal(44) * 4, special]).reshape(6, 10)
    return x.astype(dtype)


@pytest.mark.parametrize(("name", "torch_fn", "args"), FUNCTIONS, ids=IDS)
def test_function_matches_torch_float64(name, torch_fn, args):
    check_fn(lambda x: torch_fn(x, *args), lambda x: getattr(F, name)(x, *args),
             [_inputs("float64")])  # rtol 1e-7: torch's float64 hardsigmoid uses a float32 1/6


@pytest.mark.parametrize(("name", "torch_fn", "args"), FUNCTIONS, ids=IDS)
def test_function_matches_torch_float32(name, torch_fn, args):
    check_fn(lambda x: torch_fn(x, *args), lambda x: getattr(F, name)(x, *args),
             [_inputs("float32")], rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("shape", [(0, 3), (1,), (), (2, 1, 3)])
def test_shapes_batch_one_empty_and_scalar(shape):
    x = np.random.default_rng(1).standard_normal(shape)
    for name, torch_fn, args in FUNCTIONS:
        if name == "softmin":
            continue
        check_fn(lambda t: torch_fn(t, *args), lambda t: getattr(F, name)(t, *args), [x],
                 grad=shape != (0, 3))


MODULES = [
    (lambda: torch.nn.LeakyReLU(0.1), lambda: nn.LeakyReLU(0.1)),
    (torch.nn.ELU, nn.ELU), (torch.nn.SELU, nn.SELU), (lambda: torch.nn.CELU(1.5),
                                                       lambda: nn.CELU(1.5)),
    (torch.nn.Mish, nn.Mish), (torch.nn.Sigmoid, nn.Sigmoid), (torch.nn.ReLU6, nn.ReLU6),
    (torch.nn.Hardswish, nn.Hardswish), (torch.nn.Hardsigmoid, nn.Hardsigmoid),
    (lambda: torch.nn.Hardtanh(-0.5, 2.0), lambda: nn.Hardtanh(-0.5, 2.0)),
    (lambda: torch.nn.Softplus(0.5, 3.0), lambda: nn.Softplus(0.5, 3.0)),
    (torch.nn.Softsign, nn.Softsign), (torch.nn.LogSigmoid, nn.LogSigmoid),
    (lambda: torch.nn.Softmax(dim=-1), lambda: nn.Softmax(dim=-1)),
    (lambda: torch.nn.LogSoftmax(dim=0), lambda: nn.LogSoftmax(dim=0)),
    (lambda: torch.nn.Softmin(dim=1), lambda: nn.Softmin(dim=1)),
]


@pytest.mark.parametrize(("make_torch", "make_ember"), MODULES)
def test_modules_match_torch(make_torch, make_ember):
    check_pair(make_torch(), lambda device, dtype: make_ember(), [_inputs("float64")])
    assert repr(make_ember()).startswith(type(make_torch()).__name__)


def test_inplace_flags_are_accepted_and_change_nothing():
    x = em.tensor(_inputs("float32"))
    before = x.numpy().copy()
    for m in (nn.LeakyReLU(inplace=True), nn.ELU(inplace=True), nn.SELU(True), nn.Mish(True),
              nn.ReLU6(True), nn.Hardswish(True), nn.Hardsigmoid(True), nn.CELU(inplace=True),
              nn.Hardtanh(inplace=True)):
        m(x)
    np.testing.assert_array_equal(x.numpy(), before)


@pytest.mark.parametrize("shape", [(5,), (2, 5), (2, 3, 4), (2, 3, 4, 5)])
def test_softmax_modules_without_dim_choose_as_torch(shape):
    x = np.random.default_rng(2).standard_normal(shape)
    for t_cls, e_cls in ((torch.nn.Softmax, nn.Softmax), (torch.nn.LogSoftmax, nn.LogSoftmax),
                         (torch.nn.Softmin, nn.Softmin)):
        with pytest.warns(UserWarning):
            want = t_cls()(torch.tensor(x)).numpy()
        np.testing.assert_allclose(e_cls()(em.tensor(x)).numpy(), want, rtol=1e-12)


def test_integer_inputs():
    ints = em.tensor([-4, 1, 5])
    for name in ("leaky_relu", "elu", "selu", "celu", "hardsigmoid", "hardswish", "softplus",
                 "logsigmoid", "mish"):
        with pytest.raises(em.DTypeError, match=name):
            getattr(F, name)(ints)
    # hardtanh and relu6 keep integers, as torch's
    out = F.hardtanh(ints)
    assert out.dtype == em.int64 and out.tolist() == [-1, 1, 1]
    assert F.relu6(ints).tolist() == [0, 1, 5]
    assert F.softsign(ints).dtype == em.float32


def test_bad_arguments():
    with pytest.raises(ValueError, match="hardtanh"):
        F.hardtanh(em.ones(2), 1.0, -1.0)
    with pytest.raises(ValueError, match="Hardtanh"):
        nn.Hardtanh(1.0, -1.0)
    with pytest.raises(ValueError, match="celu"):
        F.celu(em.ones(2), 0.0)
    with pytest.raises(TypeError, match="leaky_relu"):
        F.leaky_relu([1.0, 2.0])
