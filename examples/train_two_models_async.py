"""Two models trained at once, on two devices, as two trio tasks in one program.

A small MLP learns the digits on ``cpu:0`` while a wider one learns them on
``cpu:1``. Each ``await learner.fit(...)`` runs its own loader, step, metrics
and checkpoint tasks; the two learners share the trio event loop, and the
device actors run their ops side by side.

Run: ``python examples/train_two_models_async.py``.
"""

from __future__ import annotations

import time

import trio

import ember as em
from ember import nn, optim, train
from train_digits import load_data


def mlp(hidden: int, device: em.Device) -> nn.Module:
    return nn.Sequential(nn.Linear(64, hidden, device=device), nn.ReLU(),
                         nn.Linear(hidden, 10, device=device))


async def train_one(name: str, hidden: int, device: em.Device, results: dict) -> None:
    (x_train, y_train), (x_test, y_test) = load_data()
    model = mlp(hidden, device.autodiff())
    learner = train.Learner(model, optim.Adam(model.parameters(), lr=2e-3), nn.F.cross_entropy,
                            metrics=("loss", "accuracy"), progress=False)
    history = await learner.fit(
        train.DataLoader((x_train, y_train), batch_size=64, shuffle=True, seed=1, device=device),
        train.DataLoader((x_test, y_test), batch_size=256, device=device), epochs=10)
    results[name] = history.valid["accuracy"][-1]
    print(f"  {name} on {device}: test accuracy {results[name]:.2%}")


async def main() -> dict:
    results: dict = {}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(train_one, "small MLP (64 hidden)", 64, em.cpu(0), results)
        nursery.start_soon(train_one, "wide MLP (512 hidden)", 512, em.cpu(1), results)
    return results


if __name__ == "__main__":
    em.manual_seed(0)
    started = time.perf_counter()
    em.run(main)
    print(f"both models trained concurrently in {time.perf_counter() - started:.1f} s")
