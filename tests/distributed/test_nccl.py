"""Gradients summed over NCCL across processes (ember/train/nccl_reduce.py).

- The bucketing (plan, flatten, slice back) on the CPU, over a stand-in communicator.
- Real NCCL without Ray: one process per GPU, started here with one unique id; the sums
  against NumPy (a world of 1 rank with one GPU, 2 ranks with two).
- Real NCCL under Ray: a GPU cluster's training against the object-store path (one GPU)
  and against the one-process run over ``devices=[em.cuda(0), em.cuda(1)]`` (two).
"""

import numpy as np
import pytest

import ember as em
from ember import distributed as dist
from ember import nn, train
from ember.train.nccl_reduce import all_reduce_gradients, plan_buckets
from tests.distributed.models import adam_fn, data, model_fn


def _gpus() -> int:
    try:
        import cupy
        from cupy.cuda import nccl  # noqa: F401

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:  # no CuPy, no NCCL in it, or no driver
        return 0


GPUS = _gpus()
needs_gpu = pytest.mark.skipif(GPUS < 1, reason="needs CuPy with NCCL and a CUDA GPU")
needs_two_gpus = pytest.mark.skipif(GPUS < 2, reason="needs CuPy with NCCL and two CUDA GPUs")


# ----- the bucketing, on the CPU ----------------------------------------------------------


@pytest.mark.without_ray
def test_plan_groups_by_dtype_in_order_and_cuts_at_the_byte_limit():
    f32, f64 = em.float32, em.float64
    shapes = [(2, 3), (4,), (5,), (), (3, 3), (0, 4), (7,)]
    dtypes = [f32, f64, f32, f32, f64, f32, f32]
    buckets = plan_buckets(shapes, dtypes, bucket_bytes=40)  # 10 float32s, 5 float64s
    got = [(b.dtype.name, [(s.index, s.offset, s.shape) for s in b.slots]) for b in buckets]
    assert got == [
        ("float32", [(0, 0, (2, 3))]),                       # 6 + 5 > 10: cut
        ("float64", [(1, 0, (4,))]),                         # 4 + 9 > 5: cut
        ("float32", [(2, 0, (5,)), (3, 5, ()), (5, 6, (0, 4))]),   # 6 + 7 > 10: cut
        # The buckets still open at the end, in the order their dtypes first appeared;
        # a parameter larger than the limit is alone in its bucket.
        ("float32", [(6, 0, (7,))]),
        ("float64", [(4, 0, (3, 3))]),
    ]
    assert [b.size for b in buckets] == [6, 4, 6, 7, 9]
    assert [b.size for b in plan_buckets(shapes, dtypes)] == [19, 13]  # default: per dtype
    assert plan_buckets([], []) == []


@pytest.mark.without_ray
def test_plan_refuses_bad_input():
    with pytest.raises(ValueError, match="plan_buckets: 2 shapes but 1 dtypes"):
        plan_buckets([(1,), (2,)], [em.float32])
    with pytest.raises(ValueError, match="bucket_bytes must be >= 1, got 0"):
        plan_buckets([(1,)], [em.float32], bucket_bytes=0)


class SumOverRanks:
    """A stand-in for the communicator: the world's other ranks hold ``others[k]`` for
    buffer k, so the sum is this rank's buffer plus theirs (NumPy does the sum)."""

    def __init__(self, others, rank=0, world=3):
        self.others, self.rank, self.world, self.calls = others, rank, world, []

    def all_reduce(self, buffers):
        self.calls.append([(tuple(b.shape), b.dtype.name) for b in buffers])
        return tuple(em.tensor(b.numpy() + other, device=b.device)
                     for b, other in zip(buffers, self.others))


@pytest.mark.without_ray
@pytest.mark.parametrize("bucket_bytes", [1, 24, 1 << 20])
def test_all_reduce_gradients_flattens_sums_and_slices_back(bucket_bytes):
    rng = np.random.default_rng(0)
    device = em.cpu(0)
    shapes = [(3, 4), (5,), (), (0, 2), (2, 1, 3), (6,)]
    dtypes = [em.float32, em.float64, em.float32, em.float32, em.float32, em.int64]
    values = [rng.standard_normal(s).astype(d.np) if d.np.kind == "f"
              else rng.integers(-9, 9, s).astype(d.np) for s, d in zip(shapes, dtypes)]
    grads = [em.tensor(v, device=device) for v in values]
    grads[1] = None  # no gradient on this rank: takes part as zeros
    buckets = plan_buckets(shapes, dtypes, bucket_bytes)
    # What the other ranks hold, per bucket: their gradients flattened in the plan's order.
    theirs = [[rng.standard_normal(s).astype(d.np) if d.np.kind == "f"
               else rng.integers(-9, 9, s).astype(d.np) for s, d in zip(shapes, dtypes)]
              for _ in range(2)]
    others = [sum(np.concatenate([t[s.index].reshape(-1) for s in b.slots]) for t in theirs)
              for b in buckets]
    comm = SumOverRanks(others)
    summed = all_reduce_gradients(grads, buckets, comm, device)
    assert len(comm.calls) == 1 and len(comm.calls[0]) == len(buckets)  # one call, per bucket
    assert [shape for shape, _ in comm.calls[0]] == [(b.size,) for b in buckets]
    for k, (shape, dtype) in enumerate(zip(shapes, dtypes)):
        mine = np.zeros(shape, dtype.np) if k == 1 else values[k]
        expected = mine + theirs[0][k] + theirs[1][k]
        assert summed[k].shape == shape and summed[k].dtype == dtype
        np.testing.assert_allclose(summed[k].numpy(), expected, rtol=1e-6)


