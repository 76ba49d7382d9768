"""The fusion planner: runs of elementwise ops in a device's batch become one group.

The planner reads the batch a device worker drained and replaces each run of
consecutive elementwise ``Call``s of one output shape with a ``FusedGroup``.
A group closes on a clear rule: a message that is not a fusible ``Call`` (a
read, a sync, a transfer, a reduction, a matmul ...), a different output shape,
a dtype the backend does not fuse, or more external inputs than the backend
allows. ``Drop``s inside a run are moved after the group (the group may still
read those buffers). A member's output is materialized only if its handle is
still alive at the end of the batch or a later message reads it: an
intermediate whose handle died before the group ran never exists.

A group's evaluation program (member steps over numbered slots) is cached by
the group's relative structure (ids renumbered, sizes left out), so a steady
training loop builds each program once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from ember.actors.ir import Call, Check, Drop, Fetch, MultiCall, Receive, Send, Upload

# Elementwise ops whose output has the broadcast shape of their inputs.
ELEMENTWISE = frozenset({
    "add", "sub", "mul", "div", "floordiv", "remainder", "pow", "maximum", "minimum",
    "eq", "ne", "lt", "le", "gt", "ge", "bitwise_and", "bitwise_or", "bitwise_xor",
    "neg", "abs", "sign", "floor", "ceil", "round", "relu", "exp", "log", "log1p", "sqrt",
    "rsqrt", "sin", "cos", "tanh", "sigmoid", "gelu", "gelu_tanh", "silu", "erf",
    "reciprocal", "isnan", "isinf", "bitwise_not", "clamp", "where", "cast",
})


class FusedGroup(msgspec.Struct, frozen=True, gc=False):
    """Members run as one kernel. ``outputs``: member outputs that must be materialized."""

    members: tuple[Call, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    shape: tuple[int, ...]
    key: tuple


class Program(msgspec.Struct, frozen=True, gc=False):
    """A group's evaluation order over slots 0..n_inputs-1 (external) and then members."""

    steps: tuple[tuple[int, tuple[int, ...]], ...]  # (member index, argument slots)
    materialize: tuple[bool, ...]


def _note_dtypes(msg: Any, made_here: dict[int, str]) -> None:
    kind = type(msg)
    if kind is Call or kind is Receive:
        made_here[msg.out] = msg.dtype
    elif kind is MultiCall:
        made_here.update(zip(msg.outs, msg.dtypes))
    elif kind is Upload:
        made_here[msg.out] = str(msg.data.dtype)  # NumPy's names are ember's for its dtypes


def _reads(msg: Any) -> tuple[int, ...]:
    kind = type(msg)
    if kind is Call or kind is MultiCall:
        return msg.inputs
    if kind is Fetch or kind is Check or kind is Send:
        return (msg.id,)
    return ()


# Members per group at most: bounds program size and the cache key (a guess; chains
# longer than this split into consecutive groups).
MAX_MEMBERS = 64


class _Run:
    """The run being built: its members, what they produce, what they read from outside."""

    __slots__ = ("members", "produced", "external", "shape", "end")

    def __init__(self) -> None:
        self.members: list[Call] = []
        self.produced: set[int] = set()
        self.external: dict[int, None] = {}  # ordered set
        self.shape: tuple[int, ...] | None = None
        self.end = -1

    def accepts(self, msg: Call, max_inputs: int) -> bool:
        if not self.members:
            return True
        if msg.shape != self.shape or len(self.members) >= MAX_MEMBERS:
            return False
        new = sum(1 for i in msg.inputs if i not in self.produced and i not in self.external)
        return len(self.external) + new <= max_inputs

    def add(self, msg: Call, position: int) -> None:
        if not self.members:
            self.shape = msg.shape
        for i in msg.inputs:
            if i not in self.produced:
                self.external.setdefault(i)
        self.members.append(msg)
        self.produced.add(msg.out)
        self.end = position


class FusionPlanner:
    """Plans fused groups for one backend.

    Args:
        fusible: ``fusible(call, dtype_of) -> bool``: whether the backend fuses this
            call; ``dtype_of(tensor_id)`` gives an input's dtype name (None if unknown).
        max_inputs: the most external inputs one group may read (WebGPU: 8 storage
            buffers per shader stage).
    """

    def __init__(self, fusible: Callable[[Call, Callable[[int], Any]], bool],
                 max_inputs: int) -> None:
        self._fusible = fusible
        self.max_inputs = max_inputs
        self._programs: dict[tuple, Program] = {}
        self.plan_cache_hits = 0

    def plan(self, batch: list, stored_dtype_of: Callable[[int], str | None]) -> list:
        """The batch with fusible runs replaced by ``FusedGroup``s (order otherwise kept).

        ``stored_dtype_of(id)`` gives the dtype name of a buffer stored before this batch.
        """
        if sum(1 for m in batch if type(m) is Call and m.op in ELEMENTWISE) < 2:
            return batch
        made_here: dict[int, str] = {}

        def dtype_of(tensor_id: int) -> str | None:
            found = made_here.get(tensor_id)
            return found if found is not None else stored_dtype_of(tensor_id)

        dropped = {m.id for m in batch if type(m) is Drop}
        last_read: dict[int, int] = {}
        for position, msg in enumerate(batch):
            for i in _reads(msg):
                last_read[i] = position
        out: list = []
        run = _Run()
        deferred: list = []
        for position, msg in enumerate(batch):
            kind = type(msg)
            if kind is Drop and run.members:
                deferred.append(msg)
                continue
            fusible = kind is Call and msg.op in ELEMENTWISE and self._fusible(msg, dtype_of)
            _note_dtypes(msg, made_here)
            if fusible and run.accepts(msg, self.max_inputs):
                run.add(msg, position)
                continue
            self._close(run, out, dropped, last_read)
            out.extend(deferred)
            run, deferred = _Run(), []
            if fusible:
                run.add(msg, position)
            else:
                out.append(msg)
        self._close(run, out, dropped, last_read)
        out.extend(deferred)
        return out

    def _close(self, run: _Run, out: list, dropped: set, last_read: dict[int, int]) -> None:
        members = run.members
        if not members:
            return
        if len(members) == 1:
            out.append(members[0])
            return
        members = tuple(members)
        inputs = tuple(run.external)
        outputs = tuple(m.out for m in members
                        if m.out not in dropped or last_read.get(m.out, -1) > run.end)
        slot = {i: k for k, i in enumerate(inputs)}
        slot.update({m.out: len(inputs) + j for j, m in enumerate(members)})
        kept = set(outputs)
        key = (tuple((m.op, m.attrs, m.dtype, tuple(slot[i] for i in m.inputs)) for m in members),
               len(inputs), tuple(m.out in kept for m in members))
        out.append(FusedGroup(members, inputs, outputs, members[0].shape, key))

    def program(self, group: FusedGroup) -> Program:
        """The group's evaluation program, built once per relative structure."""
        program = self._programs.get(group.key)
        if program is not None:
            self.plan_cache_hits += 1
            return program
        steps, n_inputs, materialize = group.key
        program = Program(tuple((j, step[3]) for j, step in enumerate(steps)), materialize)
        if len(self._programs) < 4096:
            self._programs[group.key] = program
        return program
