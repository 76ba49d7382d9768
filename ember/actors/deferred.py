"""Checks a backend left on the device, and the values they may have spoiled.

A GPU kernel cannot raise, and reading an index tensor's range back before a gather
stalls the worker while the GPU idles (6-8 ms per MLP step on an H200: cross_entropy's
gather and its gradient's scatter_add). A backend with ``deferred`` records such checks
on the device instead and lists each new one in ``deferred.created``; its gathers wrap
a bad value into range meanwhile (never an out-of-bounds access).

The device actor taints the outputs of the op that made a check, and everything later
computed from a tainted value, with the pending check. Reading a tainted value (a
fetch, an await, a transfer out) or a sync resolves every pending check with one read
(``deferred.resolve``); a failed check fails every value it tainted, whose readers get
``KernelError`` naming the op, its call site and the bad index, as on the CPU. With
more than ``MAX_PENDING`` checks pending they resolve at once too, so the bookkeeping
stays bounded while a program reads nothing.
"""

from __future__ import annotations

from typing import Any

MAX_PENDING = 256
_CLEAN: frozenset = frozenset()


class Taints:
    """Pending checks of one device and the values each taints (worker-owned)."""

    def __init__(self, deferred: Any) -> None:
        self.deferred = deferred
        self.created: list = deferred.created  # appended to by the backend's kernels
        self.of: dict[int, frozenset] = {}
        self.pending: dict[Any, tuple[str, tuple[str, int]]] = {}  # check -> (op, site)
        self.captured: list | None = None  # checks made while a step is being captured

    def mark(self, inputs: tuple[int, ...], outs: Any, op: str,
             site: tuple[str, int]) -> None:
        """Taint ``outs`` of an op that ran: with the checks it made, and its inputs'."""
        of = self.of
        found = [of[i] for i in inputs if i in of]
        created = self.created
        if created:
            for check in created:
                self.pending[check] = (op, site)
            if self.captured is not None:
                self.captured.extend(created)
            found.append(frozenset(created))
            created.clear()
        if not found:
            return
        taint = found[0] if len(found) == 1 else _CLEAN.union(*found)
        for out in outs:
            of[out] = taint

    def replayed(self, checks: list, inputs: list[int], outputs: dict[int, frozenset]) -> None:
        """A graph replayed: its captured ``checks`` are pending again; each output id is
        tainted by the captured checks it was (``outputs``) and by every input's taint."""
        for check, origin in checks:
            self.pending[check] = origin
        of = self.of
        found = [of[i] for i in inputs if i in of]
        carried = _CLEAN.union(*found) if found else _CLEAN
        for out, taint in outputs.items():
            taint = taint | carried
            if taint:
                of[out] = taint

    def too_many(self) -> bool:
        return len(self.pending) > MAX_PENDING and self.captured is None

    def resolve(self) -> dict[int, tuple[str, tuple[str, int], Exception]]:
        """Resolve every pending check and forget every taint; returns the ids of the
        values a failed check spoiled, each with that check's (op, site, cause)."""
        causes = self.deferred.resolve(list(self.pending))  # raising, it leaves the taints
        pending, self.pending = self.pending, {}
        of, self.of = self.of, {}
        if not causes:
            return {}
        failed = {}
        for tensor_id, taint in of.items():
            for check in taint:
                cause = causes.get(check)
                if cause is not None:
                    failed[tensor_id] = (*pending[check], cause)
                    break
        return failed
