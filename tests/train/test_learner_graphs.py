"""The Learner's steps as ``em.graphed`` steps, on CPU devices given a recording capturer
(its replays launch nothing, so these tests count captures and replays; the numbers of
replayed training on a GPU are checked in tests/cuda/test_learner_graphs.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import ember as em
from ember import nn, optim, train
from ember.actors.step_graphs import StepGraphs
from tests.cuda.test_graphs import RecordingCapturer
from tests.train.test_learner import _blobs
from tests.runtime_mode import lazy_only

_fresh = itertools.count(1100)  # apart from the other tests' CPU devices

# 200 samples in batches of 16: 12 full batches and a last one of 8 per epoch.
FULL, PARTIAL = 12, 1


def capturing_device() -> em.Device:
    device = em.cpu(next(_fresh))
    device.actor.graphs = StepGraphs(RecordingCapturer())
    return device


def fit(devices: list[em.Device], make_optimizer, epochs: int = 2, **options) -> train.Learner:
    em.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16, device=devices[0].autodiff()), nn.ReLU(),
                          nn.Linear(16, 3, device=devices[0].autodiff()))
    learner = train.Learner(model, make_optimizer(model.parameters()), nn.F.cross_entropy,
                            devices=devices, progress=False, **options)
    x, y = _blobs()
    learner.fit_sync(train.DataLoader((x[:200], y[:200]), batch_size=16), epochs=epochs)
    return learner


def capturable_adam(params):
    return optim.Adam(params, lr=1e-2, capturable=True)


def sgd(params):
    return optim.SGD(params, lr=0.1, momentum=0.9)


@lazy_only
def test_a_capturable_optimizer_joins_the_step_in_one_graph() -> None:
    learner = fit([capturing_device()], capturable_adam)
    stats = learner._whole_step.graph_stats()
    # The first step makes Adam's state; each batch size is seen once, then captured.
    assert stats["captures"] == 2
    assert stats["replays"] == (FULL - 3) + FULL
    assert stats["refusals"] == 0


@lazy_only
def test_other_optimizers_leave_the_update_out_of_the_graph() -> None:
    learner = fit([capturing_device()], sgd)
    assert learner._whole_step is None
    stats = learner._replica_steps[0].graph_stats()
    assert stats["captures"] == 2
    assert stats["replays"] == (FULL - 2) + FULL


@pytest.mark.parametrize("options", [{"accumulation_steps": 2}, {"graphed": False}])
@lazy_only
def test_accumulation_or_graphed_false_keep_the_whole_step_apart(options) -> None:
    learner = fit([capturing_device()], capturable_adam, **options)
    assert learner._whole_step is None
    captures = learner._replica_steps[0]
    if options.get("graphed") is False:
        assert captures == learner._gradients  # a plain call, no step opened
    else:
        assert captures.graph_stats()["replays"] > FULL


@lazy_only
def test_each_replica_of_data_parallel_replays_its_own_step() -> None:
    devices = [capturing_device(), capturing_device()]
    learner = fit(devices, capturable_adam)
    assert learner._whole_step is None  # an update across devices stays eager
    for step in learner._replica_steps:
        assert step.graph_stats()["captures"] == 2
        assert step.graph_stats()["replays"] == (FULL - 2) + FULL


def test_devices_without_graphs_run_the_plain_step() -> None:
    learner = fit([em.cpu(next(_fresh))], capturable_adam, epochs=1)
    assert learner._whole_step is None
    assert learner._replica_steps == [learner._gradients]
    assert np.isfinite(learner.history.train["loss"]).all()


@lazy_only
def test_a_pure_step_replays_without_running_its_python() -> None:
    learner = fit([capturing_device()], capturable_adam, graphed="pure")
    calls = []
    step = learner._whole_step
    original = step.fn
    step.fn = lambda *args, **kwargs: calls.append(1) or original(*args, **kwargs)
    learner.fit_sync(train.DataLoader((_blobs()[0][:200], _blobs()[1][:200]), batch_size=16),
                     epochs=3)
    assert step.pure and calls == []  # an epoch more, every batch replayed
    assert learner.optimizer.statistics().steps == 3 * (FULL + PARTIAL)
    assert learner.step == 3 * (FULL + PARTIAL)
    assert len(learner.history.train["loss"]) == 3


@pytest.mark.parametrize("devices, make_optimizer, options", [
    (1, sgd, {}), (2, capturable_adam, {}), (1, capturable_adam, {"accumulation_steps": 2})],
    ids=["not capturable", "two devices", "accumulation"])
def test_a_pure_step_needs_one_device_and_a_capturable_update(devices, make_optimizer,
                                                                options) -> None:
    with pytest.raises(ValueError, match="graphed='pure' needs one device"):
        fit([capturing_device() for _ in range(devices)], make_optimizer, graphed="pure",
            **options)
