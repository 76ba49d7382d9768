"""Would a second stream help the encoder's backward? Kernel time of each linear's and
attention's independent products (dX = G W and dW = Gᵀ X, plus the bias's column sum)
run one after another on one stream, against the same products forked onto two streams
and joined, both captured as CUDA graphs and replayed (host time out of the picture).

Most of the encoder's products fill less than a wave of 128×128 tiles on the H200's
132 SMs (2048×768: 96 tiles; 768×768: 36), so two of them side by side may finish
sooner than one after the other.

Run: ``PYTHONPATH=. python3 benchmarks/probe_streams.py`` on a machine with a GPU.
"""

from __future__ import annotations

import cupy

from benchmarks.bench_cuda import event_seconds
from ember.kernels.cupy import gemm

T, E, F = 2048, 768, 3072
BH, L, D = 96, 256, 64
REPEATS = 50


def f(*shape):
    return cupy.random.default_rng(0).standard_normal(shape, dtype=cupy.float32)


def linear_case(n_in: int, n_out: int):
    x, w, g, ones = f(T, n_in), f(n_out, n_in), f(T, n_out), cupy.ones((1, T), cupy.float32)
    # dX = G @ W ; dW = Gᵀ @ X ; db = 1 @ G
    return [lambda: gemm.current().matmul(g, w, "float32")], [
        lambda: gemm.current().matmul(g.T, x, "float32"), lambda: gemm.current().matmul(ones, g, "float32")]


def attention_case():
    q, k, v, p, dout = f(BH, L, D), f(BH, L, D), f(BH, L, D), f(BH, L, L), f(BH, L, D)
    ds = f(BH, L, L)
    # dP = dO Vᵀ || dV = Pᵀ dO ; dQ = dS K || dK = dSᵀ Q
    return ([lambda: gemm.current().matmul(dout, v.swapaxes(-1, -2), "float32"),
             lambda: gemm.current().matmul(ds, k, "float32")],
            [lambda: gemm.current().matmul(p.swapaxes(-1, -2), dout, "float32"),
             lambda: gemm.current().matmul(ds.swapaxes(-1, -2), q, "float32")])


def graph(main_ops, side_ops, two_streams: bool):
    main, side = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
    held = []
    with main:
        for op in main_ops + side_ops:  # warm: plans made, nothing lazy left for the capture
            held.append(op())
        with side:
            gemm.current()  # the side stream's cuBLAS handle, made before the capture
        main.synchronize()
        main.begin_capture()
        if two_streams:
            fork, join = cupy.cuda.Event(disable_timing=True), cupy.cuda.Event(disable_timing=True)
            fork.record(main)
            side.wait_event(fork)
            with side:
                held += [op() for op in side_ops]
                join.record(side)
            held += [op() for op in main_ops]
            main.wait_event(join)
        else:
            held += [op() for op in main_ops + side_ops]
        captured = main.end_capture()
    with main:
        seconds = min(event_seconds(lambda: captured.launch(main), REPEATS) for _ in range(3))
    return seconds, held


def main() -> None:
    cases = {"qkv 768→2304": linear_case(E, 3 * E), "out 768→768": linear_case(E, E),
             "ff1 768→3072": linear_case(E, F), "ff2 3072→768": linear_case(F, E),
             "attention bwd": attention_case()}
    total_one = total_two = 0.0
    print("| products | one stream | two streams | saved |\n|---|---|---|---|")
    for name, (main_ops, side_ops) in cases.items():
        one, _ = graph(main_ops, side_ops, False)
        two, _ = graph(main_ops, side_ops, True)
        total_one, total_two = total_one + one, total_two + two
        print(f"| {name} | {one * 1e3:.4f} ms | {two * 1e3:.4f} ms | {(one - two) * 1e3:.4f} ms |")
    print(f"| sum | {total_one * 1e3:.4f} ms | {total_two * 1e3:.4f} ms | "
          f"{(total_one - total_two) * 1e3:.4f} ms |")


if __name__ == "__main__":
    main()
