"""A small CNN on digits with the Learner, stopped half-way and resumed from its checkpoint.

The first run trains for half the epochs and leaves one checkpoint per epoch
(model, optimizer moments, scheduler, random state, loader position, history).
A second program's worth of objects — a fresh model, optimizer and Learner —
then calls ``learner.resume(checkpoint_dir)``: it starts at the saved epoch,
with the first run's history, and ``fit(epochs=N)`` trains only the epochs left.

Run: ``python examples/cnn_digits.py`` (``--epochs N``, ``--device cuda:0``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

import ember as em
from ember import nn, optim, train
from train_digits import load_data


def make_cnn(device: em.Device, width: int = 16) -> nn.Module:
    """(batch, 64) pixels → (batch, 10) logits: two 3×3 convolutions, a pool, a linear."""
    return nn.Sequential(
        nn.Unflatten(1, (1, 8, 8)),
        nn.Conv2d(1, width, 3, padding=1, device=device), nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, padding=1, device=device), nn.ReLU(),
        nn.MaxPool2d(2),                                        # (batch, 2w, 4, 4)
        nn.Flatten(),
        nn.Linear(2 * width * 16, 10, device=device))


def make_learner(device: em.Device, epochs: int, checkpoint_dir: Path) -> train.Learner:
    em.manual_seed(0)
    model = make_cnn(device.autodiff())
    optimizer = optim.Adam(model.parameters(), lr=3e-3)
    return train.Learner(model, optimizer, nn.F.cross_entropy, metrics=("loss", "accuracy"),
                         checkpoint_dir=checkpoint_dir, progress=False,
                         scheduler=optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs))


def loaders(device: em.Device, limit: int | None = None) -> tuple[train.DataLoader, ...]:
    (x_train, y_train), (x_test, y_test) = load_data()
    if limit is not None:
        x_train, y_train = x_train[:limit], y_train[:limit]
    return (train.DataLoader((x_train, y_train), batch_size=64, shuffle=True, seed=0,
                             device=device),
            train.DataLoader((x_test, y_test), batch_size=256, device=device))


def print_history(history: train.History, first: int = 0) -> None:
    for epoch in range(first, len(history.train["loss"])):
        print(f"  epoch {epoch + 1:2d}: train loss {history.train['loss'][epoch]:.4f}, "
              f"test accuracy {history.valid['accuracy'][epoch]:.2%}")


def main(epochs: int = 8, device: str | None = None, out_dir: Path | None = None,
         limit: int | None = None) -> train.History:
    dev = em.device(device) if device else em.default_device()
    checkpoints = Path(out_dir or tempfile.mkdtemp(prefix="ember-cnn-")) / "checkpoints"
    stop_at = max(1, epochs // 2)

    started = time.perf_counter()
    first = make_learner(dev, epochs, checkpoints)
    print(f"first run on {dev}: {first.model.num_params()} parameters, "
          f"stopping after epoch {stop_at} of {epochs}")
    first.fit_sync(*loaders(dev, limit), epochs=stop_at)
    print_history(first.history)
    saved = sorted(p.name for p in checkpoints.iterdir())
    print(f"checkpoints in {checkpoints}: {', '.join(saved)}")

    # A new model, optimizer and Learner, as a restarted program would build them.
    second = make_learner(dev, epochs, checkpoints).resume()
    print(f"resumed at epoch {second.epoch} (step {second.step}) with "
          f"{len(second.history.train['loss'])} epochs of history")
    if second.epoch != stop_at:
        raise SystemExit(f"cnn_digits: resumed at epoch {second.epoch}, saved {stop_at}")
    same = all(np.array_equal(a, second.model.state_dict()[k])
               for k, a in first.model.state_dict().items())
    print(f"resumed weights equal the first run's: {same}")
    history = second.fit_sync(*loaders(dev, limit), epochs=epochs)
    print_history(history, first=stop_at)
    print(f"{epochs} epochs in {time.perf_counter() - started:.1f} s; "
          f"test accuracy {history.valid['accuracy'][-1]:.2%}")
    return history


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--device", default=None, help="e.g. cpu:0, cuda:0, wgpu:0")
    args = parser.parse_args()
    main(args.epochs, args.device)
