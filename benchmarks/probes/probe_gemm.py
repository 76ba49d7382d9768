"""Kernel time of ember's cuBLAS calls (gemm.py) against CuPy's and PyTorch's matmul, per
dtype and size (CUDA events, the product alone, no host path; the best of three
interleaved rounds): does ember call the same kernels? Also ember's call on a handle
whose workspace was never set.

Run: ``PYTHONPATH=. python3 benchmarks/probes/probe_gemm.py`` on a machine with a GPU.
"""

from __future__ import annotations

import ctypes

import cupy as cp
import numpy as np
import torch

from benchmarks.bench_cuda import event_seconds, torch_event_seconds
from ember.kernels.cupy import gemm

DTYPES = {"float32": (np.float32, torch.float32), "bfloat16": (None, torch.bfloat16),
          "float16": (np.float16, torch.float16)}


def main() -> None:
    ours = gemm.Gemm()
    own_workspace = gemm.Gemm()
    own_workspace._check("cublasSetWorkspace_v2", own_workspace._lib.cublasSetWorkspace_v2(
        own_workspace._handle, ctypes.c_void_p(0), ctypes.c_size_t(0)))
    for name, (np_dtype, t_dtype) in DTYPES.items():
        for n in (1024, 2048, 4096, 8192):
            a_t = torch.randn(n, n, device="cuda", dtype=t_dtype)
            b_t = torch.randn(n, n, device="cuda", dtype=t_dtype)
            a, b = cp.from_dlpack(a_t), cp.from_dlpack(b_t)
            flops = 2 * n ** 3
            runs = {"ember": lambda: event_seconds(lambda: ours.matmul(a, b, name)),
                    "ember, no workspace set": lambda: event_seconds(
                        lambda: own_workspace.matmul(a, b, name)),
                    "torch": lambda: torch_event_seconds(lambda: torch.mm(a_t, b_t))}
            if np_dtype is not None:
                runs["cupy"] = lambda: event_seconds(lambda: cp.matmul(a, b))
            # Three interleaved rounds, the best of each: clocks ramp and drift.
            times = {k: run() for k, run in runs.items()}
            for _ in range(2):
                for k, run in runs.items():
                    times[k] = min(times[k], run())
            cells = " | ".join(f"{k} {flops / v / 1e12:.1f}" for k, v in times.items())
            print(f"| {name} {n}³ (TFLOP/s, kernel only) | {cells} |", flush=True)


if __name__ == "__main__":
    main()
