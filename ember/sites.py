"""Where an op was issued: the user's (file, line), found by walking up the stack to the
first frame outside the ember package, or pinned for a block (a backward pass, a module's
forward) so that the walk is skipped."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

_EMBER_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


class _PinnedSite(threading.local):
    site: tuple[str, int] | None = None  # per thread; None: walk the stack


_pinned = _PinnedSite()


def user_site() -> tuple[str, int]:
    """The (file, line) of the first caller outside the ember package."""
    site = _pinned.site
    if site is not None:
        return site
    return first_site_outside(_EMBER_DIR, sys._getframe(2))


def first_site_outside(prefixes: str | tuple[str, ...], frame: Any) -> tuple[str, int]:
    """The (file, line) of ``frame`` or the first frame above it whose file name starts
    with none of ``prefixes``.

    The file name's prefix, frame by frame: no cache keyed by code objects, whose hash
    walks their bytecode every time (a real cost on a walk up through trio's run loop)."""
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(prefixes):
            return (filename, frame.f_lineno)
        frame = frame.f_back
    return ("<ember>", 0)


def pinned_site_state() -> _PinnedSite:
    """This thread's pinned site (``.site``: None where ops walk the stack), for callers
    that pin and restore it themselves (``Module.__call__``)."""
    return _pinned


def is_ember_code(fn: Any) -> bool:
    """Whether ``fn`` is a Python function defined inside the ember package."""
    code = getattr(fn, "__code__", None)
    return code is not None and code.co_filename.startswith(_EMBER_DIR)


def pins_site(fn: Callable) -> Callable:
    """Decorate an ember function that calls no user code: the ops it issues find its
    caller's line once (one stack walk), not one walk each."""

    @functools.wraps(fn)
    def pinned(*args: Any, **kwargs: Any) -> Any:
        if _pinned.site is not None:
            return fn(*args, **kwargs)
        _pinned.site = first_site_outside(_EMBER_DIR, sys._getframe(1))
        try:
            return fn(*args, **kwargs)
        finally:
            _pinned.site = None

    return pinned


@contextlib.contextmanager
def pinned_site(site: tuple[str, int]) -> Iterator[None]:
    """``user_site()`` is ``site`` on this thread while the block runs: for ember code that
    calls no user code (a backward pass), whose ops' stack walks would all end there."""
    before = _pinned.site
    _pinned.site = site
    try:
        yield
    finally:
        _pinned.site = before
