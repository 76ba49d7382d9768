"""Paired samples: ember and PyTorch doing the same work, timed interleaved, reported as
the ratio of their times (median and min over pairs) against a goal.

Interleaving (the order alternating between repeats) makes load from other processes
on a shared machine fall on both sides alike, which a run of one side then the other
does not.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Row:
    """A workload: ``make()`` builds its data and returns (ember sample, torch sample),
    two callables that each run ``units`` units of the same work."""

    name: str
    goal: str  # as the issue states it: a bound on ember ÷ torch, or an absolute time
    unit: str  # "µs", "ms" or "s", per unit
    units: int
    make: Callable[[], tuple[Callable[[], object], Callable[[], object]]]
    repeats: int
    goal_ratio: float | None = None  # the bound the ratio must meet, where the goal is one
    goal_seconds: float | None = None  # the bound ember's time must meet, where it is one
    warmup: int = 1  # samples of each side run first, untimed


@dataclass
class Result:
    row: Row
    ember_s: list[float]  # per unit
    torch_s: list[float]
    ratios: list[float]


def _time(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(row: Row) -> Result:
    """Build ``row``'s samples, warm both up, then time ``row.repeats`` interleaved pairs."""
    ember, torch_ = row.make()
    for _ in range(row.warmup):
        ember()
        torch_()
    ember_s, torch_s = [], []
    for i in range(row.repeats):
        if i % 2:
            t, e = _time(torch_), _time(ember)
        else:
            e, t = _time(ember), _time(torch_)
        ember_s.append(e / row.units)
        torch_s.append(t / row.units)
    return Result(row, ember_s, torch_s, [e / t for e, t in zip(ember_s, torch_s)])


_SCALE = {"µs": 1e6, "ms": 1e3, "s": 1.0}


def _span(values: list[float], scale: float) -> str:
    digits = 3 if scale == 1.0 else (2 if statistics.median(values) * scale < 100 else 1)
    return f"{statistics.median(values) * scale:.{digits}f} ({min(values) * scale:.{digits}f})"


def _met(result: Result) -> str:
    row = result.row
    if row.goal_seconds is not None:
        return "yes" if statistics.median(result.ember_s) <= row.goal_seconds else "no"
    return "yes" if statistics.median(result.ratios) <= row.goal_ratio else "no"


def markdown(results: list[Result]) -> str:
    """A markdown table of ``results``: each side's time per unit and the ratio, median (min)."""
    lines = ["| workload | unit | PyTorch median (min) | ember median (min) | "
             "ember ÷ torch median (min) | goal | met (median) |",
             "|---|---|---|---|---|---|---|"]
    for result in results:
        row, scale = result.row, _SCALE[result.row.unit]
        lines.append(f"| {row.name} | {row.unit} | {_span(result.torch_s, scale)} | "
                     f"{_span(result.ember_s, scale)} | {statistics.median(result.ratios):.2f} "
                     f"({min(result.ratios):.2f}) | {row.goal} | {_met(result)} |")
    return "\n".join(lines)
