"""Kernel time of the encoder layer's and the MLP step's float32 products: cublasGemmEx
(gemm.py's call), each algorithm cuBLASLt's heuristic offers (its first pick, and the
fastest when all are timed) and torch.matmul, on the same operands.

Run: ``PYTHONPATH=. python3 benchmarks/probes/probe_lt.py [--dtype float32] [--most 16]`` on a
machine with a GPU. Prints one row per product and the sums per workload.
"""

from __future__ import annotations

import sys

import cupy
import torch

from benchmarks.probes import cublaslt
from benchmarks.bench_cuda import event_seconds, take_option
from ember.kernels.cupy import gemm

# (workload, batch, m, k, n, how): row-major a (m, k) @ b (k, n); "bT": b is a weight's
# transposed view, "aT": a is a transposed view (a weight gradient's Gᵀ @ X).
T, E, F = 2048, 768, 3072
CASES = [("encoder", 1, T, E, 3 * E, "bT"), ("encoder", 1, T, E, E, "bT"),
         ("encoder", 1, T, E, F, "bT"), ("encoder", 1, T, F, E, "bT"),
         ("encoder", 1, T, E, F, "N"), ("encoder", 1, T, F, E, "N"),
         ("encoder", 1, T, E, E, "N"),
         ("encoder", 1, 3 * E, T, E, "aT"), ("encoder", 1, E, T, E, "aT"),
         ("encoder", 1, F, T, E, "aT"), ("encoder", 1, E, T, F, "aT"),
         ("encoder", 96, 256, 64, 256, "bT"), ("encoder", 96, 256, 256, 64, "N"),
         ("encoder", 96, 256, 256, 64, "aT"),
         ("mlp", 1, 4096, 784, 4096, "bT"), ("mlp", 1, 4096, 4096, 4096, "bT"),
         ("mlp", 1, 4096, 4096, 10, "bT"), ("mlp", 1, 4096, 10, 4096, "N"),
         ("mlp", 1, 4096, 4096, 4096, "N"), ("mlp", 1, 4096, 4096, 784, "aT"),
         ("mlp", 1, 4096, 4096, 4096, "aT"), ("mlp", 1, 10, 4096, 4096, "aT")]
REPEATS = 20


def operands(batch: int, m: int, k: int, n: int, how: str, dtype: str) -> tuple:
    rng = cupy.random.default_rng(0)
    lead = (batch,) if batch > 1 else ()
    a = rng.standard_normal(lead + ((k, m) if how == "aT" else (m, k)), dtype=cupy.float32)
    b = rng.standard_normal(lead + ((n, k) if how == "bT" else (k, n)), dtype=cupy.float32)
    a, b = a.astype(dtype), b.astype(dtype)
    if how == "aT":
        a = a.swapaxes(-1, -2)
    if how == "bT":
        b = b.swapaxes(-1, -2)
    return a, b


def kernel_seconds(run) -> float:
    """Best of three rounds of REPEATS launches (bench_cuda.event_seconds: CUDA events)."""
    return min(event_seconds(run, REPEATS) for _ in range(3))


def lt_times(lt: cublaslt.Lt, plan: gemm._Plan, a, b, out, most: int) -> list[float]:
    """Seconds of each algorithm the heuristic offers for ``plan`` (its order kept)."""
    m, n, k = plan.m, plan.n, plan.k
    shapes = ((n, k) if plan.op_b == 0 else (k, n), (k, m) if plan.op_a == 0 else (m, k),
              (n, m))
    found = lt.descriptors(plan.data, plan.compute, plan.op_b, plan.op_a, shapes,
                           (plan.ldb, plan.lda, n), (plan.stride_b, plan.stride_a, m * n),
                           plan.count)
    engine = gemm.current()
    one, zero = engine._one[plan.compute], engine._zero[plan.compute]
    workspace = engine._workspace.data.ptr
    times = []
    for algorithm in lt.algorithms(found, 256, most):
        struct = cublaslt.algorithm_struct(algorithm)
        stream = cupy.cuda.get_current_stream().ptr
        times.append(kernel_seconds(lambda s=struct: lt.matmul(
            found, s, one, b.data.ptr, a.data.ptr, zero, out.data.ptr, workspace, stream)))
    return times


def main() -> None:
    dtype, args = take_option(sys.argv[1:], "--dtype", "float32")
    most, args = take_option(args, "--most", "16")
    engine = gemm.current()
    lt = cublaslt.Lt(gemm._cublas_path().replace("libcublas.so", "libcublasLt.so"),
                     gemm.WORKSPACE_BYTES)
    print(f"# {torch.cuda.get_device_name()}, cuBLASLt {lt.version}, {dtype}")
    print("| product | GemmEx | Lt first | Lt best (of n) | torch | best / GemmEx |")
    totals: dict[str, list[float]] = {}
    for workload, batch, m, k, n, how in CASES:
        a, b = operands(batch, m, k, n, how, dtype)
        plan = gemm._Plan(a, b, dtype, "highest")
        out = cupy.empty(plan.out_shape, a.dtype)
        ex = kernel_seconds(lambda: engine.matmul(a, b, dtype))
        lts = lt_times(lt, plan, a, b, out, int(most))
        ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
        th = kernel_seconds(lambda: torch.matmul(ta, tb))
        flops = 2 * batch * m * n * k
        best = min(lts) if lts else float("nan")
        first = lts[0] if lts else float("nan")

        def rate(seconds: float) -> str:
            return f"{flops / seconds / 1e12:.1f}"

        print(f"| {workload} {batch}×{m}×{k}×{n} {how} | {rate(ex)} | {rate(first)} | "
              f"{rate(best)} (#{lts.index(best) if lts else '-'} of {len(lts)}) | {rate(th)} | "
              f"{best / ex:.3f} |", flush=True)
        total = totals.setdefault(workload, [0.0, 0.0, 0.0, 0.0])
        for i, seconds in enumerate((ex, first, best, th)):
            total[i] += seconds
    for workload, (ex, first, best, th) in totals.items():
        print(f"# {workload}: GemmEx {ex * 1e3:.3f} ms, Lt first {first * 1e3:.3f}, "
              f"Lt best {best * 1e3:.3f}, torch {th * 1e3:.3f} (products once each)")


if __name__ == "__main__":
    main()
