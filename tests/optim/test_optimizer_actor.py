"""The optimizer actor: ``step`` promises the new parameters and state, posts one message
and returns; the actor's thread issues the multi-tensor updates into gates the caller
queued, so a forward issued right after ``step`` reads the updated values."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import ember as em
from ember import nn, optim
from ember.optim import actor as optimizer_actor
from ember.optim.lr_scheduler import StepLR
from tests.runtime_mode import lazy_only

MAKERS = {
    "sgd": lambda p: optim.SGD(p, lr=0.1),
    "sgd_momentum": lambda p: optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
    "adam": lambda p: optim.Adam(p, lr=0.05),
    "adamw_amsgrad": lambda p: optim.AdamW(p, lr=0.05, weight_decay=0.1, amsgrad=True),
    "adam_capturable": lambda p: optim.Adam(p, lr=0.05, capturable=True),
    "rmsprop": lambda p: optim.RMSprop(p, lr=0.01, momentum=0.5),
    "adagrad": lambda p: optim.Adagrad(p, lr=0.1),
}
# Empty, size-1 and 0-d parameters among ordinary ones.
SHAPES = [(3, 4), (4,), (1,), (0, 5), (), (2, 1, 3)]


@pytest.fixture
def device():
    return em.cpu(0).autodiff()


def _params(device, dtype: str = "float32", seed: int = 0) -> list[nn.Param]:
    rng = np.random.default_rng(seed)
    return [nn.Param(em.tensor(rng.standard_normal(s).astype(dtype), device=device))
            for s in SHAPES]


def _loss(params: list[nn.Param]) -> em.Tensor:
    # A loss whose gradient differs per element, so that an update off by one step shows.
    total = None
    for k, p in enumerate(params):
        term = (p.value * p.value * (k + 1.0) + p.value.sin()).sum()
        total = term if total is None else total + term
    return total


def _train(device, name: str, actors: bool, monkeypatch, steps: int = 4,
           dtype: str = "float32") -> list[np.ndarray]:
    monkeypatch.setattr(optimizer_actor, "ACTORS", actors)
    params = _params(device, dtype)
    opt = MAKERS[name](params)
    seen = []
    for _ in range(steps):
        opt.step(_loss(params).backward())
        seen.append(_loss(params))  # a forward right after the step
    return [t.numpy() for t in seen] + [p.value.numpy() for p in params]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(MAKERS))
@lazy_only
def test_the_actor_equals_the_callers_path_bit_for_bit(device, name, dtype, monkeypatch):
    before = optimizer_actor.ACTOR.messages
    with_actor = _train(device, name, True, monkeypatch, dtype=dtype)
    assert optimizer_actor.ACTOR.messages == before + 4
    inline = _train(device, name, False, monkeypatch, dtype=dtype)
    assert optimizer_actor.ACTOR.messages == before + 4
    for a, b in zip(with_actor, inline, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def test_sgd_through_the_actor_matches_numpy(device):
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((3, 2)).astype(np.float32)
    p = nn.Param(em.tensor(w0, device=device))
    opt = optim.SGD([p], lr=0.25)
    for _ in range(3):
        opt.step((p.value * p.value).sum().backward())
    # p ← p - lr · 2p, three times: p · (1 - 0.5)³ (exact in binary).
    np.testing.assert_array_equal(p.value.numpy(), w0 * np.float32(0.125))


def _hold(monkeypatch) -> tuple[threading.Event, threading.Event]:
    """Hold the actor's thread at its next issue: (reached, release)."""
    reached, release = threading.Event(), threading.Event()
    issue = optimizer_actor.OptimizerActor._issue

    def held(self, *args):
        reached.set()
        if not release.wait(10):
            raise TimeoutError("test gate never opened")
        issue(self, *args)

    monkeypatch.setattr(optimizer_actor.OptimizerActor, "_issue", held)
    return reached, release


