"""How the Learner's failures reach the user: unwrapped, and naming the user's line.

The Learner runs its work as trio tasks, so a failure leaves a nursery inside an
``ExceptionGroup`` and an op's stack walk for "the user's line" ends in trio's run
loop. The Learner raises the failure itself, and pins the line that called it
(``fit``, ``evaluate``) for the ops of ember's own code that it runs; the user's own
callables (a loss function, a module's ``forward``) still name their own lines.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import trio

from ember.nn.module import Module
from ember.sites import first_site_outside, is_ember_code, pinned_site, pinned_site_state

_EMBER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_TRIO_DIR = os.path.dirname(os.path.abspath(trio.__file__)) + os.sep
_LIBRARIES = (_EMBER_DIR, _TRIO_DIR)


def caller_site() -> tuple[str, int]:
    """The (file, line) of the first frame outside ember and trio: the user's call of
    ``fit`` whether it came through ``fit_sync``, ``em.run`` or the user's own task."""
    return first_site_outside(_LIBRARIES, sys._getframe(1))


# Ops of ember's own code in the block name ``site`` (this thread only).
pinned = pinned_site


def call_user(fn: Callable, *args: Any) -> Any:
    """``fn(*args)`` with the pin lifted when ``fn`` is the user's own function, so its ops
    walk to their own lines (ember's functions and modules keep the pin; a user's module
    lifts it itself)."""
    if isinstance(fn, Module) or is_ember_code(fn):
        return fn(*args)
    state = pinned_site_state()
    before = state.site
    state.site = None
    try:
        return fn(*args)
    finally:
        state.site = before


def unwrapped(exc: BaseException) -> BaseException:
    """The failure inside the exception groups of trio nurseries: a ``KeyboardInterrupt``
    first, else the first failure that is not the cancellation of a sibling task. A group
    of cancellations alone stays as it is (an enclosing cancel scope catches it)."""
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    leaves = list(_leaves(exc))
    for leaf in leaves:
        if isinstance(leaf, KeyboardInterrupt):
            return leaf
    for leaf in leaves:
        if not isinstance(leaf, trio.Cancelled):
            return leaf
    return exc


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc
