"""Schedulers: the same lr sequence as torch.optim.lr_scheduler, chained or alone, and resumable."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ember as em
from ember import nn, optim
from ember.optim import lr_scheduler as ls

torch = pytest.importorskip("torch")
TS = torch.optim.lr_scheduler

STEPS = 40
LR = 0.1


def pair():
    ember_opt = optim.SGD([nn.Param(em.zeros(2))], lr=LR, momentum=0.9)
    torch_opt = torch.optim.SGD([torch.zeros(2, requires_grad=True)], lr=LR, momentum=0.9)
    return ember_opt, torch_opt


# name -> (ember builder, torch builder); a builder takes the optimizer.
SINGLE = {
    "step": (lambda o: ls.StepLR(o, 7, gamma=0.5), lambda o: TS.StepLR(o, 7, gamma=0.5)),
    "step-default": (lambda o: ls.StepLR(o, 3), lambda o: TS.StepLR(o, 3)),
    "exponential": (lambda o: ls.ExponentialLR(o, 0.9), lambda o: TS.ExponentialLR(o, 0.9)),
    "cosine": (lambda o: ls.CosineAnnealingLR(o, 10), lambda o: TS.CosineAnnealingLR(o, 10)),
    "cosine-eta": (lambda o: ls.CosineAnnealingLR(o, 7, eta_min=0.01),
                   lambda o: TS.CosineAnnealingLR(o, 7, eta_min=0.01)),
    "linear": (lambda o: ls.LinearLR(o), lambda o: TS.LinearLR(o)),
    "linear-decay": (lambda o: ls.LinearLR(o, 1.0, 0.1, 15),
                     lambda o: TS.LinearLR(o, 1.0, 0.1, 15)),
    "warmup": (lambda o: ls.LinearWarmup(o, 10, start_factor=0.01),
               lambda o: TS.LinearLR(o, start_factor=0.01, total_iters=10)),
    "warmup-default": (lambda o: ls.LinearWarmup(o, 4), lambda o: TS.LinearLR(o, total_iters=4)),
}


def chained(kind):
    def build_ember(o):
        if kind == "sequential":
            return ls.SequentialLR(o, [ls.LinearWarmup(o, 5, 0.1), ls.CosineAnnealingLR(o, 20)],
                                   milestones=[5])
        if kind == "sequential3":
            return ls.SequentialLR(o, [ls.LinearWarmup(o, 4, 0.2), ls.StepLR(o, 5, 0.5),
                                       ls.ExponentialLR(o, 0.95)], milestones=[4, 15])
        return ls.ChainedScheduler([ls.ExponentialLR(o, 0.95), ls.StepLR(o, 6, 0.5),
                                    ls.LinearWarmup(o, 8, 0.25)])

    def build_torch(o):
        if kind == "sequential":
            return TS.SequentialLR(o, [TS.LinearLR(o, 0.1, total_iters=5),
                                       TS.CosineAnnealingLR(o, 20)], milestones=[5])
        if kind == "sequential3":
            return TS.SequentialLR(o, [TS.LinearLR(o, 0.2, total_iters=4), TS.StepLR(o, 5, 0.5),
                                       TS.ExponentialLR(o, 0.95)], milestones=[4, 15])
        return TS.ChainedScheduler([TS.ExponentialLR(o, 0.95), TS.StepLR(o, 6, 0.5),
                                    TS.LinearLR(o, 0.25, total_iters=8)])

    return build_ember, build_torch


CASES = {**SINGLE, **{k: chained(k) for k in ("sequential", "sequential3", "chained")}}


def lr_sequences(name, steps=STEPS):
    build_ember, build_torch = CASES[name]
    opt, topt = pair()
    sched, tsched = build_ember(opt), build_torch(topt)
    ours, theirs = [opt.lr], [topt.param_groups[0]["lr"]]
    for _ in range(steps):
        topt.step()
        tsched.step()
        sched.step()
        ours.append(opt.lr)
        theirs.append(topt.param_groups[0]["lr"])
    assert sched.get_last_lr() == [opt.lr]
    return ours, theirs


@pytest.mark.parametrize("name", CASES)
def test_lr_sequence_matches_torch(name):
    ours, theirs = lr_sequences(name)
    assert ours == theirs  # the same formulas in the same order: bit for bit


@pytest.mark.parametrize("name", CASES)
def test_state_dict_resumes_the_sequence(name):
    build_ember, _ = CASES[name]
    opt, _ = pair()
    sched = build_ember(opt)
    for _ in range(13):
        sched.step()
    saved_sched, saved_opt = sched.state_dict(), opt.state_dict()
    _assert_plain(saved_sched)
    expected = []
    for _ in range(15):
        sched.step()
        expected.append(opt.lr)
    opt2, _ = pair()
    opt2.params = opt.params
    opt2.load_state_dict(saved_opt)
    sched2 = build_ember(opt2)
    sched2.load_state_dict(saved_sched)
    opt2.lr = saved_opt["hyperparams"]["lr"]  # building a scheduler steps it: restore the lr
    got = []
    for _ in range(15):
        sched2.step()
        got.append(opt2.lr)
    assert got == expected


def _assert_plain(value):
    if isinstance(value, dict):
        for k, v in value.items():
            assert isinstance(k, str)
            _assert_plain(v)
    elif isinstance(value, list):
        for v in value:
            _assert_plain(v)
    else:
        assert value is None or isinstance(value, bool | int | float), type(value)


def test_warmup_shape():
    opt, _ = pair()
    sched = ls.LinearWarmup(opt, 4, start_factor=0.25)
    lrs = [opt.lr]
    for _ in range(6):
        sched.step()
        lrs.append(opt.lr)
    np.testing.assert_allclose(lrs, [0.025, 0.04375, 0.0625, 0.08125, 0.1, 0.1, 0.1])


def test_cosine_reaches_eta_min():
    opt, _ = pair()
    sched = ls.CosineAnnealingLR(opt, 8, eta_min=0.001)
    for _ in range(8):
        sched.step()
    assert math.isclose(opt.lr, 0.001, rel_tol=1e-9)


def test_scheduler_errors():
    opt, _ = pair()
    with pytest.raises(TypeError, match="optimizer"):
        ls.StepLR(object(), 3)
    with pytest.raises(ValueError, match="step_size"):
        ls.StepLR(opt, 0)
    with pytest.raises(ValueError, match="start_factor"):
        ls.LinearWarmup(opt, 5, start_factor=0.0)
    with pytest.raises(ValueError, match="milestone"):
        ls.SequentialLR(opt, [ls.StepLR(opt, 2), ls.StepLR(opt, 3)], milestones=[])
    other, _ = pair()
    with pytest.raises(ValueError, match="another optimizer"):
        ls.ChainedScheduler([ls.StepLR(opt, 2), ls.StepLR(other, 2)])
    fresh, _ = pair()
    with pytest.raises(ValueError, match="initial_lr"):
        ls.StepLR(fresh, 2, last_epoch=5)
    sched = ls.StepLR(opt, 2)
    with pytest.raises(ValueError, match="unknown"):
        sched.load_state_dict({"bogus": 1})


def test_chained_accepts_optimizer_first():
    opt, _ = pair()
    chain = ls.ChainedScheduler(opt, [ls.ExponentialLR(opt, 0.5)])
    chain.step()
    assert math.isclose(opt.lr, 0.05)
