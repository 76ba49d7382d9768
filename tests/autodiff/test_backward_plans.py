"""Cached backward plans: a graph of the same structure replays the messages its first walk
issued (``ember/autodiff/plans.py``); a changed structure walks again."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import ember as em
from ember import nn, optim
from ember.autodiff import engine, plans
from ember.kernels.numpy.table import KERNELS
from ember.nn import functional as F
from ember.ops._core import call
from ember.ops.gradient_rules import differentiable
from tests.runtime_mode import lazy_only

ACTOR = engine.ACTOR


_baseline = [(0, 0, 0)]


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch):
    """Each test starts with plans on, an empty cache and its counts at 0."""
    monkeypatch.setattr(ACTOR, "plans", plans.Cache())
    s = ACTOR.statistics()
    _baseline[0] = (s.plan_hits, s.plan_misses, s.plans_refused)


@contextlib.contextmanager
def plans_off() -> Iterator[None]:
    cache, ACTOR.plans = ACTOR.plans, None
    try:
        yield
    finally:
        ACTOR.plans = cache


def counts() -> tuple[int, int, int]:
    """Plan hits, misses and refusals since the test began."""
    s = ACTOR.statistics()
    now = (s.plan_hits, s.plan_misses, s.plans_refused)
    return tuple(a - b for a, b in zip(now, _baseline[0]))


def read_all(grads: em.Gradients, tensors: list) -> list[np.ndarray]:
    """The gradients of ``tensors``, read (so the actor's job has run)."""
    return [t.grad(grads).numpy().copy() for t in tensors]


# ----- the cache -------------------------------------------------------------------------

@lazy_only
def test_the_second_identical_step_replays_the_first_ones_plan():
    device = em.cpu(0).autodiff()
    values = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], dtype=np.float32)
    results = []
    for step in range(3):
        x = em.tensor(values * (step + 1), device=device).require_grad()
        grads = ((x * 2.0).tanh() * x).sum().backward()
        results.append((x.grad(grads).numpy(), counts()))
    assert [c for _, c in results] == [(0, 1, 0), (1, 1, 0), (2, 1, 0)]
    stats = ACTOR.statistics()
    assert stats.plans_cached == 1 and stats.thread_cpu_s > 0.0
    for step, (g, _) in enumerate(results):
        v = values * (step + 1)
        t = np.tanh(2.0 * v)
        np.testing.assert_allclose(g, 2.0 * (1.0 - t * t) * v + t, rtol=1e-5)


def test_the_cache_keeps_the_most_recently_used_plans():
    cache = plans.Cache(capacity=2)
    a, b, c = (plans.Plan(i, (), (), (), (), 0) for i in range(3))
    cache.put(("a",), a)
    cache.put(("b",), b)
    assert cache.get(("a",)) is a  # now the most recent
    cache.put(("c",), c)
    assert len(cache) == 2 and cache.get(("b",)) is None
    assert cache.get(("a",)) is a and cache.get(("c",)) is c


def test_ember_backward_plans_0_switches_them_off():
    script = ("import ember as em\n"
              "from ember.autodiff.engine import ACTOR\n"
              "d = em.cpu(0).autodiff()\n"
              "for _ in range(3):\n"
              "    x = em.ones(3, device=d).require_grad()\n"
              "    print(x.grad((x * 3.0).sum().backward()).tolist())\n"
              "s = ACTOR.statistics()\n"
              "print(ACTOR.plans is None, s.plan_hits, s.plan_misses, s.plans_cached)\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, EMBER_BACKWARD_PLANS="0", PYTHONPATH=root)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout.splitlines()
    assert out == ["[3.0, 3.0, 3.0]"] * 3 + ["True 0 0 0"]


# ----- identical gradients, several training steps --------------------------------------

class _SmallCNN(nn.Module):
    def __init__(self, device: em.Device) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, device=device), nn.ReLU(),
                                      nn.MaxPool2d(2))
        self.head = nn.Linear(4 * 4 * 4, 5, device=device)

    def forward(self, x: em.Tensor) -> em.Tensor:
        return self.head(self.features(x).flatten(1))


