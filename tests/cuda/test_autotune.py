"""Autotune bookkeeping with a fake timer: winners, hits and misses, size classes, the
disk cache across instances, and EMBER_AUTOTUNE=0."""

from __future__ import annotations

import json

import pytest

from ember.kernels import autotune
from ember.kernels.autotune import Autotuner


class FakeTimer:
    """Times a candidate by the cost table; records which candidates ran."""

    def __init__(self, costs: dict) -> None:
        self.costs = costs
        self.timed: list = []
        self.current = None

    def __call__(self, run) -> float:
        run()
        self.timed.append(self.current)
        return self.costs[self.current]


def _tuner(tmp_path, costs):
    timer = FakeTimer(costs)
    tuner = Autotuner("test-scope", timer, path=str(tmp_path / "winners.json"))

    def run(candidate):
        timer.current = candidate

    return tuner, timer, run


def test_first_use_times_every_candidate_and_keeps_the_fastest(tmp_path):
    tuner, timer, run = _tuner(tmp_path, {(256, 4): 3.0, (512, 4): 1.0, (128, 8): 2.0})
    candidates = [(256, 4), (512, 4), (128, 8)]
    assert tuner.pick("fused", ("add", "float32"), (1 << 20,), candidates, run) == (512, 4)
    assert timer.timed == candidates and (tuner.hits, tuner.misses) == (0, 1)
    assert tuner.pick("fused", ("add", "float32"), (1 << 20,), candidates, run) == (512, 4)
    assert len(timer.timed) == 3 and (tuner.hits, tuner.misses) == (1, 1)


def test_sizes_share_a_winner_within_a_power_of_two(tmp_path):
    tuner, timer, run = _tuner(tmp_path, {1: 2.0, 2: 1.0})
    tuner.pick("rows", "softmax", (3000, 1000), [1, 2], run)
    tuner.pick("rows", "softmax", (4096, 1024), [1, 2], run)
    assert tuner.misses == 1 and tuner.hits == 1
    tuner.pick("rows", "softmax", (4096, 1025), [1, 2], run)
    assert tuner.misses == 2
    assert autotune.anchor(0) == 0 and autotune.anchor(1) == 1 and autotune.anchor(1025) == 2048


def test_a_new_process_reads_winners_from_disk(tmp_path):
    tuner, _, run = _tuner(tmp_path, {"a": 5.0, "b": 1.0})
    tuner.pick("fused", "k", (64,), ["a", "b"], run)
    again, timer, run = _tuner(tmp_path, {"a": 0.1, "b": 9.0})  # would now pick "a"
    assert again.pick("fused", "k", (64,), ["a", "b"], run) == "b"
    assert timer.timed == [] and again.hits == 1
    stored = json.loads((tmp_path / "winners.json").read_text())
    assert stored["scope"] == "test-scope" and list(stored["winners"].values()) == ["b"]


def test_a_stale_winner_no_longer_among_the_candidates_is_retuned(tmp_path):
    tuner, _, run = _tuner(tmp_path, {"a": 5.0, "b": 1.0, "c": 0.5})
    tuner.pick("fused", "k", (64,), ["a", "b"], run)
    assert tuner.pick("fused", "k", (64,), ["a", "c"], run) == "c"
    assert tuner.misses == 2


def test_autotune_off_takes_the_default_untimed(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_AUTOTUNE", "0")
    tuner, timer, run = _tuner(tmp_path, {"a": 5.0, "b": 1.0})
    assert tuner.pick("fused", "k", (64,), ["a", "b"], run) == "a"
    assert timer.timed == [] and (tuner.hits, tuner.misses) == (0, 0)
    assert not (tmp_path / "winners.json").exists()


def test_a_corrupt_cache_file_is_ignored(tmp_path):
    (tmp_path / "winners.json").write_text("{not json")
    tuner, _, run = _tuner(tmp_path, {"a": 5.0, "b": 1.0})
    assert tuner.pick("fused", "k", (64,), ["a", "b"], run) == "b"


def test_no_candidates_is_an_error(tmp_path):
    tuner, _, run = _tuner(tmp_path, {})
    with pytest.raises(ValueError, match="no candidates"):
        tuner.pick("fused", "k", (64,), [], run)
