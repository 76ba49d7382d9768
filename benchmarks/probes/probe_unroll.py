"""Probe (not a benchmark of record): the generated custom_gelu kernel on the H200 with
several vectors loaded per thread before computing (codegen's ``unroll``), blocks and
grids, beside float4 copies of the same shapes and torch's kernels. Every variant's
output is checked bit for bit against the first one's.

Run: PYTHONPATH=. python3 benchmarks/probes/probe_unroll.py
Prints one markdown row per variant and size: TB/s counting 2 passes (read + write).
"""

from __future__ import annotations

import math
import statistics

import cupy as cp
import numpy as np
import torch

import ember as em
from benchmarks import bench_cuda as bc
from ember.kernels.cupy import codegen
from ember.kernels.cupy.fused import WHOLE_GRID

_COPY = r"""
extern "C" __global__ void __launch_bounds__(256)
copy{U}(const float4* __restrict__ a, float4* __restrict__ b, long long n4) {{
  long long step = (long long)gridDim.x * blockDim.x * {U};
  for (long long base = (long long)blockIdx.x * blockDim.x * {U} + threadIdx.x; base < n4;
       base += step) {{
    float4 r[{U}];
    #pragma unroll
    for (int t = 0; t < {U}; ++t) {{
      long long j = base + t * blockDim.x;
      if (j < n4) r[t] = a[j];
    }}
    #pragma unroll
    for (int t = 0; t < {U}; ++t) {{
      long long j = base + t * blockDim.x;
      if (j < n4) b[j] = r[t];
    }}
  }}
}}"""
COPIES = {u: cp.RawKernel(_COPY.format(U=u), f"copy{u}") for u in (1, 2, 4)}


def seconds(issue) -> float:
    """The median of 3 event timings of 10 launches each (seconds per launch)."""
    return statistics.median(bc.event_seconds(issue, repeats=10) for _ in range(3))


def _capture():
    """Wrap codegen.render to keep its last (group, program, dtypes, layout)."""
    original = codegen.render
    kept = {}

    def render(group, program, dtypes, layout, *rest):
        kept["args"] = (group, program, dtypes, layout)
        return original(group, program, dtypes, layout, *rest)

    codegen.render = render
    return kept


def _gelu_variants(n: int, moved: int, args: tuple, out, render, sms: int,
                   kernels: dict) -> None:
    reference = None
    for block in (256, 128, 512):
        for unroll in (1, 2, 4, 8):
            if (block, unroll) not in kernels:
                source = render(4, block, unroll)
                kernels[block, unroll] = cp.RawKernel(source.code, source.name,
                                                      options=("--std=c++17",))
            kernel = kernels[block, unroll]
            whole = -(-n // (4 * block * unroll))
            per_sms = (WHOLE_GRID, 4, 8, 16, 32) if block == 256 else (
                WHOLE_GRID, 8 * 256 // block)
            for per_sm in per_sms:
                grid = whole if per_sm == WHOLE_GRID else min(whole, sms * per_sm)
                out.fill(math.nan)
                kernel((grid,), (block,), args)
                if reference is None:
                    reference = out.copy()
                same = bool(cp.array_equal(out.view(cp.uint32), reference.view(cp.uint32)))
                t = seconds(lambda k=kernel, g=grid, b=block: k((g,), (b,), args))
                where = "whole" if per_sm == WHOLE_GRID else f"{per_sm}/SM"
                print(f"| gelu block {block} unroll {unroll} grid {where} ({grid}) | "
                      f"{moved / t / 1e12:.2f} | {'same' if same else 'DIFFER'} |", flush=True)


def _copies(n: int, moved: int, x, out, sms: int) -> None:
    n4 = np.int64(n // 4)
    for unroll, copy in COPIES.items():
        whole = -(-int(n4) // (256 * unroll))
        for per_sm in (WHOLE_GRID, 8, 16, 32):
            grid = whole if per_sm == WHOLE_GRID else min(whole, sms * per_sm)
            t = seconds(lambda c=copy, g=grid: c((g,), (256,), (x, out, n4)))
            where = "whole" if per_sm == WHOLE_GRID else f"{per_sm}/SM"
            print(f"| float4 copy unroll {unroll} grid {where} ({grid}) | "
                  f"{moved / t / 1e12:.2f} | |", flush=True)


def _torch(x_np: np.ndarray, moved: int) -> None:
    x = torch.from_numpy(x_np).cuda()
    cases = [("torch eager gelu (5 kernels)", lambda: x * 0.5 * (1.0 + torch.erf(x / bc.SQRT_2))),
             ("torch F.gelu (one kernel)", lambda: torch.nn.functional.gelu(x)),
             ("torch clone", x.clone)]
    for name, issue in cases:
        t = bc.torch_event_seconds(issue)
        print(f"| {name} | {moved / t / 1e12:.2f} | |", flush=True)


def _shape(shape: tuple[int, ...], kept: dict, sms: int, kernels: dict) -> None:
    x_np = np.random.default_rng(1).standard_normal(shape, dtype=np.float32)
    n = x_np.size
    moved = 2 * x_np.nbytes
    x_em = em.from_numpy(x_np, device=bc.DEV)
    y = x_em * 0.5 * (1.0 + (x_em / bc.SQRT_2).erf())
    y.numpy()
    _, grid, block, ember_args = bc._LastLaunch.last
    group, program, dtypes, layout = kept["args"]
    inputs = len(layout.kinds)  # x, perhaps more than once
    assert set(layout.kinds) == {"full"}, layout.kinds
    del y, x_em
    x = cp.asarray(x_np)
    out = cp.empty_like(x)
    print(f"## {list(shape)} float32 ({moved / 1e9:.2f} GB moved); ember chose grid "
          f"{grid[0]} block {block[0]}", flush=True)
    print("| variant | TB/s | bits |", flush=True)

    def render(vector, block, unroll):
        return codegen.render(group, program, dtypes, layout, vector, block, unroll)

    args = (*[x] * inputs, out, *ember_args[inputs + 1:])  # then n and the scalars
    _gelu_variants(n, moved, args, out, render, sms, kernels)
    _copies(n, moved, x, out, sms)
    _torch(x_np, moved)


def main() -> None:
    kept = _capture()
    bc._record_launches()
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    kernels: dict = {}
    for shape in ((32, 512, 2048), (64, 1024, 4096)):
        _shape(shape, kept, sms, kernels)


if __name__ == "__main__":
    main()
