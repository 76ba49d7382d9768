"""The programs in examples/ run and check their own results."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_demo_runs_and_matches_its_references():
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "runtime_demo.py")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "pi ≈" in result.stdout and "largest eigenvalue" in result.stdout
    assert "[cpu:0]" in result.stdout and "[cpu:1]" in result.stdout


def test_digits_demo_trains_saves_and_reloads(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "train_digits.py")],
                            capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "test accuracy" in result.stdout and "predicts the same: True" in result.stdout


def test_two_models_train_concurrently_on_two_devices():
    result = subprocess.run([sys.executable, "train_two_models_async.py"], capture_output=True,
                            text=True, timeout=600, cwd=ROOT / "examples")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "on cpu:0" in result.stdout and "on cpu:1" in result.stdout
