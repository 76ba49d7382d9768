"""The Learner's failures: the failure itself (never an exception group), at the user's line."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import trio

import ember as em
from ember import nn, optim, train


def _data(bad_target_at=None, n=64):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = rng.integers(0, 3, n)
    if bad_target_at is not None:
        y[bad_target_at] = 7  # out of range for 3 classes
    return x, y


def _learner(loss_fn=nn.F.cross_entropy, model=None):
    em.manual_seed(0)
    model = model or nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = optim.SGD(model.parameters(), lr=0.1)
    return train.Learner(model, opt, loss_fn, progress=False, devices=em.cpu())


def _line_of(text):
    """The line of this file holding ``text``."""
    with open(__file__) as f:
        return next(k for k, line in enumerate(f, 1) if text in line and "_line_of" not in line)


def test_kernel_error_of_a_library_loss_is_raised_bare_at_the_fit_line():
    learner = _learner()
    loader = train.DataLoader(_data(bad_target_at=40), batch_size=16)
    with pytest.raises(em.KernelError) as info:
        learner.fit_sync(loader, epochs=2)  # the fit line
    assert not isinstance(info.value, BaseExceptionGroup)
    assert info.value.site == f"{__file__}:{_line_of('# the fit line')}"
    assert "trio" not in str(info.value)


def test_kernel_error_of_a_user_loss_names_the_loss_line():
    def loss(out, target):
        return nn.F.cross_entropy(out, target)  # the loss line

    learner = _learner(loss)
    with pytest.raises(em.KernelError) as info:
        learner.fit_sync(train.DataLoader(_data(bad_target_at=3), batch_size=16))
    assert info.value.site == f"{__file__}:{_line_of('# the loss line')}"


class _Picker(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x):
        out = self.linear(x)
        return out.index_select(1, em.tensor([0, 1, 5]))  # the forward line


def test_kernel_error_of_a_user_module_names_its_forward_line():
    learner = _learner(model=_Picker())
    with pytest.raises(em.KernelError) as info:
        learner.fit_sync(train.DataLoader(_data(), batch_size=16))
    assert info.value.site == f"{__file__}:{_line_of('# the forward line')}"


def test_kernel_error_of_evaluate_is_bare_at_the_evaluate_line():
    learner = _learner()
    loader = train.DataLoader(_data(bad_target_at=0), batch_size=16)
    with pytest.raises(em.KernelError) as info:
        learner.evaluate_sync(loader)  # the evaluate line
    assert info.value.site == f"{__file__}:{_line_of('# the evaluate line')}"


class _Failing(Exception):
    pass


class _BadDataset:
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i == 37:
            raise _Failing(f"item {i} is unreadable")
        x, y = _data()
        return x[i], y[i]


def test_dataset_failure_arrives_as_itself():
    learner = _learner()
    with pytest.raises(_Failing, match="item 37"):
        learner.fit_sync(train.DataLoader(_BadDataset(), batch_size=8), epochs=2)
    with pytest.raises(_Failing, match="item 37"):
        learner.evaluate_sync(train.DataLoader(_BadDataset(), batch_size=8))


def test_loss_failure_arrives_as_itself_and_other_tasks_end():
    calls = []

    def loss(out, target):
        calls.append(1)
        if len(calls) == 3:
            raise _Failing("loss refused")
        return nn.F.cross_entropy(out, target)

    threads_before = {t for t in threading.enumerate()}
    learner = _learner(loss)
    with pytest.raises(_Failing, match="loss refused"):
        learner.fit_sync(train.DataLoader(_data(), batch_size=8), epochs=3)
    assert len(calls) == 3  # nothing ran past the failure
    assert learner.step == 2
    leftover = [t for t in threading.enumerate()
                if t not in threads_before and t.name.startswith("ember-dataloader")]
    assert not leftover


async def test_fit_inside_a_user_nursery_raises_the_failure_and_siblings_go_on():
    learner = _learner()
    loader = train.DataLoader(_data(bad_target_at=40), batch_size=16)
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            ticks += 1
            await trio.sleep(0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        with pytest.raises(em.KernelError) as info:
            await learner.fit(loader, epochs=2)  # the async fit line
        nursery.cancel_scope.cancel()
    assert info.value.site == f"{__file__}:{_line_of('# the async fit line')}"
    assert ticks > 0


def test_a_cancelled_fit_still_cancels():
    learner = _learner()
    big = train.DataLoader(_data(n=4000), batch_size=4)

    async def main():
        with trio.move_on_after(0.3) as scope:
            await learner.fit(big, epochs=50)
        return scope.cancelled_caught

    assert em.run(main) is True
