"""RNN, LSTM, GRU and their cells against torch.nn: values, gradients, states, layouts."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ember as em
from ember import nn
from tests.nn.layer_check import assert_same_layout, check_pair, randn

torch = pytest.importorskip("torch")

KINDS = {"LSTM": (torch.nn.LSTM, nn.LSTM), "GRU": (torch.nn.GRU, nn.GRU),
         "RNN": (torch.nn.RNN, nn.RNN)}


def _pair(kind, *args, **kw):
    torch.manual_seed(0)
    t_cls, e_cls = KINDS[kind]
    tm = t_cls(*args, **kw)
    return tm, lambda device, dtype: e_cls(*args, device=device, dtype=dtype, **kw)


def _state(kind, shape, seed=5):
    h = randn(*shape, seed=seed) * 0.5
    return (h, randn(*shape, seed=seed + 1) * 0.5) if kind == "LSTM" else h


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("layers, bidirectional", [(1, False), (2, False), (1, True), (3, True)])
@pytest.mark.parametrize("with_state", [False, True])
def test_matches_torch(kind, layers, bidirectional, with_state):
    tm, make = _pair(kind, 3, 4, num_layers=layers, bidirectional=bidirectional)
    x = randn(5, 2, 3)  # (L, N, H_in)
    inputs = [x]
    if with_state:
        inputs.append(_state(kind, ((2 if bidirectional else 1) * layers, 2, 4)))
    m = check_pair(tm, make, inputs)
    assert_same_layout(tm, m)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_batch_first_no_bias_and_unbatched(kind):
    tm, make = _pair(kind, 3, 5, num_layers=2, batch_first=True)
    check_pair(tm, make, [randn(2, 6, 3), _state(kind, (2, 2, 5))])
    tm, make = _pair(kind, 3, 4, bias=False)
    m = check_pair(tm, make, [randn(4, 3, 3)])
    assert_same_layout(tm, m)
    tm, make = _pair(kind, 3, 4, num_layers=2, bidirectional=True)
    check_pair(tm, make, [randn(4, 3)])
    check_pair(tm, make, [randn(4, 3), _state(kind, (4, 4))])
    tm, make = _pair(kind, 3, 4, batch_first=True)
    check_pair(tm, make, [randn(1, 1, 3)])  # one step, one sample


def test_rnn_relu():
    tm, make = _pair("RNN", 3, 4, num_layers=2, nonlinearity="relu")
    check_pair(tm, make, [randn(5, 2, 3)])


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_float32_forward(kind):
    tm, make = _pair(kind, 8, 16, num_layers=2, batch_first=True)
    check_pair(tm, make, [randn(3, 10, 8)], dtype="float32", grad=False, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_dropout_between_layers_only_in_training(kind):
    tm, make = _pair(kind, 3, 4, num_layers=2, dropout=0.5)
    check_pair(tm, make, [randn(5, 2, 3)], train=False)  # eval equals torch's
    m = make(em.cpu(), "float64")
    x = em.tensor(randn(5, 2, 3))
    em.manual_seed(3)
    a = m(x)[0].numpy()
    em.manual_seed(3)
    np.testing.assert_array_equal(a, m(x)[0].numpy())
    assert not np.allclose(a, m.eval()(x)[0].numpy())


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_default_init_and_layout(kind):
    em.manual_seed(0)
    t_cls, e_cls = KINDS[kind]
    m = e_cls(10, 32, num_layers=2, bidirectional=True)
    assert_same_layout(t_cls(10, 32, num_layers=2, bidirectional=True), m)
    bound = 1.0 / math.sqrt(32)
    for name, value in m.state_dict().items():
        assert value.dtype == np.float32
        assert np.abs(value).max() <= bound, name
        assert abs(value.std() - bound / math.sqrt(3)) < 0.2 * bound, name
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[kind]
    assert m.weight_ih_l1_reverse.shape == (gates * 32, 64)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_cells_match_torch(kind):
    torch.manual_seed(0)
    t_cls = getattr(torch.nn, f"{kind}Cell")
    e_cls = getattr(nn, f"{kind}Cell")
    tm = t_cls(3, 4)
    make = lambda device, dtype: e_cls(3, 4, device=device, dtype=dtype)  # noqa: E731
    m = check_pair(tm, make, [randn(2, 3)])
    assert_same_layout(tm, m)
    check_pair(tm, make, [randn(2, 3), _state(kind, (2, 4))])
    check_pair(tm, make, [randn(3), _state(kind, (4,))])  # unbatched
    tm = t_cls(3, 4, bias=False)
    assert_same_layout(tm, check_pair(tm, lambda d, dt: e_cls(3, 4, bias=False, device=d,
                                                              dtype=dt), [randn(2, 3)]))


def test_errors():
    with pytest.raises(ValueError, match="proj_size"):
        nn.LSTM(3, 4, proj_size=2)
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNN(3, 4, nonlinearity="sigmoid")
    lstm = nn.LSTM(3, 4, num_layers=2)
    with pytest.raises(em.ShapeError, match="input_size"):
        lstm(em.ones(5, 2, 2))
    with pytest.raises(em.ShapeError, match=r"h_0 of shape \(2, 2, 4\)"):
        lstm(em.ones(5, 2, 3), (em.zeros(1, 2, 4), em.zeros(1, 2, 4)))
    with pytest.raises(TypeError, match=r"\(h_0, c_0\)"):
        lstm(em.ones(5, 2, 3), em.zeros(2, 2, 4))
    with pytest.raises(em.ShapeError, match="2-D"):
        nn.GRU(3, 4)(em.ones(3))


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_gradients_under_balanced_checkpointing(kind):
    tm, make = _pair(kind, 3, 4, num_layers=2, bidirectional=True)
    check_pair(tm, make, [randn(4, 2, 3), _state(kind, (4, 2, 4))], checkpointing="balanced")
