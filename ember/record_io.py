"""Atomic file writes: a temporary file in the target folder, fsync, rename, fsync the folder.

A writer holds an exclusive ``flock`` on its temporary until the rename, so the next
save of the same target can tell a temporary left by a killed writer (no lock: removed)
from one being written now (locked: kept). The kernel drops a dead process's locks.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
from pathlib import Path

_TEMPORARY_TAIL = r"\.[a-z0-9_]{8,12}\.tmp"  # ours (12 hex digits) and mkstemp's (8)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so a reader sees the old file or the whole new one.

    The file gets the mode 0666 less the umask in force (the kernel applies it; the
    process umask is never changed). Temporaries of ``path`` left by killed writers are
    removed first.
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    remove_stale_temporaries(path)
    fd, tmp = _locked_temporary(folder, path.name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            os.replace(tmp, path)  # before the close releases the lock
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:  # make the rename itself durable
        dir_fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def remove_stale_temporaries(path: Path) -> list[Path]:
    """Remove the temporaries of ``path`` that no live writer holds; returns them."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    pattern = re.compile(re.escape(f".{path.name}") + _TEMPORARY_TAIL)
    try:
        names = [n for n in os.listdir(folder) if pattern.fullmatch(n)]
    except OSError:
        return []
    removed = []
    for name in names:
        candidate = folder / name
        try:
            fd = os.open(candidate, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # a writer holds it: in use
            os.close(fd)
            continue
        try:
            os.unlink(candidate)
            removed.append(candidate)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


def _locked_temporary(folder: Path, name: str) -> tuple[int, str]:
    """A new temporary beside the target, created with mode 0666 (less the umask) and
    locked; made again if a cleaner took it in the moment before the lock."""
    while True:
        tmp = str(folder / f".{name}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        except FileExistsError:
            continue
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            same = os.stat(tmp).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd, tmp
        os.close(fd)
