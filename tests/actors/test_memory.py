"""Memory: the idle-buffer pools stay within the devices' recent peak of live bytes (and
``EMBER_POOL_BYTES``), an output that can never fit raises ``OutOfMemoryError`` at the call,
and a failed allocation raises it at the read while the device keeps working."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import ember as em
from ember.kernels.numpy import pool as numpy_pool
from tests.runtime_mode import lazy_only

_ROOT = Path(__file__).resolve().parents[2]
_LIMIT_S = 300


def _child(code: str, **env: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=_ROOT,
                          env=dict(os.environ, PYTHONPATH=str(_ROOT), **env),
                          capture_output=True, text=True, timeout=_LIMIT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


_LOOP = """
    import json, os
    import ember as em

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    devices = [em.cpu(0), em.cpu(1)]
    n = 1 << 20

    def step(d, w):
        x = em.randn((n,), device=d)
        y = (x * w + 1.0).relu()
        z = em.cat([y[: n // 2], y[n // 2:] * 2.0])
        return w * 0.999 + z.mean() * 0.001, y.sum() + z.sum()

    def loop(ws, count):
        for i in range(count):
            out = [step(d, w) for d, w in zip(devices, ws)]
            ws = [w for w, _ in out]
            if i % 10 == 0:
                [s.item() for _, s in out]
        em.sync()
        return ws

    ws = loop([em.zeros((n,), device=d) for d in devices], 100)
    base = rss()
    loop(ws, int(os.environ["LOOP_ITERATIONS"]))
    stats = [em.stats(d) for d in devices]
    print(json.dumps({"growth": rss() - base, "pooled": [s.bytes_pooled for s in stats],
                      "peak": [s.peak_bytes_held for s in stats]}))
"""


def test_rss_stays_flat_over_2000_iterations_on_two_devices():
    import json

    result = json.loads(_child(_LOOP, LOOP_ITERATIONS="2000"))
    assert result["growth"] < 64 << 20, result
    for pooled, peak in zip(result["pooled"], result["peak"]):
        assert pooled <= peak, result


def test_pool_bytes_setting_caps_each_pool():
    import json

    result = json.loads(_child(_LOOP, LOOP_ITERATIONS="200", EMBER_POOL_BYTES=str(4 << 20)))
    assert all(p <= 4 << 20 for p in result["pooled"]) and max(result["peak"]) > 8 << 20, result


def test_the_pool_follows_the_recent_peak_of_live_bytes(monkeypatch):
    monkeypatch.setattr(numpy_pool, "WINDOW_RELEASES", 8)
    pool = numpy_pool.BufferPool()
    big = [np.empty(1 << 18, np.float32) for _ in range(4)]  # 1 MiB each
    for a in big:
        pool.made(a)
    assert pool.limit() == 4 << 20
    while big:
        a = big.pop()
        pool.release(a)
        del a
    assert pool.statistics()["bytes_pooled"] == 4 << 20  # all of the peak, and no more
    stray = np.empty(1 << 18, np.float32)  # made elsewhere: never counted live
    pool.release(stray)
    del stray
    assert pool.statistics()["bytes_pooled"] == 4 << 20
    for _ in range(2 * 8):  # two windows of small live values: the old peak is forgotten
        small = pool.empty((1 << 14,), np.dtype(np.float32))
        pool.made(small)
        pool.release(small)
        del small
    assert pool.limit() == 1 << 16
    assert pool.statistics()["bytes_pooled"] <= 1 << 16


def _made_then_released(pool: numpy_pool.BufferPool, arrays: list[np.ndarray]) -> None:
    """Count ``arrays`` live on ``pool``, then drop them all (the list is emptied: the pool
    keeps only buffers nothing else holds)."""
    for a in arrays:
        pool.made(a)
    while arrays:
        a = arrays.pop()
        pool.release(a)
        del a


def test_buffers_too_small_to_pool_are_not_counted_live():
    pool = numpy_pool.BufferPool()
    small = np.empty(16, np.float32)  # below the size the pool keeps
    pool.made(small)
    assert pool.limit() == 0
    assert pool.release(small) == small.nbytes  # its bytes, for the device's count
    assert pool.statistics() == {"buffers_pooled": 0, "bytes_pooled": 0}


def test_the_pool_never_exceeds_its_capacity():
    pool = numpy_pool.BufferPool(capacity=1 << 20)
    _made_then_released(pool, [np.empty(1 << 18, np.float32) for _ in range(3)])
    assert pool.statistics() == {"buffers_pooled": 1, "bytes_pooled": 1 << 20}


def _filled_pool() -> tuple[numpy_pool.BufferPool, list[int]]:
    """A pool holding its whole limit: four idle 1 MiB buffers of one shape."""
    pool = numpy_pool.BufferPool()
    old = [pool.empty((1 << 18,), np.dtype(np.float32)) for _ in range(4)]
    ids = [id(a) for a in old]
    _made_then_released(pool, old)
    assert pool.statistics()["bytes_pooled"] == pool.limit() == 4 << 20
    return pool, ids


def _missed_then_released(pool: numpy_pool.BufferPool, shape: tuple[int, ...]) -> int:
    new = pool.empty(shape, np.dtype(np.float32))
    pool.made(new)
    address = id(new)
    pool.release(new)
    del new
    return address


def test_a_full_pool_makes_room_for_a_shape_kernels_miss(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(numpy_pool, "monotonic", lambda: clock[0])
    pool, _ = _filled_pool()
    clock[0] += 2 * numpy_pool.IDLE_S  # the old shape goes unasked for
    kept = _missed_then_released(pool, (512, 512))
    # One old buffer went back to make room; the new shape is served from the pool.
    assert pool.statistics() == {"buffers_pooled": 4, "bytes_pooled": 4 << 20}
    assert id(pool.empty((512, 512), np.dtype(np.float32))) == kept


def test_shapes_asked_for_lately_keep_their_place(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(numpy_pool, "monotonic", lambda: clock[0])
    pool, ids = _filled_pool()
    clock[0] += numpy_pool.IDLE_S / 2  # a loop's step later: still in use
    _missed_then_released(pool, (512, 512))
    assert pool.statistics() == {"buffers_pooled": 4, "bytes_pooled": 4 << 20}
    taken = pool.empty((1 << 18,), np.dtype(np.float32))
    assert id(taken) in ids
    pool.release(taken)
    del taken
    # A shape no kernel asked the pool for (a NumPy kernel's own output) makes no room
    # even when the pooled ones are idle.
    clock[0] += 2 * numpy_pool.IDLE_S
    stray = np.empty((256, 1024), np.float32)
    pool.made(stray)
    pool.release(stray)
    del stray
    assert pool.statistics() == {"buffers_pooled": 4, "bytes_pooled": 4 << 20}
    assert id(pool.empty((1 << 18,), np.dtype(np.float32))) in ids


def test_a_pool_gives_nothing_back_when_too_little_is_idle(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(numpy_pool, "monotonic", lambda: clock[0])
    pool = numpy_pool.BufferPool()
    f32 = np.dtype(np.float32)
    _made_then_released(pool, [pool.empty(shape, f32) for shape in [(1 << 18,)] * 2
                               + [(512, 512)] * 2])  # two shapes, 1 MiB buffers, 4 in all
    clock[0] += 2 * numpy_pool.IDLE_S
    in_use = pool.empty((512, 512), f32)  # asked for again: not idle
    pool.release(in_use)
    del in_use
    # 3 MiB of room needed, 2 MiB idle: the new buffer is not kept and nothing goes back.
    _missed_then_released(pool, (768, 1024))
    assert pool.statistics() == {"buffers_pooled": 4, "bytes_pooled": 4 << 20}


@pytest.mark.parametrize("make", [
    lambda: em.zeros((10**12,)),
    lambda: em.full((10**6, 10**6), 1.5),
    lambda: em.ones((4,)).reshape(4, 1).expand(4, 10**12) + 1,
])
def test_an_output_that_can_never_fit_raises_at_the_call(make):
    with pytest.raises(em.OutOfMemoryError, match=r"total memory") as info:
        make()
    assert isinstance(info.value, MemoryError) and isinstance(info.value, em.EmberError)
    assert em.ones((3,)).sum().item() == 3.0


def test_out_of_memory_error_is_public_and_both_kinds():
    assert issubclass(em.OutOfMemoryError, em.EmberError)
    assert issubclass(em.OutOfMemoryError, MemoryError)
    assert issubclass(em.OutOfMemoryError, em.KernelError)


@lazy_only
def test_a_failed_allocation_raises_at_the_read_and_the_device_keeps_working():
    out = _child("""
        import resource
        import ember as em
        x = em.ones((1000,)) * 2  # the device and its worker start before the limit
        assert x.sum().item() == 2000.0
        with open("/proc/self/statm") as f:
            size = int(f.read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (size + (256 << 20), resource.RLIM_INFINITY))
        big = em.zeros((300_000_000,))  # 1.2 GB: fits the machine, not this process
        try:
            big.numpy()
        except em.OutOfMemoryError as exc:
            assert isinstance(exc, MemoryError) and "full failed" in str(exc), exc
            print("raised at the read")
        resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY,) * 2)
        assert (em.ones((1000,)) * 3).sum().item() == 3000.0
        print("still working")
    """)
    assert out.split("\n")[:2] == ["raised at the read", "still working"]
