"""The CPU devices at work share the cores: the budget's arithmetic, the devices telling it
when they work, BLAS's thread count set per product and put back, and results that do not
depend on how many threads computed them."""

from __future__ import annotations


import numpy as np
import pytest

import ember as em
from ember.kernels.numpy import blas_threads, compiled, cores


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = _Clock()
    monkeypatch.setattr(cores.time, "perf_counter", fake)
    return fake


def test_a_device_alone_gets_every_core_and_two_share_them(clock):
    budget = cores.CoreBudget(cores=4, window_s=0.05)
    assert budget.share() == 4  # nobody at work
    budget.working("cpu:0", True)
    assert budget.share() == 4
    budget.working("cpu:1", True)
    assert (budget.at_work(), budget.share()) == (2, 2)
    budget.working("cpu:1", False)
    clock.now += 0.04
    assert budget.share() == 2  # between two batches of its loop: still at work
    clock.now += 0.02
    assert budget.statistics() == cores.BudgetStatistics(4, 2, 1, 4)  # back to all cores


def test_a_long_batch_counts_as_work_past_the_window(clock):
    budget = cores.CoreBudget(cores=2, window_s=0.05)
    budget.working(0, True)
    budget.working(1, True)
    budget.working(1, False)
    clock.now += 10.0
    assert (budget.at_work(), budget.share()) == (1, 2)
    budget.working(1, True)
    assert budget.share() == 1


def test_more_devices_than_cores_get_one_thread_each(clock):
    budget = cores.CoreBudget(cores=2)
    for device in range(3):
        budget.working(device, True)
    assert (budget.at_work(), budget.share()) == (3, 1)
    assert cores.CoreBudget(cores=0).share() == 1


def test_cpu_devices_tell_the_budget_when_they_work(monkeypatch):
    budget = cores.CoreBudget(cores=4, window_s=60.0)
    monkeypatch.setattr(cores, "budget", budget)
    (em.ones((1 << 17,), device=em.cpu(0)) * 2.0).sum().item()
    assert budget.statistics().at_work == 1
    (em.ones((1 << 17,), device=em.cpu(1)) * 2.0).sum().item()
    statistics = budget.statistics()
    assert (statistics.devices, statistics.at_work, statistics.share) == (2, 2, 2)
    budget.window_s = 0.0
    assert budget.share() == 4


