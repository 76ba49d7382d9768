"""TransformerDecoderLayer, TransformerEncoder, TransformerDecoder and Transformer against
torch: torch state dicts load unchanged; values and gradients match."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn
from tests.nn.layer_check import assert_same_layout, check_pair, randn

torch = pytest.importorskip("torch")

E, HEADS, FF = 8, 2, 16


def _perturb(tm):
    with torch.no_grad():  # non-trivial norms and attention biases
        for name, p in tm.named_parameters():
            if "norm" in name or "in_proj_bias" in name:
                p.add_(torch.randn(p.shape) * 0.2)
    return tm


def _decoder_layer(**kw):
    torch.manual_seed(0)
    kw.setdefault("batch_first", True)
    tm = _perturb(torch.nn.TransformerDecoderLayer(E, HEADS, FF, 0.0, **kw))

    def make(device, dtype):
        return nn.TransformerDecoderLayer(E, HEADS, FF, 0.0, device=device, dtype=dtype, **kw)
    return tm, make


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_decoder_layer_matches_torch(norm_first, activation):
    tm, make = _decoder_layer(norm_first=norm_first, activation=activation)
    m = check_pair(tm, make, [randn(3, 5, E), randn(3, 6, E, seed=1)], train=False)
    assert_same_layout(tm, m)


def test_decoder_layer_masks_sequence_first_unbatched_no_bias():
    tm, make = _decoder_layer()
    tgt, memory = randn(2, 4, E), randn(2, 6, E, seed=1)
    causal = np.triu(np.ones((4, 4), dtype=bool), 1)
    pad = np.zeros((2, 6), dtype=bool)
    pad[1, 4:] = True
    tpad = np.zeros((2, 4), dtype=bool)
    tpad[0, 3] = True
    check_pair(tm, make, [tgt, memory, causal, pad, tpad], train=False,
               call=lambda mod, t, mem, c, p, tp: mod(t, mem, tgt_mask=c,
                                                      memory_key_padding_mask=p,
                                                      tgt_key_padding_mask=tp))
    fmask = randn(4, 6, seed=3)
    check_pair(tm, make, [tgt, memory, fmask], train=False, wrt=[0, 1],
               call=lambda mod, t, mem, f: mod(t, mem, memory_mask=f))
    tm, make = _decoder_layer(batch_first=False)
    check_pair(tm, make, [randn(4, 2, E), randn(6, 2, E, seed=1)], train=False)
    tm, make = _decoder_layer()
    check_pair(tm, make, [randn(4, E), randn(6, E, seed=1)], train=False)
    tm, make = _decoder_layer(bias=False)
    assert_same_layout(tm, check_pair(tm, make, [tgt, memory], train=False))


def test_encoder_and_decoder_stacks_match_torch():
    torch.manual_seed(1)
    t_enc = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(E, HEADS, FF, 0.0, batch_first=True), 3,
        norm=torch.nn.LayerNorm(E), enable_nested_tensor=False)
    _perturb(t_enc)

    def make_enc(device, dtype):
        layer = nn.TransformerEncoderLayer(E, HEADS, FF, 0.0, device=device, dtype=dtype)
        return nn.TransformerEncoder(layer, 3, norm=nn.LayerNorm(E, device=device, dtype=dtype))
    pad = np.zeros((2, 5), dtype=bool)
    pad[0, 4] = True
    m = check_pair(t_enc, make_enc, [randn(2, 5, E), pad], train=False,
                   call=lambda mod, x, p: mod(x, src_key_padding_mask=p))
    assert_same_layout(t_enc, m)

    t_dec = _perturb(torch.nn.TransformerDecoder(
        torch.nn.TransformerDecoderLayer(E, HEADS, FF, 0.0, batch_first=True), 2))

    def make_dec(device, dtype):
        layer = nn.TransformerDecoderLayer(E, HEADS, FF, 0.0, device=device, dtype=dtype)
        return nn.TransformerDecoder(layer, 2)
    m = check_pair(t_dec, make_dec, [randn(2, 4, E), randn(2, 5, E, seed=2)], train=False)
    assert_same_layout(t_dec, m)


@pytest.mark.parametrize("batch_first", [True, False])
def test_transformer_loads_a_torch_state_dict_and_matches(batch_first):
    torch.manual_seed(2)
    tm = _perturb(torch.nn.Transformer(E, HEADS, 2, 2, FF, 0.0, batch_first=batch_first))

    def make(device, dtype):
        return nn.Transformer(E, HEADS, 2, 2, FF, 0.0, batch_first=batch_first, device=device,
                              dtype=dtype)
    src = randn(2, 5, E) if batch_first else randn(5, 2, E)
    tgt = randn(2, 4, E, seed=1) if batch_first else randn(4, 2, E, seed=1)
    causal = torch.nn.Transformer.generate_square_subsequent_mask(4, dtype=torch.float64).numpy()
    m = check_pair(tm, make, [src, tgt, causal], train=False, wrt=[0, 1],
                   call=lambda mod, s, t, c: mod(s, t, tgt_mask=c))
    assert_same_layout(tm, m)


def test_transformer_float32_causal_hint_and_mask_helper():
    torch.manual_seed(3)
    tm = torch.nn.Transformer(16, 4, 1, 2, 32, 0.0, batch_first=True)
    mask = nn.Transformer.generate_square_subsequent_mask(4)
    want = torch.nn.Transformer.generate_square_subsequent_mask(4)
    assert mask.dtype == em.float32
    np.testing.assert_array_equal(mask.numpy(), want.numpy())

    def call(mod, s, t):  # ember's causal hint needs no mask; torch's does
        if isinstance(mod, torch.nn.Module):
            return mod(s, t, tgt_mask=want, tgt_is_causal=True)
        return mod(s, t, tgt_is_causal=True)
    check_pair(tm, lambda d, t: nn.Transformer(16, 4, 1, 2, 32, 0.0, device=d, dtype=t),
               [randn(2, 6, 16), randn(2, 4, 16, seed=1)], dtype="float32", grad=False,
               train=False, call=call, rtol=1e-5, atol=1e-5)


def test_stack_copies_have_their_own_parameters():
    layer = nn.TransformerEncoderLayer(E, HEADS, FF, 0.0)
    enc = nn.TransformerEncoder(layer, 2)
    ids = {p.id for p in enc.parameters()}
    assert len(ids) == len(enc.parameters()) == 2 * len(layer.parameters())
    assert not ids & {p.id for p in layer.parameters()}
    np.testing.assert_array_equal(enc.layers[0].linear1.weight.value.numpy(),
                                  layer.linear1.weight.value.numpy())
    enc.layers[0].linear1.weight.value = em.zeros(FF, E)  # one copy changes, not the others
    assert np.abs(enc.layers[1].linear1.weight.value.numpy()).sum() > 0
    assert np.abs(layer.linear1.weight.value.numpy()).sum() > 0
    d = em.cpu().autodiff()
    denc = nn.TransformerEncoder(nn.TransformerEncoderLayer(E, HEADS, FF, 0.0, device=d), 2)
    # (a plain sum of a LayerNorm's output has zero gradient: project on random weights)
    grads = (denc(em.randn(1, 3, E, device=d)) * em.randn(1, 3, E, device=d)).sum().backward()
    assert all(p.grad(grads) is not None for p in denc.parameters())
    g0 = denc.layers[0].linear1.weight.grad(grads).numpy()
    g1 = denc.layers[1].linear1.weight.grad(grads).numpy()
    assert not np.allclose(g0, g1)


def test_transformer_defaults_and_errors():
    tm = torch.nn.Transformer(batch_first=True)
    m = nn.Transformer()
    assert_same_layout(tm, m)
    w = m.encoder.layers[0].linear1.weight.value.numpy()
    bound = np.sqrt(6.0 / (512 + 2048))  # Xavier uniform, as torch's _reset_parameters
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    small = nn.Transformer(8, 2, 1, 1, 16)
    with pytest.raises(em.ShapeError, match="batch sizes"):
        small(em.zeros(2, 3, 8), em.zeros(3, 3, 8))
    with pytest.raises(em.ShapeError, match="d_model"):
        small(em.zeros(2, 3, 8), em.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="TransformerDecoderLayer"):
        nn.TransformerDecoderLayer(8, 2, activation="tanh")