@lazy_only
def test_step_returns_before_the_update_is_issued_and_the_forward_sees_it(device,
                                                                           monkeypatch):
    params = _params(device)
    opt = optim.Adam(params, lr=0.05)
    opt.step(_loss(params).backward())
    em.sync()
    reached, release = _hold(monkeypatch)
    updates = optimizer_actor.ACTOR.updates
    old = [p.value for p in params]
    opt.step(_loss(params).backward())  # returns although the actor is held
    assert reached.wait(10)
    assert optimizer_actor.ACTOR.updates == updates  # nothing issued yet
    assert all(p.value is not o for p, o in zip(params, old))
    assert [p.shape for p in params] == SHAPES
    forward = _loss(params)  # queued behind the update's gate
    state = opt.state_dict()  # the promised state, no wait
    del old
    release.set()
    got = forward.numpy()
    monkeypatch.undo()
    # The same two steps on the caller's thread.
    monkeypatch.setattr(optimizer_actor, "ACTORS", False)
    ref = _params(device)
    ref_opt = optim.Adam(ref, lr=0.05)
    for _ in range(2):
        ref_opt.step(_loss(ref).backward())
    np.testing.assert_array_equal(got, _loss(ref).numpy())
    ref_state = ref_opt.state_dict()
    for entry, ref_entry in zip(state["params"], ref_state["params"], strict=True):
        assert entry["state"]["step"] == ref_entry["state"]["step"] == 2
        for key in ("exp_avg", "exp_avg_sq"):
            np.testing.assert_array_equal(entry["state"][key].numpy(),
                                          ref_entry["state"][key].numpy())


def test_a_learning_rate_changed_after_step_applies_to_the_next_step_only(device,
                                                                          monkeypatch):
    """The scheduler sets the group's lr right after step returns, before the held actor
    issues that step: the step still uses the lr it was called with."""
    def run(actors: bool, hold: bool) -> list[np.ndarray]:
        monkeypatch.setattr(optimizer_actor, "ACTORS", actors)
        params = _params(device, seed=3)
        opt = optim.SGD(params, lr=0.5, momentum=0.9)
        scheduler = StepLR(opt, step_size=1, gamma=0.1)
        out = []
        for _ in range(3):
            release = None
            if hold:
                _, release = _hold(monkeypatch)
            opt.step(_loss(params).backward())
            scheduler.step()
            if release is not None:
                release.set()
                out.append(_loss(params).numpy())
                monkeypatch.setattr(optimizer_actor.OptimizerActor, "_issue", ISSUE)
            else:
                out.append(_loss(params).numpy())
        assert opt.lr == pytest.approx(0.5e-3)
        return out + [p.value.numpy() for p in params]

    for a, b in zip(run(True, True), run(False, False), strict=True):
        np.testing.assert_array_equal(a, b)


ISSUE = optimizer_actor.OptimizerActor._issue


def test_load_state_dict_after_steps_through_the_actor(device, monkeypatch):
    params = _params(device)
    opt = optim.AdamW(params, lr=0.05)
    for _ in range(2):
        opt.step(_loss(params).backward())
    saved = opt.state_dict()
    values = [p.value.numpy().copy() for p in params]
    other = _params(device, seed=9)
    for p, v in zip(other, values):
        p.value = em.tensor(v, device=device)
    other_opt = optim.AdamW(other, lr=0.05)
    other_opt.load_state_dict(saved)
    opt.step(_loss(params).backward())
    other_opt.step(_loss(other).backward())
    for p, q in zip(params, other):
        np.testing.assert_array_equal(p.value.numpy(), q.value.numpy())
    assert other_opt.state_dict()["params"][0]["state"]["step"] == 3


