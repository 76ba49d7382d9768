"""The shell of an actor that runs jobs on a thread of its own (autodiff, the optimizer):
a mailbox, a thread started on the first job (and again if it ever died), counters."""

from __future__ import annotations

import queue
import threading
from typing import Any

from ember.actors.stats import ActorInfo


class JobActor:
    """Runs each posted job with ``run_job(job)`` on its thread, in posting order.

    Subclasses name themselves (``kind``: what ``em.list_actors()`` shows) and define
    ``run_job``, which must not raise: a job's failure goes to the readers of what it
    promised (its lanes), never to this thread.
    """

    kind = "actor"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._mailbox: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.messages = 0

    def info(self) -> ActorInfo:
        """This actor as ``em.list_actors()`` lists it."""
        thread = self._thread
        return ActorInfo(self.kind, self.kind, "" if thread is None else thread.name,
                         self.messages, self._mailbox.qsize())

    def post(self, job: Any) -> None:
        """Hand ``job`` to the actor's thread; returns at once."""
        self.messages += 1
        thread = self._thread
        if thread is None or not thread.is_alive():
            with self._lock:
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(target=self._loop,
                                                    name=f"ember-{self.kind}", daemon=True)
                    self._thread.start()
        self._mailbox.put(job)

    def _loop(self) -> None:
        while True:
            self.run_job(self._mailbox.get())

    def run_job(self, job: Any) -> None:
        raise NotImplementedError
