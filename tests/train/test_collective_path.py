"""The Learner's collective data-parallel path (what NCCL runs on CUDA devices), driven
on two CPU devices by host stand-ins of the two collective kernels: the same calls,
the same rendezvous, real worker threads. The NCCL kernels themselves run in
tests/cuda/test_nccl.py where a host has two GPUs."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.kernels.cupy.rendezvous import Rendezvous
from ember.kernels.numpy.table import KERNELS
from ember.ops._core import multi_call
from ember.train import replicas

from tests.train.test_learner import _blobs, _learner


class HostCollectives:
    """``collective_all_reduce`` / ``collective_broadcast`` on NumPy arrays, counted."""

    def __init__(self, timeout_s: float = 10.0) -> None:
        self.timeout_s = timeout_s
        self.groups: dict[tuple[int, ...], Rendezvous] = {}
        self.rounds = {"collective_all_reduce": 0, "collective_broadcast": 0}

    def kernel(self, msg, pool, *inputs):
        indices, round_id, rank = msg.attrs
        rendezvous = self.groups.setdefault(tuple(indices),
                                            Rendezvous(len(indices), self.timeout_s))
        outputs = tuple(np.empty_like(x) for x in inputs)

        def issue(parts):
            self.rounds[msg.op] += 1
            for j in range(len(inputs)):
                if msg.op == "collective_all_reduce":
                    value = sum(ins[j] for ins, _ in parts)
                else:
                    value = parts[0][0][j]
                for _, outs in parts:
                    outs[j][...] = value

        rendezvous.arrive(round_id, rank, (inputs, outputs), issue)
        return outputs


@pytest.fixture
def host_collectives(monkeypatch):
    fake = HostCollectives()
    for op in fake.rounds:
        monkeypatch.setitem(KERNELS, op, fake.kernel)
    for device in (em.cpu(0), em.cpu(1)):
        monkeypatch.setattr(device.actor.backend, "collectives", True, raising=False)
    return fake


def test_cpu_devices_keep_the_transfer_path():
    model = _learner(devices=[em.cpu(0), em.cpu(1)])
    assert replicas.collective_devices(model.replicas) is None


def test_collective_path_matches_one_device(host_collectives):
    x, y = _blobs()
    loader = lambda: em.train.DataLoader((x[:192], y[:192]), batch_size=32)  # noqa: E731
    single = _learner()
    single.fit_sync(loader(), epochs=2)
    parallel = _learner(devices=[em.cpu(0), em.cpu(1)], accumulation_steps=2)
    assert [d.name for d in replicas.collective_devices(parallel.replicas)] == ["cpu:0", "cpu:1"]
    parallel.fit_sync(loader(), epochs=2)
    # 6 batches an epoch, 2 accumulated per update: 3 all-reduces and 3 broadcasts an epoch.
    assert host_collectives.rounds == {"collective_all_reduce": 6, "collective_broadcast": 6}
    a, b = (r.state_dict() for r in parallel.replicas)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    accumulated = _learner(accumulation_steps=2)
    accumulated.fit_sync(loader(), epochs=2)
    reference = accumulated.model.state_dict()
    for k in a:
        np.testing.assert_allclose(a[k], reference[k], rtol=1e-4, atol=1e-5)


def test_a_rank_that_never_arrives_fails_the_read_instead_of_hanging(host_collectives):
    host_collectives.timeout_s = 0.2
    x = em.ones((4,), device=em.cpu(0))
    (out,) = multi_call("collective_all_reduce", (x,), ((4,),), (em.float32,),
                        ((0, 1), 10**9, 0), rendezvous=True)
    with pytest.raises(em.KernelError, match=r"collective_all_reduce failed.*rank\(s\) \[1\] "
                                             r"did not arrive"):
        out.numpy()
