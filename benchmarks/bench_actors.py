"""Issue 22's figures: what the autodiff and optimizer work costs the caller's thread.

- Caller-thread CPU time per training step (``time.thread_time()`` on the calling thread)
  and wall time, for the CPU MLP 784-1024-1024-10 (batch 256) and the small CNN (batch 32)
  with Adam, written by hand (``grads = loss.backward(); opt.step(grads)``, the loss read
  every step).
- ``loss.backward()`` on a 3,000-op tracked chain: how long the call takes to return,
  against the time until every gradient is readable.

Run: ``PYTHONPATH=. python benchmarks/bench_actors.py [--steps N]`` (the models are
bench_runtime.py's).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import ember as em
from benchmarks.bench_runtime import _mlp_ember as _mlp
from benchmarks.bench_runtime import _SmallCNN
from ember import optim
from ember.nn import functional as F


def training_steps(model: str, steps: int, repeats: int) -> dict[str, float]:
    """Median (min) caller-thread CPU ms and wall ms per step."""
    shape, batch = ((3, 32, 32), 32) if model == "cnn" else ((784,), 256)
    rng = np.random.default_rng(0)
    device = em.cpu(0).autodiff()
    net = _SmallCNN(device) if model == "cnn" else _mlp(device)
    opt = optim.Adam(net.parameters(), lr=1e-3)
    x = em.tensor(rng.standard_normal((batch, *shape), dtype=np.float32), device=device)
    y = em.tensor(rng.integers(0, 10, batch), device=device)

    def run(n: int) -> tuple[float, float]:
        cpu, wall = time.thread_time(), time.perf_counter()
        for _ in range(n):
            loss = F.cross_entropy(net(x), y)
            opt.step(loss.backward())
            loss.item()
        return ((time.thread_time() - cpu) / n * 1e3, (time.perf_counter() - wall) / n * 1e3)

    run(3)
    samples = [run(steps) for _ in range(repeats)]
    cpus, walls = [s[0] for s in samples], [s[1] for s in samples]
    return {"caller_cpu_ms": statistics.median(cpus), "caller_cpu_min": min(cpus),
            "wall_ms": statistics.median(walls), "wall_min": min(walls)}


def long_chain(ops: int, repeats: int) -> dict[str, float]:
    """``backward()``'s return time against the time until its gradients are readable."""
    device = em.cpu(0).autodiff()
    returns, readable = [], []
    for _ in range(repeats):
        w = em.ones(64, device=device).require_grad()
        h = w
        for _ in range(ops // 2):
            h = (h * 1.0001).tanh()
        loss = h.sum()
        em.sync()
        start = time.perf_counter()
        grads = loss.backward()
        returned = time.perf_counter()
        w.grad(grads).numpy()
        done = time.perf_counter()
        returns.append((returned - start) * 1e3)
        readable.append((done - start) * 1e3)
    return {"return_ms": statistics.median(returns), "readable_ms": statistics.median(readable)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print("| workload | caller CPU ms/step, median (min) | wall ms/step, median (min) |")
    print("|---|---|---|")
    for model in ("mlp", "cnn"):
        r = training_steps(model, args.steps, args.repeats)
        print(f"| {model} Adam hand loop | {r['caller_cpu_ms']:.2f} ({r['caller_cpu_min']:.2f}) "
              f"| {r['wall_ms']:.2f} ({r['wall_min']:.2f}) |", flush=True)
    chain = long_chain(3000, args.repeats)
    print(f"\nbackward() on a 3,000-op chain: returns in {chain['return_ms']:.2f} ms; gradients "
          f"readable after {chain['readable_ms']:.2f} ms "
          f"(ratio {chain['return_ms'] / chain['readable_ms']:.3f})")


if __name__ == "__main__":
    main()
