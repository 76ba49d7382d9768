"""The CPU executor of fused groups: blocked evaluation in cache-sized chunks.

Each member runs its ordinary NumPy kernel, but on one chunk of the group's
output at a time, writing into a chunk buffer that stays in cache; only the
outputs the group must materialize get full-size buffers (from the pool).
The arithmetic is the unfused kernels' own, element for element, so fused
and unfused results are identical.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember.kernels.numpy.table import KERNELS, NP

# Elements per chunk: a few float32 chunk buffers fit in a core's L2 (a guess, tuned
# on custom_gelu here: 16K-64K elements all run within a few percent).
CHUNK_ELEMENTS = 1 << 15
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
    shape = group.shape
    members = group.members
    full = [pool.empty(shape, NP[m.dtype]) if keep else None
            for m, keep in zip(members, program.materialize)]
    total = math.prod(shape)
    if total <= CHUNK_ELEMENTS or not shape:
        _evaluate(program, members, inputs, full, None)
        return _materialized(members, full)
    arrays = [a for a in inputs if isinstance(a, np.ndarray) and a.ndim]
    if all(a.shape == shape for a in arrays):
        flat_inputs = [a.reshape(-1) if isinstance(a, np.ndarray) and a.ndim else a
                       for a in inputs]
        flat_full = [f.reshape(-1) if f is not None else None for f in full]
        scratch = [None] * len(members)
        for start in range(0, total, CHUNK_ELEMENTS):
            stop = min(start + CHUNK_ELEMENTS, total)
            _evaluate(program, members,
                      [a[start:stop] if isinstance(a, np.ndarray) and a.ndim else a
                       for a in flat_inputs],
                      [f[start:stop] if f is not None else None for f in flat_full],
                      (scratch, (CHUNK_ELEMENTS,), stop - start))
        return _materialized(members, full)
    stored = full  # the full-shape arrays to return; the blocks below may see them merged
    shape, inputs, full = _merge_leading_dims(shape, inputs, full)
    rows = shape[0]
    inner = total // rows if rows else 0
    block = max(1, CHUNK_ELEMENTS // max(inner, 1))
    if rows <= 1 or block >= rows:
        _evaluate(program, members, inputs, full, None)
        return _materialized(members, stored)
    scratch = [None] * len(members)
    for start in range(0, rows, block):
        stop = min(start + block, rows)
        _evaluate(program, members,
                  [a[start:stop] if _spans_rows(a, shape) else a for a in inputs],
                  [f[start:stop] if f is not None else None for f in full],
                  (scratch, (block, *shape[1:]), stop - start))
    return _materialized(members, stored)


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


def _evaluate(program: Any, members: tuple, inputs: list, outputs: list,
              scratch_spec: tuple | None) -> None:
    """One chunk: every member's kernel, writing materialized outputs in place."""
    slots = list(inputs)
    chunk_pool = _ChunkPool()
    for (j, args), keep in zip(program.steps, program.materialize):
        member = members[j]
        if keep:
            dest = outputs[j]
        elif scratch_spec is None:
            dest = np.empty(member.shape, NP[member.dtype])
        else:
            buffers, shape, length = scratch_spec
            if buffers[j] is None:
                buffers[j] = np.empty(shape, NP[member.dtype])
            dest = buffers[j][:length]
        chunk_pool.buffer = dest
        result = KERNELS[member.op](member, chunk_pool, *[slots[a] for a in args])
        if result is not dest and keep:
            np.copyto(dest, result, casting="unsafe")
            result = dest
        slots.append(result)


def _materialized(members: tuple, full: list) -> list[tuple[int, np.ndarray]]:
    return [(m.out, f) for m, f in zip(members, full) if f is not None]
