"""Which members a fused group's kernel stores. Pure Python (no CuPy), tested on the CPU.

A group must store the members whose handles outlive its batch or that later messages
read; which those are depends on where the worker's batch ended, hence on timing. Each
new pattern would be a kernel compiled and autotuned mid-run (on the H200, an encoder
layer's add+relu group met a new pattern after 50 steps: 0.4 s; an MLP step with Adam
compiled 8 kernels in 30 steps). So a pattern met for the first time takes the widest
kernel of its structure so far (the union of every pattern met), which writes a few more
outputs, dropped at once; a pattern met ``EXACT_AFTER`` times is a steady state and gets a
kernel of its own, compiled then. An encoder layer's softmax wrote the scaled scores, met
once in a warm-up batch cut mid-attention, in every later step: a quarter of its traffic
(its saved output, stored twice, another quarter: see below).

An ``alias`` of a stored member (an autodiff node's saved output) is the same values: its
output shares that member's buffer instead of a second store.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

# Meetings of a pattern after which it gets a kernel of its own (a guess: a batch edge
# falling the same odd way three times is rare; a training loop meets its pattern every
# step).
EXACT_AFTER = 3
# Structures (and patterns) remembered at most; past it, patterns are taken as they come.
_MAX_REMEMBERED = 4096


class StoreChoice:
    """The stores of one device's group kernels, by structure (on its worker)."""

    def __init__(self) -> None:
        self._widest: dict[tuple, tuple[bool, ...]] = {}
        self._met: dict[tuple, int] = {}

    def stored(self, structure: tuple, needed: tuple[bool, ...],
               capturing: Callable[[], bool] = lambda: False) -> tuple[bool, ...]:
        """The members to store for a group of ``structure`` that ``needed`` these: a
        superset of ``needed``. While ``capturing()`` (a CUDA graph: nothing may compile)
        a pattern does not get a kernel of its own yet."""
        wide = self._widest.get(structure)
        if wide is None or len(wide) != len(needed):
            if len(self._widest) < _MAX_REMEMBERED:
                self._widest[structure] = needed
            return needed
        if wide == needed:
            return needed
        if any(n and not w for w, n in zip(wide, needed)):
            wide = self._widest[structure] = tuple(w or n for w, n in zip(wide, needed))
            return wide
        key = (structure, needed)
        met = self._met.get(key, 0)
        if met >= EXACT_AFTER:
            return needed
        if len(self._met) < _MAX_REMEMBERED and not capturing():
            self._met[key] = met = met + 1
        return needed if met >= EXACT_AFTER else wide


def shared_aliases(members: Sequence[Any], steps: Sequence[tuple[int, tuple[int, ...]]],
                   n_inputs: int, stored: Sequence[bool]) -> dict[int, int]:
    """{alias member: the member whose buffer it shares} for stored aliases of stored
    members of the same shape and dtype (member indices; ``steps`` read slots
    ``n_inputs + member``)."""
    shared: dict[int, int] = {}
    for j, args in steps:
        member = members[j]
        if member.op != "alias" or not stored[j] or args[0] < n_inputs:
            continue
        source = args[0] - n_inputs
        source = shared.get(source, source)
        origin = members[source]
        if stored[source] and origin.shape == member.shape and origin.dtype == member.dtype:
            shared[j] = source
    return shared
