"""The CUDA worker's own CPU time per step, by message kind and op (``time.thread_time``:
time spent running, not waiting for the GIL or the GPU), for the MLP and encoder steps of
bench_cuda.py issued 10 at a time, beside the caller's CPU time issuing them.

Run: ``PYTHONPATH=. python3 benchmarks/probes/probe_worker.py [mlp_step] [encoder_layer]
[--precision highest|high|medium] [--detail]`` (``--detail``: also the parts of fused
groups' and calls' runs, indented).
"""

from __future__ import annotations

import collections
import sys
import time

from benchmarks.bench_cuda import (
    DEV,
    em_sync,
    ember_encoder_step,
    ember_mlp_step,
    encoder_input,
    in_flight,
    mlp_data,
    take_precision,
    time_calls,
)
from ember.actors import device_actor
from ember.ir import Call, MultiCall

cpu: dict[str, float] = collections.defaultdict(float)
count: dict[str, int] = collections.defaultdict(int)


def label(msg) -> str:
    kind = type(msg).__name__
    if type(msg) in (Call, MultiCall):
        return f"{kind} {msg.op}"
    if kind == "FusedGroup":
        return f"group[{'rows' if msg.rows is not None else 'elementwise'}]"
    return kind


def instrument() -> None:
    handlers = device_actor.DeviceActor._handlers
    for kind, handler in list(handlers.items()):
        def timed(self, msg, handler=handler):
            start = time.thread_time()
            handler(self, msg)
            name = label(msg)
            cpu[name] += time.thread_time() - start
            count[name] += 1
        handlers[kind] = timed
    time_calls(device_actor.DeviceActor, "run_messages", cpu, count, "run_messages (all)")
    time_calls(DEV.actor.executor.planner, "plan", cpu, count, "planner.plan")


def instrument_inside() -> None:
    """Times the parts of a fused group's run and of a call's (``--detail``)."""
    from ember.kernels.cupy import backend, fused, gemm

    for owner, name in ((fused.FusedKernels, "run"), (fused._Launch, "run"),
                        (fused.FusedKernels, "_widened"), (backend.CupyBackend, "run"),
                        (device_actor.DeviceActor, "_store"),
                        (device_actor.DeviceActor, "_taint"),
                        (fused.cexpr, "scalar_arguments"), (fused.cexpr, "scalar_value"),
                        (fused.cupy, "empty"), (gemm.Gemm, "matmul"),
                        (gemm.Gemm, "_product")):
        time_calls(owner, name, cpu, count, f"  {getattr(owner, '__name__', owner)}.{name}")


def probe(name: str, step, steps: int = 30, warmup: int = 20) -> None:
    for _ in range(warmup):  # compiles and tuning of every kernel shape the batches meet
        step()
    em_sync()
    cpu.clear()
    count.clear()
    fused = DEV.actor.backend.fused
    compiled, tuned = fused.compiled, fused.tuner().misses
    wall, caller = in_flight(step, steps // 10, 10)
    wall /= steps
    print(f"## {name}: wall {wall * 1e3:.2f} ms/step, caller CPU {caller / steps * 1e3:.2f} "
          f"ms/step, worker CPU {cpu['run_messages (all)'] / steps * 1e3:.2f} ms/step; "
          f"{fused.compiled - compiled} compiles, {fused.tuner().misses - tuned} tunings")
    print("| worker, per step | n | CPU ms | µs each |\n|---|---|---|---|")
    for key, seconds in sorted(cpu.items(), key=lambda kv: -kv[1])[:24]:
        n = count.get(key, 0) / steps
        each = f"{seconds / count[key] * 1e6:.1f}" if count.get(key) else ""
        print(f"| {key} | {n:.1f} | {seconds / steps * 1e3:.3f} | {each} |", flush=True)


if __name__ == "__main__":
    instrument()
    args = take_precision(sys.argv[1:])
    if "--detail" in args:
        args.remove("--detail")
        instrument_inside()
    chosen = args or ["mlp_step", "encoder_layer"]
    if "mlp_step" in chosen:
        probe("MLP eager", ember_mlp_step(*mlp_data()))
    if "encoder_layer" in chosen:
        probe("encoder eager", ember_encoder_step(encoder_input()))
