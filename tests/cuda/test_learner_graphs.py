"""The Learner's steps replayed as CUDA graphs train as its eager steps do: the whole step
(a capturable Adam, its learning rate scheduled every step), also replayed without its
Python ("pure"), and the forward and backward alone (SGD, updated eagerly)."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn, optim, train
from tests.cuda import gpu
from tests.train.test_learner import _blobs


def _fit(device: em.Device, capturable: bool, graphed: bool | str) -> train.Learner:
    em.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 32, device=device.autodiff()), nn.ReLU(),
                          nn.Linear(32, 3, device=device.autodiff()))
    if capturable:
        opt = optim.Adam(model.parameters(), lr=1e-2, capturable=True)
    else:
        opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.7)
    learner = train.Learner(model, opt, nn.F.cross_entropy, metrics=("loss", "accuracy"),
                            progress=False, scheduler=scheduler, scheduler_interval="step",
                            graphed=graphed)
    x, y = _blobs(n=400)
    learner.fit_sync(train.DataLoader((x, y), batch_size=64, shuffle=True, seed=3), epochs=3)
    return learner


@gpu.needs_gpu
@pytest.mark.parametrize("capturable, graphed", [(True, True), (False, True), (True, "pure")],
                         ids=["whole step", "gradients", "pure whole step"])
def test_replayed_learner_steps_train_as_eager_ones(cuda: em.Device, capturable: bool,
                                                    graphed: bool | str) -> None:
    eager = _fit(cuda, capturable, graphed=False)
    before = cuda.actor.graphs.replays
    replayed = _fit(cuda, capturable, graphed=graphed)
    assert (replayed._whole_step is not None) == capturable
    # 3 epochs of 6 full batches and one of 16: most steps replay.
    assert cuda.actor.graphs.replays - before >= 12
    np.testing.assert_allclose(replayed.history.train["loss"], eager.history.train["loss"],
                               rtol=1e-5)
    assert replayed.history.train["accuracy"][-1] > 0.8
    for name, value in eager.model.state_dict().items():
        np.testing.assert_allclose(replayed.model.state_dict()[name], value, rtol=1e-4,
                                   atol=1e-6, err_msg=name)