@pytest.mark.without_ray
def test_all_reduce_gradients_refuses_a_gradient_unlike_its_plan():
    buckets = plan_buckets([(2, 3)], [em.float32])
    comm = SumOverRanks([np.zeros(6, np.float32)])
    wrong = em.zeros((3, 2), device=em.cpu(0))
    with pytest.raises(ValueError, match=r"parameter 0 has a gradient of \(3, 2\) float32, "
                                         r"planned as \(2, 3\) float32"):
        all_reduce_gradients([wrong], buckets, comm, em.cpu(0))
    assert comm.calls == []  # refused before any rank's collective


@pytest.mark.without_ray
def test_communicator_and_cluster_refuse_bad_arguments():
    with pytest.raises(ValueError, match="NCCL runs on CUDA devices, not cpu:0"):
        dist.NcclCommunicator(1, b"", 0, em.cpu(0))
    with pytest.raises(ValueError, match="rank 2 is outside a world of 2"):
        dist.NcclCommunicator(2, b"", 2, em.cpu(0))
    with pytest.raises(ValueError, match="transport must be 'object_store', or 'nccl' on "
                                         "device='cuda'; got 'nccl' on 'cpu'"):
        dist.RayCluster(1, transport="nccl")
    with pytest.raises(ValueError, match="got 'carrier-pigeon'"):
        dist.RayCluster(1, device="cuda", transport="carrier-pigeon")


# ----- real NCCL, processes started here (no Ray) -----------------------------------------


def _rank_sums(rank, world, uid):
    """In a fresh process: this rank's gradients (seeded by rank) summed over the world."""
    device = em.cuda(rank)
    comm = dist.NcclCommunicator(world, uid, rank, device)
    rng = np.random.default_rng(rank)
    shapes = [(33, 7), (5,), (), (0, 3), (1000,), (4, 4)]
    dtypes = [em.float32, em.float64, em.float32, em.float32, em.float16, em.int64]
    values = [rng.standard_normal(s).astype(d.np) if d.np.kind == "f"
              else rng.integers(-99, 99, s).astype(d.np) for s, d in zip(shapes, dtypes)]
    grads = [em.tensor(v, device=device) for v in values]
    out = []
    for bucket_bytes in (16, 1 << 20):  # many buckets, then one per dtype
        buckets = plan_buckets(shapes, dtypes, bucket_bytes)
        out.append([t.numpy() for t in all_reduce_gradients(grads, buckets, comm, device)])
    comm.close()
    return values, out


@needs_gpu
@pytest.mark.without_ray
@pytest.mark.parametrize("world", [1, 2])
def test_real_nccl_sums_over_processes(world):
    if world > GPUS:
        pytest.skip(f"a world of {world} ranks needs {world} GPUs, found {GPUS}")
    from benchmarks.bench_nccl import spawn_ranks

    results = spawn_ranks(_rank_sums, world, timeout_s=240)
    expected = [sum(vals) for vals in zip(*(values for values, _ in results))]
    for _, out in results:
        for got in out:
            for g, e in zip(got, expected):
                assert g.shape == e.shape and g.dtype == e.dtype
                tol = 1e-2 if e.dtype == np.float16 else 1e-6
                np.testing.assert_allclose(g, e, rtol=tol, atol=tol)


# ----- real NCCL under Ray ------------------------------------------------------------------


def _fit(learner, epochs=2):
    return learner.fit_sync(train.DataLoader(data(), batch_size=32, shuffle=True, seed=1),
                            epochs=epochs)


def _on_cluster(**kwargs):
    em.manual_seed(0)
    with dist.RayCluster(**kwargs) as cluster:
        learner = train.Learner(model_fn, adam_fn, nn.F.cross_entropy, cluster=cluster,
                                progress=False)
        history = _fit(learner)
        return learner.model.state_dict(), history


def _assert_same(a, b, atol=1e-5):
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_allclose(np.asarray(a[key]), np.asarray(b[key]), atol=atol, rtol=0)


@needs_gpu
def test_one_gpu_worker_over_nccl_equals_the_object_store_path():
    nccl_weights, nccl_history = _on_cluster(num_workers=1, device="cuda")
    store_weights, store_history = _on_cluster(num_workers=1, device="cuda",
                                               transport="object_store")
    _assert_same(nccl_weights, store_weights)
    np.testing.assert_allclose(nccl_history.train["loss"], store_history.train["loss"],
                               rtol=1e-5)


@needs_two_gpus
def test_two_gpu_workers_over_nccl_equal_one_process_two_gpus():
    weights, history = _on_cluster(num_workers=2, device="cuda")
    em.manual_seed(0)
    model = model_fn(em.cuda(0).autodiff())
    learner = train.Learner(model, adam_fn(model.parameters()), nn.F.cross_entropy,
                            devices=[em.cuda(0), em.cuda(1)], progress=False)
    expected = _fit(learner)
    _assert_same(weights, model.state_dict())
    np.testing.assert_allclose(history.train["loss"], expected.train["loss"], rtol=1e-5)
