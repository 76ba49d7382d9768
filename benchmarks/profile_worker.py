"""Where the host time of eager CUDA steps goes, function by function: cProfile over the
eager MLP and encoder steps of bench_cuda.py issued 10 at a time, caller and worker
together (from Python 3.12 a profiler sees every thread: sys.monitoring). The worker's
part is what runs under ``DeviceActor.run_messages``. cProfile roughly doubles Python's
time per call: read the ranking, not the absolute figures.

Run: ``PYTHONPATH=. python3 benchmarks/profile_worker.py [mlp_step] [encoder_layer]
[encoder_graphed] [--precision highest|high|medium] [--top N] [--callees NAME,NAME]`` on a
machine with a GPU (``--callees``: what the functions matching each name call, by cumulative time;
``encoder_graphed``: the encoder step under ``em.graphed``, its replays' host work).
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys

import ember as em
from benchmarks.bench_cuda import (
    DEV,
    em_sync,
    ember_encoder_step,
    ember_mlp_step,
    encoder_input,
    mlp_data,
    take_option,
    take_precision,
)


def report(title: str, profile: cProfile.Profile, top: int, callees: list[str]) -> None:
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats(order).print_stats(top)
        table = out.getvalue()
        print(f"### {title}, by {order}\n{table[table.find('   ncalls'):]}", flush=True)
    for name in callees:  # what the named functions spend their time in
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("cumulative").print_callees(name)
        print(f"### {title}: callees of {name}\n{out.getvalue()}", flush=True)


def profile(name: str, step, top: int, callees: list[str], steps: int = 30,
            warmup: int = 20) -> None:
    for _ in range(warmup):  # compiles and tuning first
        step()
    em_sync()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps // 10):
        kept = [step() for _ in range(10)]
        em_sync()
        del kept
    profiler.disable()
    report(f"{name}, {steps} steps", profiler, top, callees)


if __name__ == "__main__":
    top, args = take_option(take_precision(sys.argv[1:]), "--top", "25")
    named, args = take_option(args, "--callees", "")
    top, callees = int(top), [n for n in named.split(",") if n]
    for chosen in args or ["encoder_layer", "mlp_step"]:
        if chosen == "mlp_step":
            profile("MLP eager", ember_mlp_step(*mlp_data()), top, callees)
        elif chosen == "encoder_graphed":
            profile("encoder em.graphed", em.graphed(ember_encoder_step(encoder_input()), DEV),
                    top, callees)
        else:
            profile("encoder eager", ember_encoder_step(encoder_input()), top, callees)
