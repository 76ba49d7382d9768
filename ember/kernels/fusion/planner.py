"""The fusion planner: runs of elementwise ops in a device's batch become one group.

The planner reads the batch a device worker drained and replaces each run of
consecutive fusible ``Call``s with a ``FusedGroup``. Two kinds of group:

- **elementwise**: every member is elementwise and has the group's shape.
- **row** (backends that fuse reductions): members work on the rows of a base
  shape S, the leading ``rows`` dims that every reduction in the group keeps.
  A reduction over the trailing dims of S joins, with an elementwise prologue
  (members of shape S before it) and epilogue (members of shape S, or of the
  reduced shape, reading its result): softmax and layer_norm are one group
  each. Every member of a row reads only its own row, so a backend can run the
  group row block by row block (CPU) or one row per workgroup (GPU).

Views are index maps (backends that fuse them): reshape / permute / expand of
a group's input is computed as a view before the group, and in a row group a
reshape or expand that keeps the rows (the reduced shape with or without its
size-1 dims, or broadcast back to S) joins it.

A group closes on a clear rule: a message that is not a fusible ``Call`` (a
read, a sync, a transfer, a matmul ...), a shape outside the group's (another
base shape, or another row split), a reduce that would read what the group
writes (one over leading dims, whose rows other blocks compute), a dtype the
backend does not fuse, or more external inputs than the backend allows.
``Drop``s inside a run are moved after the group (the group may still read
those buffers); the inputs they drop are the group's donors, whose buffers
may hold its outputs. A member's output is materialized only if its handle is still
alive at the end of the batch or a later message reads it: an intermediate
whose handle died before the group ran never exists.

A group's evaluation program (member steps over numbered slots) is cached by
the group's relative structure (ids renumbered, sizes and scalar values left
out), so a steady training loop builds each program once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import msgspec

import ember.op_kinds as op_kinds
from ember.dtype import storage_name
from ember.ir import (Call, Check, Drop, Fetch, MultiCall, Receive, ReplayStep, Send,
                      Upload)
from ember.kernels.fusion.cexpr import attr_shape

# The ops of each kind, as ``ember/ops/`` declares them (``ember/op_kinds.py``): live sets,
# so ops a module declares after this import still fuse. Elementwise ops' outputs have the
# broadcast shape of their inputs; reductions' attrs start with (dims, keepdim).
ELEMENTWISE = op_kinds.OPS[op_kinds.ELEMENTWISE]
REDUCTIONS = op_kinds.OPS[op_kinds.REDUCTION]
VIEWS = op_kinds.OPS[op_kinds.VIEW]


class FusedGroup(msgspec.Struct, frozen=True, gc=False):
    """Members run as one kernel. ``outputs``: member outputs that must be materialized.

    ``shape``: the output shape of an elementwise group, the base shape S of a row
    group. ``rows``: None for an elementwise group; for a row group, how many
    leading dims of S its reductions keep. ``prologue``: how many leading members
    are views of inputs (index maps evaluated before the group, full size).
    ``donors``: inputs whose handles died in this batch and that nothing after the
    group reads, so a backend may write an output into their buffer.
    """

    members: tuple[Call, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    shape: tuple[int, ...]
    key: tuple
    rows: int | None = None
    prologue: int = 0
    donors: tuple[int, ...] = ()


class Program(msgspec.Struct, frozen=True, gc=False):
    """A group's evaluation order over slots 0..n_inputs-1 (external) and then members."""

    steps: tuple[tuple[int, tuple[int, ...]], ...]  # (member index, argument slots)
    materialize: tuple[bool, ...]


def _note_meta(msg: Any, made_here: dict[int, tuple[str, tuple[int, ...]]]) -> None:
    """Record (dtype name, shape) of what ``msg``, not a ``Call`` (``plan`` notes those
    itself), makes."""
    kind = type(msg)
    if kind is Receive:
        made_here[msg.out] = (msg.dtype, msg.shape)
    elif kind is MultiCall or kind is ReplayStep:
        made_here.update(zip(msg.outs, zip(msg.dtypes, msg.shapes)))
    elif kind is Upload:
        # NumPy's dtype names are ember's for the dtypes NumPy has.
        made_here[msg.out] = (storage_name(msg.data.dtype), tuple(msg.data.shape))


