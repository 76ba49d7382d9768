"""TransformerEncoderLayer against torch.nn.TransformerEncoderLayer."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn
from tests.nn.layer_check import assert_same_layout, check_pair, randn

torch = pytest.importorskip("torch")


def _pair(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0, **kw):
    torch.manual_seed(0)
    kw.setdefault("batch_first", True)
    tm = torch.nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, **kw)
    with torch.no_grad():  # non-trivial norms and attention biases
        for name, p in tm.named_parameters():
            if "norm" in name or "in_proj_bias" in name:
                p.add_(torch.randn(p.shape) * 0.2)

    def make(device, dtype):
        return nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, device=device,
                                          dtype=dtype, **kw)
    return tm, make


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_matches_torch(norm_first, activation):
    tm, make = _pair(norm_first=norm_first, activation=activation)
    m = check_pair(tm, make, [randn(3, 5, 8)], train=False)
    assert_same_layout(tm, m)


def test_encoder_layer_masks():
    tm, make = _pair()
    x = randn(3, 5, 8)
    causal = np.triu(np.ones((5, 5), dtype=bool), 1)
    pad = np.zeros((3, 5), dtype=bool)
    pad[1, 3:] = True
    check_pair(tm, make, [x, causal, pad], train=False,
               call=lambda mod, x, c, p: mod(x, src_mask=c, src_key_padding_mask=p))

    def causal_call(mod, x, c):  # torch needs the mask with its is_causal hint; ember does not
        if isinstance(mod, torch.nn.Module):
            return mod(x, src_mask=c, is_causal=True)
        return mod(x, is_causal=True)

    check_pair(tm, make, [x, causal], train=False, call=causal_call)
    fmask = randn(5, 5, seed=3)
    check_pair(tm, make, [x, fmask], train=False, wrt=[0],
               call=lambda mod, x, f: mod(x, src_mask=f))


def test_encoder_layer_sequence_first_unbatched_and_no_bias():
    tm, make = _pair(batch_first=False)
    check_pair(tm, make, [randn(5, 2, 8)], train=False)
    tm, make = _pair()
    check_pair(tm, make, [randn(5, 8)], train=False)
    tm, make = _pair(bias=False)
    m = check_pair(tm, make, [randn(2, 4, 8)], train=False)
    assert_same_layout(tm, m)


def test_encoder_layer_float32_forward():
    tm, make = _pair(d_model=16, nhead=4, dim_feedforward=32)
    check_pair(tm, make, [randn(2, 7, 16)], dtype="float32", grad=False, train=False,
               rtol=1e-5, atol=1e-5)


def test_encoder_layer_dropout_only_in_training():
    tm, make = _pair(dropout=0.3)
    check_pair(tm, make, [randn(2, 4, 8)], train=False)  # eval equals torch's
    m = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.3)
    x = em.randn(2, 4, 8)
    em.manual_seed(2)
    a = m(x).numpy()
    em.manual_seed(2)
    np.testing.assert_array_equal(a, m(x).numpy())
    m.eval()
    assert not m.self_attn.training and not m.dropout1.training
    assert not np.allclose(a, m(x).numpy())
    np.testing.assert_array_equal(m(x).numpy(), m(x).numpy())


def test_encoder_layer_layout_defaults():
    tm = torch.nn.TransformerEncoderLayer(32, 4, batch_first=True)
    m = nn.TransformerEncoderLayer(32, 4)
    assert_same_layout(tm, m)
    assert m.linear1.weight.shape == (2048, 32) and m.dropout.p == 0.1
    with pytest.raises(ValueError, match="relu/gelu"):
        nn.TransformerEncoderLayer(8, 2, activation="tanh")
    callable_act = nn.TransformerEncoderLayer(8, 2, 16, activation=lambda x: x.tanh())
    assert callable_act(em.randn(1, 3, 8)).shape == (1, 3, 8)


def test_encoder_layer_gradients_under_balanced_checkpointing():
    tm, make = _pair(norm_first=True)
    pad = np.zeros((2, 4), dtype=bool)
    pad[0, -1] = True
    check_pair(tm, make, [randn(2, 4, 8), pad], train=False, checkpointing="balanced",
               call=lambda mod, x, p: mod(x, src_key_padding_mask=p))
