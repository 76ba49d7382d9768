"""Mixed precision: ember's ``em.autocast(dtype=em.bfloat16)`` training step against
``torch.autocast("cuda", dtype=torch.bfloat16)``, side by side, interleaved.

Workloads (Adam, float32 master weights, the loss in float32):

- the MLP of bench_cuda.py (784-4096-4096-10, batch 4096);
- the encoder classifier of bench_learner.py (bench_cuda.py's encoder layer, d_model 768,
  12 heads, feed-forward 3072, seq 256, batch 8; the mean over the sequence; a linear
  head to 10 classes).

Rows: ms per step, each sample ``STEPS`` steps and one device sync, ember and torch
alternating (benchmarks/paired.py), median and min of the ratio; ember eager, and ember's
step as an ``em.graphed`` step with a capturable Adam (replayed as a CUDA graph). Then
a loss curve per workload: both start from the same weights (torch's initialization,
copied) and see the same batches (labels from a fixed random linear teacher) for
``--steps`` steps (default 200); printed: the largest ``|loss_ember - loss_torch|``
relative to torch's loss at that step, and the first and last losses of each.

Run: ``PYTHONPATH=. python3 benchmarks/bench_precision.py [mlp] [encoder] [--steps N]``
on a machine with a CUDA GPU; ``--quick`` runs tiny models on the CPU (to check the
script: CPU times mean nothing here; NumPy has no bfloat16 arithmetic, ember emulates it).
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import ember as em
from benchmarks.bench_cuda import ENCODER, MLP_BATCH, MLP_SIZES, take_option
from benchmarks.bench_learner import EncoderClassifier, TorchEncoderClassifier
from benchmarks.paired import Row, markdown, measure
from ember.nn import functional as F

STEPS = 10  # steps per timed sample
# --quick: the same workloads, small enough for a CPU.
QUICK_MLP = (64, (784, 128, 128, 10))
QUICK_ENCODER = {"d_model": 64, "heads": 4, "ff": 128, "seq": 16, "batch": 4}


class Setup:
    """Where and how large: the CUDA GPU and the issue's sizes, or ``--quick`` on the CPU."""

    def __init__(self, quick: bool) -> None:
        self.quick = quick
        self.em_device = em.cpu() if quick else em.cuda(0)
        self.torch_device = "cpu" if quick else "cuda"
        self.mlp_batch, self.mlp_sizes = QUICK_MLP if quick else (MLP_BATCH, MLP_SIZES)
        if quick:
            # bench_learner's classifiers read bench_cuda's ENCODER when built.
            ENCODER.update(QUICK_ENCODER)

    def sync_ember(self) -> None:
        em.sync(self.em_device)

    def sync_torch(self) -> None:
        if self.torch_device == "cuda":
            torch.cuda.synchronize()


