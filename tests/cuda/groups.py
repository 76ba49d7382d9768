"""Fused groups built the way a device worker builds them: Calls through the planner."""

from __future__ import annotations

from typing import Any

from ember.actors.ir import Call
from ember.kernels.cupy import codegen
from ember.kernels.fusion.planner import FusionPlanner

SITE = ("test", 1)


def plan(calls: list[Call], dtypes: dict[int, str]) -> tuple[Any, Any]:
    """The one group the planner makes of ``calls`` (inputs' dtypes from ``dtypes``)."""
    planner = FusionPlanner(codegen.fusible, 32)
    batch = planner.plan(calls, dtypes.get)
    assert len(batch) == 1, f"expected one group, got {[type(m).__name__ for m in batch]}"
    group = batch[0]
    return group, planner.program(group)


def gelu_tanh_chain(dtype: str = "float32", scale: float = 0.5) -> list[Call]:
    """y = gelu_tanh(x * w + b) * scale, from inputs 1 (x), 2 (w), 3 (b)."""
    shape = (64, 128)
    return [
        Call("mul", 10, (1, 2), (dtype,), shape, dtype, SITE),
        Call("add", 11, (10, 3), (dtype,), shape, dtype, SITE),
        Call("gelu_tanh", 12, (11,), (), shape, dtype, SITE),
        Call("mul", 13, (12,), (dtype, scale, False), shape, dtype, SITE),
    ]
