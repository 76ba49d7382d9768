"""The runtime's host path on the CPU against PyTorch eager, every row of issue 21's table.

Each row runs an ember sample and a PyTorch sample of the same work, interleaved (the
order alternates between repeats) after a warm-up, so that load from other processes
on a shared machine falls on both sides alike. The figure is ember's time divided by
PyTorch's, pair by pair; the table gives the median and the min of those ratios, and of
each side's time per unit. PyTorch runs as a user writes it: eager, default threads,
autograd on only where a model trains.

Rows: a read round trip ``(x + 1).sum().item()`` on float32[16]; 1000 chained tiny adds
then one read (per add); a small CNN's Adam step, batch 32 (conv 3→32 k3 pad 1, relu,
maxpool 2, conv 32→64 k3 pad 1, relu, maxpool 2, flatten, linear to 10 on 3×32×32;
cross entropy; the loss read each step); an MLP 784-1024-1024-10 Adam step, batch 256;
``F.gelu(x, approximate="tanh")`` and the same gelu written out with ``x ** 3`` on 16M
float32; softmax over the rows of 4096×4096; ``import ember`` in a fresh interpreter
(against ``import torch``; its goal is absolute: 0.3 s); the digits demo's training loop
(examples/train_digits.py's Learner against the same loop written in PyTorch).

Run: ``python benchmarks/bench_runtime.py`` (about 3 minutes), ``--quick`` (about 30 s:
fewer repeats, smaller samples, 3 digits epochs).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import ember as em  # noqa: E402  (after the path: run as a script from anywhere)
from benchmarks.common import machine, torch  # noqa: E402
from benchmarks.paired import Row, markdown, measure  # noqa: E402
from ember import nn, optim, train  # noqa: E402
from ember.nn import functional as F  # noqa: E402

if torch is not None:
    import torch.nn.functional as TF

DEVICE = em.cpu()
GELU_C = 0.79788456


# ----- the workloads ---------------------------------------------------------------------

def read_round_trip(reads: int) -> tuple[Callable, Callable]:
    x = em.ones(16, device=DEVICE)
    tx = torch.ones(16)

    def ember_sample() -> None:
        for _ in range(reads):
            (x + 1).sum().item()

    def torch_sample() -> None:
        for _ in range(reads):
            (tx + 1).sum().item()

    return ember_sample, torch_sample


def chained_adds(adds: int) -> tuple[Callable, Callable]:
    x, b = em.ones(16, device=DEVICE), em.full((16,), 0.5, device=DEVICE)
    tx, tb = torch.ones(16), torch.full((16,), 0.5)

    def ember_sample() -> None:
        y = x
        for _ in range(adds):
            y = y + b
        y.numpy()

    def torch_sample() -> None:
        y = tx
        for _ in range(adds):
            y = y + tb
        y.numpy()

    return ember_sample, torch_sample


class _SmallCNN(nn.Module):
    def __init__(self, device: em.Device) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1, device=device), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1, device=device), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(64 * 8 * 8, 10, device=device)

    def forward(self, x: em.Tensor) -> em.Tensor:
        return self.head(self.features(x).flatten(1))


def _cnn_torch() -> torch.nn.Module:
    tnn = torch.nn
    return tnn.Sequential(tnn.Conv2d(3, 32, 3, padding=1), tnn.ReLU(), tnn.MaxPool2d(2),
                          tnn.Conv2d(32, 64, 3, padding=1), tnn.ReLU(), tnn.MaxPool2d(2),
                          tnn.Flatten(), tnn.Linear(64 * 8 * 8, 10))


def _mlp_ember(device: em.Device) -> nn.Module:
    return nn.Sequential(nn.Linear(784, 1024, device=device), nn.ReLU(),
                         nn.Linear(1024, 1024, device=device), nn.ReLU(),
                         nn.Linear(1024, 10, device=device))


def _mlp_torch() -> torch.nn.Module:
    tnn = torch.nn
    return tnn.Sequential(tnn.Linear(784, 1024), tnn.ReLU(), tnn.Linear(1024, 1024), tnn.ReLU(),
                          tnn.Linear(1024, 10))


def adam_steps(model: str, steps: int) -> tuple[Callable, Callable]:
    """Hand-written training steps, the loss read every step (as a loop that logs it)."""
    shape, batch = ((3, 32, 32), 32) if model == "cnn" else ((784,), 256)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, *shape), dtype=np.float32)
    y = rng.integers(0, 10, batch)
    device = DEVICE.autodiff()
    net = (_SmallCNN if model == "cnn" else _mlp_ember)(device)
    opt = optim.Adam(net.parameters(), lr=1e-3)
    ex, ey = em.tensor(x, device=device), em.tensor(y, device=device)
    tnet = _cnn_torch() if model == "cnn" else _mlp_torch()
    topt = torch.optim.Adam(tnet.parameters(), lr=1e-3)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)

    def ember_sample() -> None:
        for _ in range(steps):
            loss = F.cross_entropy(net(ex), ey)
            grads = loss.backward()
            opt.step(grads)
            loss.item()

    def torch_sample() -> None:
        for _ in range(steps):
            topt.zero_grad()
            loss = TF.cross_entropy(tnet(tx), ty)
            loss.backward()
            topt.step()
            loss.item()

    return ember_sample, torch_sample


def _big(shape: tuple[int, ...]) -> tuple[em.Tensor, torch.Tensor]:
    data = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    return em.tensor(data, device=DEVICE), torch.from_numpy(data.copy())


def elementwise(which: str, size: int) -> tuple[Callable, Callable]:
    """One op on a large tensor; ember's result is kept until ``em.sync()`` computed it."""
    x, tx = _big((size,)) if which != "softmax" else _big((size, size))

    def written_out(v):
        return v * 0.5 * (1 + (GELU_C * (v + 0.044715 * v ** 3)).tanh())

    if which == "gelu":
        fn, tfn = (lambda: F.gelu(x, approximate="tanh"),
                   lambda: TF.gelu(tx, approximate="tanh"))
    elif which == "expression":
        fn, tfn = (lambda: written_out(x), lambda: written_out(tx))
    else:
        fn, tfn = (lambda: F.softmax(x, -1), lambda: torch.softmax(tx, -1))

    def ember_sample() -> None:
        out = fn()
        em.sync()
        del out

    return ember_sample, tfn


