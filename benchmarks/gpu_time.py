"""GPU time per training step, kernel by kernel: ember (eager and ``em.graphed``) against
PyTorch eager, for the encoder layer and the MLP step of bench_cuda.py.

torch.profiler (CUPTI) sees every kernel of the process, CuPy's and cuBLAS's included,
so one tool times both frameworks. Per workload: the wall clock per step (``steps``
steps in flight, one sync), the summed GPU time of its kernels, copies and memsets
per step (the floor a host-bound step could reach), and the kernels that take most.

Run: ``PYTHONPATH=. python3 benchmarks/gpu_time.py [encoder_layer] [mlp_step] [--top N]
[--precision highest|high|medium]`` on a machine with a GPU (the precision: ember's float32
matmuls'; torch's stay at its default).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

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
    torch_encoder_step,
    torch_mlp_step,
    torch_sync,
)

STEPS = 10


def measure(name: str, step: Callable[[], Any], sync: Callable[[], None], top: int) -> None:
    for _ in range(3):  # compiles, autotuning, captures
        step()
    sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        kept = [step() for _ in range(STEPS)]
        sync()
        wall = (time.perf_counter() - start) / STEPS
        del kept
    events = [e for e in prof.key_averages() if e.self_device_time_total > 0]
    gpu = sum(e.self_device_time_total for e in events) / STEPS / 1e3
    print(f"| {name} | wall {wall * 1e3:.2f} ms/step | GPU {gpu:.2f} ms/step | "
          f"{sum(e.count for e in events) / STEPS:.0f} kernels+copies/step |", flush=True)
    events.sort(key=lambda e: -e.self_device_time_total)
    for e in events[:top]:
        print(f"|   {e.key[:90]} | {e.self_device_time_total / STEPS / 1e3:.3f} ms | "
              f"x{e.count / STEPS:.0f} |", flush=True)


def encoder_layer(top: int) -> None:
    x_np = encoder_input()
    eager = ember_encoder_step(x_np)
    measure("ember encoder eager", eager, em_sync, top)
    measure("ember encoder em.graphed", em.graphed(ember_encoder_step(x_np), DEV), em_sync,
            top)
    measure("ember encoder em.graphed pure",
            em.graphed(ember_encoder_step(x_np), DEV, pure=True), em_sync, top)
    measure("torch encoder eager", torch_encoder_step(x_np), torch_sync, top)


def mlp_step(top: int) -> None:
    x_np, y_np = mlp_data()
    measure("ember MLP eager", ember_mlp_step(x_np, y_np), em_sync, top)
    measure("ember MLP em.graphed (capturable Adam)",
            em.graphed(ember_mlp_step(x_np, y_np, capturable=True), DEV), em_sync, top)
    measure("torch MLP eager", torch_mlp_step(x_np, y_np), torch_sync, top)


if __name__ == "__main__":
    top, args = take_option(take_precision(sys.argv[1:]), "--top", "12")
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, numpy "
          f"{np.__version__}")
    for name in args or ["encoder_layer", "mlp_step"]:
        {"encoder_layer": encoder_layer, "mlp_step": mlp_step}[name](int(top))
