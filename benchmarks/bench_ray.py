"""Learner on a local Ray cluster vs one process, and the object-store all-reduce.

A 1M-parameter MLP (512 -> 1024 -> 512, batch 64 of random data): training steps per
second with 1 and 2 CPU workers against the one-process Learner (one device, and two
devices as two workers split a batch), measured interleaved and repeated; then the
all-reduce alone (every worker's 1M float32 gradients summed on every worker through
Ray's object store) per step. Run inside a loopback-only namespace:
``unshare -n bash -c 'ip link set lo up && PYTHONPATH=. python benchmarks/bench_ray.py'``.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

import ember as em
from ember import distributed as dist
from ember import nn, optim, train

BATCH, STEPS, REPEATS = 64, 20, 3


def model_fn(device: em.Device) -> nn.Module:
    return nn.Sequential(nn.Linear(512, 1024, device=device), nn.ReLU(),
                         nn.Linear(1024, 512, device=device))


def sgd_fn(params: list) -> optim.SGD:
    return optim.SGD(params, lr=1e-3)


def loader() -> train.DataLoader:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH * STEPS, 512)).astype(np.float32)
    return train.DataLoader((x, x.copy()), batch_size=BATCH)


def steps_per_second(learner: train.Learner) -> float:
    data = loader()
    learner.fit_sync(data, epochs=learner.epoch + 1)  # warm-up epoch
    started = time.perf_counter()
    learner.fit_sync(data, epochs=learner.epoch + 1)
    return STEPS / (time.perf_counter() - started)


def one_process(devices: list) -> float:
    model = model_fn(em.cpu(0).autodiff())
    return steps_per_second(train.Learner(model, sgd_fn(model.parameters()), nn.F.mse_loss,
                                          devices=devices, progress=False))


def on_cluster(cluster: dist.RayCluster) -> float:
    return steps_per_second(train.Learner(model_fn, sgd_fn, nn.F.mse_loss, cluster=cluster,
                                          progress=False))


def _gradients(context: dict, size: int) -> np.ndarray:
    return np.full(size, context["rank"], np.float32)


def _sum(context: dict, *parts: np.ndarray) -> float:
    return float(sum(parts[1:], parts[0])[0])


def all_reduce_ms(cluster: dist.RayCluster, size: int, rounds: int = 20) -> float:
    import ray

    times = []
    for _ in range(rounds):
        parts = [w.call.remote(_gradients, size) for w in cluster.workers]
        ray.wait(parts, num_returns=len(parts))
        started = time.perf_counter()
        ray.get([w.call.remote(_sum, *parts) for w in cluster.workers])
        times.append(time.perf_counter() - started)
    return 1e3 * statistics.median(times)


def main() -> None:
    params = sum(p.numel() for p in model_fn(em.cpu(0)).parameters())
    print(f"model: {params:,} parameters, batch {BATCH}, {STEPS} steps per epoch")
    rows: dict[str, list[float]] = {k: [] for k in ("1 process, 1 device", "1 worker",
                                                     "1 process, 2 devices", "2 workers")}
    reduce_ms = []
    for _ in range(REPEATS):
        rows["1 process, 1 device"].append(one_process([em.cpu(0)]))
        with dist.RayCluster(1) as cluster:
            rows["1 worker"].append(on_cluster(cluster))
        rows["1 process, 2 devices"].append(one_process([em.cpu(0), em.cpu(1)]))
        with dist.RayCluster(2) as cluster:
            rows["2 workers"].append(on_cluster(cluster))
            reduce_ms.append(all_reduce_ms(cluster, params))
    for name, values in rows.items():
        print(f"{name:>22}: {statistics.median(values):7.1f} steps/s (min {min(values):.1f})")
    for cluster_row, process_row in (("1 worker", "1 process, 1 device"),
                                     ("2 workers", "1 process, 2 devices")):
        ratios = [c / p for c, p in zip(rows[cluster_row], rows[process_row])]
        print(f"{cluster_row} / {process_row}: median {statistics.median(ratios):.2f}, "
              f"min {min(ratios):.2f}")
    print(f"object-store all-reduce of {params:,} float32 over 2 workers: "
          f"median {statistics.median(reduce_ms):.1f} ms (min {min(reduce_ms):.1f})")


if __name__ == "__main__":
    main()
