"""Fused groups built the way a device worker builds them: Calls through the planner."""

from __future__ import annotations

from typing import Any

from ember.ir import Call
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


ROW_SHAPE = (8, 16, 128)


def plan_rows(calls: list[Call], dtypes: dict[int, str],
              shapes: dict[int, tuple[int, ...]]) -> tuple[Any, Any]:
    """The one row group the CUDA backend's planner makes of ``calls``."""
    planner = FusionPlanner(codegen.fusible, 32, reductions=True, views=True)
    batch = planner.plan(calls, dtypes.get, shapes.get)
    assert len(batch) == 1, f"expected one group, got {[type(m).__name__ for m in batch]}"
    group = batch[0]
    return group, planner.program(group)


def softmax_calls(dtype: str = "float32") -> list[Call]:
    """e = exp(x - max(x).detach()); e / sum(e), over the last dim of input 1."""
    s, kept = ROW_SHAPE, ROW_SHAPE[:-1] + (1,)
    return [
        Call("max", 10, (1,), ((2,), True), kept, dtype, SITE),
        Call("alias", 11, (10,), (), kept, dtype, SITE),
        Call("sub", 12, (1, 11), (dtype,), s, dtype, SITE),
        Call("exp", 13, (12,), (), s, dtype, SITE),
        Call("sum", 14, (13,), ((2,), True), kept, dtype, SITE),
        Call("div", 15, (13, 14), (dtype,), s, dtype, SITE),
    ]


def layer_norm_calls(dtype: str = "float32") -> list[Call]:
    """(x - mean) * rsqrt(var + 1e-5) * w + b over the last dim; x, w, b are inputs 1-3."""
    s, kept = ROW_SHAPE, ROW_SHAPE[:-1] + (1,)
    return [
        Call("mean", 10, (1,), ((2,), True), kept, dtype, SITE),
        Call("sub", 11, (1, 10), (dtype,), s, dtype, SITE),
        Call("mul", 12, (11, 11), (dtype,), s, dtype, SITE),
        Call("mean", 13, (12,), ((2,), True), kept, dtype, SITE),
        Call("add", 14, (13,), (dtype, 1e-5, False), kept, dtype, SITE),
        Call("rsqrt", 15, (14,), (), kept, dtype, SITE),
        Call("mul", 16, (11, 15), (dtype,), s, dtype, SITE),
        Call("mul", 17, (16, 2), (dtype,), s, dtype, SITE),
        Call("add", 18, (17, 3), (dtype,), s, dtype, SITE),
    ]