class _Encoder(nn.Module):
    def __init__(self, device: em.Device) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.1,
                                                device=device)
        self.head = nn.Linear(8, 5, device=device)

    def forward(self, x: em.Tensor) -> em.Tensor:
        return self.head(self.layer(x).mean(dim=1))


def _mlp(device: em.Device) -> nn.Module:
    return nn.Sequential(nn.Linear(6, 16, device=device), nn.GELU(),
                         nn.Linear(16, 16, device=device), nn.Tanh(),
                         nn.Linear(16, 5, device=device))


def _train(make: Callable, device: em.Device, x: np.ndarray, steps: int) -> list:
    """Every step's gradients and the final parameters, with Adam, seeded throughout."""
    em.manual_seed(0)
    model = make(device)
    params = list(model.parameters())
    opt = optim.Adam(params, lr=1e-2)
    inputs = em.tensor(x, device=device)
    labels = em.tensor(np.arange(x.shape[0]) % 5, device=device)
    history = []
    for step in range(steps):
        em.manual_seed(100 + step)  # the same dropout masks in both runs
        loss = F.cross_entropy(model(inputs), labels)
        grads = loss.backward()
        history.append(read_all(grads, params) + [loss.numpy().copy()])
        opt.step(grads)
    history.append([p.value.numpy().copy() for p in params])
    return history


@pytest.mark.parametrize("make, shape", [(_mlp, (4, 6)), (_SmallCNN, (2, 3, 8, 8)),
                                         (_Encoder, (2, 5, 8))], ids=["mlp", "cnn", "encoder"])
@pytest.mark.parametrize("checkpointing", [None, "balanced"])
@lazy_only
def test_replayed_gradients_are_the_walks_bit_for_bit(make, shape, checkpointing):
    device = em.cpu(0).autodiff(checkpointing)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    steps = 4
    with plans_off():
        walked = _train(make, device, x, steps)
    hits = counts()[0]
    replayed = _train(make, device, x, steps)
    assert counts()[0] - hits == steps - 1
    assert len(walked) == len(replayed) == steps + 1
    for step, (a, b) in enumerate(zip(walked, replayed)):
        assert len(a) == len(b)
        for u, v in zip(a, b):
            assert u.dtype == v.dtype and u.shape == v.shape
            np.testing.assert_array_equal(u, v, err_msg=f"step {step}")
    assert all(np.isfinite(a).all() for a in walked[-1])


@pytest.mark.parametrize("checkpointing", [None, "balanced"])
@lazy_only
def test_a_multi_output_op_with_an_unused_output_replays(checkpointing):
    device = em.cpu(0).autodiff(checkpointing)
    values = np.arange(12, dtype=np.float64).reshape(3, 4) / 7.0
    results = []
    for _ in range(2):
        x = em.tensor(values, device=device).require_grad()
        a, _, c = (x * 1.0).split([1, 2, 1], dim=1)
        grads = ((a * 2.0).sum() + c.tanh().sum()).backward()
        results.append(x.grad(grads).numpy())
    assert counts()[:2] == (1, 1)
    expected = np.zeros_like(values)
    expected[:, 0] = 2.0
    expected[:, 3] = 1.0 - np.tanh(values[:, 3]) ** 2
    for g in results:
        np.testing.assert_allclose(g, expected, rtol=1e-12)


# ----- a changed structure walks ---------------------------------------------------------

def _case(shape=(3, 4), dtype=np.float32, scale=2.0, op="tanh", track_b=False):
    """A graph, its gradients and NumPy's: loss = sum(op(x * scale) * b)."""
    rng = np.random.default_rng(sum(shape))
    xv = rng.standard_normal(shape).astype(dtype)
    bv = rng.standard_normal(shape[-1:]).astype(dtype)
    device = em.cpu(0).autodiff()
    x = em.tensor(xv, device=device).require_grad()
    b = em.tensor(bv, device=device)
    if track_b:
        b.require_grad()
    grads = (getattr(x * scale, op)() * b).sum().backward()
    got = read_all(grads, [x, b] if track_b else [x])
    f = np.tanh(scale * xv) if op == "tanh" else 1.0 / (1.0 + np.exp(-scale * xv))
    df = 1.0 - f * f if op == "tanh" else f * (1.0 - f)
    want = [scale * df * bv] + ([f.sum(axis=0)] if track_b else [])
    return got, want


