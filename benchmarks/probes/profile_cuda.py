"""Where a training step's time goes on a CUDA device: GPU and host time per message.

Each message the device worker runs (an op, a fused group, a drop, a read) is followed
by a CUDA event on the worker's stream; the time between consecutive events is that
message's GPU time, the time its handler ran on the worker its host time. A message
whose host time far exceeds its GPU time and its neighbours' is the place to look for
a host sync (the worker waited for the GPU) or a compile; many messages of small GPU
time and the step's wall clock well above the GPU's sum mean the step is host-bound.

Also counted over the profiled step: generated-kernel compiles, fused groups that fell
back to unfused ops (with their errors), autotune misses, and the caller's issue time
(submitting the step, without waiting for it).

``--cprofile`` also profiles the Python (cProfile; the worker's thread too from Python
3.12) over 5 more runs and prints where the host time goes.
``--in-flight K`` issues K steps before one sync (as bench_cuda's timings do, every
result kept until then) and reports per step; the default is 1. Also counted: how
often and how long the caller waited for room in the device's queue (back-pressure).

Run: ``PYTHONPATH=. python3 benchmarks/probes/profile_cuda.py [encoder_layer] [mlp_step]
[mlp_bf16] [encoder_bf16] [learner] [--in-flight K] [--top N] [--cprofile] [--switch-interval S]`` on a machine with a GPU. ``learner`` fits the MLP
with ``Learner`` on one GPU (no table): it profiles what a later workload inherits.
"""

from __future__ import annotations

import collections
import cProfile
import io
import os
import pstats
import sys
import threading
import time
from typing import Any

import cupy as cp
import numpy as np

import ember as em
from benchmarks.bench_cuda import (
    ember_encoder_step,
    ember_mlp_step,
    encoder_input,
    mlp_data,
)
from ember.actors import device_actor, executor
from ember.ir import Call, MultiCall
from ember.kernels.cupy import fused as ember_fused
from ember.kernels.fusion.planner import FusedGroup
from ember.nn import functional as F

DEV = em.cuda(0)


class MessageProfile:
    """Per-message host time and GPU time (CUDA events) while ``active``."""

    def __init__(self) -> None:
        self.active = False
        self.records: list[tuple[str, int, Any]] = []  # (label, host ns, event after)
        self.start_event: Any = None
        self.fallbacks: collections.Counter = collections.Counter()

    def install(self) -> None:
        handlers = executor.Executor._handlers
        for kind, handler in list(handlers.items()):
            handlers[kind] = self._wrap(handler)
        original_run = ember_fused.FusedKernels.run
        profile = self

        def run(kernels, group, program, inputs):
            try:
                return original_run(kernels, group, program, inputs)
            except Exception as exc:
                if profile.active:
                    profile.fallbacks[f"{type(exc).__name__}: {str(exc)[:160]}"] += 1
                raise

        ember_fused.FusedKernels.run = run

    def _wrap(self, handler):
        profile = self

        def timed(runner, msg):
            if not profile.active:
                return handler(runner, msg)
            start = time.perf_counter_ns()
            handler(runner, msg)
            host = time.perf_counter_ns() - start
            event = cp.cuda.Event()
            event.record(runner.backend.stream)
            profile.records.append((_label(msg), host, event))

        return timed

    def begin(self) -> None:
        self.records = []
        self.fallbacks.clear()
        self.active = True

    def end(self) -> None:
        self.active = False


def _label(msg: Any) -> str:
    kind = type(msg)
    if kind is Call:
        return f"{msg.op} {msg.shape} {msg.dtype}"
    if kind is MultiCall:
        return f"{msg.op} {msg.shapes}"
    if kind is FusedGroup:
        ops = "+".join(m.op for m in msg.members)
        what = "rows" if msg.rows is not None else "elementwise"
        return f"group[{what}] {msg.shape} {ops[:100]}"
    return kind.__name__.lower()


PROFILE = MessageProfile()


class Throttle:
    """The caller's waits for room in a device's queue."""

    waits = 0
    seconds = 0.0

    @classmethod
    def install(cls) -> None:
        original = device_actor.DeviceActor._throttle

        def throttle(actor):
            start = time.perf_counter()
            original(actor)
            cls.waits += 1
            cls.seconds += time.perf_counter() - start

        device_actor.DeviceActor._throttle = throttle


def python_profile(step, k: int, top: int) -> None:
    """cProfile over 5 runs of ``k`` steps and their syncs. From Python 3.12 a profiler
    sees every thread (sys.monitoring), so the worker's time is in it; before, only the
    caller's."""
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(5):
        kept = [step() for _ in range(k)]
        em.sync(DEV)
        del kept
    profile.disable()
    print(f"\n### Python (cProfile, 5 x {k} steps), by own time")
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(top)
    print("\n".join(out.getvalue().splitlines()[4:]))


