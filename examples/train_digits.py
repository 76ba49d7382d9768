"""Train an MLP on scikit-learn's digits (1,797 8×8 images, shipped with the package).

The readable version of `make demo`: load and split the data, build a model,
train it with the Learner (progress bar, per-epoch metrics, checkpoints),
evaluate on the held-out split, save the model and a PNG of the curves, then
reload the model and check it predicts the same.

Run: ``python examples/train_digits.py`` (``make demo`` runs it).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits

import ember as em
from ember import nn, optim, train


def load_data(seed: int = 0) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Digits scaled to [0, 1], split 80/20 with a fixed seed."""
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    cut = int(0.8 * len(x))
    train_idx, test_idx = order[:cut], order[cut:]
    return (x[train_idx], y[train_idx]), (x[test_idx], y[test_idx])


def make_model(device: em.Device) -> nn.Module:
    return nn.Sequential(nn.Linear(64, 256, device=device), nn.ReLU(),
                         nn.Linear(256, 128, device=device), nn.ReLU(),
                         nn.Linear(128, 10, device=device))


def main(out_dir: Path | None = None, epochs: int = 20) -> float:
    em.manual_seed(0)
    out_dir = Path(out_dir or tempfile.mkdtemp(prefix="ember-digits-"))
    device = em.default_device()
    (x_train, y_train), (x_test, y_test) = load_data()
    train_loader = train.DataLoader((x_train, y_train), batch_size=64, shuffle=True, seed=0,
                                    device=device)
    test_loader = train.DataLoader((x_test, y_test), batch_size=256, device=device)

    model = make_model(device.autodiff())
    optimizer = optim.Adam(model.parameters(), lr=2e-3)
    learner = train.Learner(model, optimizer, nn.F.cross_entropy,
                            metrics=("loss", "accuracy"), checkpoint_dir=out_dir / "checkpoints",
                            scheduler=optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs))
    started = time.perf_counter()
    history = learner.fit_sync(train_loader, test_loader, epochs=epochs)
    elapsed = time.perf_counter() - started
    accuracy = history.valid["accuracy"][-1]
    print(f"trained {epochs} epochs on {device} in {elapsed:.1f} s: "
          f"train loss {history.train['loss'][-1]:.4f}, test accuracy {accuracy:.2%}")

    model_path, plot_path = out_dir / "digits.ember", out_dir / "curves.png"
    model.save(model_path)
    history.plot(plot_path)
    reloaded = make_model(device).load(model_path)
    inputs = em.tensor(x_test, device=device)
    same = np.array_equal(model(inputs).numpy(), reloaded(inputs).numpy())
    print(f"saved {model_path} and {plot_path}; reloaded model predicts the same: {same}")
    if not same:
        raise SystemExit("demo: the reloaded model predicts differently")
    if accuracy < 0.97:
        raise SystemExit(f"demo: test accuracy {accuracy:.2%} is below 97%")
    return accuracy


if __name__ == "__main__":
    main()