def _reads(msg: Any) -> tuple[int, ...]:
    """The ids ``msg``, not a ``Call`` (``plan`` reads those itself), reads."""
    kind = type(msg)
    if kind is MultiCall:
        return msg.inputs
    if kind is Fetch or kind is Check or kind is Send:
        return (msg.id,)
    if kind is ReplayStep:
        return msg.args
    return ()


# Members per group at most: bounds program size and the cache key (a guess; chains
# longer than this split into consecutive groups).
MAX_MEMBERS = 64


def _broadcasts_into(shape: tuple[int, ...], base: tuple[int, ...]) -> bool:
    if len(shape) > len(base):
        return False
    return all(d == b or d == 1 for d, b in zip(reversed(shape), reversed(base)))


def _trailing_rows(dims: tuple[int, ...], ndim: int) -> int | None:
    """How many leading dims a reduction over ``dims`` keeps, if ``dims`` are trailing."""
    if not dims or tuple(dims) != tuple(range(ndim - len(dims), ndim)):
        return None
    return ndim - len(dims)


class _Run:
    """The run being built: its members, what they produce, what they read from outside.

    ``prologue``: views of external inputs (index maps), moved before the other
    members. ``shape`` is S once a non-view member joined; ``rows`` is set by the
    first reduction.
    """

    __slots__ = ("prologue", "members", "produced", "external", "shape", "rows", "end", "size")

    def __init__(self) -> None:
        self.prologue: list[Call] = []
        self.members: list[Call] = []
        self.produced: dict[int, tuple[int, ...]] = {}  # id → shape
        self.external: dict[int, None] = {}  # ordered set
        self.shape: tuple[int, ...] | None = None
        self.rows: int | None = None
        self.end = -1
        self.size = 0  # prologue and members

    def _reduced(self, shape: tuple[int, ...]) -> bool:
        """Whether ``shape`` is the rows of S with or without the reduced dims' size-1 axes."""
        if self.rows is None or self.shape is None:
            return False
        head = self.shape[:self.rows]
        return shape == head or shape == head + (1,) * (len(self.shape) - self.rows)

    def accepts(self, msg: Call, kind: str, in_shape: tuple[int, ...] | None,
                max_inputs: int) -> bool:
        """Whether ``msg`` (of ``kind`` "elementwise", "reduce" or "view") joins the run;
        ``in_shape`` is the shape of its first input, where known."""
        if self.size >= MAX_MEMBERS:
            return False
        produced, external = self.produced, self.external
        new = 0
        for i in msg.inputs:
            if i not in produced and i not in external:
                new += 1
        if new and len(external) + new > max_inputs:
            return False
        internal = msg.inputs[0] in produced if msg.inputs else False
        if kind == "view" and not internal:
            return self.shape is None or _broadcasts_into(msg.shape, self.shape)
        if self.shape is None:
            return self._starts(msg, kind, in_shape)
        if kind == "elementwise":
            return msg.shape == self.shape or self._reduced(msg.shape)
        if kind == "reduce":
            rows = _trailing_rows(msg.attrs[0], len(in_shape)) if in_shape is not None else None
            return (in_shape == self.shape and rows is not None
                    and (self.rows is None or rows == self.rows))
        # A view of a member's output keeps to its rows: the reduced shape reshaped
        # (size-1 axes in or out), or broadcast back to S.
        if msg.op == "reshape":
            return self._reduced(in_shape) and self._reduced(msg.shape)
        return (msg.op == "expand" and msg.shape == self.shape
                and in_shape is not None and self._reduced(in_shape))

    def _starts(self, msg: Call, kind: str, in_shape: tuple[int, ...] | None) -> bool:
        """Whether ``msg`` can be the first non-view member, given the prologue so far."""
        if kind == "elementwise":
            base = msg.shape
        elif kind == "reduce" and in_shape is not None:
            if _trailing_rows(msg.attrs[0], len(in_shape)) is None:
                return False
            base = in_shape
        else:
            return False
        return all(_broadcasts_into(v.shape, base) for v in self.prologue)

    def add(self, msg: Call, kind: str, in_shape: tuple[int, ...] | None,
            position: int) -> None:
        for i in msg.inputs:
            if i not in self.produced:
                self.external.setdefault(i)
        if kind == "view" and msg.inputs[0] not in self.produced:
            self.prologue.append(msg)
        else:
            if self.shape is None:
                self.shape = in_shape if kind == "reduce" else msg.shape
            if kind == "reduce" and self.rows is None:
                self.rows = _trailing_rows(msg.attrs[0], len(in_shape))
            self.members.append(msg)
        self.produced[msg.out] = msg.shape
        self.end = position
        self.size += 1


