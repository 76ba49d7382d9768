"""Where a replayed ``em.graphed`` step's time goes: caller, worker (per part), GPU.

Times the encoder layer's step of bench_cuda.py as a pure graphed step (replays skip the
Python) and as a plain one: wall per step with ``--in-flight`` steps before a sync, the
caller's issue time, the worker's time in each part of a replay (copies out, copies in,
the launch, the rest), and the GPU time of each graph launch (CUDA events around it).

Run: ``PYTHONPATH=. python3 benchmarks/probes/probe_replay.py`` on a machine with a GPU.
"""

from __future__ import annotations

import collections
import time

import cupy as cp

import ember as em
from benchmarks.bench_cuda import DEV, em_sync, ember_encoder_step, encoder_input
from benchmarks.bench_cuda import in_flight as run_in_flight
from benchmarks.bench_cuda import time_calls
from ember.actors import step_graphs
from ember.kernels.cupy import graphs

spent: dict[str, float] = collections.defaultdict(float)
counts: dict[str, int] = collections.defaultdict(int)
gpu_events: list = []


def evented_launch() -> None:
    original = graphs.CupyCapturer.launch

    def launch(self, graph):
        before, after = cp.cuda.Event(), cp.cuda.Event()
        before.record(self._backend.stream)
        original(self, graph)
        after.record(self._backend.stream)
        gpu_events.append((before, after))

    graphs.CupyCapturer.launch = launch


for cls, names in ((step_graphs.StepGraphs, ("run", "replay_pure", "_replay")),
                   (graphs.CupyCapturer, ("copy_out", "copy_into"))):
    for name in names:
        time_calls(cls, name, spent, counts, clock=time.perf_counter)
evented_launch()
time_calls(graphs.CupyCapturer, "launch", spent, counts, clock=time.perf_counter)


def probe(label: str, step, steps: int, in_flight: int) -> None:
    for _ in range(4):
        step()
    em_sync()
    spent.clear()
    counts.clear()
    gpu_events.clear()
    wall, issue = run_in_flight(step, steps // in_flight, in_flight, time.perf_counter)
    wall /= steps
    gpu = sum(cp.cuda.get_elapsed_time(a, b) for a, b in gpu_events) / max(len(gpu_events), 1)
    parts = ", ".join(f"{k} {v / steps * 1e3:.3f} ms (x{counts[k] / steps:.1f})"
                      for k, v in spent.items())
    print(f"| {label}, {in_flight} in flight | wall {wall * 1e3:.2f} ms/step | caller "
          f"{issue / steps * 1e3:.3f} ms/step | GPU per launch {gpu:.3f} ms | {parts} |",
          flush=True)


if __name__ == "__main__":
    x_np = encoder_input()
    pure = em.graphed(ember_encoder_step(x_np), DEV, pure=True)
    plain = em.graphed(ember_encoder_step(x_np), DEV)
    for in_flight in (1, 10):
        probe("encoder pure", pure, 40, in_flight)
        probe("encoder graphed", plain, 40, in_flight)
    print(f"# {pure.graph_stats()} pure tokens {list(DEV.actor.graphs.pure)}")
