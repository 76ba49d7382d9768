"""Resume is exact: after SIGKILL (from the last epoch checkpoint) and after Ctrl-C (from
``interrupted.ember``, mid-epoch), with shuffling (seeded and not), dropout and a per-step
scheduler, the final weights equal an uninterrupted run's. Every run is a child process
under a time limit."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

_ROOT = Path(__file__).resolve().parents[2]
_LIMIT_S = 120


def _env(slow: bool = False) -> dict:
    env = dict(os.environ, PYTHONPATH=str(_ROOT))
    env["EMBER_TEST_SLOW_ITEMS"] = "1" if slow else "0"
    return env


def _command(*args) -> list[str]:
    return [sys.executable, "-m", "tests.train.resume_run", *map(str, args)]


def _run(*args, slow=False, expect_ok=True) -> subprocess.CompletedProcess:
    done = subprocess.run(_command(*args), cwd=_ROOT, env=_env(slow), capture_output=True,
                          text=True, timeout=_LIMIT_S)
    if expect_ok:
        assert done.returncode == 0, done.stderr[-3000:]
    return done


def _weights(directory: Path) -> dict:
    with np.load(directory / "final.npz") as f:
        return dict(f)


def _assert_same(got: dict, expected: dict) -> None:
    assert got.keys() == expected.keys()
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=0, atol=1e-6, err_msg=name)


@pytest.fixture(scope="module", params=["5", "none"], ids=["seeded", "unseeded"])
def straight(request, tmp_path_factory):
    """An uninterrupted run: (its folder with every epoch checkpoint, its seed)."""
    directory = tmp_path_factory.mktemp(f"straight-{request.param}")
    _run("fresh", directory, request.param)
    return directory, request.param


def _from_epoch_one(straight_dir: Path, into: Path) -> None:
    """``into`` holds what the straight run held after its first epoch (same process state:
    a run resumed from it is the straight run's own continuation, even unseeded)."""
    into.mkdir()
    shutil.copy(straight_dir / "epoch-0001.ember", into / "epoch-0001.ember")


def test_resume_after_sigkill_is_exact(straight, tmp_path):
    straight_dir, seed = straight
    killed = tmp_path / "killed"
    _from_epoch_one(straight_dir, killed)
    child = subprocess.Popen(_command("resume", killed, seed, killed), cwd=_ROOT,
                             env=_env(slow=True), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + _LIMIT_S
        while not (killed / "epoch-0002.ember").exists():
            assert child.poll() is None, child.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "no epoch-2 checkpoint in time"
            time.sleep(0.005)
        child.send_signal(signal.SIGKILL)  # mid epoch 3: its dataset is slow
    finally:
        child.kill()
        child.wait(timeout=_LIMIT_S)
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    assert not (killed / "final.npz").exists()
    _run("resume", killed, seed, killed)
    _assert_same(_weights(killed), _weights(straight_dir))


@pytest.mark.parametrize("interrupt_at", [8 * 9 + 3, 8 * 22])
def test_resume_after_ctrl_c_continues_mid_epoch_exactly(straight, tmp_path, interrupt_at):
    straight_dir, seed = straight
    stopped = tmp_path / "stopped"
    _from_epoch_one(straight_dir, stopped)
    done = _run("resume", stopped, seed, stopped, interrupt_at, expect_ok=False)
    assert done.returncode != 0 and "KeyboardInterrupt" in done.stderr, done.stderr[-3000:]
    interrupted = stopped / "interrupted.ember"
    assert interrupted.exists() and not (stopped / "epoch-0002.ember").exists()
    _run("resume", stopped, seed, interrupted)
    _assert_same(_weights(stopped), _weights(straight_dir))
