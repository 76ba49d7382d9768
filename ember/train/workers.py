"""Worker processes of a ``DataLoader`` (``num_workers > 0``): NumPy batches, in order.

Each worker gets the dataset once (pickled by ``multiprocessing``: the dataset, never an
ember tensor) and then batch index arrays on its own queue, round robin, as PyTorch's
workers do, so batch ``k`` always goes to worker ``k % n`` and comes back to be yielded in
order. A worker answers ``(k, arrays)`` or ``(k, failure)``, its exception as plain data,
which the caller raises again with its own type and message. Workers ignore SIGINT (the
caller's Ctrl-C shuts them down) and exit by themselves once the process that started
them is gone, so no worker outlives its loader.
"""

from __future__ import annotations

import multiprocessing
import queue
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

# Batches in flight per worker (PyTorch's prefetch_factor).
PREFETCH_PER_WORKER = 2
# How often an idle worker checks that its parent still lives, in seconds (a guess: short
# enough that an orphan goes quickly, long enough to cost nothing).
PARENT_POLL_S = 0.5
JOIN_TIMEOUT_S = 5.0


def fetch(dataset: Any, fields: Sequence[np.ndarray] | None, collate_fn: Callable | None,
          indices: np.ndarray) -> tuple[np.ndarray, ...]:
    """The batch at ``indices`` as host arrays: one fancy index per field of an array
    dataset, else ``collate_fn`` (or stacking) over the items."""
    if fields is not None and collate_fn is None:
        return tuple(np.ascontiguousarray(f[indices]) for f in fields)
    if fields is not None:
        items = [tuple(f[int(i)] for f in fields) for i in indices]
    else:
        items = [dataset[int(i)] for i in indices]
    if collate_fn is not None:
        batch = collate_fn(items)
        if isinstance(batch, tuple | list):
            return tuple(np.asarray(b) for b in batch)
        return (np.asarray(batch),)
    if isinstance(items[0], tuple | list):
        return tuple(np.stack([np.asarray(item[k]) for item in items])
                     for k in range(len(items[0])))
    return (np.stack([np.asarray(item) for item in items]),)


def _context() -> multiprocessing.context.BaseContext:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def _worker_loop(dataset: Any, fields: Any, collate_fn: Any, tasks: Any, results: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    results.cancel_join_thread()  # a worker told to stop never waits on an unread pipe
    parent = multiprocessing.parent_process()
    while True:
        try:
            task = tasks.get(timeout=PARENT_POLL_S)
        except queue.Empty:
            if parent is not None and not parent.is_alive():
                return
            continue
        if task is None:
            return
        number, indices = task
        try:
            results.put((number, fetch(dataset, fields, collate_fn, indices)))
        except BaseException as exc:  # noqa: BLE001 - every failure goes to the caller
            results.put((number, _portable(exc)))


class _Failure(tuple):
    """A worker's exception as plain data (its class's module and name, and its message):
    what crosses back is never an object to unpickle, and the caller rebuilds it."""

    __slots__ = ()

    def rebuild(self) -> BaseException:
        """The exception again, of its own type where that type takes a message, else a
        RuntimeError naming it."""
        module, name, message = self
        found = sys.modules.get(module)
        cls = getattr(found, name, None) if found is not None else None
        if isinstance(cls, type) and issubclass(cls, Exception):
            try:
                return cls(message)
            except Exception:  # noqa: BLE001 - a constructor that wants other arguments
                pass
        return RuntimeError(f"DataLoader worker: {name}: {message}")


def _portable(exc: BaseException) -> _Failure:
    return _Failure((type(exc).__module__, type(exc).__qualname__, str(exc)))


class WorkerPool:
    """``num_workers`` processes over one dataset; ``run(batches)`` yields their arrays."""

    def __init__(self, num_workers: int, dataset: Any, fields: Any,
                 collate_fn: Callable | None) -> None:
        context = _context()
        self._results = context.Queue()
        self._tasks = [context.Queue() for _ in range(num_workers)]
        self._processes = [
            context.Process(target=_worker_loop, name=f"ember-dataloader-{k}", daemon=True,
                            args=(dataset, fields, collate_fn, self._tasks[k], self._results))
            for k in range(num_workers)]
        for process in self._processes:
            process.start()
        self.busy = False  # a pass is under way (its batches would mix with the next's)

    @property
    def alive(self) -> bool:
        return all(p.is_alive() for p in self._processes)

    def pids(self) -> list[int]:
        return [p.pid for p in self._processes if p.pid is not None]

    def run(self, batches: Sequence[np.ndarray]) -> Iterator[tuple[np.ndarray, ...]]:
        """The arrays of every batch, in order. A failed batch raises its worker's exception;
        a caller that stops early must ``shutdown()`` (its batches are still in flight)."""
        workers = len(self._processes)
        limit = PREFETCH_PER_WORKER * workers
        sent, done = 0, {}
        self.busy = True
        for wanted in range(len(batches)):
            while sent < len(batches) and sent - wanted < limit:
                self._tasks[sent % workers].put((sent, np.asarray(batches[sent])))
                sent += 1
            while wanted not in done:
                done.update([self._receive()])
            result = done.pop(wanted)
            if isinstance(result, _Failure):
                raise result.rebuild()
            yield result
        self.busy = False

    def _receive(self) -> tuple[int, Any]:
        while True:
            try:
                return self._results.get(timeout=PARENT_POLL_S)
            except queue.Empty:
                dead = [p for p in self._processes if not p.is_alive()]
                if dead:
                    raise RuntimeError(f"DataLoader worker {dead[0].name} (pid {dead[0].pid}) "
                                       f"exited unexpectedly with code {dead[0].exitcode}")

    def shutdown(self) -> None:
        """Stop every worker and wait for it (terminated if it does not stop in time)."""
        for tasks in self._tasks:
            try:
                tasks.put_nowait(None)
            except (ValueError, OSError):
                pass
        for process in self._processes:
            process.join(JOIN_TIMEOUT_S)
            if process.is_alive():
                process.terminate()
                process.join()
        for q in (*self._tasks, self._results):
            q.cancel_join_thread()
            q.close()
