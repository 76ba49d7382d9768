"""Would a second stream help the encoder's backward? Kernel time of each linear's and
attention's independent products (dX = G W and dW = Gᵀ X, plus the bias's column sum)
run one after another on one stream, against the same products forked onto two streams
and joined, both captured as CUDA graphs and replayed (host time out of the picture).

Most of the encoder's products fill less than a wave of 128×128 tiles on the H200's
132 SMs (2048×768: 96 tiles; 768×768: 36), so two of them side by side may finish
sooner than one after the other.

``--encoder``: the encoder layer's pure ``em.graphed`` step (bench_cuda.py) captured on
two streams (side_stream.py) and on one (``EMBER_SIDE_STREAM=0``), each in processes of
its own, alternating (a graph is kept per step structure, so one process replays one
kind), against torch eager in the same processes.

Run: ``PYTHONPATH=. python3 benchmarks/probes/probe_streams.py [--encoder]`` on a machine
with a GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys

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


def encoder_once() -> None:
    import ember as em
    from benchmarks.bench_cuda import (DEV, em_sync, ember_encoder_step, encoder_input, timed,
                                       torch_encoder_step, torch_sync)

    x_np = encoder_input()
    pure = em.graphed(ember_encoder_step(x_np), DEV, pure=True)
    torch_step = torch_encoder_step(x_np)
    for _ in range(3):  # run, capture, replay
        pure()
    em_sync()
    ours, theirs = timed(pure, em_sync, 20), timed(torch_step, torch_sync, 20)
    streams = "two streams" if pure.graph_stats()["side_ops"] else "one stream"
    print(f"| encoder pure graph, {streams} | {ours * 1e3:.3f} ms | torch eager "
          f"{theirs * 1e3:.3f} ms | {ours / theirs:.2f}x |", flush=True)


def encoder() -> None:
    for side in ("1", "0", "1", "0"):
        subprocess.run([sys.executable, __file__, "--encoder-once"], check=True,
                       env={**os.environ, "EMBER_SIDE_STREAM": side})


if __name__ == "__main__":
    {"--encoder": encoder, "--encoder-once": encoder_once}.get(
        sys.argv[1] if len(sys.argv) > 1 else "", main)()
