"""Serving a small model to many concurrent trio tasks on one device.

A digits MLP is trained for a few seconds, then answers the same requests (one
8×8 image each) three ways:

- **sequential**: one request at a time, each awaited before the next starts;
- **concurrent**: ``--clients`` trio tasks, each awaiting its own inferences. The
  forward of one task is queued on the device while others wait, so the device
  actor drains the ops of many requests per batch of work;
- **batched**: the same clients hand their requests to one batcher task, which
  stacks whatever is waiting into one forward (dynamic batching) and sends each
  client its row.

For each it prints the latency percentiles (time from a request's start to its
answer), the throughput and the accuracy of the answers.

Run: ``python examples/serve_async.py`` (``--requests N --clients C --device cuda:0``).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np
import trio

import ember as em
from ember import nn, optim
from train_digits import load_data, make_model

Infer = Callable[[np.ndarray], Awaitable[int]]


@dataclass
class Report:
    mode: str
    latencies: np.ndarray  # seconds, one per request
    seconds: float
    correct: int

    def line(self) -> str:
        p50, p99 = np.percentile(self.latencies, [50, 99]) * 1e3
        return (f"{self.mode:<11} p50 {p50:7.2f} ms   p99 {p99:7.2f} ms   "
                f"{len(self.latencies) / self.seconds:8.0f} requests/s   "
                f"accuracy {self.correct / len(self.latencies):.2%}")


def trained_model(device: em.Device, steps: int) -> nn.Module:
    """The demo's MLP after ``steps`` Adam steps, copied to an inference-only model."""
    (x_train, y_train), _ = load_data()
    em.manual_seed(0)
    model = make_model(device.autodiff())
    optimizer = optim.Adam(model.parameters(), lr=2e-3)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        rows = rng.integers(0, len(x_train), 64)
        loss = nn.F.cross_entropy(model(em.tensor(x_train[rows], device=device)),
                                  em.tensor(y_train[rows], device=device))
        optimizer.step(loss.backward())
    # The same weights on the plain device: no graph is recorded while serving.
    served = make_model(device).load_state_dict(model.state_dict())
    served.eval()
    return served


def single(model: nn.Module, device: em.Device) -> Infer:
    async def infer(image: np.ndarray) -> int:
        logits = model(em.tensor(image[None], device=device))
        return int((await logits.argmax(dim=1))[0])
    return infer


class Batcher:
    """Collects the requests waiting at a moment into one forward pass."""

    def __init__(self, model: nn.Module, device: em.Device, max_batch: int) -> None:
        self.model, self.device, self.max_batch = model, device, max_batch
        self.send, self.receive = trio.open_memory_channel(max_batch * 4)
        self.batches = 0

    async def infer(self, image: np.ndarray) -> int:
        done, answer = trio.Event(), []
        await self.send.send((image, done, answer))
        await done.wait()
        return answer[0]

    async def serve(self) -> None:
        async for first in self.receive:
            waiting = [first]
            while len(waiting) < self.max_batch:
                try:
                    waiting.append(self.receive.receive_nowait())
                except trio.WouldBlock:
                    break
            images = np.stack([image for image, _, _ in waiting])
            predictions = await self.model(em.tensor(images, device=self.device)).argmax(dim=1)
            self.batches += 1
            for (_, done, answer), prediction in zip(waiting, predictions):
                answer.append(int(prediction))
                done.set()


async def run_requests(mode: str, infer: Infer, images: np.ndarray, labels: np.ndarray,
                       clients: int) -> Report:
    """Send every request through ``infer`` from ``clients`` tasks; time each."""
    latencies = np.zeros(len(images))
    correct = 0

    async def client(indices: range) -> None:
        nonlocal correct
        for i in indices:
            start = time.perf_counter()
            prediction = await infer(images[i])
            latencies[i] = time.perf_counter() - start
            correct += prediction == labels[i]

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for c in range(clients):
            nursery.start_soon(client, range(c, len(images), clients))
    return Report(mode, latencies, time.perf_counter() - started, correct)


async def serve(requests: int = 2000, clients: int = 64, device: str | None = None,
                train_steps: int = 300, max_batch: int = 64) -> list[Report]:
    dev = em.device(device) if device else em.default_device()
    model = await trio.to_thread.run_sync(trained_model, dev, train_steps)
    _, (x_test, y_test) = load_data()
    picks = np.random.default_rng(1).integers(0, len(x_test), requests)
    images, labels = x_test[picks], y_test[picks]
    infer = single(model, dev)
    await run_requests("warm-up", infer, images[:50], labels[:50], 1)
    print(f"{requests} requests of one 8x8 digit each, to an MLP on {dev}:")
    reports = [await run_requests("sequential", infer, images, labels, 1),
               await run_requests("concurrent", infer, images, labels, clients)]
    batcher = Batcher(model, dev, max_batch)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(batcher.serve)
        reports.append(await run_requests("batched", batcher.infer, images, labels, clients))
        batcher.send.close()
    for report in reports:
        print("  " + report.line())
    sequential = reports[0]
    for report in reports[1:]:
        speedup = sequential.seconds / report.seconds
        print(f"  {report.mode} ({clients} tasks): {speedup:.1f}x the sequential throughput")
    print(f"  the batcher ran {batcher.batches} forwards for {requests} requests "
          f"({requests / batcher.batches:.1f} per forward)")
    return reports


def main(requests: int = 2000, clients: int = 64, device: str | None = None,
         train_steps: int = 300) -> list[Report]:
    return em.run(serve, requests, clients, device, train_steps)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--device", default=None, help="e.g. cpu:0, cuda:0, wgpu:0")
    args = parser.parse_args()
    main(args.requests, args.clients, args.device)
