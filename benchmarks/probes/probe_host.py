"""Host time per call of gemm.py's matmul and its parts, on the calling thread (no actor):
the operand layouts of the encoder layer's and the MLP's products, at "highest" and
"high". Each figure: the host's perf_counter over 200 calls issued back to back, divided
by 200 (the GPU keeps up or falls behind: the second column is its time per call).

Run: ``PYTHONPATH=. python3 benchmarks/probes/probe_host.py`` on a machine with a GPU.
"""

from __future__ import annotations

import time

import cupy as cp

from benchmarks.bench_cuda import event_seconds
from ember.kernels.cupy import gemm, tf32_split

CALLS = 200


def _operands() -> dict[str, tuple]:
    r = cp.random.default_rng(0)

    def f(*shape):
        return r.standard_normal(shape, dtype=cp.float32)

    qkv = f(8, 256, 3, 12, 64).transpose(2, 0, 3, 1, 4)  # (3, batch, heads, seq, d)
    return {
        "x @ W.T (2048x768 @ 768x2304)": (f(2048, 768), f(2304, 768).T),
        "q @ k.T (8x12x256x64 views)": (qkv[0], qkv[1].swapaxes(-1, -2)),
        "rows.T @ g (768x2048 @ 2048x3072)": (f(2048, 768).T, f(2048, 3072)),
        "MLP h @ W.T (4096x4096 @ 4096x4096)": (f(4096, 4096), f(4096, 4096).T),
        "16x16 @ 16x16": (f(16, 16), f(16, 16)),
    }


def host_seconds(call) -> float:
    call()
    cp.cuda.Device().synchronize()
    start = time.perf_counter()
    for _ in range(CALLS):
        call()
    seconds = (time.perf_counter() - start) / CALLS
    cp.cuda.Device().synchronize()
    return seconds


def main() -> None:
    ours = gemm.Gemm()
    print("| operands | precision | host µs / call | GPU µs / call | host µs: empty, split, "
          "one cuBLAS call |\n|---|---|---|---|---|")
    for name, (a, b) in _operands().items():
        for precision in ("highest", "high"):
            def call():
                return ours.matmul(a, b, "float32", precision)

            call()
            plan = next(p for k, p in ours._plans.items()
                        if k[:4] == (a.shape, a.strides, b.shape, b.strides) and k[5] == precision)
            out = call()
            parts = [host_seconds(lambda: cp.empty(plan.out_shape, cp.float32)),
                     host_seconds(lambda: tf32_split.split(a, b))]
            if not (plan.copy_a or plan.copy_b):  # else cuBLAS reads the copies
                parts.append(host_seconds(lambda: ours._product(
                    plan, a.data.ptr, b.data.ptr, out.data.ptr, ours._zero[plan.compute])))
            cells = ", ".join(f"{s * 1e6:.1f}" for s in parts)
            if plan.copy_a or plan.copy_b:
                cells += f" (copies a: {plan.copy_a}, b: {plan.copy_b})"
            print(f"| {name} | {precision} | {host_seconds(call) * 1e6:.1f} | "
                  f"{event_seconds(call, 20) * 1e6:.1f} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
