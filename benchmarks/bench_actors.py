"""Issue 22's figures: what the autodiff and optimizer work costs the caller's thread.

- Caller-thread CPU time per training step (``time.thread_time()`` on the calling thread)
  and wall time, for the CPU MLP 784-1024-1024-10 (batch 256) and the small CNN (batch 32)
  with Adam, written by hand (``grads = loss.backward(); opt.step(grads)``, the loss read
  every step); and a small transformer encoder layer (d_model 64, batch 8 x 16), whose
  step is many small ops.
  Each with cached backward plans on and off (``ember/autodiff/plans.py``), runs of the
  two interleaved in one process, with the autodiff thread's CPU time per step.
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
from ember import nn, optim
from ember.autodiff import plans
from ember.autodiff.engine import ACTOR
from ember.nn import functional as F


class _Encoder(nn.Module):
    """A small transformer encoder layer and a linear head: many small ops per step."""

    def __init__(self, device: em.Device) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, device=device)
        self.head = nn.Linear(64, 10, device=device)

    def forward(self, x: em.Tensor) -> em.Tensor:
        return self.head(self.layer(x).mean(dim=1))


def training_steps(model: str, steps: int, repeats: int) -> dict[str, dict[str, list[float]]]:
    """Per run of ``steps`` steps, with plans on and off in turn: caller-thread CPU ms, wall
    ms and autodiff-thread CPU ms per step."""
    shape, batch = {"mlp": ((784,), 256), "cnn": ((3, 32, 32), 32),
                    "encoder": ((16, 64), 8)}[model]
    rng = np.random.default_rng(0)
    device = em.cpu(0).autodiff()
    net = {"mlp": _mlp, "cnn": _SmallCNN, "encoder": _Encoder}[model](device)
    opt = optim.Adam(net.parameters(), lr=1e-3)
    x = em.tensor(rng.standard_normal((batch, *shape), dtype=np.float32), device=device)
    y = em.tensor(rng.integers(0, 10, batch), device=device)
    cache = plans.Cache()

    def run(n: int, with_plans: bool) -> tuple[float, float, float]:
        ACTOR.plans = cache if with_plans else None
        walker = ACTOR.thread_cpu_s
        cpu, wall = time.thread_time(), time.perf_counter()
        for _ in range(n):
            loss = F.cross_entropy(net(x), y)
            opt.step(loss.backward())
            loss.item()
        cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
        em.sync()
        return cpu / n * 1e3, wall / n * 1e3, (ACTOR.thread_cpu_s - walker) / n * 1e3

    run(3, True)
    run(3, False)
    samples: dict[str, dict[str, list[float]]] = {
        mode: {"cpu": [], "wall": [], "autodiff": []} for mode in ("on", "off")}
    for i in range(repeats):
        for mode in (("on", "off") if i % 2 == 0 else ("off", "on")):
            for name, value in zip(("cpu", "wall", "autodiff"), run(steps, mode == "on")):
                samples[mode][name].append(value)
    ACTOR.plans = cache if plans.ENABLED else None
    return samples


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
    print("| workload | backward plans | caller CPU ms/step | wall ms/step "
          "| autodiff-thread CPU ms/step |")
    print("|---|---|---|---|---|")

    def cell(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} ({min(values):.2f})"

    for model in ("mlp", "cnn", "encoder"):
        r = training_steps(model, args.steps, args.repeats)
        for mode in ("on", "off"):
            m = r[mode]
            print(f"| {model} Adam hand loop | {mode} | {cell(m['cpu'])} | {cell(m['wall'])} "
                  f"| {cell(m['autodiff'])} |", flush=True)
        for name in ("cpu", "wall", "autodiff"):
            ratios = [a / b for a, b in zip(r["on"][name], r["off"][name])]
            print(f"|   on/off ratio | {name} | median {statistics.median(ratios):.3f}, "
                  f"min {min(ratios):.3f} | | |", flush=True)
    print("\nmedian (min) over the runs; runs with plans on and off interleaved")
    chain = long_chain(3000, args.repeats)
    print(f"\nbackward() on a 3,000-op chain: returns in {chain['return_ms']:.2f} ms; gradients "
          f"readable after {chain['readable_ms']:.2f} ms "
          f"(ratio {chain['return_ms'] / chain['readable_ms']:.3f})")


if __name__ == "__main__":
    main()
