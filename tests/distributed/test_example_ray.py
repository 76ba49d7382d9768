"""examples/train_ray.py runs (one epoch) and matches the one-process run."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_train_ray_example():
    code = "import train_ray; assert train_ray.main(epochs=1) < 1e-5"
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300, cwd=ROOT / "examples",
                            env={**os.environ, "PYTHONPATH": path})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "epoch 1: train loss" in result.stdout and "2 Ray workers" in result.stdout
