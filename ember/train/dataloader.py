"""``DataLoader``: batches of a map-style dataset, built ahead of use in worker threads.

A dataset is a NumPy array, a tuple of arrays of equal length, or anything
with ``__len__`` and ``__getitem__`` returning arrays (or tuples of them).
Array datasets are batched with one fancy index per field; other datasets
call ``__getitem__`` per item and stack. Batches are uploaded to the target
device as they are built, so the device has them before a step needs them.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import numpy as np
import trio

from ember.device import Device
from ember.ops._core import resolve_device
from ember.ops.creation import tensor as make_tensor
from ember.tensor import Tensor

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
        shard: ``(rank, world)``: this reader's part of every batch, for data parallel over
            ``world`` readers. ``batch_size`` stays the global batch; rank ``r`` reads rows
            ``round(n·r/world)`` to ``round(n·(r+1)/world)`` of each batch of ``n`` items,
            the rows ``Learner(devices=[...])`` gives its ``r``-th device. Default None: all.

    Iterate with ``for batch in loader`` in scripts or ``async for batch in loader``
    under trio; each pass is one epoch.
    """

    def __init__(self, dataset: Any, batch_size: int, shuffle: bool = False,
                 drop_last: bool = False, prefetch: int = 2, seed: int | None = None,
                 device: Device | str | None = None,
                 shard: tuple[int, int] | None = None) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be an int >= 1, got {batch_size!r}")
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
        self.epoch = 0
        self._fields = _array_fields(dataset)
        self._length = len(self._fields[0]) if self._fields is not None else len(dataset)
        if self._fields is not None and any(len(f) != self._length for f in self._fields):
            raise ValueError(f"DataLoader: dataset arrays differ in length: "
                             f"{[len(f) for f in self._fields]}")

    def __len__(self) -> int:
        full, rest = divmod(self._length, self.batch_size)
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
        order = np.arange(self._length)
        if self.shuffle:
            order = np.random.default_rng((self.seed, epoch)).permutation(self._length)
        batches = [order[i:i + self.batch_size] for i in range(0, self._length, self.batch_size)]
        if self.drop_last and batches and len(batches[-1]) < self.batch_size:
            batches.pop()
        if self.shard is not None:
            rank, world = self.shard
            batches = [b[round(len(b) * rank / world):round(len(b) * (rank + 1) / world)]
                       for b in batches]
        return batches

    def host_batch(self, indices: np.ndarray) -> tuple[np.ndarray, ...]:
        """The batch at ``indices`` as host arrays (runs in a worker thread)."""
        if self._fields is not None:
            return tuple(np.ascontiguousarray(f[indices]) for f in self._fields)
        items = [self.dataset[int(i)] for i in indices]
        if isinstance(items[0], tuple | list):
            return tuple(np.stack([np.asarray(item[k]) for item in items])
                         for k in range(len(items[0])))
        return (np.stack([np.asarray(item) for item in items]),)

    def place(self, arrays: tuple[np.ndarray, ...],
              device: Device | None = None) -> tuple[Tensor, ...]:
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
            for indices in batches:
                yield self.place(self.host_batch(indices))
            return
        ready: queue.Queue = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()

        def produce() -> None:
            try:
                for indices in batches:
                    if stop.is_set():
                        return
                    ready.put(self.place(self.host_batch(indices)))
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
        if self.prefetch == 0:
            for indices in batches:
                yield await trio.to_thread.run_sync(self._load, indices)
            return
        send, receive = trio.open_memory_channel(self.prefetch - 1 if self.prefetch > 1 else 0)
        token = trio.lowlevel.current_trio_token()

        def produce() -> None:
            try:
                for indices in batches:
                    trio.from_thread.run(send.send, self.place(self.host_batch(indices)),
                                         trio_token=token)
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
