"""One-shot result slots that a device worker resolves and a caller waits on.

A blocking wait sleeps on a lock the worker releases. An ``await`` parks the
trio task on a ``trio.Event`` that the worker sets through the run's trio
token, so no thread is spent per await. A waiter may be waited on in both
ways, several times, and after a cancelled await. A GPU worker may resolve a
read with a ``Later`` (its copy still in flight): the reader then waits for
that too, so the worker never does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import trio

from ember.kernels.later import Later

# How often a blocked reader checks that the worker it waits on is still alive.
_LIVENESS_POLL_S = 0.5


class Waiter:
    __slots__ = ("_done", "_value", "_error", "_events", "_guard")

    def __init__(self) -> None:
        self._done = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None
        self._events: list[tuple[trio.lowlevel.TrioToken, trio.Event]] = []
        self._guard = threading.Lock()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def resolve(self, value: Any = None, error: BaseException | None = None) -> None:
        """Called once, from the worker thread."""
        self._value = value
        self._error = error
        with self._guard:
            self._done.set()
            events, self._events = self._events, []
        for token, event in events:
            try:
                token.run_sync_soon(event.set)
            except trio.RunFinishedError:
                pass

    def result(self) -> Any:
        if self._error is not None:
            raise self._error
        value = self._value
        return value.result() if isinstance(value, Later) else value

    def wait(self, alive: Callable[[], bool], who: str) -> Any:
        """Block the calling thread until resolved; never hangs on a dead worker."""
        while not self._done.wait(_LIVENESS_POLL_S):
            if not alive():
                from ember.errors import KernelError

                raise KernelError(f"the worker of {who} stopped before delivering this result")
        return self.result()

    async def wait_async(self) -> Any:
        """Park the current trio task until resolved. Cancellation leaves the waiter intact."""
        if not self._done.is_set():
            event = trio.Event()
            with self._guard:
                if not self._done.is_set():
                    self._events.append((trio.lowlevel.current_trio_token(), event))
                else:
                    event.set()
            await event.wait()
        value = self._value
        if isinstance(value, Later) and not value.done():
            # Its wait blocks a thread: not trio's. Abandoned on cancellation, the copy
            # still lands, and a later wait finds it done.
            await trio.to_thread.run_sync(value.result, abandon_on_cancel=True)
        return self.result()
