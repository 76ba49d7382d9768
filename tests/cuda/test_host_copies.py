"""Copies through pinned memory on a GPU (kernels/cupy/host_copies.py): uploads staged on
the uploading thread, reads the reader waits for, against the host's values."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.kernels.cupy import host_copies
from tests.cuda import gpu

pytestmark = gpu.needs_gpu


@pytest.mark.parametrize("dtype", ["float32", "int64", "bfloat16", "bool"])
def test_staged_uploads_and_reads_round_trip(cuda: em.Device, dtype: str) -> None:
    rng = np.random.default_rng(0)
    n = 2 * host_copies.MIN_STAGED_UPLOAD  # staged at every dtype's width
    source = rng.standard_normal(n).astype(getattr(em, dtype).np)
    kept = source.copy()
    uploads = [em.tensor(source, device=cuda) for _ in range(4)]
    source[:] = source[::-1]  # after tensor() returned: no upload may see it
    computed = [~u if dtype == "bool" else u + u for u in uploads]
    expected = ~kept if dtype == "bool" else kept + kept
    for u, c in zip(uploads, computed):
        np.testing.assert_array_equal(u.numpy(), kept)
        np.testing.assert_array_equal(c.numpy(), expected)


def test_reads_of_views_scalars_and_values_still_being_written(cuda: em.Device) -> None:
    x = em.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4), device=cuda)
    total = (x * 2.0).sum()
    transposed = x.T
    chain = x
    for _ in range(50):  # a queue of kernels before the read
        chain = chain * 1.0 + 1.0
    assert total.numpy().shape == () and total.item() == 132.0
    np.testing.assert_array_equal(transposed.numpy(), np.arange(12).reshape(3, 4).T)
    np.testing.assert_array_equal(chain.numpy(), np.arange(12).reshape(3, 4) + 50.0)
    big = em.zeros((host_copies.MAX_BYTES // 4 + 1,), device=cuda)  # read the blocking way
    assert big.numpy().shape == (host_copies.MAX_BYTES // 4 + 1,)


async def test_awaited_reads_of_a_training_loss(cuda: em.Device) -> None:
    device = cuda.autodiff()
    model = em.nn.Linear(8, 3, device=device)
    x = em.from_numpy(np.ones((16, 8), dtype=np.float32), device=device)
    y = em.tensor(np.arange(16) % 3, device=device)
    losses = []
    for _ in range(5):
        loss = em.nn.functional.cross_entropy(model(x), y)
        losses.append(loss)
        loss.backward()
    values = [float(await loss) for loss in losses]
    assert values == pytest.approx([values[0]] * 5)
    bad = em.tensor(np.full(16, 7), device=device)
    with pytest.raises(em.KernelError, match="out of range"):
        await em.nn.functional.cross_entropy(model(x), bad)
