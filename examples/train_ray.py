"""Train the digits MLP data parallel on a 2-worker local Ray cluster.

Each worker is a process with its own ember runtime; the loader's batch of 64 is
split over the workers (``DataLoader(..., shard=(rank, world))`` in each), gradients
are all-reduced every step, and the driver records the History. The same run in one
process (two CPU devices) is timed beside it and ends with the same weights.

Run inside a loopback-only network namespace, as the tests do:
``unshare -n bash -c 'ip link set lo up && python examples/train_ray.py'``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

import ember as em
from ember import distributed as dist
from ember import optim, train
from ember.nn import functional as F

# The workers unpickle make_model by its module's name: the Ray processes inherit this path.
_HERE = str(Path(__file__).resolve().parent)
sys.path.insert(0, _HERE)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_HERE, os.environ.get("PYTHONPATH")) if p)
from train_digits import load_data, make_model  # noqa: E402


def make_optimizer(params: list) -> optim.Adam:
    return optim.Adam(params, lr=2e-3)


def main(epochs: int = 5, workers: int = 2) -> float:
    (x_train, y_train), (x_test, y_test) = load_data()

    def loaders() -> tuple[train.DataLoader, train.DataLoader]:
        return (train.DataLoader((x_train, y_train), batch_size=64, shuffle=True, seed=0),
                train.DataLoader((x_test, y_test), batch_size=256))

    with dist.RayCluster(workers) as cluster:
        em.manual_seed(0)
        learner = train.Learner(make_model, make_optimizer, F.cross_entropy, cluster=cluster,
                                metrics=("loss", "accuracy"), progress=False)
        started = time.perf_counter()
        history = learner.fit_sync(*loaders(), epochs=epochs)
        on_cluster = time.perf_counter() - started
    for epoch in range(epochs):
        print(f"epoch {epoch + 1}: train loss {history.train['loss'][epoch]:.4f}, "
              f"test accuracy {history.valid['accuracy'][epoch]:.2%}")

    em.manual_seed(0)
    model = make_model(em.cpu(0).autodiff())
    single = train.Learner(model, make_optimizer(model.parameters()), F.cross_entropy,
                           devices=[em.cpu(k) for k in range(workers)],
                           metrics=("loss", "accuracy"), progress=False)
    started = time.perf_counter()
    single.fit_sync(*loaders(), epochs=epochs)
    one_process = time.perf_counter() - started
    difference = max(float(np.abs(a - model.state_dict()[k]).max())
                     for k, a in learner.model.state_dict().items())
    print(f"{workers} Ray workers: {on_cluster:.1f} s; one process, {workers} devices: "
          f"{one_process:.1f} s; largest weight difference {difference:.1e}")
    return difference


if __name__ == "__main__":
    main()
