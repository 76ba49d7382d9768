"""What a kernel running on a device worker may ask of the runtime above it.

``kernels/`` imports nothing from ``ember/actors/``, so the runtime installs its answers
here when it loads (``ember/actors/device_actor.py``). Until then, and in a program that
runs kernels with no actors, each hook does nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

ContextFactory = Callable[[], contextlib.AbstractContextManager]

_waiting_on_others: ContextFactory = contextlib.nullcontext


def waiting_on_others() -> contextlib.AbstractContextManager:
    """A context around a worker's wait for other threads (the other ranks of a
    collective), so that the runtime can let a caller go on meanwhile."""
    return _waiting_on_others()


def install_waiting_on_others(factory: ContextFactory) -> None:
    """Make ``waiting_on_others()`` enter ``factory()`` (the runtime's, at its import)."""
    global _waiting_on_others
    _waiting_on_others = factory
