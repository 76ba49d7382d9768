"""Float32 matmul precisions on the GPU, kernel time and error against float64:
cuBLAS SGEMM, TF32, and three TF32 products of split operands (a = hi + lo, each part
exact in TF32; a b ~ hi hi + hi lo + lo hi).

Run: ``PYTHONPATH=. python3 benchmarks/probes/probe_precision.py`` on a machine with a GPU.
"""

from __future__ import annotations

import torch

from benchmarks.bench_cuda import torch_event_seconds

SHAPES = [(1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192), (4096, 784, 4096),
          (4096, 4096, 10), (784, 4096, 4096), (2048, 768, 3072), (768, 2048, 3072)]


def round_tf32(x: torch.Tensor) -> torch.Tensor:
    bits = x.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    bits = (bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000
    return ((bits ^ 0x80000000) - 0x80000000).to(torch.int32).view(torch.float32)


def split(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    hi = round_tf32(x)
    return hi, round_tf32(x - hi)


def three_products(a_parts, b_parts) -> torch.Tensor:
    (a_hi, a_lo), (b_hi, b_lo) = a_parts, b_parts
    out = torch.mm(a_lo, b_hi)
    out.addmm_(a_hi, b_lo)
    return out.addmm_(a_hi, b_hi)


def main() -> None:
    torch.manual_seed(0)
    for m, k, n in SHAPES:
        a = torch.randn(m, k, device="cuda")
        b = torch.randn(k, n, device="cuda")
        exact = torch.mm(a.double(), b.double())
        scale = torch.mm(a.double().abs(), b.double().abs())
        flops = 2 * m * k * n
        parts = split(a), split(b)
        cells = []
        for name, tf32, run in (("sgemm", False, lambda: torch.mm(a, b)),
                                ("tf32", True, lambda: torch.mm(a, b)),
                                ("3xtf32", True, lambda: three_products(*parts)),
                                ("3xtf32+split", True,
                                 lambda: three_products(split(a), split(b)))):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            seconds = min(torch_event_seconds(run, 10) for _ in range(3))
            error = ((run().double() - exact).abs() / scale).max().item()
            rel = ((run().double() - exact).norm() / exact.norm()).item()
            cells.append(f"{name} {flops / seconds / 1e12:.0f} TF/s err {error:.1e} "
                         f"rel {rel:.1e}")
        torch.backends.cuda.matmul.allow_tf32 = False
        print(f"| {m}x{k}x{n} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
