"""The CPU executor of fused groups: blocked evaluation in cache-sized chunks.

Each member runs its ordinary NumPy kernel, but on one chunk of the group's
output at a time, writing into a chunk buffer that stays in cache; only the
outputs the group must materialize get full-size buffers (from the pool).
An elementwise group is cut anywhere; a row group only between whole rows
(its reductions see complete rows), its leading dims merged where that needs
no copy. Input views (the prologue) are taken once, full size, as NumPy
views. The arithmetic is the unfused kernels' own, element for element and
row for row, so fused and unfused results are identical.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import msgspec
import numpy as np

from ember.kernels.fusion.planner import REDUCTIONS, VIEWS
from ember.kernels.numpy import compiled, cores
from ember.kernels.numpy.compiled import Piece
from ember.kernels.numpy.table import KERNELS, NP

# Elements per chunk. Measured on custom_gelu's group here: 32K 0.25-0.30 s, 64K
# 0.19-0.21 s, 128K 0.16-0.18 s, 256K 0.18-0.21 s: NumPy's per-call cost favours big
# chunks and L3 holds them. 64K keeps a test's shapes past one chunk small enough.
CHUNK_ELEMENTS = 1 << 16
# A group over fewer elements runs as plain calls: with no memory traffic to save, its
# bookkeeping costs more than the kernels (a chain of float32[16] ops: 37 µs per op
# fused, 18 unfused, measured here).
MIN_FUSED_ELEMENTS = 1024
_LOW_PRECISION = ("float16", "bfloat16")


def fusible(call: Any, dtype_of: Any) -> bool:
    """The NumPy backend fuses every elementwise op except in float16 / bfloat16, whose
    kernels widen whole arrays to float32."""
    if call.dtype in _LOW_PRECISION:
        return False
    for i in call.inputs:
        d = dtype_of(i)
        if d is None or d in _LOW_PRECISION:
            return False
    return True


class _ChunkPool:
    """Hands a kernel the chunk buffer it must write into, whatever shape it asks for."""

    __slots__ = ("buffer",)

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return self.buffer


def run_fused(group: Any, program: Any, inputs: list, pool: Any) -> list[tuple[int, np.ndarray]]:
    """Evaluate ``group``; returns (tensor id, array) for each output to materialize."""
    members = group.members
    # Views of inputs (the prologue) are taken once, full size: they cost no copy.
    inputs = list(inputs)
    for j, args in program.steps[:group.prologue]:
        inputs.append(KERNELS[members[j].op](members[j], pool, *[inputs[a] for a in args]))
    shared = _shared_aliases(group, program)
    donated = _donations(group, program, inputs, shared) if group.donors else {}
    full = [(donated[j] if j in donated else pool.empty(m.shape, NP[m.dtype]))
            if keep and j >= group.prologue and j not in shared else None
            for j, (m, keep) in enumerate(zip(members, program.materialize))]
    views = [(m.out, inputs[len(group.inputs) + j])
             for j, m in enumerate(members[:group.prologue]) if program.materialize[j]]
    if group.rows is not None:
        if not compiled.run_rows(group, program, inputs, full):
            _run_rows(group, program, inputs, full, compiled.plan(group, program, inputs, full),
                      pool)
    else:
        items = compiled.plan(group, program, inputs, full)
        if items is None or not compiled.run_whole(items, group, inputs, full):
            _run_elementwise(group, program, inputs, full, items, pool)
    n_inputs = len(group.inputs)
    aliases = [(members[j].out, inputs[slot] if slot < len(inputs) else full[slot - n_inputs])
               for j, slot in shared.items()]
    return views + aliases + [(m.out, f) for m, f in zip(members, full) if f is not None]


def _shared_aliases(group: Any, program: Any) -> dict[int, int]:
    """Kept aliases (detach) that return the array of the slot they alias, an input or a
    kept member, rather than a copy: member index → that slot."""
    n_inputs, prologue = len(group.inputs), group.prologue
    shared: dict[int, int] = {}
    for j, args in program.steps[prologue:]:
        if group.members[j].op != "alias" or not program.materialize[j]:
            continue
        slot = args[0]
        source = slot - n_inputs
        if source >= prologue and source in shared:
            slot = shared[source]
        elif source >= prologue and not program.materialize[source]:
            continue  # the source is never stored: the alias holds the only copy
        shared[j] = slot
    return shared


# References to a donor's array when nothing but the device holds it: the device's
# environment, the actor's list of the group's inputs, run_fused's copy of that list,
# the loop variable below and getrefcount's argument. A view or a reader holds more.
_REFS_WHEN_DONATED = 5
# Members whose output shows their input's memory (an alias is a view of it all).
_VIEWS = VIEWS | {"alias"}


def _donations(group: Any, program: Any, inputs: list,
               shared: dict[int, int]) -> dict[int, np.ndarray]:
    """Members whose output may go into a donor's buffer: member index → that buffer.

    A donor serves an output of its shape and dtype written after its last reader
    (through any alias or view of it), so no member reads a block it overwrote, and
    never one a kept alias returns (``shared``). Only groups whose kernels cannot fail
    on their data donate (no integer members): a failing group re-runs member by
    member from its inputs, which must be intact.
    """
    members = group.members
    if any(NP[m.dtype].kind not in "fb" for m in members):
        return {}
    n = len(group.inputs)
    returned = set(shared.values())
    free = []
    for k, i in enumerate(group.inputs):
        a = inputs[k]
        if (i in group.donors and k not in returned and type(a) is np.ndarray and a.base is None
                and a.shape == group.shape and a.flags.c_contiguous and a.flags.writeable
                and sys.getrefcount(a) <= _REFS_WHEN_DONATED):
            free.append(k)
    if not free:
        return {}
    donor_of = {k: k for k in free}  # slot → the donor slot whose memory it shows
    last_reader: dict[int, int] = {}
    for j, args in program.steps:
        for a in args:
            if a in donor_of:
                last_reader[donor_of[a]] = j
        if members[j].op in _VIEWS and args[0] in donor_of:
            donor_of[n + j] = donor_of[args[0]]
    donated = {}
    for j, (m, keep) in enumerate(zip(members, program.materialize)):
        if not keep or j < group.prologue or m.shape != group.shape or m.op in _VIEWS:
            continue
        for k in free:
            if last_reader.get(k, -1) < j and inputs[k].dtype == NP[m.dtype]:
                donated[j] = inputs[k]
                free.remove(k)
                break
    return donated


def _run_elementwise(group: Any, program: Any, inputs: list, full: list,
                     items: list | None, pool: Any) -> None:
    """``items``: the members after the prologue, runs of them as compiled ``Piece``s
    (None: each member its NumPy kernel); ``pool``: the device's buffer pool, which
    lends the chunk buffers."""
    shape = group.shape
    members = group.members
    total = math.prod(shape)
    if total <= CHUNK_ELEMENTS or not shape:
        _run_once(group, program, inputs, full, items, pool)
        return
    arrays = [a for a in inputs if isinstance(a, np.ndarray) and a.ndim]
    if all(a.shape == shape and a.flags.c_contiguous for a in arrays):
        flat_inputs = [(a.reshape(-1), True) if isinstance(a, np.ndarray) and a.ndim
                       else (a, False) for a in inputs]
        flat_full = [f.reshape(-1) if f is not None else None for f in full]
        _in_blocks(group, program, members, flat_inputs, flat_full, total, CHUNK_ELEMENTS,
                   (CHUNK_ELEMENTS,), pool, items=items)
        return
    shape, inputs, full = _merge_leading_dims(shape, inputs, full)
    rows = shape[0]
    inner = total // rows if rows else 0
    block = max(1, CHUNK_ELEMENTS // max(inner, 1))
    if rows <= 1 or block >= rows:
        _run_once(group, program, inputs, full, items, pool)
        return
    _in_blocks(group, program, members, [(a, _spans_rows(a, shape)) for a in inputs], full,
               rows, block, (block, *shape[1:]), pool, items=items)


def _run_rows(group: Any, program: Any, inputs: list, full: list,
              items: list | None, pool: Any) -> None:
    """A row group, in blocks of whole rows: the leading dims of S merged into one where
    every input allows it without a copy (a copy would change a reduction's summation
    order), each member's kernel (or compiled piece, ``items``) run on its block with
    its dims renumbered to match."""
    shape, r = group.shape, group.rows
    members = group.members
    inner = math.prod(shape[r:])
    if r == 0 or math.prod(shape[:r]) <= max(1, CHUNK_ELEMENTS // max(inner, 1)):
        _run_once(group, program, inputs, full, items, pool)
        return
    read = {a for _, args in program.steps[group.prologue:] for a in args}
    for merged in range(r, 0, -1):  # one dim needs no merge, so this always ends
        views = _rows_views(inputs, shape, merged, read)
        if views is not None:
            break
    rows = math.prod(shape[:merged])
    block = max(1, CHUNK_ELEMENTS // max(math.prod(shape[merged:]), 1))
    inputs = views
    full = [f.reshape((rows, *f.shape[merged:])) if f is not None else None for f in full]
    _in_blocks(group, program, [_block_message(m, merged, block) for m in members], inputs,
               full, rows, block, None, pool,
               [_block_message(m, merged, rows % block) for m in members] if rows % block else None,
               items)


def _run_once(group: Any, program: Any, inputs: list, full: list, items: list | None,
              pool: Any) -> None:
    """The whole group as one block."""
    scratch = _Scratch(group, program, full, group.members, pool, items=items)
    _evaluate(program, group, group.members, inputs, full, scratch, items)
    scratch.release(pool)


def _in_blocks(group: Any, program: Any, messages: list, inputs: list, full: list,
               rows: int, block: int, scratch_shape: tuple[int, ...] | None, pool: Any,
               last_messages: list | None = None, items: list | None = None) -> None:
    """Evaluate rows [0, rows) of every input (``(value, spans rows)``) and output in
    blocks of ``block`` rows. ``last_messages``: the members as a short last block runs
    them, where they differ. With compiled pieces, which let go of the GIL, the blocks
    are shared between the cores (NumPy kernels alone hold it too often to gain)."""
    starts = range(0, rows, block)
    parts = cores.share() if items is not None else 1
    if len(starts) < 2 * parts:
        parts = 1

    # Each part's buffers are taken from the pool here, on the device's worker: the pool
    # is not shared between threads.
    scratches = [_Scratch(group, program, full, messages, pool, scratch_shape, items)
                 for _ in range(parts)]

    def evaluate(starts: range, scratch: _Scratch) -> None:
        for start in starts:
            stop = min(start + block, rows)
            scratch.length = stop - start
            short = last_messages is not None and stop - start != block
            _evaluate(program, group, last_messages if short else messages,
                      [a[start:stop] if spans else a for a, spans in inputs],
                      [f[start:stop] if f is not None else None for f in full], scratch, items)

    share = -(-len(starts) // parts)
    compiled.in_parallel([lambda p=p: evaluate(starts[p * share:(p + 1) * share], scratches[p])
                          for p in range(parts)])
    for scratch in scratches:
        scratch.release(pool)


def _rows_views(inputs: list, shape: tuple[int, ...], m: int, read: set[int]) -> list | None:
    """Each input as (value, whether it spans the rows), with the leading ``m`` dims of
    ``shape`` seen as one: (rows, ...) where it spans them, its trailing dims alone where
    it broadcasts over all of them. None if some input would need a copy for that.
    Inputs not in ``read`` (read only by the prologue's views) stay as they are."""
    rows = math.prod(shape[:m])
    views = []
    for k, a in enumerate(inputs):
        if k not in read or not isinstance(a, np.ndarray) or not a.ndim:
            views.append((a, False))
            continue
        padded = (1,) * (len(shape) - a.ndim) + a.shape
        if all(d == 1 for d in padded[:m]):
            views.append((a.reshape(padded[m:]), False))
            continue
        if padded[:m] != shape[:m]:
            return None
        try:
            views.append((a.reshape((rows, *padded[m:]), copy=False), True))
        except ValueError:
            return None
    return views


def _block_message(member: Any, m: int, length: int) -> Any:
    """``member`` as it runs on a block of ``length`` rows: the leading ``m`` dims of its
    shape become one, and a reduction's dims move with them."""
    shape = (length, *member.shape[m:])
    if member.op in REDUCTIONS:
        dims = tuple(d - m + 1 for d in member.attrs[0])
        return msgspec.structs.replace(member, shape=shape, attrs=(dims, *member.attrs[1:]))
    return msgspec.structs.replace(member, shape=shape)


def _merge_leading_dims(shape: tuple[int, ...], inputs: list,
                        full: list) -> tuple[tuple[int, ...], list, list]:
    """Merge the most leading dims that every input either spans fully or broadcasts over.

    Blocks are cut along the first dim, so (8, 512, 4096) with a (8, 512, 1) input is
    best seen as (4096, 4096) with a (4096, 1) input: chunks of 8 rows fit in cache,
    where cutting the first dim alone gives 2M-element chunks.
    """
    ndim = len(shape)
    arrays = [a for a in inputs if isinstance(a, np.ndarray) and a.ndim]
    merge = 1
    for k in range(2, ndim):
        if all(_leading_kind(a, shape, k) is not None for a in arrays):
            merge = k
        else:
            break
    if merge == 1:
        return shape, inputs, full
    rows = math.prod(shape[:merge])
    merged = (rows, *shape[merge:])
    new_inputs = []
    for a in inputs:
        if isinstance(a, np.ndarray) and a.ndim:
            padded = (1,) * (ndim - a.ndim) + a.shape
            if _leading_kind(a, shape, merge) == "full":
                a = a.reshape((rows, *padded[merge:]))
            else:
                a = a.reshape(padded[merge:])
        new_inputs.append(a)
    return merged, new_inputs, [f.reshape(merged) if f is not None else None for f in full]


def _leading_kind(a: np.ndarray, shape: tuple[int, ...], k: int) -> str | None:
    """"full" if ``a`` spans the first ``k`` dims of ``shape``, "broadcast" if it is 1 there."""
    padded = (1,) * (len(shape) - a.ndim) + a.shape
    head = padded[:k]
    if head == shape[:k]:
        return "full"
    if all(d == 1 for d in head):
        return "broadcast"
    return None


def _spans_rows(a: Any, shape: tuple[int, ...]) -> bool:
    return isinstance(a, np.ndarray) and a.ndim == len(shape) and a.shape[0] == shape[0]


class _Scratch:
    """Chunk buffers for the members a group does not materialize, shared by liveness:
    a member's buffer goes back to the free list after the last member that reads it
    (through any view of it) has run, so a chain keeps a few buffers in cache, not one
    per member. A member never writes into a buffer one of its own inputs holds.

    ``shape``: every buffer's shape (chunks of one shape), or None for each member's
    block shape as its message in ``messages`` gives it; ``length``: the rows of the
    current block. The buffers come from the device's pool (``release`` gives them
    back), so a training loop's groups reuse the same few.
    A compiled piece (in ``items``) is one step: its members' reads count at its last
    member (so it never writes into a buffer it reads), and members whose values stay
    inside it need no buffer.
    """

    __slots__ = ("assign", "buffers", "length")

    def __init__(self, group: Any, program: Any, full: list, messages: list, pool: Any,
                 shape: tuple[int, ...] | None = None, items: list | None = None) -> None:
        members, n, prologue = group.members, len(group.inputs), group.prologue
        steps = program.steps[prologue:]
        read_at: dict[int, int] = {}  # a piece's member → the step its reads count at
        in_registers: set[int] = set()
        for item in items or ():
            if type(item) is Piece:
                read_at.update((j, item.indices[-1] - prologue) for j in item.indices)
                in_registers.update(set(item.indices) - set(item.stores))
        root: dict[int, int] = {}  # a view's slot → the slot whose buffer it shows
        last: dict[int, int] = {}  # slot → the last step reading it, through views
        for step, (j, args) in enumerate(steps):
            for a in args:
                last[root.get(a, a)] = read_at.get(j, step)
            if members[j].op in _VIEWS and full[j] is None:
                root[n + j] = root.get(args[0], args[0])
        self.assign: dict[int, int] = {}  # member → buffer
        free: dict[tuple, list[int]] = {}
        keys: list[tuple] = []
        self.buffers: list[np.ndarray] = []
        frees_after: dict[int, list[tuple]] = {}
        for step, (j, _) in enumerate(steps):
            member = members[j]
            if full[j] is None and member.op not in _VIEWS and j not in in_registers:
                # The member's whole shape: in one unblocked run a (1,) value and a (700,)
                # one both end in (); in blocks, one shape is one block shape.
                key = (member.dtype, member.shape)
                ids = free.get(key)
                buffer = ids.pop() if ids else len(keys)
                if buffer == len(keys):
                    keys.append(key)
                    self.buffers.append(pool.lend(shape or messages[j].shape, NP[member.dtype]))
                self.assign[j] = buffer
                frees_after.setdefault(max(last.get(n + j, step), step), []).append((key, buffer))
            for key, buffer in frees_after.pop(step, ()):
                free.setdefault(key, []).append(buffer)
        self.length: int | None = None

    def dest(self, j: int) -> np.ndarray | None:
        """Where member ``j`` writes this block (None for a view, which writes nothing)."""
        buffer = self.assign.get(j)
        if buffer is None:
            return None
        array = self.buffers[buffer]
        return array if self.length is None else array[:self.length]

    def release(self, pool: Any) -> None:
        """Give every buffer back to ``pool`` (which keeps only those no one else holds)."""
        buffers, self.buffers = self.buffers, []
        while buffers:
            array = buffers.pop()  # a local, as give_back expects of its caller
            pool.give_back(array)


def _evaluate(program: Any, group: Any, messages: list, inputs: list, outputs: list,
              scratch: _Scratch, items: list | None = None) -> None:
    """One block: every member's kernel after the prologue (or its compiled piece),
    writing the outputs it materializes (``outputs[j]`` not None) in place and the rest
    into scratch."""
    slots = list(inputs)
    chunk_pool = _ChunkPool()
    steps = program.steps
    for item in items if items is not None else range(group.prologue, len(steps)):
        if type(item) is not Piece:
            slots.append(_run_member(messages[item], steps[item][1], slots, outputs[item],
                                     scratch.dest(item), chunk_pool))
            continue
        dests = [outputs[j] if outputs[j] is not None else scratch.dest(j)
                 for j in item.stores]
        if not dests:  # nothing it computes is read or kept
            slots += [None] * len(item.indices)
        elif item.run(messages, [slots[a] for a in item.reads], dests):
            stored = dict(zip(item.stores, dests))
            slots += [stored.get(j) for j in item.indices]
        else:  # it did not compile: its members one by one, in buffers of their own
            stored = dict(zip(item.stores, dests))
            for j in item.indices:
                dest = stored.get(j)
                slots.append(_run_member(messages[j], steps[j][1], slots, outputs[j],
                                         dest if dest is not None else
                                         np.empty(dests[0].shape, NP[messages[j].dtype]),
                                         chunk_pool))


def _run_member(member: Any, args: tuple[int, ...], slots: list, output: np.ndarray | None,
                scratch: np.ndarray | None, chunk_pool: _ChunkPool) -> np.ndarray:
    """One member's NumPy kernel on this block, into ``output`` if it is kept, else into
    ``scratch`` (None for a view, which writes nothing)."""
    dest = output if output is not None else scratch
    chunk_pool.buffer = dest
    result = KERNELS[member.op](member, chunk_pool, *[slots[a] for a in args])
    if result is not dest and output is not None:
        np.copyto(output, result, casting="unsafe")
        return output
    return result
