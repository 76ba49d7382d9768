"""``Learner.fit`` on one GPU against the bare step loops of ember and PyTorch.

Two models, each trained with Adam on random data held on the host, a batch uploaded per
step as a training loop does: the MLP of bench_cuda.py (784-4096-4096-10, batch 4096) and
a transformer encoder classifier (bench_cuda.py's encoder layer, d_model 768, 12 heads,
feed-forward 3072, seq 256, batch 8, then the mean over the sequence and a linear
classifier to 10 classes).

Rows, ms per step (the median over timed epochs, after a warm-up epoch; each epoch ends
with a device sync):

- ``Learner.fit``: loader task, step task and metrics task (the loss and outputs read
  every step); each batch's forward and backward replayed as a CUDA graph, Adam eager;
- ``graphed=False``: every step eager (the Learner before its graphed steps);
- ``Adam(capturable=True)``: the whole step, update included, replayed as one graph;
- ``graphed='pure'``: that graph replayed without running the step's Python;
- ``reads skipped``: the same with the metrics task handed zeros instead of reading
  (what reading the loss and outputs costs the steps);
- ``ember step loop``: the loop written by hand: upload, forward, backward, Adam step,
  each loss kept and read at the epoch's end;
- ``torch step loop``: the same loop in PyTorch (``.cuda()`` per batch,
  ``zero_grad``, ``backward``, ``step``), losses kept likewise.

Run: ``PYTHONPATH=. python3 benchmarks/bench_learner.py [mlp] [encoder] [--epochs N]`` on a
machine with a GPU.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import ember as em
import ember.train.learner as learner_module
from benchmarks.bench_cuda import DEV, ENCODER, MLP_BATCH, MLP_SIZES, take_option
from ember.nn import functional as F

STEPS_PER_EPOCH = {"mlp": 24, "encoder": 48}


class EncoderClassifier(em.nn.Module):
    """bench_cuda.py's encoder layer, the mean over the sequence, a linear classifier."""

    def __init__(self, device: em.Device) -> None:
        super().__init__()
        e = ENCODER
        self.encoder = em.nn.TransformerEncoderLayer(e["d_model"], e["heads"], e["ff"],
                                                     dropout=0.0, device=device)
        self.head = em.nn.Linear(e["d_model"], 10, device=device)

    def forward(self, x: em.Tensor) -> em.Tensor:
        return self.head(self.encoder(x).mean(dim=1))


class TorchEncoderClassifier(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        e = ENCODER
        self.encoder = torch.nn.TransformerEncoderLayer(e["d_model"], e["heads"], e["ff"],
                                                        dropout=0.0, batch_first=True)
        self.head = torch.nn.Linear(e["d_model"], 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x).mean(dim=1))


def host_data(workload: str) -> tuple[np.ndarray, np.ndarray, int]:
    """(inputs, labels, batch size) of one epoch, on the host."""
    rng = np.random.default_rng(0)
    steps = STEPS_PER_EPOCH[workload]
    if workload == "mlp":
        batch = MLP_BATCH
        x = rng.standard_normal((batch * steps, MLP_SIZES[0]), dtype=np.float32)
    else:
        batch = ENCODER["batch"]
        x = rng.standard_normal((batch * steps, ENCODER["seq"], ENCODER["d_model"]),
                                dtype=np.float32)
    return x, rng.integers(0, 10, batch * steps), batch


def ember_model(workload: str) -> em.nn.Module:
    device = DEV.autodiff()
    if workload == "mlp":
        s = MLP_SIZES
        return em.nn.Sequential(em.nn.Linear(s[0], s[1], device=device), em.nn.ReLU(),
                                em.nn.Linear(s[1], s[2], device=device), em.nn.ReLU(),
                                em.nn.Linear(s[2], s[3], device=device))
    return EncoderClassifier(device)


