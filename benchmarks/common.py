"""Timing helpers shared by the benchmarks: medians of repeated runs, an optional torch."""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable

try:
    import torch
except ImportError:  # PyTorch is optional: its columns are left out
    torch = None


def median_seconds(fn: Callable[[], object], repeats: int = 7, warmup: int = 2) -> float:
    """The median wall time of ``fn()`` over ``repeats`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def machine() -> str:
    import os

    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def table(title: str, header: list[str], rows: list[list[str]]) -> str:
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |",
             "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}×"
