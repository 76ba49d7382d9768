"""``Later``: a backend's result still on its way when the worker hands it over.

A GPU backend answers a read with a device-to-host copy in flight; the worker resolves
the reader's waiter with it and moves on, and the reader, not the worker, waits for it.
It is defined here, by the backends that make it, so that ``kernels/`` need not import
the runtime above it (``ember/actors/waiter.py`` reads it from here).
"""

from __future__ import annotations

from typing import Any


class Later:
    """A result still in flight; ``result()`` waits for it on the caller's thread."""

    __slots__ = ()

    def done(self) -> bool:
        """Whether ``result()`` would return without waiting."""
        raise NotImplementedError

    def result(self) -> Any:
        """Wait for the result (on the caller's thread) and return it, or raise."""
        raise NotImplementedError
