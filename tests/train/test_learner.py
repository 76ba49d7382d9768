"""The Learner: training as concurrent tasks, checkpoints and resume, data parallel, metrics."""

from __future__ import annotations

import numpy as np
import pytest
import trio

import ember as em
from ember import nn, optim, train


def _blobs(n=240, seed=0):
    """Three well-separated Gaussian blobs in 4-D: an easy classification problem."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 4, (3, 4))
    y = rng.integers(0, 3, n)
    x = (centers[y] + rng.normal(0, 0.7, (n, 4))).astype(np.float32)
    return x, y.astype(np.int64)


def _model(device=None):
    return nn.Sequential(nn.Linear(4, 16, device=device), nn.ReLU(), nn.Linear(16, 3, device=device))


def _learner(tmp_path=None, seed=0, devices=None, **kwargs):
    em.manual_seed(seed)
    model = _model(em.cpu().autodiff())
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return train.Learner(model, opt, nn.F.cross_entropy, metrics=("loss", "accuracy", "lr"),
                         checkpoint_dir=None if tmp_path is None else tmp_path / "ckpt",
                         progress=False, devices=devices, **kwargs)


def _loaders(batch_size=16, seed=1):
    x, y = _blobs()
    return (train.DataLoader((x[:200], y[:200]), batch_size=batch_size, shuffle=True, seed=seed),
            train.DataLoader((x[200:], y[200:]), batch_size=64))


def test_fit_learns_and_records_history():
    learner = _learner()
    train_loader, valid_loader = _loaders()
    history = learner.fit_sync(train_loader, valid_loader, epochs=4)
    assert history.epochs == 4 and len(history.valid["accuracy"]) == 4
    assert history.train["loss"][-1] < history.train["loss"][0]
    assert history.valid["accuracy"][-1] > 0.9
    assert history.train["lr"] == [0.1] * 4
    metrics = em.run(learner.evaluate, valid_loader)
    assert set(metrics) == {"loss", "accuracy"} and metrics["accuracy"] > 0.9


async def test_fit_runs_inside_trio_next_to_other_tasks():
    learner = _learner()
    train_loader, _ = _loaders()
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            ticks += 1
            await trio.sleep(0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        history = await learner.fit(train_loader, epochs=2)
        nursery.cancel_scope.cancel()
    assert history.epochs == 2 and ticks > 10


def _losses(history):
    return np.array(history.train["loss"])


def test_resume_continues_exactly(tmp_path):
    straight = _learner(tmp_path / "a")
    train_loader, _ = _loaders()
    expected = _losses(straight.fit_sync(train_loader, epochs=4))

    first = _learner(tmp_path / "b")
    first.fit_sync(_loaders()[0], epochs=2)
    em.manual_seed(123)  # clobber the global RNG: resume must restore it
    resumed = _learner(tmp_path / "b", seed=99).resume()
    assert resumed.epoch == 2
    got = _losses(resumed.fit_sync(_loaders()[0], epochs=4))
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)


def test_checkpoints_keep_the_last_n(tmp_path):
    learner = _learner(tmp_path, keep_checkpoints=2)
    learner.fit_sync(_loaders()[0], epochs=4)
    names = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert names == ["epoch-0003.ember", "epoch-0004.ember"]


def test_cancellation_writes_a_checkpoint(tmp_path):
    learner = _learner(tmp_path)
    big = train.DataLoader(_blobs(4000), batch_size=4)

    async def main():
        with trio.move_on_after(0.5):
            await learner.fit(big, epochs=50)

    em.run(main)
    assert (tmp_path / "ckpt" / "interrupted.ember").exists()
    again = _learner(tmp_path).resume(tmp_path / "ckpt" / "interrupted.ember")
    assert again.epoch == learner.epoch


def test_early_stopping_stops_on_a_plateau():
    learner = _learner(early_stopping=train.EarlyStopping("loss", patience=1, split="train",
                                                          min_delta=10.0))
    history = learner.fit_sync(_loaders()[0], epochs=10)
    assert history.epochs == 2


def test_gradient_accumulation_equals_a_bigger_batch():
    x, y = _blobs()
    results = []
    for batch, steps in ((32, 1), (16, 2)):
        em.manual_seed(0)
        model = _model(em.cpu().autodiff())
        opt = optim.SGD(model.parameters(), lr=0.1)
        learner = train.Learner(model, opt, nn.F.cross_entropy, progress=False,
                                accumulation_steps=steps)
        learner.fit_sync(train.DataLoader((x[:192], y[:192]), batch_size=batch), epochs=2)
        results.append(model.state_dict())
    for k in results[0]:
        np.testing.assert_allclose(results[0][k], results[1][k], rtol=1e-5, atol=1e-6)


def test_data_parallel_keeps_replicas_identical_and_matches_one_device():
    x, y = _blobs()
    loader = lambda: train.DataLoader((x[:192], y[:192]), batch_size=32)  # noqa: E731
    single = _learner()
    single.fit_sync(loader(), epochs=2)
    parallel = _learner(devices=[em.cpu(0), em.cpu(1)])
    assert len(parallel.replicas) == 2
    history = parallel.fit_sync(loader(), epochs=2)
    a, b = (r.state_dict() for r in parallel.replicas)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert parallel.replicas[1].parameters()[0].device.name == "cpu:1"
    reference = single.model.state_dict()
    for k in a:
        np.testing.assert_allclose(a[k], reference[k], rtol=1e-4, atol=1e-5)
    assert history.train["loss"][-1] < history.train["loss"][0]


def test_custom_metrics_see_host_arrays():
    class MeanMargin(train.Metric):
        name = "margin"

        def __init__(self):
            self.reset()

        def update(self, output, target):
            assert isinstance(output, np.ndarray) and isinstance(target, np.ndarray)
            self.values.append(float(output.max(axis=1).mean()))

        def compute(self):
            return float(np.mean(self.values))

        def reset(self):
            self.values = []

    em.manual_seed(0)
    model = _model(em.cpu().autodiff())
    learner = train.Learner(model, optim.Adam(model.parameters()), nn.F.cross_entropy,
                            metrics=("loss", MeanMargin(), "top2_accuracy"), progress=False)
    history = learner.fit_sync(_loaders()[0], epochs=1)
    assert np.isfinite(history.train["margin"][0]) and 0 <= history.train["top2_accuracy"][0] <= 1


def test_history_plot_writes_a_png(tmp_path):
    history = train.History()
    for epoch in range(3):
        history.append("train", {"loss": 1.0 / (epoch + 1), "accuracy": 0.5 + epoch / 10})
        history.append("valid", {"loss": 1.2 / (epoch + 1)})
    path = tmp_path / "curves.png"
    history.plot(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError):
        train.History().plot(tmp_path / "empty.png")


def test_unknown_metric_names_are_refused():
    with pytest.raises(ValueError, match="unknown metric"):
        train.metrics.make("nope")


def test_grad_clip_limits_each_update():
    em.manual_seed(0)
    model = _model(em.cpu().autodiff())
    before = model.state_dict()
    opt = optim.SGD(model.parameters(), lr=1.0)
    learner = train.Learner(model, opt, nn.F.cross_entropy, grad_clip=1e-3, progress=False)
    x, y = _blobs(32)
    learner.fit_sync(train.DataLoader((x, y), batch_size=32), epochs=1)
    after = model.state_dict()
    step = np.sqrt(sum(((after[k] - before[k]).astype(np.float64) ** 2).sum() for k in before))
    assert 0 < step <= 1e-3 * (1 + 1e-4)  # lr 1 × a gradient clipped to norm 1e-3


def test_progress_bar_on_a_terminal(monkeypatch, capsys):
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    learner = _learner()
    learner.progress = train.learner.Progress(True)
    learner.fit_sync(_loaders()[0], epochs=1)
    err = capsys.readouterr().err
    assert "epoch 1/1" in err and "loss" in err
