"""A CUDA device's memory pool keeps at most the recent peak of live bytes idle, as the
CPU's pool does: a loop that once used large buffers and then small ones gives the rest
back to the GPU."""

from __future__ import annotations

import numpy as np

import ember as em
from tests.cuda.gpu import needs_gpu


@needs_gpu
def test_the_pool_gives_back_memory_past_the_recent_peak():
    device = em.cuda(0)
    memory = device.actor.backend.memory
    big = [em.ones((1 << 24,), device=device) * float(i) for i in range(8)]  # 512 MiB live
    em.sync(device)
    del big
    em.sync(device)
    for i in range(6000):  # many small values: the big ones' memory is not needed again
        x = em.ones((1 << 10,), device=device) + float(i)
        if i % 1000 == 0:
            x.numpy()
    em.sync(device)
    assert memory.free_bytes() < 256 << 20, memory.free_bytes()
    np.testing.assert_array_equal((em.ones(4, device=device) * 2).numpy(), [2.0] * 4)
