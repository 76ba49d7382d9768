"""Where the wall time of a training step goes, by thread: the caller issuing, the
device's worker running messages, against the wall clock, for bench_cuda.py's MLP and
encoder steps run eagerly, as ``em.graphed`` steps and (the encoder) as pure ones.

Both threads share the GIL, so while the GPU keeps up, wall ≈ caller + worker CPU. The
worker's CPU is read from its own thread clock (``pthread_getcpuclockid``), so nothing in
the runtime is instrumented and the figures are the plain run's; it includes the final
sync's wait, which spins. Also: the worker's batches per step, and the fused kernels
compiled while measuring (0 in a steady state).

Run: ``PYTHONPATH=. python3 benchmarks/probes/probe_threads.py [mlp_step] [encoder_layer]
[--precision highest|high|medium] [--steps N]`` on a machine with a GPU.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import torch

import ember as em
from benchmarks.bench_cuda import (
    DEV,
    em_sync,
    ember_encoder_step,
    ember_mlp_step,
    encoder_input,
    in_flight,
    mlp_data,
    take_option,
    take_precision,
    timed,
    torch_encoder_step,
    torch_mlp_step,
    torch_sync,
)

IN_FLIGHT = 10


def worker_clock() -> int:
    """The CPU clock of ``DEV``'s worker thread."""
    return time.pthread_getcpuclockid(DEV.actor._thread.ident)


def probe(name: str, step: Callable[[], Any], steps: int) -> None:
    for _ in range(3):  # compiles, tunings, captures
        kept = [step() for _ in range(IN_FLIGHT)]
        em_sync()
        del kept
    clock = worker_clock()
    fused = DEV.actor.backend.fused
    compiled, batches = fused.compiled, DEV.actor._batches_done
    worker = time.clock_gettime(clock)
    wall, caller = in_flight(step, steps // IN_FLIGHT, IN_FLIGHT)
    worker = time.clock_gettime(clock) - worker
    n = steps // IN_FLIGHT * IN_FLIGHT
    print(f"| {name} | {wall / n * 1e3:.2f} | {caller / n * 1e3:.2f} | "
          f"{worker / n * 1e3:.2f} | {(DEV.actor._batches_done - batches) / n:.1f} | "
          f"{fused.compiled - compiled} |", flush=True)


def main(args: list[str]) -> None:
    args = take_precision(args)
    steps, args = take_option(args, "--steps", "50")
    chosen = args or ["mlp_step", "encoder_layer"]
    precision = em.get_float32_matmul_precision()
    print(f"# float32 matmul precision {precision!r}, {IN_FLIGHT} steps in flight\n"
          "| step | wall ms | caller CPU ms | worker CPU ms | batches / step | kernels "
          "compiled |\n|---|---|---|---|---|---|", flush=True)
    if "mlp_step" in chosen:
        x_np, y_np = mlp_data()
        probe("MLP eager", ember_mlp_step(x_np, y_np), int(steps))
        probe("MLP em.graphed", em.graphed(ember_mlp_step(x_np, y_np, capturable=True), DEV),
              int(steps))
        ms = timed(torch_mlp_step(x_np, y_np), torch_sync, IN_FLIGHT) * 1e3
        print(f"| MLP torch eager (its default precision) | {ms:.2f} | | | | |", flush=True)
    if "encoder_layer" in chosen:
        e_np = encoder_input()
        probe("encoder eager", ember_encoder_step(e_np), int(steps))
        probe("encoder em.graphed", em.graphed(ember_encoder_step(e_np), DEV), int(steps))
        probe("encoder em.graphed pure", em.graphed(ember_encoder_step(e_np), DEV, pure=True),
              int(steps))
        ms = timed(torch_encoder_step(e_np), torch_sync, IN_FLIGHT) * 1e3
        print(f"| encoder torch eager (its default precision) | {ms:.2f} | | | | |", flush=True)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main(sys.argv[1:])
