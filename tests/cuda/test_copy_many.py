"""Several buffers in one copy launch (kernels/cupy/copy_many.py). On the CPU: the launch
plan carried out the way the kernel walks it, over NumPy buffers; the source compiles
for Hopper. On a GPU: the copies match, and a graphed step's replays hand out outputs
that later replays leave alone."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.kernels.cupy.copy_many import BLOCK, MAX_BUFFERS, launches, source, unit_of
from tests.cuda.gpu import needs_gpu, needs_nvcc, ptx_of


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _run_as_the_kernel(pairs: list[tuple[np.ndarray, np.ndarray]]) -> int:
    """Carry out ``launches`` over NumPy buffers (by address, as the kernel sees them);
    returns the launch count."""
    by_address = {}
    for d, s in pairs:
        by_address[_address(d)] = d.reshape(-1).view(np.uint8)
        by_address[_address(s)] = s.reshape(-1).view(np.uint8)
    plan = launches([(_address(d), _address(s), s.nbytes) for d, s in pairs])
    for unit, blocks, count, args in plan:
        assert len(args) == 3 * MAX_BUFFERS and 1 <= count <= MAX_BUFFERS
        assert blocks * BLOCK >= 1
        for y in range(count):  # blockIdx.y: one buffer; its threads stride over [0, n)
            src, dst, n = args[3 * y:3 * y + 3]
            out, inp = by_address[dst], by_address[src]
            out[:n * unit] = inp[:n * unit]
        assert args[3 * count:] == [0] * (3 * (MAX_BUFFERS - count))
    return len(plan)


@pytest.mark.parametrize("sizes", [[16], [4096, 48, 1 << 16], [3, 5, 7], list(range(1, 40)),
                                   [16 * k for k in range(1, 40)]])
def test_the_plan_copies_every_buffer(sizes):
    rng = np.random.default_rng(len(sizes))
    sources = [rng.integers(0, 255, n, dtype=np.uint8) for n in sizes]
    targets = [np.zeros(n, np.uint8) for n in sizes]
    count = _run_as_the_kernel(list(zip(targets, sources)))
    wide = sum(1 for t, s in zip(targets, sources)
               if unit_of(_address(t), _address(s), s.nbytes) == 16)
    assert count == -(-wide // MAX_BUFFERS) + -(-(len(sizes) - wide) // MAX_BUFFERS)
    for t, s in zip(targets, sources):
        np.testing.assert_array_equal(t, s)


def test_the_unit_is_16_bytes_only_where_addresses_and_size_allow():
    assert unit_of(0, 256, 64) == 16
    assert unit_of(512, 1024, 20) == 1 and unit_of(8, 256, 64) == 1
    (wide, _, two, _), (narrow, _, one, _) = launches([(0, 256, 64), (512, 1024, 20),
                                                       (2048, 4096, 32)])
    assert (wide, two, narrow, one) == (16, 2, 1, 1)
    (unit, blocks, count, args), = launches([(1024, 2048, 1 << 30)])
    assert (unit, count) == (16, 1) and args[:3] == [2048, 1024, 1 << 26]
    assert blocks == 528  # capped: the threads loop


@needs_nvcc
@pytest.mark.parametrize("unit", [16, 1])
def test_the_source_compiles_to_ptx_for_hopper(tmp_path, unit):
    name, code = source(unit)
    ptx = ptx_of(tmp_path, code, name)
    if unit == 16:
        assert "ld.global.nc.v4.u32" in ptx or "ld.global.v4.u32" in ptx


@needs_gpu
@pytest.mark.parametrize("count", [1, 5, MAX_BUFFERS + 3])
def test_copies_on_the_gpu_match(count):
    import cupy

    from ember.kernels.cupy.copy_many import copy_many

    rng = np.random.default_rng(count)
    hosts = [rng.standard_normal(int(n)).astype(np.float32)
             for n in rng.integers(0, 300_000, count)]
    hosts[0] = hosts[0][:3]  # 12 bytes: the 1-byte kernel
    sources = [cupy.asarray(h) for h in hosts]
    targets = [cupy.empty_like(s) for s in sources]
    copy_many(list(zip(targets, sources)))
    for t, h in zip(targets, hosts):
        np.testing.assert_array_equal(cupy.asnumpy(t), h)


@needs_gpu
def test_held_outputs_of_pure_replays_keep_their_values():
    device = em.cuda(0)
    w = em.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4), device=device)

    # A pure graph replays one step whose outputs each replay copies out of its buffers.
    pure = em.graphed(lambda: [w * 2.0, w + 1.0, (w * w).sum(dim=0)], device, pure=True)
    held = [pure() for _ in range(4)]
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    for outputs in held:
        got = [o.numpy() for o in outputs]
        np.testing.assert_array_equal(got[0], base * 2)
        np.testing.assert_array_equal(got[1], base + 1)
        np.testing.assert_array_equal(got[2], (base * base).sum(0))
