"""The gradient graph: nodes recorded by ops on tracked tensors.

A node remembers its op, attributes, parent nodes and what its backward
rule needs from the forward. Under "balanced" checkpointing it keeps only
checkpoints (leaves, constants, outputs of compute-bound ops) and, for the
outputs of memory-bound ops, the node that can recompute them.

Nodes are referenced by tensors (``Tensor._node``) and by their consumers,
never by a global list, so a graph is freed with the last handle into it.
"""

from __future__ import annotations

import itertools
from typing import Any

from ember.errors import EmberError
from ember.ops import recording
from ember.ops._core import call
from ember.ops.gradient_rules import BACKWARD, NOT_DIFFERENTIABLE, Rule
# Re-exported: nn, optim and train pause recording and record composites through these names.
from ember.ops.recording import no_record, record_composite  # noqa: F401

_seq = itertools.count(1)

LEAF = "leaf"
SELECT = "select"  # one output of a multi-output node


class Node:
    __slots__ = ("seq", "op", "rule", "attrs", "parents", "saved_inputs", "saved_output",
                 "input_shapes", "input_dtypes", "shape", "dtype", "device", "consumed",
                 "__weakref__")

    def __init__(self, op: str, rule: Rule | None, attrs: tuple, parents: tuple,
                 input_shapes: tuple, input_dtypes: tuple, shape: Any, dtype: Any,
                 device: Any) -> None:
        self.seq = next(_seq)
        self.op = op
        self.rule = rule
        self.attrs = attrs
        self.parents = parents
        self.input_shapes = input_shapes
        self.input_dtypes = input_dtypes
        self.shape = shape
        self.dtype = dtype
        self.device = device
        self.saved_inputs: tuple | None = None
        self.saved_output: Any = None
        self.consumed = False

    def __repr__(self) -> str:
        return f"Node({self.op}#{self.seq}, shape={self.shape})"


def leaf(tensor: Any) -> Node:
    return Node(LEAF, None, (), (), (), (), tensor.shape, tensor.dtype, tensor.device)


def _is_checkpoint(parent: Node | None) -> bool:
    """Kept under "balanced": constants, leaves and outputs of compute-bound ops."""
    return parent is None or parent.op == LEAF or parent.op == SELECT or parent.rule.compute_bound


def record(op: str, inputs: tuple, attrs: tuple, outputs: tuple) -> None:
    """Record a node for an op on an autodiff device, after its outputs exist; ops reach it
    through ``ember.ops.recording.record``, which skips it while recording is paused."""
    # One or two inputs, most ops: no comprehension's frame (Python 3.11), three times.
    n = len(inputs)
    if n == 1:
        a = inputs[0]
        parents, shapes, dtypes = (a._node,), (a.shape,), (a.dtype,)
    elif n == 2:
        a, b = inputs
        parents, shapes, dtypes = (a._node, b._node), (a.shape, b.shape), (a.dtype, b.dtype)
    else:
        parents = tuple([t._node for t in inputs])
        shapes, dtypes = tuple([t.shape for t in inputs]), tuple([t.dtype for t in inputs])
    if parents.count(None) == n or op in NOT_DIFFERENTIABLE:
        return
    multi = len(outputs) > 1
    if multi:
        if all(o.dtype.kind != "f" for o in outputs):
            return  # integer and bool results carry no gradient
    elif outputs[0].dtype.kind != "f":
        return
    rule = BACKWARD.get(op)
    if rule is None:
        raise EmberError(f"{op}: no gradient rule is defined for this op; help: call .detach() "
                         f"on its tracked inputs if no gradient should flow through it")
    device = outputs[0].device
    node = Node(op, rule, attrs, parents, shapes, dtypes,
                tuple(o.shape for o in outputs) if multi else outputs[0].shape,
                tuple(o.dtype for o in outputs) if multi else outputs[0].dtype, device)
    balanced = device.checkpointing == "balanced"
    if balanced and not rule.compute_bound:
        # Keep what recomputes the output: checkpoints as handles, the rest as nodes.
        node.saved_inputs = tuple(t if _is_checkpoint(p) else p for t, p in zip(inputs, parents))
    elif rule.uses_inputs:
        kept = rule.kept_inputs
        if kept is None and not balanced:  # the common case: every input, as it is
            node.saved_inputs = tuple(inputs)
        else:
            node.saved_inputs = tuple(
                None if kept is not None and i not in kept
                else (t if not balanced or _is_checkpoint(p) else p)
                for i, (t, p) in enumerate(zip(inputs, parents)))
    if rule.uses_output and not (balanced and not rule.compute_bound):
        node.saved_output = _untracked_copies(outputs, multi)
    if multi:
        for i, out in enumerate(outputs):
            if out.dtype.kind == "f":
                out._node = Node(SELECT, None, (i,), (node,), (), (), out.shape, out.dtype, device)
    else:
        outputs[0]._node = node


def _untracked_copies(outputs: tuple, multi: bool) -> Any:
    """New handles to the outputs' buffers: a node must not hold its own output's handle."""
    token = recording.paused.set(True)  # as no_record(), without a generator per recorded op
    try:
        copies = tuple([call("alias", (o,), o.shape, o.dtype) for o in outputs])
    finally:
        recording.paused.reset(token)
    return copies if multi else copies[0]


recording.install(record)