class FusionPlanner:
    """Plans fused groups for one backend.

    Args:
        fusible: ``fusible(call, dtype_of) -> bool``: whether the backend fuses this
            call; ``dtype_of(tensor_id)`` gives an input's dtype name (None if unknown).
        max_inputs: the most external inputs one group may read (WebGPU: 8 storage
            buffers per shader stage).
        reductions: whether the backend runs row groups (reductions with prologue
            and epilogue).
        views: whether the backend takes reshape / permute / expand as index maps.
        min_elements: a group over fewer elements runs as plain calls (where a group's
            bookkeeping costs more than the kernels it saves, as on the CPU); a batch
            with fewer than two larger elementwise ops or reductions is not planned.
        single_from: an elementwise op with nothing to fuse with runs as a group of its
            own from this many elements on (where the backend's generated kernel beats its
            plain one: CuPy's ufuncs move one element per thread); None: never.
    """

    def __init__(self, fusible: Callable[[Call, Callable[[int], Any]], bool],
                 max_inputs: int, *, reductions: bool = False, views: bool = False,
                 min_elements: int = 0, single_from: int | None = None) -> None:
        self._fusible = fusible
        self.max_inputs = max_inputs
        self.min_elements = min_elements
        self.single_from = single_from
        self._kinds = {op: "elementwise" for op in ELEMENTWISE}
        if reductions:
            self._kinds.update({op: "reduce" for op in REDUCTIONS})
        if views:
            self._kinds.update({op: "view" for op in VIEWS})
        self._programs: dict[tuple, Program] = {}
        self.plan_cache_hits = 0

    def plan(self, batch: list, stored_dtype_of: Callable[[int], str | None],
             stored_shape_of: Callable[[int], tuple[int, ...] | None] = lambda i: None) -> list:
        """The batch with fusible runs replaced by ``FusedGroup``s (order otherwise kept).

        ``stored_dtype_of(id)`` / ``stored_shape_of(id)`` give the dtype name / shape of
        a buffer stored before this batch (None if unknown).
        """
        kinds, least = self._kinds, self.min_elements
        alone = self.single_from
        candidates = 0
        for m in batch:
            if type(m) is Call and m.op in kinds:
                if kinds[m.op] == "elementwise":
                    size = math.prod(m.shape)
                    if size < least:
                        continue
                    if alone is not None and size >= alone:  # a group even on its own
                        break
                candidates += 1
                if candidates == 2:
                    break
        else:
            return batch
        made_here: dict[int, tuple[str, tuple[int, ...]]] = {}

        def dtype_of(tensor_id: int) -> str | None:
            found = made_here.get(tensor_id)
            return found[0] if found is not None else stored_dtype_of(tensor_id)

        def shape_of(tensor_id: int) -> tuple[int, ...] | None:
            found = made_here.get(tensor_id)
            return found[1] if found is not None else stored_shape_of(tensor_id)

        dropped: set[int] = set()
        last_read: dict[int, int] = {}
        for position, msg in enumerate(batch):
            kind = type(msg)
            if kind is Drop:
                dropped.add(msg.id)
                continue
            for i in msg.inputs if kind is Call else _reads(msg):
                last_read[i] = position
        out: list = []
        run = _Run()
        deferred: list = []
        fusible, max_inputs = self._fusible, self.max_inputs
        for position, msg in enumerate(batch):
            kind = type(msg)
            if kind is Drop:  # half of a training step's messages: the short way
                (deferred if run.end >= 0 else out).append(msg)
                continue
            if kind is Call:
                role = kinds.get(msg.op)
                if role is not None and not fusible(msg, dtype_of):
                    role = None
                # Only reductions and views look at their input's shape.
                in_shape = (shape_of(msg.inputs[0]) if role is not None and role != "elementwise"
                            else None)
                made_here[msg.out] = (msg.dtype, msg.shape)
            else:
                role = in_shape = None
                _note_meta(msg, made_here)
            if role is not None and run.accepts(msg, role, in_shape, max_inputs):
                run.add(msg, role, in_shape, position)
                continue
            if run.size:  # an empty run (the common case between calls) stays as it is
                self._close(run, out, dropped, last_read)
                out.extend(deferred)
                run, deferred = _Run(), []
            if role is not None and run.accepts(msg, role, in_shape, max_inputs):
                run.add(msg, role, in_shape, position)
            else:
                out.append(msg)
        self._close(run, out, dropped, last_read)
        out.extend(deferred)
        return out

    def _close(self, run: _Run, out: list, dropped: set, last_read: dict[int, int]) -> None:
        elements = math.prod(run.shape) if run.members else 0
        if (not run.members or elements < self.min_elements
                or (len(run.prologue) + len(run.members) < 2
                    and not self._runs_alone(run, elements))):
            out.extend(run.prologue + run.members)  # nothing worth fusing: plain calls
            return
        members = (*run.prologue, *run.members)
        inputs = tuple(run.external)
        outputs = tuple(m.out for m in members
                        if m.out not in dropped or last_read.get(m.out, -1) > run.end)
        slot = {i: k for k, i in enumerate(inputs)}
        slot.update({m.out: len(inputs) + j for j, m in enumerate(members)})
        kept = set(outputs)
        shape = run.shape
        # Roles rather than sizes, so one key serves every size: a member is full (S),
        # reduced (the rows of S), or, in the prologue, a view of its own rank. Scalar
        # values are left out (compiled groups take them as arguments): an optimizer's
        # per-step scalars would make every step's groups new.
        roles = tuple(len(m.shape) if j < len(run.prologue) else m.shape == shape
                      for j, m in enumerate(members))
        key = (tuple((m.op, attr_shape(m), m.dtype, tuple(slot[i] for i in m.inputs))
                     for m in members),
               len(inputs), tuple(m.out in kept for m in members),
               run.rows, len(run.prologue), len(shape), roles)
        viewed = {m.inputs[0] for m in run.prologue}
        donors = tuple(i for i in inputs if i in dropped and i not in viewed
                       and last_read.get(i, -1) <= run.end)
        out.append(FusedGroup(members, inputs, outputs, shape, key, run.rows, len(run.prologue),
                              donors))

    def _runs_alone(self, run: _Run, elements: int) -> bool:
        """Whether a run of one elementwise member is a group of its own (an alias stays
        the view its plain kernel makes)."""
        return (self.single_from is not None and elements >= self.single_from
                and run.rows is None and run.members[0].op != "alias")

    def program(self, group: FusedGroup) -> Program:
        """The group's evaluation program, built once per relative structure."""
        program = self._programs.get(group.key)
        if program is not None:
            self.plan_cache_hits += 1
            return program
        steps, n_inputs, materialize = group.key[:3]
        program = Program(tuple((j, step[3]) for j, step in enumerate(steps)), materialize)
        if len(self._programs) < 4096:
            self._programs[group.key] = program
        return program