def test_compiled_kernels_split_into_the_share(monkeypatch):
    """A row kernel over a device's share of the cores, and the same bits whatever the
    share: the split is by rows, never inside a sum."""
    x_np = np.random.default_rng(0).standard_normal((512, 300), dtype=np.float32)
    parts = []
    original = compiled.in_parallel
    monkeypatch.setattr(compiled, "in_parallel", lambda tasks: (parts.append(len(tasks)),
                                                                original(tasks)))
    monkeypatch.setattr(compiled, "_PER_THREAD", 1 << 10)
    results = []
    for share in (1, 3):
        monkeypatch.setattr(cores, "budget", cores.CoreBudget(cores=share))
        results.append(em.nn.functional.softmax(em.tensor(x_np), -1).numpy())
    if not compiled._enabled():
        pytest.skip(f"fused CPU groups do not compile here: {compiled.status()}")
    assert parts[0] == 1 and parts[-1] == 3, parts
    np.testing.assert_array_equal(results[0], results[1])
    e = np.exp(x_np.astype(np.float64) - x_np.max(-1, keepdims=True))
    np.testing.assert_allclose(results[1], e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


# ----- BLAS ------------------------------------------------------------------------------

class _FakeBlas:
    def __init__(self, count: int) -> None:
        self.count = count
        self.calls: list[int] = []
        self.path = "fake"

    def get(self) -> int:
        return self.count

    def set(self, n: int) -> None:
        self.calls.append(n)
        self.count = n


@pytest.fixture
def fake_blas(monkeypatch):
    blas = _FakeBlas(4)
    monkeypatch.setattr(blas_threads, "_blas", blas)
    monkeypatch.setattr(cores, "budget", cores.CoreBudget(cores=4))
    return blas


def _seen(blas: _FakeBlas):
    """A product whose "BLAS" records the count in force while it runs."""
    seen = []
    real = np.matmul

    def product(a, b, out=None):
        seen.append(blas.count)
        return real(a, b, out=out)
    return product, seen


def test_a_device_alone_keeps_the_programs_blas_count(fake_blas, monkeypatch):
    product, seen = _seen(fake_blas)
    monkeypatch.setattr(blas_threads.np, "matmul", product)
    cores.budget.working(0, True)
    for n in (128, 512):
        a = np.ones((n, n), np.float32)
        out = blas_threads.matmul(np, a, a)
        np.testing.assert_array_equal(out, np.full((n, n), n, np.float32))
    assert seen == [4, 4] and fake_blas.calls == []


def test_two_devices_at_work_halve_blas_and_never_raise_the_programs_count(fake_blas,
                                                                           monkeypatch):
    product, seen = _seen(fake_blas)
    monkeypatch.setattr(blas_threads.np, "matmul", product)
    cores.budget.working(0, True)
    cores.budget.working(1, True)
    a = np.ones((512, 512), np.float32)
    blas_threads.matmul(np, a, a)
    assert seen == [2] and fake_blas.calls == [2, 4] and fake_blas.count == 4
    tiny = np.ones((8, 8), np.float32)
    blas_threads.matmul(np, tiny, tiny)  # OpenBLAS's own single-thread range: untouched
    assert fake_blas.calls == [2, 4]
    fake_blas.count = 1  # the program asked for one thread: ember never asks for more
    fake_blas.calls.clear()
    blas_threads.matmul(np, a, a)
    assert seen[-1] == 1 and fake_blas.calls == []


def test_overlapping_products_restore_the_count_once_the_last_ends(fake_blas):
    assert blas_threads._lower(fake_blas, 1)
    assert blas_threads._lower(fake_blas, 2)  # another device's product meanwhile
    blas_threads._restore(fake_blas)
    assert fake_blas.count == 2  # still held
    blas_threads._restore(fake_blas)
    assert fake_blas.count == 4 and blas_threads._holders == 0


def test_a_failing_product_still_restores_the_count(fake_blas):
    cores.budget.working(0, True)
    cores.budget.working(1, True)
    a = np.ones((128, 128), np.float32)
    with pytest.raises(ValueError):
        blas_threads.matmul(np, a, np.ones((64, 128), np.float32))
    assert fake_blas.count == 4 and blas_threads._holders == 0


def test_numpys_openblas_is_found_and_left_as_it_was():
    blas = blas_threads._library()
    if blas is None:
        pytest.skip(f"no OpenBLAS to set: {blas_threads.status()}")
    before = blas.get()
    a = np.ones((128, 128), np.float32)
    old = cores.budget
    cores.budget = cores.CoreBudget(cores=1)
    try:
        blas_threads.matmul(np, a, a)
    finally:
        cores.budget = old
    assert blas.get() == before
    assert "OpenBLAS" in blas_threads.status()


@pytest.mark.parametrize("shape_a, shape_b", [
    ((256, 784), (784, 1024)),  # the benchmark MLP's first layer
    ((3, 200, 300), (300, 257)),  # stacked onto one GEMM
    ((4, 1, 300, 300), (2, 300, 1)),  # broadcast batch, a matrix-vector product
    ((0, 300), (300, 400)),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_products_agree_whatever_blas_threads_computed_them(shape_a, shape_b, dtype):
    """ember's matmul on one BLAS thread and on all: the same up to the order of the sums."""
    rng = np.random.default_rng(1)
    a_np = rng.standard_normal(shape_a).astype(dtype)
    b_np = rng.standard_normal(shape_b).astype(dtype)
    expected = np.matmul(a_np.astype(np.float64), b_np.astype(np.float64))
    results = []
    for share in (1, cores.count()):
        old = cores.budget
        cores.budget = cores.CoreBudget(cores=share)
        try:
            results.append((em.tensor(a_np) @ em.tensor(b_np)).numpy())
        finally:
            cores.budget = old
    tolerance = 1e-4 if dtype == np.float32 else 1e-12
    for result in results:
        assert result.shape == expected.shape and result.dtype == dtype
        np.testing.assert_allclose(result, expected, rtol=tolerance,
                                   atol=tolerance * np.sqrt(shape_a[-1]))
    np.testing.assert_allclose(results[0], results[1], rtol=tolerance,
                               atol=tolerance * np.sqrt(shape_a[-1]))


def test_a_product_shape_that_does_not_match_still_raises_at_the_call():
    with pytest.raises(Exception, match=r"matmul.*\(32, 64\).*\(128, 10\)"):
        em.ones((32, 64)) @ em.ones((128, 10))


def test_two_models_trained_at_once_stay_exact(monkeypatch):
    """The same training on two devices at once (sharing the cores) and on one alone: the
    same losses up to float reassociation."""
    def train(device):
        em.manual_seed(0)
        rng = np.random.default_rng(0)
        model = em.nn.Linear(300, 200, device=device.autodiff())
        opt = em.optim.SGD(model.parameters(), lr=0.1)
        x = em.tensor(rng.standard_normal((256, 300), dtype=np.float32), device=device)
        losses = []
        for _ in range(3):
            loss = (model(x) ** 2).mean()
            opt.step(loss.backward())
            losses.append(loss)
        return losses

    alone = [v.item() for v in train(em.cpu(0))]
    first, second = train(em.cpu(0)), train(em.cpu(1))
    both = [[v.item() for v in run] for run in (first, second)]
    for losses in both:
        np.testing.assert_allclose(losses, alone, rtol=1e-5)
