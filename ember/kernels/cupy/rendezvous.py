"""Where the ranks of one collective meet, so that all of them are issued together.

Every device's worker thread reaches its part of a collective on its own time. A
collective issued rank by rank from separate threads hangs every GPU that issued it
if one rank never does (its inputs failed, its worker is behind a long compile), so
no rank issues anything alone: each one arrives with what it contributes, the last
to arrive issues the whole collective for every rank at once, and the others wait for
it. A rank that does not arrive within the timeout abandons the round: the waiting
ranks raise (their outputs fail, their devices carry on) and a late arrival raises
too, so nothing is ever half issued.

Pure Python (no CuPy): the NCCL kernels pass in what issuing means.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ember.kernels.worker_hooks import waiting_on_others

# Seconds a rank waits for the others. Generous because a rank's first step may spend
# a minute compiling kernels while the others wait (a guess from H200 cold starts).
DEFAULT_TIMEOUT_S = float(os.environ.get("EMBER_COLLECTIVE_TIMEOUT_S", "120"))


def _wait_for_others(cond: threading.Condition, done: Callable[[], bool],
                     timeout_s: float) -> bool:
    # A caller waiting for this worker's batch (turns, device_actor.py) may hold the
    # other ranks' parts: it goes on meanwhile.
    with waiting_on_others():
        return cond.wait_for(done, timeout_s)


class CollectiveError(RuntimeError):
    """A collective could not run: a rank did not arrive in time, or issuing it failed."""


@dataclass
class _Round:
    parts: dict[int, Any] = field(default_factory=dict)
    done: bool = False
    error: BaseException | None = None


class Rendezvous:
    """Rounds of one group of ``size`` ranks, each round named by an id all ranks share."""

    def __init__(self, size: int, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.size = size
        self.timeout_s = timeout_s
        self._cond = threading.Condition()
        self._rounds: dict[int, _Round] = {}
        self._abandoned: set[int] = set()
        self.issued = 0

    def arrive(self, round_id: int, rank: int, part: Any,
               issue: Callable[[list[Any]], None]) -> None:
        """Contribute ``part`` as ``rank`` to round ``round_id``; return once it is issued.

        The last rank to arrive calls ``issue(parts in rank order)`` while the others
        wait. Raises ``CollectiveError`` if the round was abandoned, timed out, or
        ``issue`` raised (every rank of the round gets that error).
        """
        if not 0 <= rank < self.size:
            raise CollectiveError(f"rank {rank} is outside a group of {self.size}")
        with self._cond:
            if round_id in self._abandoned:
                raise CollectiveError(f"collective round {round_id}: the other ranks gave up "
                                      f"waiting for rank {rank}")
            state = self._rounds.setdefault(round_id, _Round())
            if rank in state.parts:
                raise CollectiveError(f"collective round {round_id}: rank {rank} arrived twice")
            state.parts[rank] = part
            if len(state.parts) == self.size:
                self._issue(round_id, state, issue)
            elif not _wait_for_others(self._cond, lambda: state.done, self.timeout_s):
                missing = sorted(set(range(self.size)) - set(state.parts))
                state.error = CollectiveError(
                    f"collective round {round_id}: rank(s) {missing} did not arrive within "
                    f"{self.timeout_s:g} s (their inputs failed, or their device is stuck); "
                    f"EMBER_COLLECTIVE_TIMEOUT_S sets the wait")
                state.done = True
                del self._rounds[round_id]
                self._abandoned.add(round_id)
                self._cond.notify_all()
            error = state.error
            if isinstance(error, CollectiveError):
                raise CollectiveError(str(error))
            if error is not None:
                raise CollectiveError(f"collective round {round_id} failed: "
                                      f"{type(error).__name__}: {error}") from error

    def _issue(self, round_id: int, state: _Round, issue: Callable[[list[Any]], None]) -> None:
        # Called with the condition held: no rank of this round runs until it is issued.
        del self._rounds[round_id]
        try:
            issue([state.parts[k] for k in range(self.size)])
            self.issued += 1
        except Exception as exc:
            state.error = exc
        state.done = True
        self._cond.notify_all()