def torch_model(workload: str) -> torch.nn.Module:
    if workload == "mlp":
        s = MLP_SIZES
        return torch.nn.Sequential(torch.nn.Linear(s[0], s[1]), torch.nn.ReLU(),
                                   torch.nn.Linear(s[1], s[2]), torch.nn.ReLU(),
                                   torch.nn.Linear(s[2], s[3])).cuda()
    return TorchEncoderClassifier().cuda()


def per_step(run_epoch: Callable[[int], Any], steps: int, epochs: int) -> float:
    """Median seconds per step of ``run_epoch(k)`` for k = 1..epochs, after epoch 0."""
    run_epoch(0)
    samples = []
    for k in range(1, epochs + 1):
        start = time.perf_counter()
        run_epoch(k)
        samples.append((time.perf_counter() - start) / steps)
    return statistics.median(samples)


def learner_epochs(workload: str, skip_reads: bool = False, capturable: bool = False,
                   **options: Any) -> Callable:
    x, y, batch = host_data(workload)
    model = ember_model(workload)
    opt = em.optim.Adam(model.parameters(), lr=1e-4, capturable=capturable)
    learner = em.train.Learner(model, opt, F.cross_entropy, progress=False, **options)
    loader = em.train.DataLoader((x, y), batch_size=batch, prefetch=4)

    async def zeros(tensors: list[em.Tensor]) -> list[np.ndarray]:
        return [np.zeros(t.shape, dtype=np.float32) for t in tensors]

    def run_epoch(k: int) -> None:
        original = learner_module._read_all
        if skip_reads:
            learner_module._read_all = zeros
        try:
            learner.fit_sync(loader, epochs=k + 1)
        finally:
            learner_module._read_all = original
        em.sync(DEV)

    return run_epoch


def ember_loop_epochs(workload: str) -> Callable:
    x, y, batch = host_data(workload)
    model = ember_model(workload)
    opt = em.optim.Adam(model.parameters(), lr=1e-4)
    device = DEV.autodiff()

    def run_epoch(k: int) -> None:
        losses = []
        for start in range(0, len(x), batch):
            xb = em.from_numpy(x[start:start + batch], device=device)
            yb = em.from_numpy(y[start:start + batch], device=device)
            loss = F.cross_entropy(model(xb), yb)
            opt.step(loss.backward())
            losses.append(loss)
        [loss.item() for loss in losses]

    return run_epoch


def torch_loop_epochs(workload: str) -> Callable:
    x, y, batch = host_data(workload)
    model = torch_model(workload)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)

    def run_epoch(k: int) -> None:
        losses = []
        for start in range(0, len(x), batch):
            xb = torch.from_numpy(x[start:start + batch]).cuda()
            yb = torch.from_numpy(y[start:start + batch]).cuda()
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        [loss.item() for loss in losses]

    return run_epoch


def measure(workload: str, epochs: int) -> None:
    steps = STEPS_PER_EPOCH[workload]
    rows = {
        "Learner.fit, graphed=False": learner_epochs(workload, graphed=False),
        "Learner.fit": learner_epochs(workload),
        "Learner.fit, Adam(capturable=True)": learner_epochs(workload, capturable=True),
        "Learner.fit, Adam(capturable=True), graphed='pure'":
            learner_epochs(workload, capturable=True, graphed="pure"),
        "Learner.fit, Adam(capturable=True), graphed='pure', reads skipped":
            learner_epochs(workload, capturable=True, graphed="pure", skip_reads=True),
        "ember step loop": ember_loop_epochs(workload),
        "torch step loop": torch_loop_epochs(workload),
    }
    times = {name: per_step(run, steps, epochs) for name, run in rows.items()}
    torch_time = times["torch step loop"]
    for name, seconds in times.items():
        print(f"| {workload} | {name} | {seconds * 1e3:.2f} | {seconds / torch_time:.2f} |",
              flush=True)


def main(args: list[str]) -> None:
    epochs, args = take_option(args, "--epochs", "3")
    print("| model | loop | ms / step | ÷ torch |\n|---|---|---|---|", flush=True)
    for workload in args or ["mlp", "encoder"]:
        measure(workload, int(epochs))


if __name__ == "__main__":
    main(sys.argv[1:])
