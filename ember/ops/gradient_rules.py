"""The registry of backward rules. Each rule is declared next to its op in ``ember/ops/``;
the autodiff engine, the layer above, reads it.

A rule receives a ``BackwardContext`` and the gradient of the op's output
(a tuple of them, ``None`` where no gradient flows, for an op with several
outputs) and returns one gradient per tensor input (``None`` where none
flows). Rules compute with ordinary ember ops; the engine sums each
gradient over broadcast dims and casts it to its input's dtype, so rules
need not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple


class Rule(NamedTuple):
    fn: Callable[..., tuple]
    uses_inputs: bool
    uses_output: bool
    compute_bound: bool
    kept_inputs: frozenset[int] | None  # positions the rule reads; None: all of them
    replay: bool = True  # a cached backward plan may stand in for it (``autodiff/plans.py``)


BACKWARD: dict[str, Rule] = {}
# Ops whose outputs carry no gradient (comparisons, argmax, integer results ...).
NOT_DIFFERENTIABLE: set[str] = set()


def differentiable(*ops: str, inputs: bool | tuple[int, ...] = True, output: bool = False,
                   compute_bound: bool = False, replay: bool = True) -> Callable:
    """Register ``fn`` as the backward rule of ``ops``.

    Args:
        inputs: the rule reads ``ctx.inputs`` (the forward inputs are kept for it);
            a tuple of positions keeps only those (``ctx.inputs`` holds None elsewhere),
            e.g. ``(1,)`` for a gather that reads its index but not its source.
        output: the rule reads ``ctx.output`` (the forward output is kept for it).
        compute_bound: matmul, convolution, reductions: under "balanced"
            checkpointing their outputs are kept, while memory-bound ops'
            outputs are recomputed during backward.
        replay: the rule decides from the graph's structure alone (op, attrs, shapes,
            dtypes, which inputs are tracked), so a walk's recorded messages may replay in
            its place on a graph of the same structure. False for a rule that decides from
            values (reads a tensor) or has side effects: walks through it always run it.
    """

    def register(fn: Callable) -> Callable:
        for op in ops:
            if op in BACKWARD:
                raise RuntimeError(f"backward rule for {op!r} registered twice")
            kept = frozenset(inputs) if isinstance(inputs, tuple) else None
            BACKWARD[op] = Rule(fn, bool(inputs), output, compute_bound, kept, replay)
        return fn

    return register


def not_differentiable(*ops: str) -> None:
    """Declare that ``ops`` produce untracked outputs even from tracked inputs."""
    NOT_DIFFERENTIABLE.update(ops)


class BackwardContext:
    """What a backward rule may read about its forward op.

    ``inputs`` and ``output`` are materialized on first access (kept from the
    forward, or recomputed under checkpointing); ``attrs``, ``input_shapes``,
    ``input_dtypes``, ``shape`` and ``dtype`` describe the forward call.
    """

    __slots__ = ("node", "_inputs", "_output", "_materialize")

    def __init__(self, node: Any, materialize: Any) -> None:
        self.node = node
        self._materialize = materialize
        self._inputs = None
        self._output = None

    @property
    def attrs(self) -> tuple:
        return self.node.attrs

    @property
    def input_shapes(self) -> tuple:
        return self.node.input_shapes

    @property
    def input_dtypes(self) -> tuple:
        return self.node.input_dtypes

    @property
    def shape(self) -> Any:
        return self.node.shape

    @property
    def dtype(self) -> Any:
        return self.node.dtype

    @property
    def needs_input_grad(self) -> tuple[bool, ...]:
        """Per tensor input: whether a gradient flows to it (it is tracked)."""
        return tuple(p is not None for p in self.node.parents)

    @property
    def inputs(self) -> tuple:
        if self._inputs is None:
            self._inputs = self._materialize.inputs(self.node)
        return self._inputs

    @property
    def output(self) -> Any:
        if self._output is None:
            self._output = self._materialize.output(self.node)
        return self._output
