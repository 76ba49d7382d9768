"""Probe (not a benchmark of record): the generated custom_gelu kernel's bandwidth on
the H200 against its grid size, beside a plain float4 copy, to see what the
fused-elementwise launch should choose. Run: PYTHONPATH=. python3 benchmarks/probes/probe_grid.py
"""

from __future__ import annotations

import math

import cupy as cp
import numpy as np

import ember as em
from benchmarks import bench_cuda as bc

COPY = cp.RawKernel(r"""
extern "C" __global__ void copy4(const float4* __restrict__ a, float4* __restrict__ b,
                                 long long n4) {
  long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += step)
    b[i] = a[i];
}""", "copy4")


def main() -> None:
    bc._record_launches()
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    for shape in ((32, 512, 2048), (64, 1024, 4096)):
        x_np = np.random.default_rng(1).standard_normal(shape, dtype=np.float32)
        n = x_np.size
        x_em = em.from_numpy(x_np, device=bc.DEV)
        y = x_em * 0.5 * (1.0 + (x_em / bc.SQRT_2).erf())
        y.numpy()
        kernel, grid, block, args = bc._LastLaunch.last
        per_thread = math.ceil(n / (grid[0] * block[0]))
        print(f"## {shape}: chosen grid {grid[0]} block {block[0]} (~{per_thread} elems/thread)")
        moved = 2 * x_np.nbytes
        for g in sorted({sms * k for k in (1, 2, 4, 8, 16, 32, 64)} | {grid[0]}):
            t = bc.event_seconds(lambda g=g: kernel((g,), block, args))
            print(f"| gelu grid {g} | {moved / t / 1e12:.2f} TB/s |", flush=True)
        for g in (n // (4 * block[0]), n // (8 * block[0])):
            t = bc.event_seconds(lambda g=g: kernel((g,), block, args))
            print(f"| gelu grid {g} (n/{n // g} per block) | {moved / t / 1e12:.2f} TB/s |",
                  flush=True)
        a = cp.asarray(x_np)
        b = cp.empty_like(a)
        n4 = np.int64(n // 4)
        for g in (sms * 8, sms * 16, sms * 32, int(n4) // 256):
            t = bc.event_seconds(lambda g=g: COPY((g,), (256,), (a, b, n4)))
            print(f"| copy4 grid {g} block 256 | {moved / t / 1e12:.2f} TB/s |", flush=True)
        del x_em, y, a, b


if __name__ == "__main__":
    main()
