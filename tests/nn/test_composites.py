"""Composites: layer_norm, rms_norm and softmax record one node each, whose rule issues the
closed-form gradient. Values and gradients against torch (every subset of tracked
inputs, "balanced" checkpointing, low precision), fully masked rows, and the ops the
backward issues."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.autodiff.graph import record_composite
from ember.ops.gradient_rules import differentiable
from ember.nn import F
from ember.nn.functional.activations import safe_softmax
from tests.nn.layer_check import check_fn, randn

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("checkpointing", [None, "balanced"])
@pytest.mark.parametrize("wrt", [(0, 1, 2), (0,), (1, 2), (1,)])
@pytest.mark.parametrize("shape, normalized", [((3, 4, 6), (6,)), ((2, 3, 4), (3, 4)),
                                               ((5,), (5,)), ((1, 1, 7), (7,))])
def test_layer_norm_gradients_match_torch(shape, normalized, wrt, checkpointing):
    x = randn(*shape) * 2 + 0.5
    w, b = randn(*normalized, seed=1), randn(*normalized, seed=2)
    # x comes out of an op (exp), so "balanced" has a memory-bound producer to recompute.
    check_fn(lambda x, w, b: torch.nn.functional.layer_norm(x.exp(), normalized, w, b, 1e-3),
             lambda x, w, b: F.layer_norm(x.exp(), normalized, w, b, 1e-3),
             [x, w, b], wrt=wrt, checkpointing=checkpointing)


@pytest.mark.parametrize("checkpointing", [None, "balanced"])
@pytest.mark.parametrize("wrt", [(0, 1), (0,), (1,)])
@pytest.mark.parametrize("shape, normalized", [((3, 4, 6), (6,)), ((2, 3, 4), (3, 4)),
                                               ((5,), (5,))])
def test_rms_norm_gradients_match_torch(shape, normalized, wrt, checkpointing):
    x, w = randn(*shape) * 2 + 0.5, randn(*normalized, seed=1)
    check_fn(lambda x, w: torch.nn.functional.rms_norm(x.exp(), normalized, w, 1e-3),
             lambda x, w: F.rms_norm(x.exp(), normalized, w, 1e-3),
             [x, w], wrt=wrt, checkpointing=checkpointing)
    check_fn(lambda x: torch.nn.functional.rms_norm(x, normalized),
             lambda x: F.rms_norm(x, normalized), [x], checkpointing=checkpointing)


@pytest.mark.parametrize("weight, bias", [(True, False), (False, True), (False, False)])
def test_layer_norm_gradients_with_part_of_the_affine(weight, bias):
    x, w, b = randn(4, 5), randn(5, seed=1), randn(5, seed=2)
    check_fn(lambda x, w, b: torch.nn.functional.layer_norm(x, (5,), w if weight else None,
                                                            b if bias else None),
             lambda x, w, b: F.layer_norm(x, 5, w if weight else None, b if bias else None),
             [x, w, b], wrt=[0] + [1] * weight + [2] * bias)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_layer_norm_low_precision_gradients_near_float32(dtype):
    x = randn(4, 16).astype(np.float32) * 3
    w, b = randn(16, seed=1).astype(np.float32), randn(16, seed=2).astype(np.float32)
    seed = randn(4, 16, seed=3).astype(np.float32)
    device = em.cpu().autodiff()
    tensors = [em.tensor(v, device=device).to(dtype).require_grad() for v in (x, w, b)]
    y = F.layer_norm(tensors[0], 16, tensors[1], tensors[2])
    assert y.dtype.name == dtype
    grads = (y * em.tensor(seed, device=device).to(dtype)).sum().backward()
    t = [torch.tensor(v, requires_grad=True) for v in (x, w, b)]
    (torch.nn.functional.layer_norm(t[0], (16,), t[1], t[2]) * torch.tensor(seed)).sum().backward()
    for ours, theirs in zip(tensors, t):
        got = ours.grad(grads)
        assert got.dtype.name == dtype
        np.testing.assert_allclose(got.to("float32").numpy(), theirs.grad.numpy(), rtol=0.05,
                                   atol=0.05)


@pytest.mark.parametrize("checkpointing", [None, "balanced"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_gradients_match_torch(dim, checkpointing):
    check_fn(lambda x: torch.softmax(x * 3, dim), lambda x: F.softmax(x * 3, dim),
             [randn(3, 4, 5)], checkpointing=checkpointing)


def test_safe_softmax_gives_a_fully_masked_row_zeros_and_zero_gradient():
    scores = randn(3, 4)
    scores[1] = -np.inf
    device = em.cpu().autodiff()
    x = em.tensor(scores, device=device).require_grad()
    y = safe_softmax(x)
    grads = (y * em.tensor(randn(3, 4, seed=5), device=device)).sum().backward()
    np.testing.assert_array_equal(y.numpy()[1], 0.0)
    got = x.grad(grads).numpy()
    np.testing.assert_array_equal(got[1], 0.0)
    t = torch.tensor(np.delete(scores, 1, axis=0), requires_grad=True)
    seed = torch.tensor(np.delete(randn(3, 4, seed=5), 1, axis=0))
    (torch.softmax(t, -1) * seed).sum().backward()
    np.testing.assert_allclose(np.delete(got, 1, axis=0), t.grad.numpy(), rtol=1e-7, atol=1e-9)


def test_attention_with_a_fully_masked_query_matches_torch():
    q, k, v = randn(2, 3, 4, seed=1), randn(2, 5, 4, seed=2), randn(2, 5, 4, seed=3)
    mask = np.ones((3, 5), bool)
    mask[2] = False
    check_fn(lambda q, k, v, m: torch.nn.functional.scaled_dot_product_attention(q, k, v, m),
             lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m), [q, k, v, mask])


def _ops_of_backward(make_loss) -> int:
    device = em.cpu(41)
    loss = make_loss(device.autodiff())
    before = em.stats(device).ops_submitted
    loss.backward()
    return em.stats(device).ops_submitted - before


def test_composites_backward_issues_their_closed_form_only():
    def layer_norm_loss(device):
        x, w, b = (em.tensor(randn(*s, seed=i), device=device).require_grad()
                   for i, s in enumerate([(8, 6), (6,), (6,)]))
        return F.layer_norm(x, 6, w, b).sum()

    def rms_norm_loss(device):
        x, w = (em.tensor(randn(*s, seed=i), device=device).require_grad()
                for i, s in enumerate([(8, 6), (6,)]))
        return F.rms_norm(x, 6, w).sum()

    def softmax_loss(device):
        return F.softmax(em.tensor(randn(8, 6), device=device).require_grad()).sum()

    # The seed and the sum's gradient (3 ops), then: layer_norm 11 (its primitives' rules
    # issued 22), softmax 4 (was 9), rms_norm 8 (was 16).
    assert _ops_of_backward(layer_norm_loss) <= 3 + 11
    assert _ops_of_backward(softmax_loss) <= 3 + 4
    assert _ops_of_backward(rms_norm_loss) <= 3 + 8


def test_record_composite_needs_a_compute_bound_rule():
    @differentiable("test_composite_memory_bound")
    def _rule(ctx, grad):
        return (grad,)

    x = em.tensor([1.0, 2.0], device=em.cpu().autodiff()).require_grad()
    with pytest.raises(RuntimeError, match="compute_bound=True"):
        record_composite("test_composite_memory_bound", (x,), (), x * 2)
    with pytest.raises(RuntimeError, match="needs a rule"):
        record_composite("test_composite_unregistered", (x,), (), x * 2)