def batches(setup: Setup, workload: str, count: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``count`` batches whose labels a fixed random linear map of the inputs decides."""
    rng = np.random.default_rng(0)
    if workload == "mlp":
        shape = (setup.mlp_batch, setup.mlp_sizes[0])
    else:
        shape = (ENCODER["batch"], ENCODER["seq"], ENCODER["d_model"])
    teacher = rng.standard_normal((shape[-1], 10)).astype(np.float32)
    out = []
    for _ in range(count):
        x = rng.standard_normal(shape, dtype=np.float32)
        features = x if x.ndim == 2 else x.mean(axis=1)
        out.append((x, np.argmax(features @ teacher, axis=1).astype(np.int64)))
    return out


def torch_model(setup: Setup, workload: str) -> torch.nn.Module:
    if workload == "mlp":
        s = setup.mlp_sizes
        model = torch.nn.Sequential(torch.nn.Linear(s[0], s[1]), torch.nn.ReLU(),
                                    torch.nn.Linear(s[1], s[2]), torch.nn.ReLU(),
                                    torch.nn.Linear(s[2], s[3]))
    else:
        model = TorchEncoderClassifier()
    return model.to(setup.torch_device)


def ember_model(setup: Setup, workload: str, like: torch.nn.Module) -> em.nn.Module:
    """The ember twin of ``like``, with its weights (the names are torch's)."""
    device = setup.em_device.autodiff()
    if workload == "mlp":
        s = setup.mlp_sizes
        model = em.nn.Sequential(em.nn.Linear(s[0], s[1], device=device), em.nn.ReLU(),
                                 em.nn.Linear(s[1], s[2], device=device), em.nn.ReLU(),
                                 em.nn.Linear(s[2], s[3], device=device))
    else:
        model = EncoderClassifier(device)
    model.load_state_dict({k: v.detach().cpu().numpy() for k, v in like.state_dict().items()})
    return model


def ember_step(setup: Setup, model: em.nn.Module, data: list, capturable: bool = False,
               lr: float = 1e-4) -> Callable[[], em.Tensor]:
    opt = em.optim.Adam(model.parameters(), lr=lr, capturable=capturable)
    device = setup.em_device.autodiff()
    placed = [(em.from_numpy(x, device=device), em.from_numpy(y, device=device))
              for x, y in data]
    at = [0]

    def step() -> em.Tensor:
        x, y = placed[at[0] % len(placed)]
        at[0] += 1
        with em.autocast(dtype=em.bfloat16):
            loss = F.cross_entropy(model(x), y)
        opt.step(loss.backward())
        return loss

    return step


def torch_step(setup: Setup, model: torch.nn.Module, data: list,
               lr: float = 1e-4) -> Callable[[], torch.Tensor]:
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    placed = [(torch.from_numpy(x).to(setup.torch_device),
               torch.from_numpy(y).to(setup.torch_device)) for x, y in data]
    at = [0]

    def step() -> torch.Tensor:
        x, y = placed[at[0] % len(placed)]
        at[0] += 1
        opt.zero_grad(set_to_none=True)
        with torch.autocast(setup.torch_device, dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def _repeated(step: Callable[[], Any], sync: Callable[[], None]) -> Callable[[], None]:
    def sample() -> None:
        for _ in range(STEPS):
            step()
        sync()

    return sample


def step_rows(setup: Setup, workload: str, repeats: int) -> list:
    """Paired rows of one workload: ember eager and ember graphed, each against torch."""
    data = batches(setup, workload, 4)
    name = ("MLP 784-4096-4096-10 batch 4096" if workload == "mlp" and not setup.quick
            else "encoder classifier d768 h12 ff3072 seq256 batch8" if not setup.quick
            else f"{workload} (quick, CPU)")
    rows = []
    for label, capturable in (("eager", False), ("em.graphed, capturable Adam", True)):
        def make(capturable: bool = capturable) -> tuple[Callable, Callable]:
            reference = torch_model(setup, workload)
            step = ember_step(setup, ember_model(setup, workload, reference), data, capturable)
            if capturable:
                step = em.graphed(step, setup.em_device)
            return (_repeated(step, setup.sync_ember),
                    _repeated(torch_step(setup, reference, data), setup.sync_torch))

        rows.append(Row(f"{name}, bf16 autocast step, ember {label}", "≤ 0.9× torch", "ms",
                        STEPS, make, repeats, goal_ratio=0.9, warmup=2))
    return rows


def loss_curves(setup: Setup, workload: str, steps: int) -> str:
    """Both frameworks from the same weights on the same batches: the losses compared."""
    torch.manual_seed(0)
    reference = torch_model(setup, workload)
    model = ember_model(setup, workload, reference)
    data = batches(setup, workload, 16)
    lr = 1e-3 if setup.quick else 1e-4
    ours = ember_step(setup, model, data, lr=lr)
    theirs = torch_step(setup, reference, data, lr=lr)
    em_losses = [ours() for _ in range(steps)]
    torch_losses = [theirs() for _ in range(steps)]
    a = np.array([float(t.item()) for t in em_losses])
    b = np.array([float(t.item()) for t in torch_losses])
    relative = np.abs(a - b) / np.abs(b)
    worst = int(np.argmax(relative))
    return (f"{workload} loss curve, {steps} steps, bf16 autocast, Adam lr {lr}: "
            f"max |loss_ember - loss_torch| / loss_torch = {relative[worst]:.4f} "
            f"(step {worst}), median {statistics.median(relative):.4f}; "
            f"ember {a[0]:.4f} -> {a[-1]:.4f}, torch {b[0]:.4f} -> {b[-1]:.4f}")


def main(args: list[str]) -> None:
    steps, args = take_option(args, "--steps", "200")
    quick = "--quick" in args
    args = [a for a in args if a != "--quick"]
    if not quick and not (torch.cuda.is_available() and em.available("cuda")):
        print("bench_precision: needs a CUDA GPU with CuPy and torch (or --quick on the CPU)")
        return
    setup = Setup(quick)
    workloads = args or ["mlp", "encoder"]
    repeats = 4 if quick else 9
    results = []
    for workload in workloads:
        for row in step_rows(setup, workload, repeats):
            results.append(measure(row))
            print(markdown(results[-1:]).splitlines()[-1], flush=True)
    print()
    print(markdown(results))
    print()
    for workload in workloads:
        print(loss_curves(setup, workload, int(steps) if not quick else min(int(steps), 20)),
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