@pytest.mark.parametrize("change", [{"shape": (2, 4)}, {"dtype": np.float64}, {"scale": 3.0},
                                    {"op": "sigmoid"}, {"track_b": True}],
                         ids=["shape", "dtype", "attr", "op", "tracked"])
@lazy_only
def test_a_changed_structure_walks_and_then_has_a_plan_of_its_own(change):
    _case()
    _case()
    base = counts()
    assert base[:2] == (1, 1)
    for repeat in range(2):  # a walk that records, then a replay of that record
        got, want = _case(**change)
        assert counts() == (base[0] + repeat, base[1] + 1, 0)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype
            tol = 1e-5 if w.dtype == np.float32 else 1e-12
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


@lazy_only
def test_minus_zero_and_zero_are_different_attrs():
    device = em.cpu(0).autodiff()
    signs = []
    for scale in (0.0, 0.0, -0.0, -0.0):
        x = em.ones(3, device=device).require_grad()
        g = x.grad((x * scale).sum().backward()).numpy()
        np.testing.assert_array_equal(g, [0.0, 0.0, 0.0])
        signs.append(bool(np.signbit(g).all()))
    assert signs == [False, False, True, True]
    assert counts()[:2] == (2, 2)


@lazy_only
def test_a_value_shared_when_recorded_but_not_now_walks():
    """The plan names a kept tensor by one of its places; where the places the recording
    shared now hold different tensors, the plan does not apply."""
    device = em.cpu(0).autodiff()

    def grad(c1: np.ndarray, c2: np.ndarray | None) -> np.ndarray:
        x = em.ones(4, device=device).require_grad()
        t1 = em.tensor(c1, device=device)
        t2 = t1 if c2 is None else em.tensor(c2, device=device)
        return x.grad(((x * t1) * t2).sum().backward()).numpy()

    c1, c2 = np.array([1.0, 2.0, 3.0, 4.0]), np.array([-1.0, 0.5, 2.0, 0.0])
    np.testing.assert_array_equal(grad(c1, None), c1 * c1)  # records: t1 is t2
    np.testing.assert_array_equal(grad(c1, c2), c1 * c2)  # the plan does not bind: walks
    assert counts()[:2] == (0, 2)
    np.testing.assert_array_equal(grad(c2, None), c2 * c2)  # binds: replays
    assert counts()[:2] == (1, 2)


KERNELS.setdefault("test_plans_uploads", lambda msg, pool, x: x.copy())


@differentiable("test_plans_uploads", inputs=False)
def _uploading_backward(ctx, grad):
    """Scales the gradient by a constant it uploads: an upload message of the walk."""
    return (grad * em.tensor(np.array([1.0, -2.0, 3.0], dtype=np.float32), device=grad.device),)


KERNELS.setdefault("test_plans_splits", lambda msg, pool, x: x.copy())


@differentiable("test_plans_splits", inputs=False)
def _splitting_backward(ctx, grad):
    """Scales the gradient's first element by 2, the rest by 3, through a split: a
    multi-output message of the walk."""
    first, rest = grad.split([1, grad.shape[0] - 1], dim=0)
    return (em.cat([first * 2.0, rest * 3.0]),)


@lazy_only
def test_a_walk_that_splits_replays_the_multi_output_message():
    device = em.cpu(0).autodiff()
    for step in range(3):
        x = em.tensor(np.arange(4.0) + step, device=device).require_grad()
        y = call("test_plans_splits", (x.exp(),), (4,), em.float64)
        g = x.grad(y.sum().backward()).numpy()
        np.testing.assert_allclose(g, np.exp(np.arange(4.0) + step) * [2.0, 3.0, 3.0, 3.0],
                                   rtol=1e-12)
    assert counts()[:2] == (2, 1)
    (plan,) = ACTOR.plans._plans.values()
    assert any(step[0] == plans._MULTI for step in plan.steps)


