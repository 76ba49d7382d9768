"""The process's cores, shared between the CPU devices at work.

A CPU device alone may use every core: its compiled loops split between threads
(``compiled.in_parallel``) and BLAS runs its own. Two devices at work at once, each
splitting as if alone, would run twice as many busy threads as there are cores, and a
split kernel waits for its slowest part, which waits for a core. So each CPU device
tells the budget when it starts and ends a batch (the runtime calls its backend's
``working``), and a kernel asks ``share()`` how many threads it may use now: the cores
divided between the devices at work, all of them for a device alone.

A device counts as at work while a batch runs and for ``WINDOW_S`` after it ends: a
training loop's batches come with gaps (the caller building the next step), and a
device between two batches of the same loop still needs its share.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Hashable
from typing import NamedTuple

# How long a device counts as at work after its last batch ended. A guess: longer than
# the gaps between the batches of a training step, short enough that a device left
# alone gets every core back within a few steps.
WINDOW_S = 0.05


def count() -> int:
    """The cores this process may run on (a container's CPU set, not the host's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class _DeviceWork:
    __slots__ = ("running", "ended")

    def __init__(self) -> None:
        self.running = 0  # batches running now (one at a time: the device's turn)
        self.ended = -float("inf")  # when its last batch ended (perf_counter)


class BudgetStatistics(NamedTuple):
    cores: int
    devices: int  # devices seen
    at_work: int  # of them at work now
    share: int  # threads each may use now


class CoreBudget:
    """The cores divided between the devices at work.

    ``working(device, True)`` as a device's batch starts, ``working(device, False)`` as
    it ends (from the thread that runs it); ``share()``: threads a kernel may use now.
    """

    def __init__(self, cores: int | None = None, window_s: float = WINDOW_S) -> None:
        self.cores = max(1, cores if cores is not None else count())
        self.window_s = window_s
        self._devices: dict[Hashable, _DeviceWork] = {}
        self._all: tuple[_DeviceWork, ...] = ()  # a snapshot that readers iterate without a lock
        self._lock = threading.Lock()

    def working(self, device: Hashable, running: bool) -> None:
        """Note that ``device`` starts (``running``) or ends a batch."""
        state = self._devices.get(device)
        if state is None:
            with self._lock:
                state = self._devices.setdefault(device, _DeviceWork())
                self._all = tuple(self._devices.values())
        if running:
            state.running += 1
        else:
            state.running = max(state.running - 1, 0)
            state.ended = time.perf_counter()

    def at_work(self) -> int:
        """How many devices run a batch now or ended one within the window."""
        since = time.perf_counter() - self.window_s
        return sum(1 for d in self._all if d.running or d.ended > since)

    def share(self) -> int:
        """Threads one device's kernel may use now: the cores over the devices at work
        (at least one; all of them for a device alone)."""
        return max(1, self.cores // max(1, self.at_work()))

    def forget_running(self) -> None:
        """A forked child runs none of its parent's batches."""
        for device in self._all:
            device.running = 0

    def statistics(self) -> BudgetStatistics:
        at_work = self.at_work()
        return BudgetStatistics(self.cores, len(self._all), at_work,
                                max(1, self.cores // max(1, at_work)))


# The process's budget, which every CPU device draws from.
budget = CoreBudget()

os.register_at_fork(after_in_child=lambda: budget.forget_running())


def share() -> int:
    """Threads a CPU kernel may use now (``budget.share()``)."""
    return budget.share()
