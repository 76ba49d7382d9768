"""``DataLoader(prefetch=0)`` loads each batch when asked (no prefetching); ``index_select``
names the tensor's shape when its dim is out of range; loader state round-trips."""

from __future__ import annotations

import time

import numpy as np
import pytest

import ember as em
from ember import nn, optim, train


class _Counted:
    """A map-style dataset that records how many items it served."""

    def __init__(self, n=40):
        rng = np.random.default_rng(0)
        self.x = rng.normal(size=(n, 4)).astype(np.float32)
        self.y = rng.integers(0, 3, n)
        self.served = 0

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        self.served += 1
        return self.x[i], self.y[i]


def test_prefetch_zero_loads_on_demand_in_scripts():
    data = _Counted()
    loader = train.DataLoader(data, batch_size=8, prefetch=0)
    seen = []
    for k, (x, y) in enumerate(loader):
        time.sleep(0.01)  # a prefetching producer would run ahead meanwhile
        assert data.served == 8 * (k + 1)
        seen.append(x.numpy())
    np.testing.assert_array_equal(np.concatenate(seen), data.x)


async def test_prefetch_zero_loads_on_demand_under_trio():
    import trio

    data = _Counted()
    k = 0
    async for x, y in train.DataLoader(data, batch_size=8, prefetch=0, shuffle=True, seed=3):
        await trio.sleep(0.01)
        k += 1
        assert data.served == 8 * k
        assert x.shape == (8, 4) and y.shape == (8,)
    assert k == 5


def test_prefetch_zero_in_the_learner_loads_each_batch_at_its_step():
    data = _Counted()
    at_steps = []

    def loss(out, target):
        at_steps.append(data.served)
        return nn.F.cross_entropy(out, target)

    em.manual_seed(0)
    model = nn.Linear(4, 3)
    learner = train.Learner(model, optim.SGD(model.parameters(), lr=0.1), loss,
                            devices=em.cpu(), progress=False)
    learner.fit_sync(train.DataLoader(data, batch_size=8, prefetch=0), epochs=2)
    assert at_steps == [8 * k for k in range(1, 11)]


def test_prefetch_must_be_a_non_negative_int():
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="prefetch"):
            train.DataLoader(np.zeros(3), batch_size=1, prefetch=bad)


def test_loader_state_round_trips_an_unseeded_order():
    x = np.arange(50)
    first = train.DataLoader(x, batch_size=10, shuffle=True)
    next(iter(first))
    second = train.DataLoader(x, batch_size=10, shuffle=True)
    second.load_state_dict(first.state_dict())
    assert second.epoch == 1
    for epoch in range(3):
        for a, b in zip(first.batch_indices(epoch), second.batch_indices(epoch)):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dim", [2, -3, 5])
def test_index_select_dim_out_of_range_names_the_shape(dim):
    x = em.zeros((2, 3))
    with pytest.raises(IndexError, match=r"index_select: dim -?\d+ is out of range for x of "
                                         r"shape \(2, 3\)"):
        x.index_select(dim, em.tensor([0]))
