"""``no_grad`` / ``enable_grad``: switch gradient recording off or on for a block or a function.

They set the same context variable as ops' ``no_record()`` (``ember.ops.recording``): a
context variable, so one trio task's block never changes recording in another task on the
same thread.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ember.ops.recording import paused as _paused


class _GradMode:
    """A context manager and decorator that sets recording to ``self._paused``."""

    _paused = False

    def __init__(self) -> None:
        self._tokens: list = []

    def __enter__(self) -> _GradMode:
        self._tokens.append(_paused.set(self._paused))
        return self

    def __exit__(self, *exc: Any) -> None:
        _paused.reset(self._tokens.pop())

    def __call__(self, fn: Callable) -> Callable:
        mode = type(self)

        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with mode():
                return fn(*args, **kwargs)

        return wrapped


class no_grad(_GradMode):  # noqa: N801  (torch's name)
    """Ops inside the block (or the decorated function) record no gradient graph.

    Their outputs are untracked, as ``torch.no_grad`` makes them.

    Example:
        >>> with em.no_grad():
        ...     y = w * 2   # y.is_tracked is False even for a tracked w
    """

    _paused = True


class enable_grad(_GradMode):  # noqa: N801  (torch's name)
    """Recording back on inside a ``no_grad`` block (or for the decorated function).

    Example:
        >>> with em.no_grad():
        ...     with em.enable_grad():
        ...         em.is_grad_enabled()
        True
    """

    _paused = False


def is_grad_enabled() -> bool:
    """Whether ops on tracked tensors record gradients here (False inside ``no_grad``).

    Example:
        >>> with em.no_grad():
        ...     em.is_grad_enabled()
        False
    """
    return not _paused.get()
