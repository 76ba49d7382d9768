"""The WebGPU backend: bench_fusion's workloads on wgpu:0, fused vs unfused vs NumPy.

Workloads (float32, written from primitives as in bench_fusion): custom_gelu,
softmax and layer_norm, forward (result read back) and forward+backward
(every input gradient read back). Shapes are small by default, for Mesa's
software Vulkan (lavapipe), where only ratios mean anything;
``--large`` uses bench_fusion's own shapes (for a real GPU).

Columns: ember on wgpu:0 with fusion (this process) and with ``EMBER_FUSION=0``
(a child process); NumPy written naively on the CPU; kernels per step;
``device GB/s``: the forward alone, 20 steps queued back to back with no
read, by the minimum bytes (inputs read once, output written once) over the
time until the queue drained. A second table gives compile costs: the first
step of each workload (compiling the pipelines no earlier workload needed)
against a warm step; a third, float32 matmul throughput.

Run: ``python -m benchmarks.bench_wgpu [--large]`` (needs a wgpu adapter).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np

import ember as em
from benchmarks import bench_fusion
from benchmarks.common import median_seconds, table

SMALL = {"custom_gelu": (8, 256, 512), "softmax": (8, 256, 512), "layer_norm": (8, 256, 512)}
LARGE = {"custom_gelu": (32, 512, 2048), "softmax": (32, 512, 4096),
         "layer_norm": (32, 512, 4096)}
_QUEUED_STEPS = 20


def _device() -> em.Device:
    found = em.available("wgpu")
    if not found:
        raise SystemExit("bench_wgpu: no wgpu adapter (em.available('wgpu') is empty)")
    return found[0]


def _runtime(device: em.Device):
    return device.actor.backend.rt


def ember_figures(shapes: dict[str, tuple[int, ...]]) -> dict[str, list]:
    """Per workload and direction: [first-step s, median s, kernels/step, pipelines compiled
    by the first step, forward device GB/s or None]."""
    out = {}
    rt = _runtime(_device())
    for name, shape in shapes.items():
        for backward in (False, True):
            step, forward, device = bench_fusion.ember_workload(name, shape, _device(), backward)
            compiled = rt.compiles
            start = time.perf_counter()
            step()
            first = time.perf_counter() - start
            new_pipelines = rt.compiles - compiled
            em.sync()
            before = em.stats(device).kernels_launched
            step()
            em.sync()
            kernels = em.stats(device).kernels_launched - before
            median = median_seconds(step, repeats=5, warmup=1)
            bandwidth = None if backward else _device_bandwidth(name, shape, forward)
            out[f"{name}/{int(backward)}"] = [first, median, kernels, new_pipelines, bandwidth]
    return out


def _device_bandwidth(name: str, shape: tuple[int, ...], forward) -> float:
    forward()
    em.sync()  # waits for the GPU too
    start = time.perf_counter()
    results = [forward() for _ in range(_QUEUED_STEPS)]  # kept: unread results are skipped
    em.sync()
    elapsed = time.perf_counter() - start
    del results
    elements = int(np.prod(shape))
    extra = 2 * shape[-1] if name == "layer_norm" else 0
    return (2 * elements + extra) * 4 * _QUEUED_STEPS / elapsed / 1e9


def matmul_table(sizes: tuple[int, ...]) -> str:
    """float32 n×n @ n×n: 10 products queued, then one sync (GPU included), vs NumPy."""
    rows = []
    device = _device()
    rng = np.random.default_rng(0)
    for n in sizes:
        a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
        ta, tb = em.tensor(a, device=device), em.tensor(b, device=device)
        np.testing.assert_allclose((ta @ tb).numpy()[:4, :4], (a @ b)[:4, :4], rtol=1e-3,
                                   atol=1e-3)

        def queued() -> None:
            results = [ta @ tb for _ in range(10)]  # kept until the sync
            em.sync()
            del results

        seconds = median_seconds(queued, repeats=3, warmup=1) / 10
        numpy_s = median_seconds(lambda: a @ b, repeats=3, warmup=1)
        rows.append([f"{n}³", f"{seconds * 1e3:.2f}", f"{2 * n ** 3 / seconds / 1e9:.1f}",
                     f"{numpy_s * 1e3:.2f}", f"{2 * n ** 3 / numpy_s / 1e9:.1f}"])
    return table(f"WebGPU matmul on {device} (float32, 64×64 tiles, 4×4 per invocation)",
                 ["n", "ms", "GFLOP/s", "NumPy ms (CPU)", "NumPy GFLOP/s"], rows)


def _unfused(large: bool) -> dict[str, list]:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args = [sys.executable, "-m", "benchmarks.bench_wgpu", "--ember-json"]
    done = subprocess.run(args + (["--large"] if large else []), cwd=root,
                          env=dict(os.environ, EMBER_FUSION="0"), capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(large: bool = False) -> str:
    shapes = LARGE if large else SMALL
    fused = ember_figures(shapes)
    unfused = _unfused(large)
    rt = _runtime(_device())
    rows, compile_rows = [], []
    for name, shape in shapes.items():
        bench_fusion.WORKLOADS[name] = (shape, 3)  # NumPy runs the same shapes
        for backward in (False, True):
            key = f"{name}/{int(backward)}"
            first, fused_s, fused_k, pipelines, bandwidth = fused[key]
            _, unfused_s, unfused_k, _, unfused_bw = unfused[key]
            numpy_s = bench_fusion.numpy_seconds(name, backward)
            label = f"{name} {list(shape)} {'fwd+bwd' if backward else 'fwd'}"
            rows.append([label, f"{fused_s * 1e3:.1f}", f"{unfused_s * 1e3:.1f}",
                         f"{numpy_s * 1e3:.1f}", f"{unfused_s / fused_s:.2f}×",
                         f"{numpy_s / fused_s:.2f}×", f"{fused_k} / {unfused_k}",
                         "" if bandwidth is None else f"{bandwidth:.1f} / {unfused_bw:.1f}"])
            compile_rows.append([label, f"{first * 1e3:.0f}", f"{fused_s * 1e3:.1f}",
                                 str(pipelines)])
    device = f"{_device()} ({rt.adapter_name})"
    header = ["workload (float32)", "fused ms", "unfused ms", "NumPy naive ms (CPU)",
              "unfused ÷ fused", "NumPy ÷ fused", "kernels fused / unfused",
              "fwd device GB/s fused / unfused"]
    return (table(f"WebGPU on {device} (median ms, read included)", header, rows) + "\n"
            + table(f"WebGPU kernel compile on {device}: a workload's first step (compiling "
                    f"the pipelines it is first to need) vs warm",
                    ["workload", "cold first step ms", "warm step ms", "pipelines compiled"],
                    compile_rows) + "\n"
            + matmul_table((1024, 2048, 4096) if large else (256, 512)))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    large = "--large" in sys.argv
    if "--ember-json" in sys.argv:
        print(json.dumps(ember_figures(LARGE if large else SMALL)))
    else:
        print(run(large))
