"""Losses: forward values and gradients equal torch.nn.functional's, float64, every option."""

from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest

import ember as em
from ember.nn import functional as F
from tests.runtime_mode import lazy_only

torch = pytest.importorskip("torch")
TF = torch.nn.functional

DEVICE = em.cpu(0).autodiff()
RTOL = 1e-10
ATOL = 1e-12


def rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def check(em_fn, torch_fn, arrays: dict, wrt: tuple[str, ...], device=DEVICE):
    """Run both losses on the same arrays; compare the value and the gradients of ``wrt``.

    Float arrays listed in ``wrt`` are tracked; a non-scalar loss is seeded with a
    fixed random gradient.
    """
    em_args = {}
    torch_args = {}
    for name, value in arrays.items():
        if value is None:
            em_args[name] = torch_args[name] = None
            continue
        t = em.tensor(value, device=device)
        em_args[name] = t.require_grad() if name in wrt else t
        torch_args[name] = torch.tensor(value, requires_grad=name in wrt)
    out = em_fn(**em_args)
    expected = torch_fn(**torch_args)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=RTOL, atol=ATOL)
    assert out.shape == tuple(expected.shape)
    if not wrt:
        return
    seed = rng("seed" + str(out.shape)).standard_normal(out.shape)
    grads = out.backward(None if out.shape == () else em.tensor(seed, device=device))
    expected.backward(None if out.shape == () else torch.tensor(seed))
    for name in wrt:
        got = em_args[name].grad(grads)
        assert got is not None, name
        np.testing.assert_allclose(got.numpy(), torch_args[name].grad.numpy(), rtol=RTOL,
                                   atol=ATOL, err_msg=name)


REDUCTIONS = ["none", "mean", "sum"]


# ----- cross_entropy / nll_loss ------------------------------------------------------------

LAYOUTS = {"NC": (7, 5), "NCd": (3, 4, 5), "NCdd": (2, 3, 4, 2), "C": (6,)}


def class_problem(layout: str, ignore_index: int, with_ignored: bool):
    shape = LAYOUTS[layout]
    r = rng(f"ce-{layout}-{ignore_index}-{with_ignored}")
    logits = r.standard_normal(shape) * 2
    classes = shape[1] if len(shape) > 1 else shape[0]
    target_shape = shape[:1] + shape[2:] if len(shape) > 1 else ()
    target = r.integers(0, classes, target_shape)
    if with_ignored and target.ndim:
        flat = target.reshape(-1)
        flat[:: 3] = ignore_index  # a third of the targets are ignored
        target = flat.reshape(target_shape)
    weight = r.uniform(0.2, 2.0, classes)
    return logits, target.astype(np.int64), weight


CE_CASES = list(itertools.product(
    LAYOUTS, REDUCTIONS, [False, True], [(-100, False), (-100, True), (1, True)], [0.0, 0.2]))


@pytest.mark.parametrize("layout,reduction,weighted,ignore,smoothing", CE_CASES,
                         ids=[f"{c[0]}-{c[1]}-w{int(c[2])}-ig{c[3][0]}{'x' if c[3][1] else ''}"
                              f"-ls{c[4]}" for c in CE_CASES])
def test_cross_entropy_class_indices(layout, reduction, weighted, ignore, smoothing):
    ignore_index, with_ignored = ignore
    logits, target, weight = class_problem(layout, ignore_index, with_ignored)

    def run(fn):
        def call(input, target, weight):
            return fn(input, target, weight=weight, ignore_index=ignore_index,
                      reduction=reduction, label_smoothing=smoothing)
        return call

    check(run(F.cross_entropy), run(TF.cross_entropy),
          {"input": logits, "target": target, "weight": weight if weighted else None},
          ("input",))


NLL_CASES = list(itertools.product(LAYOUTS, REDUCTIONS, [False, True],
                                   [(-100, False), (-100, True), (2, True)]))


@pytest.mark.parametrize("layout,reduction,weighted,ignore", NLL_CASES,
                         ids=[f"{c[0]}-{c[1]}-w{int(c[2])}-ig{c[3][0]}" for c in NLL_CASES])
def test_nll_loss(layout, reduction, weighted, ignore):
    ignore_index, with_ignored = ignore
    logits, target, weight = class_problem(layout, ignore_index, with_ignored)
    dim = 1 if logits.ndim > 1 else 0
    log_p = logits - np.log(np.exp(logits).sum(dim, keepdims=True))

    def run(fn):
        def call(input, target, weight):
            return fn(input, target, weight=weight, ignore_index=ignore_index,
                      reduction=reduction)
        return call

    check(run(F.nll_loss), run(TF.nll_loss),
          {"input": log_p, "target": target, "weight": weight if weighted else None},
          ("input",))


