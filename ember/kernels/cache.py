"""Where compiled kernels and autotune results persist: ``$XDG_CACHE_HOME/ember``.

Defaults to ``~/.cache/ember``; every backend keeps its files in a subfolder.
"""

from __future__ import annotations

import os
import shutil


def cache_dir(*parts: str) -> str:
    """The ember cache folder (or a subfolder of it); not created here."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ember", *parts)


def clear_cache() -> None:
    """Remove every compiled kernel and autotune result ember stored on disk.

    Example:
        ``em.clear_cache()`` frees the disk space; the next run compiles and autotunes its
        kernels again.
    """
    shutil.rmtree(cache_dir(), ignore_errors=True)
