"""Learner additions of the second wave: checkpoint_best, log_file, ReduceLROnPlateau,
evaluate_sync and DataLoader worker processes inside fit."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ember as em
from ember import optim, train
from ember.optim import lr_scheduler as ls
from tests.train.test_learner import _blobs, _learner, _loaders


def test_checkpoint_best_keeps_the_best_epoch_by_valid_loss(tmp_path):
    learner = _learner(tmp_path, checkpoint_best="valid.loss", keep_checkpoints=1)
    train_loader, valid_loader = _loaders()
    history = learner.fit_sync(train_loader, valid_loader, epochs=4)
    best_epoch = int(np.argmin(history.valid["loss"])) + 1
    saved = em.load(tmp_path / "ckpt" / "best.ember")
    assert saved["epoch"] == best_epoch
    assert saved["best_value"] == pytest.approx(min(history.valid["loss"]))
    restored = _learner(seed=5).resume(tmp_path / "ckpt" / "best.ember")
    assert restored.evaluate_sync(valid_loader)["loss"] == pytest.approx(
        min(history.valid["loss"]), rel=1e-5)


def test_checkpoint_best_maximizes_accuracy_and_survives_resume(tmp_path):
    learner = _learner(tmp_path, checkpoint_best="valid.accuracy")
    train_loader, valid_loader = _loaders()
    learner.fit_sync(train_loader, valid_loader, epochs=2)
    first = em.load(tmp_path / "ckpt" / "best.ember")
    resumed = _learner(tmp_path, checkpoint_best="valid.accuracy").resume()
    assert resumed._best_value == first["best_value"]
    history = resumed.fit_sync(train_loader, valid_loader, epochs=4)
    best = em.load(tmp_path / "ckpt" / "best.ember")
    accuracy = history.valid["accuracy"]
    assert best["best_value"] == max(accuracy)
    assert best["epoch"] == accuracy.index(max(accuracy)) + 1  # the first epoch reaching it


def test_checkpoint_best_refuses_bad_specs(tmp_path):
    with pytest.raises(ValueError, match="checkpoint_dir"):
        _learner(checkpoint_best="valid.loss")
    with pytest.raises(ValueError, match="valid.<metric>"):
        _learner(tmp_path, checkpoint_best="loss")
    learner = _learner(tmp_path, checkpoint_best="valid.top5_accuracy")
    train_loader, valid_loader = _loaders()
    with pytest.raises(ValueError, match="no valid metric 'top5_accuracy'"):
        learner.fit_sync(train_loader, valid_loader, epochs=1)


def test_log_file_appends_one_json_line_per_epoch(tmp_path):
    path = tmp_path / "logs" / "run.jsonl"
    learner = _learner(log_file=path)
    train_loader, valid_loader = _loaders()
    history = learner.fit_sync(train_loader, valid_loader, epochs=2)
    learner.fit_sync(train_loader, None, epochs=3)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["epoch"] for line in lines] == [1, 2, 3]
    assert lines[0]["train"]["loss"] == history.train["loss"][0]
    assert lines[1]["valid"]["accuracy"] == history.valid["accuracy"][1]
    assert lines[2]["step"] == 3 * len(train_loader)


def test_reduce_on_plateau_steps_on_the_valid_loss():
    learner = _learner()
    learner.scheduler = ls.ReduceLROnPlateau(learner.optimizer, patience=0, factor=0.5,
                                             threshold=10.0, threshold_mode="abs")
    # Only the first loss beats the starting best (inf) by 10.
    train_loader, valid_loader = _loaders()
    history = learner.fit_sync(train_loader, valid_loader, epochs=3)
    # Epoch 1 sets the best; each later epoch is "bad" and halves the lr (patience 0).
    assert history.train["lr"] == [0.1, 0.1, 0.05]
    assert learner.optimizer.lr == 0.025
    assert learner.scheduler.best == history.valid["loss"][0]
    with pytest.raises(ValueError, match="once per epoch"):
        _learner(scheduler=ls.ReduceLROnPlateau(optim.SGD(learner.model.parameters())),
                 scheduler_interval="step")


class Rows:
    """A map-style dataset over arrays (picklable, for worker processes)."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


def test_fit_with_worker_processes_equals_num_workers_0():
    x, y = _blobs()
    results = []
    for workers in (0, 2):
        learner = _learner()
        loader = train.DataLoader(Rows(x[:200], y[:200]), batch_size=16, shuffle=True, seed=3,
                                  num_workers=workers)
        valid = train.DataLoader(Rows(x[200:], y[200:]), batch_size=64, num_workers=workers)
        history = learner.fit_sync(loader, valid, epochs=2)
        results.append((history.train["loss"], history.valid["loss"],
                        [p.value.numpy() for p in learner.model.parameters()]))
    assert results[0][0] == results[1][0] and results[0][1] == results[1][1]
    for a, b in zip(results[0][2], results[1][2]):
        np.testing.assert_array_equal(a, b)


def test_a_worker_error_stops_fit_with_its_own_type():
    x, y = _blobs()

    learner = _learner()
    loader = train.DataLoader(Broken(x[:64], y[:64]), batch_size=16, num_workers=2)
    with pytest.raises(ZeroDivisionError, match="row 40"):
        learner.fit_sync(loader, epochs=1)


class Broken(Rows):
    def __getitem__(self, i: int):
        if i == 40:
            raise ZeroDivisionError(f"row {i}")
        return super().__getitem__(i)