PROB_CASES = list(itertools.product(["NC", "NCd", "C"], REDUCTIONS, [False, True], [0.0, 0.3]))


@pytest.mark.parametrize("layout,reduction,weighted,smoothing", PROB_CASES,
                         ids=[f"{c[0]}-{c[1]}-w{int(c[2])}-ls{c[3]}" for c in PROB_CASES])
def test_cross_entropy_probabilities(layout, reduction, weighted, smoothing):
    shape = LAYOUTS[layout]
    r = rng(f"prob-{layout}")
    logits = r.standard_normal(shape)
    dim = 1 if len(shape) > 1 else 0
    raw = r.uniform(0.0, 1.0, shape)
    probs = raw / raw.sum(dim, keepdims=True)
    weight = r.uniform(0.5, 1.5, shape[dim])

    def run(fn):
        def call(input, target, weight):
            return fn(input, target, weight=weight, reduction=reduction,
                      label_smoothing=smoothing)
        return call

    check(run(F.cross_entropy), run(TF.cross_entropy),
          {"input": logits, "target": probs, "weight": weight if weighted else None},
          ("input", "target"))


@pytest.mark.parametrize("name", ["cross_entropy", "binary_cross_entropy_with_logits"])
def test_under_balanced_checkpointing(name):
    r = rng("balanced")
    logits = r.standard_normal((6, 4))
    if name == "cross_entropy":
        target, kwargs = np.array([0, 3, 1, -100, 2, 2]), {"label_smoothing": 0.1}
    else:
        target, kwargs = r.uniform(0, 1, (6, 4)), {"pos_weight": None}
    check(lambda input, target: getattr(F, name)(input, target, **kwargs),
          lambda input, target: getattr(TF, name)(input, target, **kwargs),
          {"input": logits, "target": target}, ("input",), em.cpu(0).autodiff("balanced"))


def test_cross_entropy_extreme_logits():
    logits = np.array([[1000.0, -1000.0, 0.0], [-5.0, 2.0, 700.0]])
    target = np.array([1, 2])
    weight = np.array([0.5, 2.0, 1.0])
    check(lambda input, target, weight: F.cross_entropy(input, target, weight=weight),
          lambda input, target, weight: TF.cross_entropy(input, target, weight=weight),
          {"input": logits, "target": target, "weight": weight}, ("input",))


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_every_target_ignored_is_nan_with_zero_gradient(smoothing):
    logits = em.tensor(np.zeros((2, 3)), device=DEVICE).require_grad()
    target = em.tensor([-100, -100])
    loss = F.cross_entropy(logits, target, label_smoothing=smoothing)
    assert np.isnan(loss.item())
    np.testing.assert_array_equal(logits.grad(loss.backward()).numpy(), np.zeros((2, 3)))
    t = torch.zeros((2, 3), dtype=torch.float64, requires_grad=True)
    TF.cross_entropy(t, torch.tensor([-100, -100]), label_smoothing=smoothing).backward()
    np.testing.assert_array_equal(t.grad.numpy(), np.zeros((2, 3)))
    assert F.cross_entropy(logits, target, reduction="sum").item() == 0.0


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_an_ignored_target_adds_nothing_whatever_its_logits(reduction, weighted):
    # PyTorch skips an ignored target: a row of non-finite logits there leaves the loss
    # finite (a multiplication by its zero weight would give inf·0 = NaN).
    logits = np.array([[1.0, 2.0, 3.0], [np.inf, 0.0, np.nan], [0.5, 0.1, -1.0]])
    target = np.array([2, -100, 0])
    weight = np.array([0.5, 2.0, 1.5]) if weighted else None
    ours = F.cross_entropy(em.tensor(logits), em.tensor(target), reduction=reduction,
                           weight=None if weight is None else em.tensor(weight))
    theirs = TF.cross_entropy(torch.tensor(logits), torch.tensor(target), reduction=reduction,
                              weight=None if weight is None else torch.tensor(weight))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12)
    assert np.isfinite(ours.numpy()).all()


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_of_class_indices_records_one_node(reduction):
    # Its primitives would record a node each (sixteen for "mean") and their rules would
    # issue two to three times as many gradient ops; the closed form issues a few.
    x = em.tensor(np.zeros((4, 3)), device=DEVICE).require_grad()
    loss = F.cross_entropy(x, em.tensor([0, 1, 2, 1]), reduction=reduction)
    assert loss._node.op == "cross_entropy"
    assert loss._node.parents[0] is x._node
    assert all(p is None for p in loss._node.parents[1:])
    smoothed = F.cross_entropy(x, em.tensor([0, 1, 2, 1]), label_smoothing=0.1)
    assert smoothed._node.op != "cross_entropy"  # label smoothing keeps its primitives


