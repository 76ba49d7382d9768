"""Atomic writes keep files private as the umask asks, never touch the process umask, and
clean up the temporaries of killed writers. Umask and kill tests run in child processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import ember as em
from ember import record_io

_ROOT = Path(__file__).resolve().parents[2]
_LIMIT_S = 60


def _child(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], cwd=_ROOT,
                            env=dict(os.environ, PYTHONPATH=str(_ROOT)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(child: subprocess.Popen) -> str:
    out, err = child.communicate(timeout=_LIMIT_S)
    assert child.returncode == 0, err[-3000:]
    return out


def test_saving_never_changes_the_process_umask(tmp_path, monkeypatch):
    def refuse(mask):
        raise AssertionError("os.umask was called: it changes the whole process's umask")

    monkeypatch.setattr(os, "umask", refuse)
    em.save({"w": em.ones((3,))}, tmp_path / "a.ember")
    record_io.atomic_write_bytes(tmp_path / "b.bin", b"data")
    assert (tmp_path / "b.bin").read_bytes() == b"data"


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077, 0o002])
def test_files_get_the_mode_the_umask_allows(tmp_path, umask):
    child = _child("""
        import os, sys
        import ember as em
        os.umask(int(sys.argv[1]))
        em.save({"w": em.ones((3,))}, sys.argv[2])
        print(oct(os.stat(sys.argv[2]).st_mode & 0o777))
    """, str(umask), str(tmp_path / "m.ember"))
    assert _finish(child).strip() == oct(0o666 & ~umask)


def test_concurrent_saves_and_other_files_stay_private(tmp_path):
    # Other threads create files while saves run: none may see a loosened umask.
    child = _child("""
        import json, os, sys, threading
        from ember import record_io
        os.umask(0o077)
        folder = sys.argv[1]
        stop = threading.Event()

        def saves(k):
            i = 0
            while not stop.is_set():
                record_io.atomic_write_bytes(os.path.join(folder, f"s{k}.bin"), b"x" * 64)
                i += 1

        workers = [threading.Thread(target=saves, args=(k,)) for k in range(2)]
        for w in workers:
            w.start()
        loose = []
        for i in range(3000):
            name = os.path.join(folder, f"other{i}")
            with open(name, "w"):
                pass
            if os.stat(name).st_mode & 0o077:
                loose.append(name)
        stop.set()
        for w in workers:
            w.join()
        saved = [oct(os.stat(os.path.join(folder, f"s{k}.bin")).st_mode & 0o777) for k in range(2)]
        print(json.dumps({"loose": loose, "saved": saved}))
    """, str(tmp_path))
    result = json.loads(_finish(child))
    assert result["loose"] == [] and result["saved"] == ["0o600", "0o600"]


_STALLED_WRITER = """
    import os, sys, time
    from ember import record_io
    os.fsync = lambda fd: time.sleep(1000)  # stalls after writing, before the rename
    print("writing", flush=True)
    record_io.atomic_write_bytes(sys.argv[1], b"x" * (1 << 20))
"""


def _stalled_writer(target: Path) -> subprocess.Popen:
    before = set(_temporaries(target))
    child = _child(_STALLED_WRITER, str(target))
    assert child.stdout.readline().strip() == "writing"
    deadline = time.monotonic() + _LIMIT_S
    while not set(_temporaries(target)) - before:
        assert child.poll() is None, child.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.005)
    return child


def _temporaries(target: Path) -> list[str]:
    """Temporaries of ``target`` (``.NAME.`` + 8 or 12 random characters + ``.tmp``)."""
    head = f".{target.name}."
    return sorted(n for n in os.listdir(target.parent) if n.startswith(head)
                  and n.endswith(".tmp") and "." not in n[len(head):-len(".tmp")])


def _kill(child: subprocess.Popen) -> None:
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=_LIMIT_S)


def test_a_save_removes_temporaries_of_killed_writers(tmp_path):
    target = tmp_path / "model.ember"
    _kill(_stalled_writer(target))
    first = _temporaries(target)
    _kill(_stalled_writer(target))  # its save removed the first one's temporary
    assert len(_temporaries(target)) == 1 and _temporaries(target) != first
    (tmp_path / ".model.ember.k2j_9xq1.tmp").write_bytes(b"mkstemp's, from before")
    assert len(_temporaries(target)) == 2 and not target.exists()
    other = tmp_path / "model.ember.bak"  # another target whose name extends this one's
    other_tmp = tmp_path / ".model.ember.bak.abcdefgh.tmp"
    other_tmp.write_bytes(b"not ours")
    em.save({"w": em.arange(4)}, target)
    assert _temporaries(target) == []
    np.testing.assert_array_equal(em.load(target)["w"], np.arange(4))
    assert other_tmp.exists() and not other.exists()


def test_a_save_keeps_the_temporary_of_a_live_writer(tmp_path):
    target = tmp_path / "model.ember"
    writer = _stalled_writer(target)
    try:
        live = _temporaries(target)
        em.save({"w": em.arange(3)}, target)
        assert _temporaries(target) == live
        assert record_io.remove_stale_temporaries(target) == []
    finally:
        _kill(writer)
    assert [p.name for p in record_io.remove_stale_temporaries(target)] == live
