"""Parameter groups and the second wave's schedulers, against torch.optim step for step."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn, optim
from ember.optim import lr_scheduler as ls
from tests.optim.test_optimizers import Twin

torch = pytest.importorskip("torch")
TS = torch.optim.lr_scheduler

# name -> (group 0 options, group 1 options, constructor options): every group differs in a
# hyperparameter the update reads (lr, weight_decay, momentum...).
GROUPS = {
    "SGD": ({"lr": 0.1, "momentum": 0.9}, {"weight_decay": 0.3}, {"lr": 0.05}),
    "Adam": ({"lr": 0.02, "betas": (0.8, 0.99)}, {"weight_decay": 0.1}, {"lr": 0.01}),
    "AdamW": ({"lr": 0.03}, {"weight_decay": 0.5, "amsgrad": True}, {"lr": 0.01}),
    "RMSprop": ({"alpha": 0.9, "momentum": 0.5}, {"lr": 0.003, "centered": True}, {"lr": 0.01}),
    "Adagrad": ({"lr_decay": 0.1}, {"lr": 0.2, "eps": 1e-6}, {"lr": 0.05}),
}


def build(cls, params, options):
    first, second, common = options
    return cls([{"params": params[:2], **first}, {"params": params[2:], **second}], **common)


@pytest.mark.parametrize("multi_tensor", [True, False])
@pytest.mark.parametrize("name", GROUPS)
def test_groups_match_torch_over_steps(name, multi_tensor):
    twin = Twin(f"groups-{name}")
    opt = build(getattr(optim, name), twin.params, GROUPS[name])
    opt.multi_tensor = multi_tensor
    topt = build(lambda g, **k: getattr(torch.optim, name)(g, foreach=False, **k),
                 twin.torch_params, GROUPS[name])
    assert len(opt.param_groups) == 2
    for ours, theirs in zip(opt.param_groups, topt.param_groups):
        for key, value in ours.items():
            if key != "params" and key in theirs:
                assert theirs[key] == value, key
    for step in range(10):
        if step == 5:  # a scheduler-like change of one group between steps
            opt.param_groups[1]["lr"] *= 0.5
            topt.param_groups[1]["lr"] *= 0.5
        opt.step(twin.gradients(step))
        topt.step()
    twin.assert_equal(f"{name} groups")


def test_groups_share_one_update_op_per_program():
    twin = Twin("groups-one-op")
    opt = optim.Adam([{"params": twin.params[:1], "lr": 0.1}, {"params": twin.params[1:]}],
                     lr=0.01)
    opt.step(twin.gradients(0))  # the first step also makes the state (zeros)
    grads = twin.gradients(2)
    em.sync()
    before = em.stats().ops_submitted
    opt.step(grads)
    # Two groups, one program (same flags): one optimizer_update op, the lrs as host numbers.
    assert em.stats().ops_submitted - before == 1


def test_lr_sets_every_group_and_defaults_fill_groups():
    a, b = nn.Param(em.zeros(2)), nn.Param(em.zeros(3))
    opt = optim.SGD([{"params": [a], "lr": 0.5}, {"params": [b]}], lr=0.1, momentum=0.9)
    assert [g["lr"] for g in opt.param_groups] == [0.5, 0.1]
    assert opt.param_groups[1]["momentum"] == 0.9 and opt.lr == 0.5
    assert opt.params == [a, b]
    opt.lr = 0.25
    assert [g["lr"] for g in opt.param_groups] == [0.25, 0.25]
    c = nn.Param(em.zeros(1))
    opt.add_param_group({"params": [c], "momentum": 0.0})
    assert opt.param_groups[2]["lr"] == 0.25 and opt.param_groups[2]["momentum"] == 0.0


def test_bad_groups_are_refused():
    a, b = nn.Param(em.zeros(2)), nn.Param(em.zeros(3))
    with pytest.raises(ValueError, match="more than one group"):
        optim.SGD([{"params": [a]}, {"params": [a, b]}])
    with pytest.raises(ValueError, match="learning rate"):
        optim.SGD([{"params": [a], "lr": -1.0}])
    with pytest.raises(ValueError, match="beta"):
        optim.Adam([{"params": [a], "betas": (0.9, 1.5)}])
    with pytest.raises(TypeError, match="mixes"):
        optim.SGD([{"params": [a]}, b])
    with pytest.raises(ValueError, match="empty"):
        optim.SGD([{"params": []}])
    with pytest.raises(TypeError, match="'params'"):
        optim.SGD([a]).add_param_group({"lr": 0.1})
    opt = optim.SGD([{"params": [a]}, {"params": [b]}])
    with pytest.raises(TypeError, match="one parameter group"):
        opt.params = [a, b]


def test_state_dict_carries_groups_and_resumes():
    twin = Twin("groups-resume")
    make = lambda ps: optim.Adam([{"params": ps[:1], "lr": 0.05}, {"params": ps[1:]}],  # noqa: E731
                                 lr=0.01)
    opt = make(twin.params)
    for step in range(3):
        opt.step(twin.gradients(step))
    opt.param_groups[1]["lr"] = 0.002
    saved = opt.state_dict()
    assert [g["params"] for g in saved["param_groups"]] == [[0], [1, 2]]
    assert [g["lr"] for g in saved["param_groups"]] == [0.05, 0.002]
    assert saved["param_groups"][0]["betas"] == [0.9, 0.999]
    restored = make(twin.params)
    restored.load_state_dict(saved)
    assert [g["lr"] for g in restored.param_groups] == [0.05, 0.002]
    assert restored.param_groups[0]["betas"] == (0.9, 0.999)
    with pytest.raises(ValueError, match="parameter groups"):
        optim.Adam(twin.params).load_state_dict(saved)
    other = optim.Adam([{"params": twin.params[:2]}, {"params": twin.params[2:]}])
    with pytest.raises(ValueError, match="group 0 has 1 parameters"):
        other.load_state_dict(saved)


def test_a_state_saved_before_groups_still_loads():
    twin = Twin("groups-old-file")
    opt = optim.SGD([{"params": twin.params[:1]}, {"params": twin.params[1:]}], lr=0.1,
                    momentum=0.9)
    opt.step(twin.gradients(0))
    old = opt.state_dict()
    del old["param_groups"]
    old["hyperparams"]["lr"] = 0.03
    old["initial_lr"] = 0.1
    opt.load_state_dict(old)
    assert [g["lr"] for g in opt.param_groups] == [0.03, 0.03]
    assert [g["initial_lr"] for g in opt.param_groups] == [0.1, 0.1]


def test_save_and_load_through_a_file(tmp_path):
    twin = Twin("groups-file")
    opt = optim.RMSprop([{"params": twin.params[:2], "lr": 0.2}, {"params": twin.params[2:]}])
    ls.StepLR(opt, 2)
    opt.step(twin.gradients(0))
    path = tmp_path / "opt.ember"
    em.save(opt.state_dict(), path)
    again = optim.RMSprop([{"params": twin.params[:2]}, {"params": twin.params[2:]}])
    again.load_state_dict(em.load(path))
    assert [g["lr"] for g in again.param_groups] == [0.2, 0.01]
    assert [g["initial_lr"] for g in again.param_groups] == [0.2, 0.01]


# ----- schedulers ------------------------------------------------------------------------

def group_pair(optimizer="SGD", **options):
    ours = [nn.Param(em.zeros(2)), nn.Param(em.zeros(3))]
    theirs = [torch.zeros(2, requires_grad=True), torch.zeros(3, requires_grad=True)]
    make = lambda cls, ps: cls([{"params": ps[:1], "lr": 0.1},  # noqa: E731
                                {"params": ps[1:], "lr": 0.02}], **options)
    return (make(getattr(optim, optimizer), ours),
            make(getattr(torch.optim, optimizer), theirs))


SCHEDULERS = {
    "multistep": (lambda o: ls.MultiStepLR(o, [3, 7, 7, 12], gamma=0.5),
                  lambda o: TS.MultiStepLR(o, [3, 7, 7, 12], gamma=0.5)),
    "multistep-default": (lambda o: ls.MultiStepLR(o, [2, 5]),
                          lambda o: TS.MultiStepLR(o, [2, 5])),
    "lambda": (lambda o: ls.LambdaLR(o, lambda e: 0.9 ** e + 0.1 * (e % 3)),
               lambda o: TS.LambdaLR(o, lambda e: 0.9 ** e + 0.1 * (e % 3))),
    "lambda-per-group": (lambda o: ls.LambdaLR(o, [lambda e: 1 / (e + 1), lambda e: 2.0 ** -e]),
                         lambda o: TS.LambdaLR(o, [lambda e: 1 / (e + 1),
                                                   lambda e: 2.0 ** -e])),
    "onecycle": (lambda o: ls.OneCycleLR(o, 0.5, total_steps=30),
                 lambda o: TS.OneCycleLR(o, 0.5, total_steps=30)),
    "onecycle-groups-linear": (
        lambda o: ls.OneCycleLR(o, [1.0, 0.2], epochs=3, steps_per_epoch=10, pct_start=0.4,
                                anneal_strategy="linear", div_factor=10.0),
        lambda o: TS.OneCycleLR(o, [1.0, 0.2], epochs=3, steps_per_epoch=10, pct_start=0.4,
                                anneal_strategy="linear", div_factor=10.0)),
    "onecycle-three-phase": (lambda o: ls.OneCycleLR(o, 0.3, total_steps=31, three_phase=True),
                             lambda o: TS.OneCycleLR(o, 0.3, total_steps=31, three_phase=True)),
    "step": (lambda o: ls.StepLR(o, 4, gamma=0.5), lambda o: TS.StepLR(o, 4, gamma=0.5)),
    "cosine": (lambda o: ls.CosineAnnealingLR(o, 9, 0.001),
               lambda o: TS.CosineAnnealingLR(o, 9, 0.001)),
    "sequential": (lambda o: ls.SequentialLR(o, [ls.LinearLR(o, 0.1, total_iters=4),
                                                 ls.MultiStepLR(o, [3, 6])], [5]),
                   lambda o: TS.SequentialLR(o, [TS.LinearLR(o, 0.1, total_iters=4),
                                                 TS.MultiStepLR(o, [3, 6])], [5])),
}


@pytest.mark.parametrize("name", SCHEDULERS)
def test_schedulers_per_group_match_torch(name):
    build_ours, build_theirs = SCHEDULERS[name]
    opt, topt = group_pair(momentum=0.9)
    sched, tsched = build_ours(opt), build_theirs(topt)
    steps = 30 if name.startswith("onecycle") else 20
    for _ in range(steps):
        assert sched.get_last_lr() == pytest.approx(tsched.get_last_lr(), rel=1e-12)
        for ours, theirs in zip(opt.param_groups, topt.param_groups):
            assert ours["lr"] == pytest.approx(theirs["lr"], rel=1e-12)
            assert ours["momentum"] == pytest.approx(theirs["momentum"], rel=1e-12)
        opt.step({})
        topt.step()
        sched.step()
        tsched.step()


def test_onecycle_cycles_adam_beta1_and_refuses_steps_past_the_end():
    opt, topt = group_pair("Adam")
    sched, tsched = ls.OneCycleLR(opt, 0.1, total_steps=8), TS.OneCycleLR(topt, 0.1, total_steps=8)
    for _ in range(7):
        sched.step()
        tsched.step()
        assert opt.param_groups[0]["betas"] == pytest.approx(topt.param_groups[0]["betas"])
        assert opt.lr == pytest.approx(topt.param_groups[0]["lr"])
    sched.step()
    with pytest.raises(ValueError, match="total steps is 8"):
        sched.step()
    with pytest.raises(ValueError, match="total_steps"):
        ls.OneCycleLR(opt, 0.1)
    with pytest.raises(ValueError, match="cycle_momentum"):
        ls.OneCycleLR(optim.Adagrad([nn.Param(em.zeros(1))]), 0.1, total_steps=5)


def test_onecycle_updates_parameters_as_torch():
    twin = Twin("onecycle-adam")
    opt = optim.AdamW(twin.params, lr=0.01)
    topt = torch.optim.AdamW(twin.torch_params, lr=0.01, foreach=False)
    sched, tsched = ls.OneCycleLR(opt, 0.05, total_steps=10), TS.OneCycleLR(topt, 0.05,
                                                                            total_steps=10)
    for step in range(10):
        opt.step(twin.gradients(step))
        topt.step()
        sched.step()
        tsched.step()
    twin.assert_equal("OneCycleLR on AdamW")


PLATEAU = [
    dict(),
    dict(mode="max", factor=0.5, patience=2, threshold=0.01, cooldown=1),
    dict(patience=1, threshold_mode="abs", threshold=0.05, min_lr=[0.01, 0.005]),
    dict(patience=0, factor=0.3, eps=0.03),
]


@pytest.mark.parametrize("options", PLATEAU)
def test_reduce_on_plateau_matches_torch(options):
    opt, topt = group_pair()
    sched = ls.ReduceLROnPlateau(opt, **options)
    tsched = TS.ReduceLROnPlateau(topt, **options)
    metrics = np.random.default_rng(3).standard_normal(60).cumsum() * 0.1
    metrics[20:40] = metrics[20]  # a plateau
    for value in metrics:
        sched.step(float(value))
        tsched.step(float(value))
        assert [g["lr"] for g in opt.param_groups] == [g["lr"] for g in topt.param_groups]
        assert sched.get_last_lr() == tsched.get_last_lr()
    assert len(set(sched.get_last_lr())) >= 1 and sched.num_bad_epochs == tsched.num_bad_epochs


def test_reduce_on_plateau_reads_a_tensor_and_resumes():
    opt, _ = group_pair()
    sched = ls.ReduceLROnPlateau(opt, patience=1)
    for value in [1.0, 1.0, 1.0]:
        sched.step(em.tensor(value))
    assert opt.lr == pytest.approx(0.01)
    again = ls.ReduceLROnPlateau(group_pair()[0], patience=1)
    again.load_state_dict(sched.state_dict())
    assert again.best == 1.0 and again.num_bad_epochs == sched.num_bad_epochs
    with pytest.raises(TypeError, match="metric"):
        sched.step()
    with pytest.raises(ValueError, match="factor"):
        ls.ReduceLROnPlateau(opt, factor=1.0)
    with pytest.raises(ValueError, match="mode"):
        ls.ReduceLROnPlateau(opt, mode="up")


@pytest.mark.parametrize("name", ["multistep", "lambda", "onecycle"])
def test_new_schedulers_resume_from_state_dict(name):
    build_ours, _ = SCHEDULERS[name]
    opt, _ = group_pair(momentum=0.9)
    sched = build_ours(opt)
    for _ in range(9):
        sched.step()
    saved_sched, saved_opt = sched.state_dict(), opt.state_dict()
    assert "lr_lambdas" not in saved_sched
    expected = []
    for _ in range(12):
        sched.step()
        expected.append(sched.get_last_lr())
    opt2, _ = group_pair(momentum=0.9)
    sched2 = build_ours(opt2)
    opt2.load_state_dict(saved_opt)
    sched2.load_state_dict(saved_sched)
    got = []
    for _ in range(12):
        sched2.step()
        got.append(sched2.get_last_lr())
    assert got == expected


def test_a_scheduler_state_saved_before_groups_loads():
    opt, _ = group_pair()
    sched = ls.StepLR(opt, 2)
    old = sched.state_dict()
    old["base_lr"] = old.pop("base_lrs")[0]
    sched.load_state_dict(old)
    assert sched.base_lrs == [0.1, 0.1]
    np.testing.assert_allclose(sched.get_last_lr(), [0.1, 0.02], rtol=0, atol=0)