@lazy_only
def test_out_of_range_class_index_fails_at_the_read():
    loss = F.cross_entropy(em.zeros((2, 3), dtype=em.float64), em.tensor([0, 5]))
    with pytest.raises(em.KernelError, match="gather"):
        loss.item()


def test_cross_entropy_errors():
    x = em.zeros((4, 3), dtype=em.float64)
    with pytest.raises(em.ShapeError, match=r"cross_entropy.*\(5,\).*\(4, 3\)"):
        F.cross_entropy(x, em.zeros(5, dtype=em.int64))
    with pytest.raises(em.ShapeError, match="probability"):
        F.cross_entropy(x, em.zeros((4, 2), dtype=em.float64))
    with pytest.raises(em.ShapeError, match="weight"):
        F.cross_entropy(x, em.zeros(4, dtype=em.int64), weight=em.ones(2, dtype=em.float64))
    with pytest.raises(ValueError, match="reduction"):
        F.cross_entropy(x, em.zeros(4, dtype=em.int64), reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing"):
        F.cross_entropy(x, em.zeros(4, dtype=em.int64), label_smoothing=1.5)
    with pytest.raises(em.DTypeError, match="int"):
        F.nll_loss(x, em.zeros(4, dtype=em.bool))


# ----- regression losses -------------------------------------------------------------------


def regression_arrays(name: str, shape=(4, 5), target_shape=None):
    r = rng(name)
    return (r.standard_normal(shape) * 2, r.standard_normal(target_shape or shape),
            r.uniform(0.1, 2.0, shape))


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", ["mse_loss", "l1_loss"])
def test_mse_and_l1(name, reduction, weighted):
    x, t, w = regression_arrays(name)

    def run(fn):
        return lambda input, target, weight: fn(input, target, reduction=reduction,
                                                weight=weight)

    check(run(getattr(F, name)), run(getattr(TF, name)),
          {"input": x, "target": t, "weight": w if weighted else None}, ("input", "target"))


@pytest.mark.parametrize("name", ["mse_loss", "l1_loss", "huber_loss"])
def test_regression_broadcast_target(name):
    x, t, _ = regression_arrays(name + "-bc", (4, 5), (5,))
    with pytest.warns(UserWarning):  # torch warns about the broadcast; ember does not
        check(lambda input, target: getattr(F, name)(input, target),
              lambda input, target: getattr(TF, name)(input, target),
              {"input": x, "target": t}, ("input", "target"))


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("delta", [1.0, 0.5, 2.5])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_huber(reduction, delta, weighted):
    x, t, w = regression_arrays(f"huber-{delta}")
    x[0, 0], t[0, 0] = t[0, 0] + delta, t[0, 0]  # one difference exactly at the seam

    def run(fn):
        return lambda input, target, weight: fn(input, target, reduction=reduction,
                                                delta=delta, weight=weight)

    check(run(F.huber_loss), run(TF.huber_loss),
          {"input": x, "target": t, "weight": w if weighted else None}, ("input", "target"))


# ----- binary losses -----------------------------------------------------------------------


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_cross_entropy(reduction, weighted):
    r = rng("bce")
    x = r.uniform(0.02, 0.98, (6, 3))
    t = r.uniform(0.0, 1.0, (6, 3))
    t[0] = [0.0, 1.0, 0.5]
    w = r.uniform(0.5, 2.0, (3,))

    def run(fn):
        return lambda input, target, weight: fn(input, target, weight=weight,
                                                reduction=reduction)

    check(run(F.binary_cross_entropy), run(TF.binary_cross_entropy),
          {"input": x, "target": t, "weight": w if weighted else None}, ("input", "target"))


def test_binary_cross_entropy_at_saturation():
    # A saturated sigmoid gives exactly 0 or 1: finite values, and PyTorch's finite
    # input gradients (its clamped denominator), not 0 / 0.
    x = np.array([0.0, 1.0, 0.0, 1.0, 1e-50, 1.0 - 1e-16])
    t = np.array([1.0, 0.0, 0.0, 1.0, 0.5, 0.3])
    for reduction in ("none", "sum"):
        check(lambda input, target: F.binary_cross_entropy(input, target, reduction=reduction),
              lambda input, target: TF.binary_cross_entropy(input, target, reduction=reduction),
              {"input": x, "target": t}, ("input",))


def test_binary_cross_entropy_float32_sigmoid_saturates_without_nan():
    logits = em.tensor(np.array([30.0, -120.0, 0.5], np.float32), device=DEVICE).require_grad()
    target = em.tensor(np.array([0.0, 1.0, 1.0], np.float32))
    loss = F.binary_cross_entropy(logits.sigmoid(), target)
    grad = logits.grad(loss.backward()).numpy()
    assert np.isfinite(loss.item()) and np.isfinite(grad).all()


BCE_LOGIT_CASES = list(itertools.product(REDUCTIONS, [False, True], [False, True]))


@pytest.mark.parametrize("reduction,weighted,pos_weighted", BCE_LOGIT_CASES)
def test_binary_cross_entropy_with_logits(reduction, weighted, pos_weighted):
    r = rng("bcel")
    x = r.standard_normal((5, 4)) * 4
    x[0] = [0.0, 800.0, -800.0, 30.0]  # the kink, and values where a naive exp overflows
    t = r.uniform(0.0, 1.0, (5, 4))
    w = r.uniform(0.5, 2.0, (5, 1))
    pw = r.uniform(0.5, 3.0, (4,))

    def run(fn):
        return lambda input, target, weight, pos_weight: fn(
            input, target, weight=weight, reduction=reduction, pos_weight=pos_weight)

    check(run(F.binary_cross_entropy_with_logits), run(TF.binary_cross_entropy_with_logits),
          {"input": x, "target": t, "weight": w if weighted else None,
           "pos_weight": pw if pos_weighted else None}, ("input", "target"))


def test_binary_losses_need_matching_shapes():
    x = em.zeros((3, 2), dtype=em.float64)
    with pytest.raises(em.ShapeError, match="target"):
        F.binary_cross_entropy_with_logits(x, em.zeros(2, dtype=em.float64))
    with pytest.raises(em.ShapeError, match="target"):
        F.binary_cross_entropy(x, em.zeros((2, 3), dtype=em.float64))


# ----- kl_div ------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides")
@pytest.mark.parametrize("log_target", [False, True])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum", "batchmean"])
def test_kl_div(reduction, log_target):
    r = rng("kl")
    raw = r.uniform(0.1, 1.0, (4, 6))
    log_q = np.log(raw / raw.sum(1, keepdims=True))
    p = r.uniform(0.1, 1.0, (4, 6))
    p /= p.sum(1, keepdims=True)
    target = np.log(p) if log_target else p

    def run(fn):
        return lambda input, target: fn(input, target, reduction=reduction,
                                        log_target=log_target)

    check(run(F.kl_div), run(TF.kl_div), {"input": log_q, "target": target},
          ("input", "target"))


def test_kl_div_zero_target_contributes_nothing():
    log_q = np.log(np.array([[0.2, 0.3, 0.5], [0.1, 0.1, 0.8]]))
    p = np.array([[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]])
    check(lambda input, target: F.kl_div(input, target, reduction="batchmean"),
          lambda input, target: TF.kl_div(input, target, reduction="batchmean"),
          {"input": log_q, "target": p}, ("input",))


def test_kl_div_reduction_names():
    with pytest.raises(ValueError, match="batchmean"):
        F.kl_div(em.zeros(3), em.zeros(3), reduction="avg")


# ----- in a model --------------------------------------------------------------------------


def test_losses_are_exported_and_float32_works():
    for name in ("cross_entropy", "nll_loss", "mse_loss", "l1_loss", "huber_loss",
                 "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div"):
        assert name in F.__all__ and callable(getattr(F, name))
    x = em.tensor(np.array([[2.0, 0.5, -1.0]], np.float32), device=DEVICE).require_grad()
    loss = F.cross_entropy(x, em.tensor([0]))
    assert loss.dtype == em.float32
    expected = TF.cross_entropy(torch.tensor([[2.0, 0.5, -1.0]]), torch.tensor([0]))
    np.testing.assert_allclose(loss.item(), expected.item(), rtol=1e-6)
    assert x.grad(loss.backward()).dtype == em.float32