@lazy_only
def test_a_failing_update_reaches_the_readers_of_the_parameters(device, monkeypatch):
    params = _params(device)
    opt = optim.SGD(params, lr=0.1)

    def fail(self, *args):
        raise RuntimeError("an update that fails")

    monkeypatch.setattr(optimizer_actor.OptimizerActor, "_issue", fail)
    opt.step(_loss(params).backward())
    forward = _loss(params)
    with pytest.raises(em.KernelError, match="an update that fails"):
        params[0].value.numpy()
    with pytest.raises(em.KernelError):
        forward.numpy()
    monkeypatch.undo()
    fresh = _params(device)  # the actor goes on with the next step
    optim.SGD(fresh, lr=0.1).step(_loss(fresh).backward())
    assert np.isfinite(fresh[0].value.numpy()).all()


@lazy_only
def test_what_cannot_be_promised_stays_on_the_callers_thread(device, monkeypatch):
    before = optimizer_actor.ACTOR.messages
    half = nn.Param(em.ones(4, device=device, dtype=em.float16))
    optim.SGD([half], lr=0.5).step((half.value * 2.0).sum().backward())  # per-parameter ops
    np.testing.assert_array_equal(half.value.numpy(), np.zeros(4, np.float16))
    assert optimizer_actor.ACTOR.messages == before
    p = nn.Param(em.ones(3, device=device))
    monkeypatch.setattr(device.actor, "_in_step", True)  # as inside an em.graphed step
    assert not optimizer_actor.ACTOR.takes(device.actor)
    monkeypatch.undo()
    assert optimizer_actor.ACTOR.takes(device.actor)
    optim.SGD([p], lr=0.5).step((p.value * 2.0).sum().backward())
    assert optimizer_actor.ACTOR.messages == before + 1
    np.testing.assert_array_equal(p.value.numpy(), np.zeros(3, np.float32))


@lazy_only
def test_list_actors_names_the_optimizer_actor(device):
    p = nn.Param(em.ones(2, device=device))
    opt = optim.Adam([p], lr=0.1)
    before = {a.name: a for a in em.list_actors()}["optimizer"].messages
    opt.step((p.value * 3.0).sum().backward())
    p.value.numpy()
    info = {a.name: a for a in em.list_actors()}["optimizer"]
    assert isinstance(info, em.ActorInfo)
    assert info.kind == "optimizer" and info.thread == "ember-optimizer"
    assert info.messages == before + 1 and info.queue_depth == 0


@lazy_only
def test_the_trace_shows_the_hand_off(device):
    p = nn.Param(em.ones(2, device=device))
    opt = optim.SGD([p], lr=0.1)
    grads = (p.value * 3.0).sum().backward()
    with em.trace() as tr:
        opt.step(grads)
        em.sync()
    steps = [e for e in tr.events if e.name == "optimizer step"]
    assert [e.thread for e in steps] == ["ember-optimizer"]
    assert steps[0].posted_by == threading.current_thread().name
    assert steps[0].site.endswith("test_optimizer_actor.py:" + str(sys._getframe().f_lineno - 5))


_SCRIPT = """
import numpy as np, ember as em
from ember import nn, optim
from ember.optim import actor
d = em.cpu(0).autodiff()
p = nn.Param(em.tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), device=d))
opt = optim.Adam([p], lr=0.1)
for _ in range(3):
    opt.step((p.value * p.value + p.value.cos()).sum().backward())
print(actor.ACTORS, actor.ACTOR.messages, p.value.numpy().tobytes().hex())
"""


@lazy_only
def test_ember_optimizer_actor_0_issues_on_the_caller_with_the_same_numbers():
    outs = {}
    for flag in ("0", "1"):
        env = dict(os.environ, EMBER_OPTIMIZER_ACTOR=flag,
                   PYTHONPATH=os.pathsep.join(sys.path))
        run = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                             text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        outs[flag] = run.stdout.split()
    assert outs["0"][:2] == ["False", "0"] and outs["1"][:2] == ["True", "3"]
    assert outs["0"][2] == outs["1"][2]