def thread_cpu_seconds() -> dict[str, float]:
    """CPU seconds so far of each live thread, by name (from /proc: Linux only)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for thread in threading.enumerate():
        try:
            with open(f"/proc/self/task/{thread.native_id}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[thread.name] = (int(fields[11]) + int(fields[12])) / tick
    return out


def run_steps(step, k: int) -> tuple[float, float]:
    """Wall seconds and caller issue seconds of ``k`` steps issued before one sync."""
    start = time.perf_counter()
    kept = [step() for _ in range(k)]
    issued = time.perf_counter() - start
    em.sync(DEV)
    wall = time.perf_counter() - start
    del kept
    return wall, issued


def profile_step(name: str, step, top: int, k: int, python: bool = False) -> None:
    backend = DEV.actor.backend
    for _ in range(3):  # warm-up: compiles, autotune, pool growth
        run_steps(step, k)
    Throttle.waits, Throttle.seconds = 0, 0.0
    cpu0 = thread_cpu_seconds()
    wall = sorted(run_steps(step, k) for _ in range(5))
    cpu1 = thread_cpu_seconds()
    per_thread = {name: (cpu1[name] - cpu0.get(name, 0.0)) / 5 / k for name in cpu1}
    total, issue = (t / k for t in wall[len(wall) // 2])
    waits, waited = Throttle.waits / 5 / k, Throttle.seconds / 5 / k
    stats0 = em.stats(DEV).as_dict()
    compiled0, launched0 = backend.fused.compiled, backend.fused.launched
    em.sync(DEV)
    PROFILE.begin()
    profiled_wall = run_steps(step, k)[0] / k
    PROFILE.end()
    stats1 = em.stats(DEV).as_dict()
    records = PROFILE.records
    per: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    previous = records[0][2] if records else None
    gpu_total = host_total = 0.0
    for i, (label, host_ns, event) in enumerate(records):
        gpu_ms = cp.cuda.get_elapsed_time(previous, event) if i else 0.0
        previous = event
        entry = per[label]
        entry[0] += 1 / k
        entry[1] += gpu_ms / k
        entry[2] += host_ns / 1e6 / k
        gpu_total += gpu_ms / k
        host_total += host_ns / 1e6 / k
    print(f"\n## {name}, {k} step(s) in flight (figures per step)")
    print(f"wall {total * 1e3:.2f} ms (caller issue {issue * 1e3:.2f} ms, of which waiting for "
          f"room {waited * 1e3:.2f} ms in {waits:.1f} waits); profiled {profiled_wall * 1e3:.2f} "
          f"ms: {len(records) / k:.0f} messages, GPU {gpu_total:.2f} ms, worker host "
          f"{host_total:.2f} ms")
    print("CPU ms per step by thread: " + ", ".join(
        f"{name} {seconds * 1e3:.2f}" for name, seconds in sorted(per_thread.items(),
                                                                  key=lambda kv: -kv[1])))
    print(f"stats over the profiled step: "
          f"{ {k: stats1[k] - stats0[k] for k in stats1 if k not in ('bytes_held', 'peak_bytes_held', 'queue_depth', 'ops_in_flight', 'bytes_pooled')} }")
    print(f"generated kernels compiled {backend.fused.compiled - compiled0}, launched "
          f"{backend.fused.launched - launched0}; fused groups that fell back: "
          f"{dict(PROFILE.fallbacks) or 'none'}")
    slowest = sorted(records, key=lambda r: -r[1])[:8]
    print("slowest single messages (worker host ms): "
          + "; ".join(f"{label} {host_ns / 1e6:.2f}" for label, host_ns, _ in slowest))
    for title, column in (("GPU", 1), ("worker host", 2)):
        print(f"\n| by {title} time | n | GPU ms | host ms |\n|---|---|---|---|")
        for label, (n, gpu, host) in sorted(per.items(), key=lambda kv: -kv[1][column])[:top]:
            print(f"| {label} | {n:g} | {gpu:.3f} | {host:.3f} |")
    if python:
        python_profile(step, k, top)
    sys.stdout.flush()


def encoder_layer() -> Any:
    return ember_encoder_step(encoder_input())


def mlp_step() -> Any:
    return ember_mlp_step(*mlp_data())


def autocast_step(workload: str) -> Any:
    """bench_precision.py's bf16 autocast step of ``workload`` ("mlp" or "encoder")."""
    from benchmarks.bench_precision import (
        Setup,
        batches,
        ember_model,
        ember_step,
        torch_model,
    )
    setup = Setup(quick=False)
    model = ember_model(setup, workload, torch_model(setup, workload))
    return ember_step(setup, model, batches(setup, workload, 4))


def learner() -> None:
    batch, steps, sizes = 4096, 8, (784, 4096, 4096, 10)
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((batch * steps, sizes[0]), dtype=np.float32)
    y_np = rng.integers(0, 10, batch * steps)
    model = em.nn.Sequential(em.nn.Linear(sizes[0], sizes[1]), em.nn.ReLU(),
                             em.nn.Linear(sizes[1], sizes[2]), em.nn.ReLU(),
                             em.nn.Linear(sizes[2], sizes[3]))
    fit = em.train.Learner(model, em.optim.Adam(model.parameters(), lr=1e-4), F.cross_entropy,
                           devices=[DEV], progress=False)
    start = time.perf_counter()
    fit.fit_sync(em.train.DataLoader((x_np, y_np), batch_size=batch, prefetch=4), epochs=2)
    em.sync(DEV)
    print(f"\n## learner: 2 epochs of {steps} steps in {time.perf_counter() - start:.2f} s; "
          f"threads after: {sorted(t.name for t in threading.enumerate())}")


def _option(args: list[str], name: str, default: int) -> int:
    if name not in args:
        return default
    i = args.index(name)
    value = int(args[i + 1])
    del args[i:i + 2]
    return value


if __name__ == "__main__":
    args = sys.argv[1:]
    top = _option(args, "--top", 25)
    in_flight = _option(args, "--in-flight", 1)
    python = "--cprofile" in args
    if "--switch-interval" in args:
        i = args.index("--switch-interval")
        sys.setswitchinterval(float(args[i + 1]))
        del args[i:i + 2]
    if python:
        args.remove("--cprofile")
    PROFILE.install()
    Throttle.install()
    workloads = {"encoder_layer": encoder_layer, "mlp_step": mlp_step,
                 "mlp_bf16": lambda: autocast_step("mlp"),
                 "encoder_bf16": lambda: autocast_step("encoder")}
    for name in args or list(workloads):
        if name == "learner":
            learner()
        else:
            profile_step(name, workloads[name](), top, in_flight, python)
