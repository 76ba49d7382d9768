"""ember's runtime in one program: two CPU devices computing at once under trio.

Task A estimates pi by Monte Carlo on ``cpu:0``; task B finds the largest
eigenvalue of a random symmetric matrix by power iteration on ``cpu:1``.
Both build their graphs without waiting (every op returns a future at once)
and only ``await`` the numbers they print, so each task's waits let the
other run. The script then reads the final results the blocking way, checks
the eigenvalue against NumPy and prints each device actor's counters.

Run: ``python examples/runtime_demo.py``.
"""

from __future__ import annotations

import time

import numpy as np
import trio

import ember as em


async def estimate_pi(device: em.Device, batches: int, batch_size: int) -> em.Tensor:
    """Count random points of the unit square that fall inside the quarter circle."""
    inside = em.zeros((), dtype=em.int64, device=device)
    for i in range(batches):
        x = em.rand(batch_size, device=device)
        y = em.rand(batch_size, device=device)
        inside = inside + (x * x + y * y <= 1.0).sum()
        if (i + 1) % 5 == 0:
            count = (await inside).item()  # parks this task; the other keeps running
            print(f"  [{device}] pi ≈ {4 * count / ((i + 1) * batch_size):.5f} "
                  f"after {(i + 1) * batch_size:,} points")
    return inside.astype(em.float64) * (4.0 / (batches * batch_size))


async def top_eigenvalue(device: em.Device, n: int, steps: int) -> tuple[em.Tensor, em.Tensor]:
    """Power iteration on a random symmetric ``n × n`` matrix with one planted direction.

    Noise eigenvalues fill [-1.41, 1.41]; the planted spike of strength 3 lifts
    the top eigenvalue to about 3 + 0.5 / 3, far enough out to converge fast.
    """
    a = em.randn((n, n), device=device)
    spike = em.full((n, 1), 1.0 / n ** 0.5, device=device)
    sym = (a + a.T) / (2 * n ** 0.5) + 3.0 * (spike @ spike.T)
    v = em.randn((n, 1), device=device)
    for step in range(steps):
        w = sym @ v
        v = w / (w * w).sum().sqrt()
        if (step + 1) % 30 == 0:
            estimate = (await (v * (sym @ v)).sum()).item()
            print(f"  [{device}] step {step + 1}: eigenvalue ≈ {estimate:.4f}")
    return (v * (sym @ v)).sum(), sym


async def both() -> dict[str, em.Tensor]:
    results: dict[str, em.Tensor] = {}

    async def pi_task() -> None:
        results["pi"] = await estimate_pi(em.cpu(0), batches=20, batch_size=1_000_000)

    async def eig_task() -> None:
        results["eigenvalue"], results["matrix"] = await top_eigenvalue(em.cpu(1), 1024, 150)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pi_task)
        nursery.start_soon(eig_task)
    return results


def main() -> None:
    em.manual_seed(0)
    print("ember demo: two device actors (cpu:0, cpu:1) driven by two trio tasks")
    started = time.perf_counter()
    results = em.run(both)
    elapsed = time.perf_counter() - started
    # Plain blocking reads, as a script would do them.
    pi = results["pi"].item()
    eigenvalue = results["eigenvalue"].item()
    reference = np.linalg.eigvalsh(results["matrix"].numpy().astype(np.float64))
    largest = reference[-1]
    print(f"pi ≈ {pi:.5f}  (error {abs(pi - np.pi):.1e})")
    print(f"largest eigenvalue ≈ {eigenvalue:.4f}  (NumPy eigvalsh: {largest:.4f})")
    print(f"both tasks finished in {elapsed:.2f} s")
    for name in ("cpu:0", "cpu:1"):
        s = em.stats(name)
        print(f"  {name}: {s.ops_executed} ops in {s.batches} batches, "
              f"{s.buffers_pooled} buffers pooled, {s.bytes_held / 2**20:.1f} MiB held")
    if abs(pi - np.pi) > 0.01 or abs(eigenvalue - largest) > 1e-3 * abs(largest):
        raise SystemExit("demo: results do not match their references")


if __name__ == "__main__":
    main()