@lazy_only
def test_a_walk_that_uploads_a_constant_replays_it():
    device = em.cpu(0).autodiff()
    for step in range(3):
        x = em.tensor(np.arange(3.0) * step, device=device).require_grad()
        y = call("test_plans_uploads", (x * 2.0,), (3,), em.float32)
        g = x.grad(y.sum().backward()).numpy()
        np.testing.assert_array_equal(g, [2.0, -4.0, 6.0])
    assert counts()[:2] == (2, 1)
    (plan,) = ACTOR.plans._plans.values()
    assert any(step[0] == plans._UPLOAD for step in plan.steps)


_rule_runs = []


def _copy(msg, pool, x):
    return x.copy()


KERNELS.setdefault("test_plans_unreplayable", _copy)


@differentiable("test_plans_unreplayable", inputs=False, replay=False)
def _unreplayable_backward(ctx, grad):
    _rule_runs.append(1)
    return (grad * 3.0,)


@lazy_only
def test_a_graph_through_a_rule_marked_replay_false_always_walks():
    device = em.cpu(0).autodiff()
    _rule_runs.clear()
    for _ in range(3):
        x = em.tensor([1.0, 2.0], device=device).require_grad()
        y = call("test_plans_unreplayable", (x * 2.0,), (2,), em.float32)
        np.testing.assert_array_equal(x.grad(y.sum().backward()).numpy(), [6.0, 6.0])
    assert len(_rule_runs) == 3
    assert counts() == (0, 3, 0) and ACTOR.statistics().plans_cached == 0


@lazy_only
def test_a_walk_that_moves_gradients_between_devices_is_not_replayed():
    src, dst = em.cpu(0).autodiff(), em.cpu(1).autodiff()
    values = np.array([0.5, -1.0, 2.0])
    for _ in range(2):
        x = em.tensor(values, device=src).require_grad()
        g = x.grad((x.to(dst) * 3.0).exp().sum().backward()).numpy()
        np.testing.assert_allclose(g, 3.0 * np.exp(3.0 * values), rtol=1e-12)
    assert counts() == (0, 2, 2)


# ----- failures --------------------------------------------------------------------------

def _fail_on_negative(msg, pool, x):
    if (x < 0).any():
        raise ValueError("a negative input")
    return x.copy()


KERNELS.setdefault("test_plans_fail_on_negative", _fail_on_negative)


@differentiable("test_plans_fail_on_negative", inputs=False, output=True)
def _fail_on_negative_backward(ctx, grad):
    """Not a derivative: the gradient times the output, so that it reads the output."""
    return (grad * ctx.output,)


def _failing_step(values: list) -> em.Tensor:
    x = em.tensor(values, device=em.cpu(0).autodiff()).require_grad()
    y = call("test_plans_fail_on_negative", (x * 2.0,), (2,), em.float32)
    return x.grad(y.sum().backward())


@lazy_only
def test_a_failed_forward_value_reaches_the_reader_under_replay_as_under_a_walk():
    np.testing.assert_array_equal(_failing_step([1.0, 2.0]).numpy(), [4.0, 8.0])  # records
    errors = []
    for off in (True, False):
        with plans_off() if off else contextlib.nullcontext():
            g = _failing_step([1.0, -2.0])
            with pytest.raises(em.KernelError) as info:
                g.numpy()
        errors.append(str(info.value))
    assert counts()[:2] == (1, 1)  # the walk with plans off counts as neither
    assert errors[0] == errors[1]
    line = _failing_step.__code__.co_firstlineno + 2
    assert "a negative input" in errors[1]
    assert f"test_backward_plans.py:{line}" in errors[1]
    np.testing.assert_array_equal(_failing_step([3.0, 4.0]).numpy(), [12.0, 16.0])  # goes on
    assert counts()[0] == 2



def test_attrs_keys_tell_equal_values_of_different_types_apart():
    keys = [plans._attrs_key(a) for a in
            [(2,), (2.0,), (True,), (np.float64(2.0),), (0.0,), (-0.0,), ((1, 2),), ()]]
    assert len(set(keys)) == len(keys)
    assert plans._attrs_key((2.0, (1, 2))) == plans._attrs_key((2.0, (1, 2)))
