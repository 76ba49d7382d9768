"""NCCL collectives across two GPUs of one host, and the Learner's data-parallel path
over them (needs two CUDA devices)."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn, optim, train
from ember.ops._core import multi_call
from ember.train import replicas

pytestmark = pytest.mark.skipif(
    len(em.available("cuda")) < 2,
    reason="needs two CUDA devices (NCCL collectives across GPUs of one host)")


def _collective(op: str, values: list[np.ndarray], round_id: int, group=(0, 1)) -> list:
    outs = []
    for rank, (index, value) in enumerate(zip(group, values)):
        x = em.from_numpy(value, device=em.cuda(index))
        (out,) = multi_call(op, (x,), (x.shape,), (x.dtype,), (group, round_id, rank))
        outs.append(out)
    return [o.numpy() for o in outs]


def test_all_reduce_sums_on_every_rank():
    assert em.cuda(0).actor.backend.collectives
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((1000, 33)).astype(np.float32) for _ in range(2))
    for got in _collective("collective_all_reduce", [a, b], -1):
        np.testing.assert_allclose(got, a + b, rtol=1e-6)


def test_broadcast_copies_rank_zero():
    a = np.arange(12, dtype=np.int64).reshape(3, 4)
    for got in _collective("collective_broadcast", [a, np.zeros_like(a)], -2):
        np.testing.assert_array_equal(got, a)


def test_a_missing_rank_fails_the_read_and_the_device_carries_on():
    from ember.kernels.cupy import nccl

    nccl._group((1, 0)).rendezvous.timeout_s = 0.5
    x = em.ones((8,), device=em.cuda(1))
    (out,) = multi_call("collective_all_reduce", (x,), ((8,),), (em.float32,), ((1, 0), -3, 0))
    with pytest.raises(em.KernelError, match=r"rank\(s\) \[1\] did not arrive"):
        out.numpy()
    np.testing.assert_array_equal((x + 1).numpy(), np.full(8, 2.0, np.float32))


def _fit(devices: list[em.Device], graphed: bool = True) -> train.Learner:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((512, 32)).astype(np.float32)
    y = (x[:, :4].sum(axis=1) > 0).astype(np.int64)
    em.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64, device=em.cpu().autodiff()), nn.ReLU(),
                          nn.Linear(64, 2, device=em.cpu().autodiff()))
    learner = train.Learner(model, optim.Adam(model.parameters(), lr=1e-2), nn.F.cross_entropy,
                            devices=devices, progress=False, graphed=graphed)
    learner.fit_sync(train.DataLoader((x, y), batch_size=128), epochs=2)
    return learner


@pytest.mark.parametrize("graphed", [True, False])
def test_learner_on_two_gpus_matches_one(graphed):
    """Each replica's forward and backward replayed as its GPU's graph, or run eagerly."""
    single = _fit([em.cuda(0)], graphed)
    parallel = _fit([em.cuda(0), em.cuda(1)], graphed)
    assert [d.name for d in replicas.collective_devices(parallel.replicas)] == ["cuda:0", "cuda:1"]
    if graphed:  # 8 steps: one seen, one captured, the rest replayed
        assert [s.graph_stats()["replays"] >= 6 for s in parallel._replica_steps] == [True] * 2
    a, b = (r.state_dict() for r in parallel.replicas)
    reference = single.model.state_dict()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
        # Half-batch sums against a full batch: float32 rounding, amplified by Adam.
        np.testing.assert_allclose(a[k], reference[k], rtol=1e-3, atol=1e-4)
