"""The recording hook ops call: autodiff, the layer above, installs what records.

Ops on an autodiff device call ``record`` after their outputs exist; what builds the
gradient graph lives in ``ember.autodiff.graph``, which installs it with ``install`` when
it is imported (importing ``ember`` imports it). Until then nothing is recorded. The
switch that pauses recording (``no_record``, ``em.no_grad``) lives here, below both.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ember.ops.gradient_rules import BACKWARD

# A context variable, not a thread-local: each trio task has its own context, so one
# task's gradient emission never pauses recording in another task on the same thread.
paused: contextvars.ContextVar[bool] = contextvars.ContextVar("ember_record_paused",
                                                             default=False)


def _record_nothing(op: str, inputs: tuple, attrs: tuple, outputs: tuple) -> None:
    return None


_recorder: Callable[[str, tuple, tuple, tuple], None] = _record_nothing


def install(recorder: Callable[[str, tuple, tuple, tuple], None]) -> None:
    """Make ``recorder(op, inputs, attrs, outputs)`` what ``record`` calls."""
    global _recorder
    _recorder = recorder


@contextmanager
def no_record() -> Iterator[None]:
    """Ops inside the block record no nodes (used while emitting gradient ops)."""
    token = paused.set(True)
    try:
        yield
    finally:
        paused.reset(token)


def record(op: str, inputs: tuple, attrs: tuple, outputs: tuple) -> None:
    """Called by every op on an autodiff device, after its outputs exist."""
    if paused.get():
        return
    _recorder(op, inputs, attrs, outputs)


def record_composite(op: str, inputs: tuple, attrs: tuple, output: Any) -> None:
    """Record ``output``, computed from ``inputs`` by ops issued under ``no_record()``, as
    one node of ``op``, whose rule (``differentiable(op, compute_bound=True)``) returns
    the gradients of ``inputs``.

    A composite (layer_norm, softmax) records one node and its rule issues the few ops
    of its closed-form gradient, where its primitives would record a node each and
    their rules issue two to three times as many ops. ``inputs`` may include
    intermediates of the forward the rule reuses: made untracked, they get no gradient.
    Compute-bound, so its output is kept, never recomputed by replaying ``op``.
    """
    rule = BACKWARD.get(op)
    if rule is None or not rule.compute_bound:
        raise RuntimeError(f"record_composite: {op!r} needs a rule registered with "
                           f"differentiable({op!r}, compute_bound=True)")
    record(op, inputs, attrs, (output,))