def _interpreter_seconds(module: str) -> float:
    """Wall time of ``python -c "import module"``, the interpreter's start included."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {module}"], cwd=ROOT, check=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    return time.perf_counter() - start


def digits_loop(epochs: int) -> tuple[Callable, Callable]:
    """examples/train_digits.py's training (Learner.fit_sync: shuffled batches of 64, Adam
    lr 2e-3, cosine schedule, loss and accuracy per step, validation and a checkpoint per
    epoch) against the same loop written in PyTorch."""
    sys.path.insert(0, str(ROOT / "examples"))
    import train_digits

    (x_train, y_train), (x_test, y_test) = train_digits.load_data()
    checkpoints = Path(tempfile.mkdtemp(prefix="ember-bench-digits-"))

    def ember_sample() -> None:
        em.manual_seed(0)
        device = DEVICE
        train_loader = train.DataLoader((x_train, y_train), batch_size=64, shuffle=True, seed=0,
                                        device=device)
        test_loader = train.DataLoader((x_test, y_test), batch_size=256, device=device)
        model = train_digits.make_model(device.autodiff())
        optimizer = optim.Adam(model.parameters(), lr=2e-3)
        learner = train.Learner(
            model, optimizer, nn.F.cross_entropy, metrics=("loss", "accuracy"),
            checkpoint_dir=checkpoints / "ember", progress=False,
            scheduler=optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs))
        learner.fit_sync(train_loader, test_loader, epochs=epochs)

    def torch_sample() -> None:
        torch.manual_seed(0)
        tnn = torch.nn
        model = tnn.Sequential(tnn.Linear(64, 256), tnn.ReLU(), tnn.Linear(256, 128), tnn.ReLU(),
                               tnn.Linear(128, 10))
        optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
        xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train)
        xv, yv = torch.from_numpy(x_test), torch.from_numpy(y_test)
        rng = np.random.default_rng(0)
        (checkpoints / "torch").mkdir(exist_ok=True)
        for epoch in range(epochs):
            model.train()
            losses, correct = [], 0
            for batch in np.array_split(rng.permutation(len(xt)), math.ceil(len(xt) / 64)):
                index = torch.from_numpy(batch)
                xb, yb = xt[index], yt[index]
                optimizer.zero_grad()
                out = model(xb)
                loss = TF.cross_entropy(out, yb)
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
                correct += int((out.argmax(-1) == yb).sum())
            scheduler.step()
            model.eval()
            with torch.no_grad():
                valid_losses, valid_correct = [], 0
                for start in range(0, len(xv), 256):
                    out = model(xv[start:start + 256])
                    valid_losses.append(TF.cross_entropy(out, yv[start:start + 256]).item())
                    valid_correct += int((out.argmax(-1) == yv[start:start + 256]).sum())
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "epoch": epoch}, checkpoints / "torch" / "last.pt")

    return ember_sample, torch_sample


# ----- the table -------------------------------------------------------------------------

def rows(quick: bool) -> list[Row]:
    r = 3 if quick else 7  # repeats of the fast rows
    reads, adds, steps = (100, 1000, 2) if quick else (300, 1000, 5)
    size = 1 << 24
    out = [
        Row("read round trip `(x + 1).sum().item()`, float32[16]", "≤ 1.5", "µs", reads,
            lambda: read_round_trip(reads), r, goal_ratio=1.5),
        Row("1000 chained tiny adds then one read, per add", "≤ 1.0", "µs", adds,
            lambda: chained_adds(adds), r, goal_ratio=1.0),
        Row("small CNN Adam step, batch 32, hand loop", "≤ 1.0", "ms", steps,
            lambda: adam_steps("cnn", steps), r, goal_ratio=1.0),
        Row("MLP 784-1024-1024-10 Adam step, batch 256, hand loop", "≤ 0.9", "ms", steps,
            lambda: adam_steps("mlp", steps), r, goal_ratio=0.9),
        Row('`F.gelu(x, approximate="tanh")`, 16M float32', "≤ 1.0", "ms", 1,
            lambda: elementwise("gelu", size), r, goal_ratio=1.0),
        Row("`x * 0.5 * (1 + tanh(0.79788456 * (x + 0.044715 * x ** 3)))`, 16M", "≤ 0.5",
            "ms", 1, lambda: elementwise("expression", size), r, goal_ratio=0.5),
        Row("softmax over rows, 4096×4096 (`F.softmax` / `torch.softmax`)", "≤ 1.0", "ms", 1,
            lambda: elementwise("softmax", 4096), r, goal_ratio=1.0),
        Row("`import ember` in a fresh interpreter (vs `import torch`)", "≤ 0.3 s", "s", 1,
            lambda: (lambda: _interpreter_seconds("ember"), lambda: _interpreter_seconds("torch")),
            3 if quick else 5, goal_seconds=0.3, warmup=0),
    ]
    epochs = 2 if quick else 20
    out.append(Row(f"digits demo training loop, {epochs} epochs (`Learner.fit_sync` vs a "
                   f"PyTorch loop)", "≤ 1.0", "s", 1, lambda: digits_loop(epochs),
                   1 if quick else 3, goal_ratio=1.0, warmup=0 if quick else 1))
    return out


def run(quick: bool = False, only: str | None = None) -> str:
    """The table as markdown, under a line naming the machine (rows whose name contains
    ``only``, if given); progress goes to stderr."""
    if torch is None:
        return "bench_runtime: PyTorch is not installed; every row compares with it\n"
    started = time.perf_counter()
    results = []
    for row in rows(quick):
        if only and only.lower() not in row.name.lower():
            continue
        results.append(measure(row))
        print(f"  {row.name}: {statistics.median(results[-1].ratios):.2f}×", file=sys.stderr,
              flush=True)
    return (f"### The host path against PyTorch (issue 21)\n\n{machine()}; NumPy "
            f"{np.__version__}, PyTorch {torch.__version__} ({torch.get_num_threads()} threads); "
            f"{'--quick; ' if quick else ''}{time.perf_counter() - started:.0f} s\n\n"
            f"{markdown(results)}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="about 30 s: fewer, smaller samples")
    parser.add_argument("--only", help="run only the rows whose name contains this text")
    args = parser.parse_args()
    print(run(args.quick, args.only))


if __name__ == "__main__":
    main()
