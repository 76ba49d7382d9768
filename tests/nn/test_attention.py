"""scaled_dot_product_attention and MultiHeadAttention against PyTorch: masks, values, gradients."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.nn import F
from tests.nn.layer_check import assert_same_layout, check_fn, check_pair, randn

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _qkv(batch=(2, 3), length=4, source=5, e=6, ev=7):
    return randn(*batch, length, e, seed=1), randn(*batch, source, e, seed=2), \
        randn(*batch, source, ev, seed=3)


# ----- scaled_dot_product_attention ---------------------------------------------------------


def test_sdpa_plain_and_scale():
    for scale in (None, 0.3):
        check_fn(lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, scale=scale),
                 lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=scale), _qkv())


@pytest.mark.parametrize("length, source", [(4, 4), (3, 5), (5, 3)])
def test_sdpa_causal(length, source):
    check_fn(lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, is_causal=True),
             lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
             _qkv(length=length, source=source))


@pytest.mark.parametrize("mask_shape", [(4, 5), (3, 4, 5), (2, 1, 1, 5)])
def test_sdpa_bool_mask_true_takes_part(mask_shape):
    mask = np.random.default_rng(4).random(mask_shape) > 0.4
    check_fn(lambda q, k, v, m: TF.scaled_dot_product_attention(q, k, v, attn_mask=m),
             lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
             [*_qkv(), mask])


def test_sdpa_float_mask_is_added():
    mask = randn(4, 5, seed=7)
    mask[1, 2] = -np.inf
    check_fn(lambda q, k, v, m: TF.scaled_dot_product_attention(q, k, v, attn_mask=m),
             lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
             [*_qkv(), mask], wrt=[0, 1, 2])


def test_sdpa_fully_masked_row_gives_zeros_like_torch():
    mask = np.ones((4, 5), dtype=bool)
    mask[2] = False
    out = check_fn(lambda q, k, v, m: TF.scaled_dot_product_attention(q, k, v, attn_mask=m),
                   lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                   [*_qkv(), mask])[0]
    np.testing.assert_array_equal(out[..., 2, :], 0.0)


def test_sdpa_float32_and_numpy_reference():
    q, k, v = (a.astype(np.float32) for a in _qkv(batch=(2,)))
    out = F.scaled_dot_product_attention(em.tensor(q), em.tensor(k), em.tensor(v)).numpy()
    s = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    np.testing.assert_allclose(out, w @ v, rtol=1e-5, atol=1e-6)
    assert out.dtype == np.float32


def test_sdpa_dropout_is_seeded():
    q, k, v = (em.tensor(a) for a in _qkv())
    em.manual_seed(5)
    a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5).numpy()
    em.manual_seed(5)
    b = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5).numpy()
    plain = F.scaled_dot_product_attention(q, k, v).numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, plain)


def test_sdpa_errors():
    q = em.ones(2, 3, 4)
    with pytest.raises(em.ShapeError, match="feature"):
        F.scaled_dot_product_attention(q, em.ones(2, 3, 5), em.ones(2, 3, 4))
    with pytest.raises(em.ShapeError, match="sequence"):
        F.scaled_dot_product_attention(q, q, em.ones(2, 2, 4))
    with pytest.raises(em.ShapeError, match="attn_mask"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=em.ones(3, 2, dtype=em.bool))
    with pytest.raises(ValueError, match="not both"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=em.ones(3, 3, dtype=em.bool),
                                       is_causal=True)


# ----- MultiHeadAttention -------------------------------------------------------------------


def _mha_pair(e=8, heads=2, **kw):
    torch.manual_seed(0)
    tm = torch.nn.MultiheadAttention(e, heads, batch_first=kw.pop("batch_first", True), **kw)
    with torch.no_grad():  # non-zero biases, so their gradients are exercised
        for name, p in tm.named_parameters():
            if "bias" in name:
                p.add_(torch.randn(p.shape) * 0.1)
    return tm


def _run(tm_kwargs, inputs, torch_call, ember_call, **kw):
    tm = _mha_pair(**dict(tm_kwargs))
    e, heads = tm.embed_dim, tm.num_heads
    ember_kw = {k: v for k, v in tm_kwargs.items() if k not in ("e", "heads")}
    m = check_pair(tm, lambda d, dt: nn.MultiHeadAttention(e, heads, device=d, dtype=dt,
                                                           **ember_kw),
                   inputs, call=lambda mod, *xs: (torch_call if isinstance(mod, torch.nn.Module)
                                                  else ember_call)(mod, *xs), **kw)
    assert_same_layout(tm, m)
    return m


def _out(mod, *args, **kwargs):
    return mod(*args, need_weights=False, **kwargs)[0]


def test_mha_self_attention():
    x = randn(3, 5, 8)
    _run({}, [x], lambda m, x: _out(m, x, x, x), lambda m, x: m(x))


def test_mha_cross_attention_and_float32():
    q, kv = randn(2, 4, 8, seed=1), randn(2, 6, 8, seed=2)
    _run({}, [q, kv, kv * 0.5], lambda m, q, k, v: _out(m, q, k, v), lambda m, q, k, v: m(q, k, v))
    _run({}, [q, kv, kv], lambda m, q, k, v: _out(m, q, k, v), lambda m, q, k, v: m(q, k, v),
         dtype="float32", grad=False, rtol=1e-5, atol=1e-6)


def test_mha_causal_bool_mask_and_is_causal():
    x = randn(2, 5, 8)
    causal = np.triu(np.ones((5, 5), dtype=bool), 1)  # True = masked out, as nn.MultiheadAttention
    _run({}, [x, causal], lambda m, x, c: _out(m, x, x, x, attn_mask=c),
         lambda m, x, c: m(x, attn_mask=c))
    _run({}, [x, causal], lambda m, x, c: _out(m, x, x, x, attn_mask=c, is_causal=True),
         lambda m, x, c: m(x, is_causal=True))


def test_mha_key_padding_masks_bool_and_float():
    x = randn(3, 5, 8)
    pad = np.zeros((3, 5), dtype=bool)
    pad[0, 3:] = True
    pad[2, 1] = True
    _run({}, [x, pad], lambda m, x, p: _out(m, x, x, x, key_padding_mask=p),
         lambda m, x, p: m(x, key_padding_mask=p))
    fpad = np.where(pad, -1e9, 0.0) + randn(3, 5, seed=4) * 0.1
    _run({}, [x, fpad], lambda m, x, p: _out(m, x, x, x, key_padding_mask=p),
         lambda m, x, p: m(x, key_padding_mask=p), wrt=[0])
    causal = np.triu(np.ones((5, 5), dtype=bool), 1)  # both masks together
    _run({}, [x, pad, causal], lambda m, x, p, c: _out(m, x, x, x, key_padding_mask=p,
                                                       attn_mask=c),
         lambda m, x, p, c: m(x, key_padding_mask=p, attn_mask=c))


def test_mha_float_and_per_head_masks():
    x = randn(2, 4, 8)
    fmask = randn(4, 4, seed=5)
    _run({}, [x, fmask], lambda m, x, a: _out(m, x, x, x, attn_mask=a),
         lambda m, x, a: m(x, attn_mask=a), wrt=[0])
    per_head = np.random.default_rng(6).random((2 * 2, 4, 4)) > 0.7  # (N·heads, L, S)
    _run({}, [x, per_head], lambda m, x, a: _out(m, x, x, x, attn_mask=a),
         lambda m, x, a: m(x, attn_mask=a))


@pytest.mark.parametrize("kw", [{"bias": False}, {"add_bias_kv": True}, {"add_zero_attn": True},
                                {"add_bias_kv": True, "add_zero_attn": True},
                                {"kdim": 5, "vdim": 3}, {"heads": 4}, {"heads": 1}])
def test_mha_options(kw):
    kdim, vdim = kw.get("kdim", 8), kw.get("vdim", 8)
    q, k, v = randn(2, 4, 8, seed=1), randn(2, 6, kdim, seed=2), randn(2, 6, vdim, seed=3)
    pad = np.zeros((2, 6), dtype=bool)
    pad[1, 4:] = True
    _run(kw, [q, k, v, pad], lambda m, q, k, v, p: _out(m, q, k, v, key_padding_mask=p),
         lambda m, q, k, v, p: m(q, k, v, key_padding_mask=p))


def test_mha_unbatched_and_sequence_first():
    x = randn(5, 8)
    _run({}, [x], lambda m, x: _out(m, x, x, x), lambda m, x: m(x))
    xs = randn(5, 2, 8)  # (L, N, E)
    pad = np.zeros((2, 5), dtype=bool)
    pad[0, -1] = True
    _run({"batch_first": False}, [xs, pad], lambda m, x, p: _out(m, x, x, x, key_padding_mask=p),
         lambda m, x, p: m(x, key_padding_mask=p))


@pytest.mark.parametrize("average", [True, False])
def test_mha_need_weights(average):
    q, kv = randn(2, 3, 8, seed=1), randn(2, 4, 8, seed=2)
    _run({}, [q, kv],
         lambda m, q, k: m(q, k, k, need_weights=True, average_attn_weights=average),
         lambda m, q, k: m(q, k, need_weights=True, average_attn_weights=average))


def test_mha_dropout_train_vs_eval():
    x = randn(2, 6, 8)
    tm = _mha_pair(dropout=0.5)
    # eval: no dropout, equal to torch
    check_pair(tm, lambda d, dt: nn.MultiHeadAttention(8, 2, dropout=0.5, device=d, dtype=dt),
               [x], call=lambda m, x: _out(m, x, x, x) if isinstance(m, torch.nn.Module)
               else m(x), train=False)
    m = nn.MultiHeadAttention(8, 2, dropout=0.5, dtype=em.float64)
    xt = em.tensor(x)
    em.manual_seed(1)
    a = m(xt).numpy()
    em.manual_seed(1)
    b = m(xt).numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, m.eval()(xt).numpy())


def test_mha_init_and_layout_equal_torch():
    em.manual_seed(0)
    m = nn.MultiHeadAttention(64, 8)
    tm = torch.nn.MultiheadAttention(64, 8, batch_first=True)
    assert_same_layout(tm, m)
    w = m.in_proj_weight.value.numpy()
    bound = math.sqrt(6.0 / (64 + 3 * 64))  # xavier_uniform on (3E, E)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.05 * bound
    np.testing.assert_array_equal(m.in_proj_bias.value.numpy(), 0.0)
    np.testing.assert_array_equal(m.out_proj.bias.value.numpy(), 0.0)
    out_bound = 1.0 / math.sqrt(64)
    assert np.abs(m.out_proj.weight.value.numpy()).max() <= out_bound
    for kw in ({"kdim": 5, "vdim": 3}, {"add_bias_kv": True}, {"bias": False}):
        assert_same_layout(torch.nn.MultiheadAttention(64, 8, batch_first=True, **kw),
                           nn.MultiHeadAttention(64, 8, **kw))


def test_mha_errors():
    with pytest.raises(ValueError, match="divisible"):
        nn.MultiHeadAttention(10, 3)
    m = nn.MultiHeadAttention(8, 2)
    with pytest.raises(em.ShapeError, match="features"):
        m(em.ones(2, 3, 6))
    with pytest.raises(em.ShapeError, match="key_padding_mask"):
        m(em.ones(2, 3, 8), key_padding_mask=em.ones(2, 4, dtype=em.bool))
    with pytest.raises(em.ShapeError, match="attn_mask"):
        m(em.ones(2, 3, 8), attn_mask=em.ones(3, 4, dtype=em.bool))
    with pytest.raises(em.ShapeError, match="3-D"):
        m(em.ones(2, 3, 8), em.ones(3, 8))
