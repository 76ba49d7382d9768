"""The WGSL source cache: in memory, then on disk, then rendered.

``source(kind, key, render)`` returns the WGSL of a kernel structure: the
process's own copy, else the file ``$XDG_CACHE_HOME/ember/wgpu/<digest>.wgsl``
that an earlier process rendered, else ``render(*key)`` (written to that file
atomically for the next process; ``em.clear_cache()`` removes them all). The digest covers the kind, the key and the
text of the renderer modules themselves, so editing a renderer never serves a
stale shader. A file that cannot be read or written is skipped, never fatal.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from ember.kernels.cache import cache_dir

_RENDERERS = ("codegen.py", "scalar_ops.py", "elementwise.py", "reduction.py", "rows.py",
              "linalg.py", "scan.py", "scatter.py", "sources.py")
_memory: dict[tuple, str] = {}
_version: str | None = None
statistics = {"rendered": 0, "from_disk": 0}


def _renderer_version() -> str:
    global _version
    if _version is None:
        digest = hashlib.sha256()
        here = Path(__file__).parent
        for name in _RENDERERS:
            digest.update((here / name).read_bytes())
        _version = digest.hexdigest()[:16]
    return _version


def source(kind: str, key: tuple, render: Callable[..., str]) -> str:
    """The WGSL of ``render(*key)``, cached per (kind, key) in memory and on disk."""
    found = _memory.get((kind, key))
    if found is not None:
        return found
    digest = hashlib.sha256(repr((kind, key, _renderer_version())).encode()).hexdigest()[:32]
    path = Path(cache_dir("wgpu")) / f"{digest}.wgsl"
    try:
        found = path.read_text()
        statistics["from_disk"] += 1
    except OSError:
        found = render(*key)
        statistics["rendered"] += 1
        _write(path, found)
    _memory[(kind, key)] = found
    return found


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        temporary.write_text(text)
        os.replace(temporary, path)
    except OSError:
        pass
