"""Host time per cuBLAS call for 16-bit products (gemm.py's ``_product``: one
``cublasGemmEx``) against ``torch.matmul`` on operands of the same shapes and dtype, and
float32 for comparison: the calling thread's perf_counter over 200 calls issued back to
back, divided by 200 (no actor).

Run: ``PYTHONPATH=. python3 benchmarks/probes/probe_host16.py`` on a machine with a GPU.
"""

from __future__ import annotations

import cupy as cp
import torch

from benchmarks.probes.probe_host import host_seconds
from ember.kernels.cupy import gemm

SHAPES = {"MLP 4096x784 @ 784x4096": (4096, 784, 4096),
          "MLP 4096x4096 @ 4096x4096": (4096, 4096, 4096),
          "MLP 4096x4096 @ 4096x10": (4096, 4096, 10),
          "encoder 2048x768 @ 768x2304": (2048, 768, 2304),
          "encoder 2048x3072 @ 3072x768": (2048, 3072, 768),
          "16x16 @ 16x16": (16, 16, 16)}
TORCH = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def torch_host_seconds(call) -> float:
    call()
    torch.cuda.synchronize()
    return host_seconds(call)


def host_times(ours: gemm.Gemm, m: int, k: int, n: int, dtype: str) -> tuple[float, float]:
    """Seconds per call of ember's cuBLAS call and of torch.matmul on zero operands."""
    storage = cp.float32 if dtype == "float32" else cp.uint16
    a, b = cp.zeros((m, k), storage), cp.zeros((k, n), storage)
    out = cp.empty((m, n), storage)
    plan = gemm._Plan(a, b, dtype, "highest")
    zero = ours._zero[plan.compute]
    ember_s = host_seconds(lambda: ours._product(plan, a.data.ptr, b.data.ptr, out.data.ptr,
                                                 zero))
    ta = torch.zeros((m, k), dtype=TORCH[dtype], device="cuda")
    tb = torch.zeros((k, n), dtype=TORCH[dtype], device="cuda")
    return ember_s, torch_host_seconds(lambda: torch.matmul(ta, tb))


def main() -> None:
    ours = gemm.Gemm()
    print("| product | dtype | ember cuBLAS call µs | torch.matmul µs |\n|---|---|---|---|")
    for name, (m, k, n) in SHAPES.items():
        for dtype in ("bfloat16", "float16", "float32"):
            ember_s, torch_s = host_times(ours, m, k, n, dtype)
            print(f"| {name} | {dtype} | {ember_s * 1e6:.1f} | {torch_s * 1e6:.1f} |", flush=True)


if __name__ == "__main__":
    main()
