"""``DataLoader``: batches of a map-style dataset, built ahead of use in worker threads
(or worker processes, ``num_workers > 0``).

A dataset is a NumPy array, a tuple of arrays of equal length, or anything
with ``__len__`` and ``__getitem__`` returning arrays (or tuples of them).
Array datasets are batched with one fancy index per field; other datasets
call ``__getitem__`` per item and stack (or ``collate_fn``). Batches are uploaded to
the target device as they are built, so the device has them before a step needs them.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import trio

from ember.device import Device
from ember.ops._core import resolve_device
from ember.ops.creation import tensor as make_tensor
from ember.tensor import Tensor
from ember.train.workers import WorkerPool, fetch

_DONE = object()


class DataLoader:
    """Batches of ``dataset`` as tuples of tensors (one per item field).

    Args:
        dataset: an array, a tuple of arrays, or a map-style dataset.
        batch_size: items per batch.
        shuffle: visit items in a new random order each epoch.
        drop_last: skip the last batch when it is smaller than ``batch_size``.
        prefetch: how many batches are built ahead of the consumer (0: none, each batch
            is loaded when it is asked for).
        seed: the shuffling seed; with the same seed every run visits the same orders.
        device: where batches are placed (default ``em.default_device()``).
        num_workers: worker processes building the host batches (0: threads of this
            process). Workers get the dataset (and ``collate_fn``) pickled once, so both
            must pickle (module-level functions, no lambdas); they return NumPy batches,
            in the same order as ``num_workers=0``. A worker's exception is raised here
            with its type and message.
        collate_fn: ``collate_fn(items) -> array or tuple of arrays``, from the list of
            ``dataset[i]`` of a batch (of per-field rows for array datasets). Default:
            stack each field.
        sampler: an iterable of item indices giving the order (``len`` must work); it
            excludes ``shuffle``.
        persistent_workers: keep the worker processes from one epoch to the next (else
            each epoch starts them); ``close()`` stops them.
        shard: ``(rank, world)``: this reader's part of every batch, for data parallel over
            ``world`` readers. ``batch_size`` stays the global batch; rank ``r`` reads rows
            ``round(n·r/world)`` to ``round(n·(r+1)/world)`` of each batch of ``n`` items,
            the rows ``Learner(devices=[...])`` gives its ``r``-th device. Default None: all.

    Iterate with ``for batch in loader`` in scripts or ``async for batch in loader``
    under trio; each pass is one epoch.

    Example:
        >>> images, labels = np.zeros((100, 64), np.float32), np.arange(100) % 10
        >>> loader = train.DataLoader((images, labels), batch_size=32, shuffle=True, seed=0)
        >>> x, y = next(iter(loader))
        >>> x.shape, y.shape, len(loader)
        ((32, 64), (32,), 4)
    """

    def __init__(self, dataset: Any, batch_size: int, shuffle: bool = False,
                 drop_last: bool = False, prefetch: int = 2, seed: int | None = None,
                 device: Device | str | None = None, num_workers: int = 0,
                 collate_fn: Callable | None = None, sampler: Iterable[int] | None = None,
                 persistent_workers: bool = False,
                 shard: tuple[int, int] | None = None) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be an int >= 1, got {batch_size!r}")
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"DataLoader: num_workers must be an int >= 0, got {num_workers!r}")
        if sampler is not None and shuffle:
            raise ValueError("DataLoader: sampler option is mutually exclusive with shuffle")
        if persistent_workers and num_workers == 0:
            raise ValueError("DataLoader: persistent_workers needs num_workers > 0")
        if collate_fn is not None and not callable(collate_fn):
            raise TypeError(f"DataLoader: collate_fn must be callable, got "
                            f"{type(collate_fn).__name__}")
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise ValueError(f"DataLoader: prefetch must be an int >= 0, got {prefetch!r}")
        if shard is not None:
            rank, world = shard
            if not (isinstance(rank, int) and isinstance(world, int) and 0 <= rank < world):
                raise ValueError(f"DataLoader: shard must be (rank, world) ints with "
                                 f"0 <= rank < world, got {shard!r}")
        self.shard = shard
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.prefetch = prefetch
        self.seed = seed if seed is not None else int(np.random.SeedSequence().entropy % 2**63)
        self.device = resolve_device(device)
        self.num_workers = num_workers
        self.collate_fn = collate_fn
        self.sampler = sampler
        self.persistent_workers = persistent_workers
        self._pool: WorkerPool | None = None
        self.epoch = 0
        self._fields = _array_fields(dataset)
        self._length = len(self._fields[0]) if self._fields is not None else len(dataset)
        if self._fields is not None and any(len(f) != self._length for f in self._fields):
            raise ValueError(f"DataLoader: dataset arrays differ in length: "
                             f"{[len(f) for f in self._fields]}")

    def __len__(self) -> int:
        full, rest = divmod(self._items(), self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def state_dict(self) -> dict[str, int]:
        """What decides the batches from here on: the shuffling seed (drawn at random when
        none was given, so a resumed run must restore it) and the epoch."""
        return {"seed": self.seed, "epoch": self.epoch}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Visit the orders of the run ``state`` came from."""
        self.seed = int(state["seed"])
        if "epoch" in state:
            self.epoch = int(state["epoch"])

    def batch_indices(self, epoch: int) -> list[np.ndarray]:
        """The item indices of every batch of ``epoch`` (a pure function of seed and epoch)."""
        if self.sampler is not None:
            order = np.fromiter((int(i) for i in self.sampler), dtype=np.int64)
        elif self.shuffle:
            order = np.random.default_rng((self.seed, epoch)).permutation(self._length)
        else:
            order = np.arange(self._length)
        batches = [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        if self.drop_last and batches and len(batches[-1]) < self.batch_size:
            batches.pop()
        if self.shard is not None:
            rank, world = self.shard
            batches = [b[round(len(b) * rank / world):round(len(b) * (rank + 1) / world)]
                       for b in batches]
        return batches

    def host_batch(self, indices: np.ndarray) -> tuple[np.ndarray, ...]:
        """The batch at ``indices`` as host arrays (runs in a worker thread)."""
        return fetch(self.dataset, self._fields, self.collate_fn, indices)

    def host_batches(self, batches: Sequence[np.ndarray]) -> Iterator[tuple[np.ndarray, ...]]:
        """The host arrays of ``batches``, in order: from the worker processes when
        ``num_workers > 0``, else built here. Close the iterator to stop early (the
        workers of an unfinished pass are shut down)."""
        if self.num_workers == 0:
            for indices in batches:
                yield self.host_batch(indices)
            return
        pool = self._pool
        if pool is None or pool.busy or not pool.alive:
            if pool is not None:
                pool.shutdown()
            pool = WorkerPool(self.num_workers, self.dataset, self._fields, self.collate_fn)
        self._pool = pool if self.persistent_workers else None
        finished = False
        try:
            yield from pool.run(batches)
            finished = True
        finally:
            if not (finished and self.persistent_workers):
                pool.shutdown()
                if self._pool is pool:
                    self._pool = None

    def close(self) -> None:
        """Stop the persistent worker processes, if any (they stop by themselves too when
        this process exits)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def worker_pids(self) -> list[int]:
        """The process ids of the live persistent workers (for tests and monitoring)."""
        return [] if self._pool is None else self._pool.pids()

    def _items(self) -> int:
        return len(self.sampler) if self.sampler is not None else self._length  # type: ignore[arg-type]

    def place(self, arrays: tuple[np.ndarray, ...],
              device: Device | None = None) -> tuple[Tensor, ...]:
        """One host batch (a tuple of NumPy arrays) as tensors on ``device`` (the loader's
        own by default)."""
        target = device or self.device
        return tuple(make_tensor(a, device=target) for a in arrays)

    def _load(self, indices: np.ndarray) -> tuple[Tensor, ...]:
        return self.place(self.host_batch(indices))

    def _next_epoch(self) -> list[np.ndarray]:
        batches = self.batch_indices(self.epoch)
        self.epoch += 1
        return batches

    def __iter__(self) -> Iterator[tuple[Tensor, ...]]:
        batches = self._next_epoch()
        if self.prefetch == 0:
            with contextlib.closing(self.host_batches(batches)) as arrays:
                for host in arrays:
                    yield self.place(host)
            return
        ready: queue.Queue = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()

        def produce() -> None:
            try:
                with contextlib.closing(self.host_batches(batches)) as arrays:
                    for host in arrays:
                        if stop.is_set():
                            return
                        ready.put(self.place(host))
                ready.put(_DONE)
            except BaseException as exc:  # reaches the consumer, never a silent hang
                ready.put(exc)

        thread = threading.Thread(target=produce, name="ember-dataloader", daemon=True)
        thread.start()
        try:
            while True:
                item = ready.get()
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            while thread.is_alive():  # unblock a producer waiting on a full queue
                try:
                    ready.get_nowait()
                except queue.Empty:
                    thread.join(0.01)

    async def __aiter__(self) -> AsyncIterator[tuple[Tensor, ...]]:
        batches = self._next_epoch()
        if self.prefetch == 0 and self.num_workers == 0:
            for indices in batches:
                yield await trio.to_thread.run_sync(self._load, indices)
            return
        send, receive = trio.open_memory_channel(self.prefetch - 1 if self.prefetch > 1 else 0)
        token = trio.lowlevel.current_trio_token()

        def produce() -> None:
            try:
                with contextlib.closing(self.host_batches(batches)) as arrays:
                    for host in arrays:
                        trio.from_thread.run(send.send, self.place(host), trio_token=token)
            except (trio.BrokenResourceError, trio.ClosedResourceError, trio.RunFinishedError,
                    trio.Cancelled):
                return
            except BaseException as exc:
                try:
                    trio.from_thread.run(send.send, exc, trio_token=token)
                except Exception:
                    return
            finally:
                try:
                    trio.from_thread.run_sync(send.close, trio_token=token)
                except Exception:
                    pass

        thread = threading.Thread(target=produce, name="ember-dataloader", daemon=True)
        thread.start()
        try:
            async with receive:
                async for item in receive:
                    if isinstance(item, BaseException):
                        raise item
                    yield item
        finally:
            receive.close()


def _array_fields(dataset: Any) -> Sequence[np.ndarray] | None:
    """The dataset's fields when it is an array or a tuple of arrays; else None."""
    if isinstance(dataset, np.ndarray):
        return (dataset,)
    if isinstance(dataset, tuple) and dataset and all(isinstance(a, np.ndarray) for a in dataset):
        return dataset
    return None
