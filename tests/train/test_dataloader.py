"""DataLoader: batching, shuffling with a seed, drop_last, placement, sync and async iteration."""

from __future__ import annotations

import numpy as np
import pytest
import trio

import ember as em
from ember.train import DataLoader


def _data(n=10):
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    y = np.arange(n, dtype=np.int64)
    return x, y


def test_batches_cover_the_dataset_in_order():
    x, y = _data()
    loader = DataLoader((x, y), batch_size=4)
    batches = list(loader)
    assert len(loader) == len(batches) == 3
    assert [b[0].shape for b in batches] == [(4, 3), (4, 3), (2, 3)]
    np.testing.assert_array_equal(np.concatenate([b[1].numpy() for b in batches]), y)
    assert all(isinstance(t, em.Tensor) and t.device == em.cpu(0) for b in batches for t in b)


def test_drop_last_and_device():
    x, y = _data()
    loader = DataLoader((x, y), batch_size=4, drop_last=True, device="cpu:1")
    batches = list(loader)
    assert len(loader) == len(batches) == 2
    assert batches[0][0].device == em.cpu(1)


def test_shuffle_is_reproducible_per_seed_and_differs_per_epoch():
    x, y = _data(50)

    def orders(seed):
        loader = DataLoader((x, y), batch_size=7, shuffle=True, seed=seed)
        return [np.concatenate([b[1].numpy() for b in loader]) for _ in range(2)]

    a, b, c = orders(1), orders(1), orders(2)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[0], a[1]) and not np.array_equal(a[0], c[0])
    assert sorted(a[0].tolist()) == list(range(50))


def test_map_style_dataset_with_tuples():
    class Squares:
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return np.full(2, i, np.float32), np.int64(i * i)

    batches = list(DataLoader(Squares(), batch_size=2))
    assert [b[1].tolist() for b in batches] == [[0, 1], [4, 9], [16]]
    assert batches[0][0].shape == (2, 2)


def test_single_array_dataset():
    batches = list(DataLoader(np.arange(5.0), batch_size=2))
    assert [b[0].tolist() for b in batches] == [[0.0, 1.0], [2.0, 3.0], [4.0]]


def test_errors_in_the_dataset_reach_the_consumer():
    class Broken:
        def __len__(self):
            return 4

        def __getitem__(self, i):
            if i == 2:
                raise IndexError("bad item 2")
            return np.zeros(1)

    with pytest.raises(IndexError, match="bad item 2"):
        list(DataLoader(Broken(), batch_size=1))


def test_breaking_out_early_does_not_hang():
    x, y = _data(100)
    loader = DataLoader((x, y), batch_size=1, prefetch=2)
    for i, _ in enumerate(loader):
        if i == 3:
            break
    assert len(list(loader)) == 100


async def test_async_iteration_matches_sync():
    x, y = _data(23)
    loader = DataLoader((x, y), batch_size=5, shuffle=True, seed=3)
    reference = DataLoader((x, y), batch_size=5, shuffle=True, seed=3)
    sync_order = np.concatenate([y[i] for i in reference.batch_indices(0)])
    got = []
    async for inputs, targets in loader:
        got.append(await targets)
        assert inputs.shape[1] == 3
    np.testing.assert_array_equal(np.concatenate(got), sync_order)


async def test_async_break_and_errors():
    x, y = _data(40)
    loader = DataLoader((x, y), batch_size=2)
    count = 0
    async for _ in loader:
        count += 1
        if count == 2:
            break
    assert count == 2

    class Broken:
        def __len__(self):
            return 3

        def __getitem__(self, i):
            raise ValueError("nope")

    with pytest.raises(ValueError, match="nope"):
        async for _ in DataLoader(Broken(), batch_size=1):
            pass
    with trio.fail_after(5):
        async for _ in DataLoader((x, y), batch_size=8):
            pass


def test_bad_arguments():
    with pytest.raises(ValueError):
        DataLoader(np.zeros(3), batch_size=0)
    with pytest.raises(ValueError, match="differ in length"):
        DataLoader((np.zeros(3), np.zeros(4)), batch_size=1)
