"""Autotune: pick the fastest of a few kernel variants, once per structure and size class.

Backend-independent. A backend names an op family ("fused_elementwise", "rows", ...),
the structure the variants compute (its cache key, without sizes), the sizes, the
candidate variants (JSON-serializable values: ints, strings, tuples of them) and a
function that runs one candidate. On the first use of a (family, structure, size
class) every candidate runs under the backend's timer (which synchronizes its stream);
the winner is kept in memory and on disk under the ember cache, in one file per scope
(backend, device name, driver and compiler versions, ember version), so a warm process
start takes it without timing. Sizes are anchored to powers of two: one winner
serves a size class. ``EMBER_AUTOTUNE=0`` takes the first (default) candidate untimed.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

from ember.kernels.cache import cache_dir

T = TypeVar("T")


def enabled() -> bool:
    """Whether autotuning is on (``EMBER_AUTOTUNE`` unset or anything but 0)."""
    return os.environ.get("EMBER_AUTOTUNE", "1") != "0"


def anchor(size: int) -> int:
    """The power of two at or above ``size`` (0 stays 0): the size class a winner serves."""
    return 1 << (size - 1).bit_length() if size > 0 else 0


def _plain(value: Any) -> Any:
    """A candidate as JSON gives it back (tuples become lists), for comparison."""
    return json.loads(json.dumps(value))


class Autotuner:
    """Winners per (family, structure, size class) for one scope.

    Args:
        scope: what winners are valid for: backend, device name, driver / compiler
            versions, ember version. Names the file under ``<ember cache>/autotune``.
        timer: ``timer(run) -> seconds``: times ``run()`` (warm-up, stream synchronized).
        path: the file; default derived from ``scope``.
    """

    def __init__(self, scope: str, timer: Callable[[Callable[[], None]], float],
                 path: str | None = None) -> None:
        self.scope = scope
        self.timer = timer
        digest = hashlib.sha256(scope.encode()).hexdigest()[:16]
        self.path = path or os.path.join(cache_dir("autotune"), f"{digest}.json")
        self._winners: dict[str, Any] | None = None  # loaded on first use
        self.hits = 0
        self.misses = 0

    def pick(self, family: str, structure: Hashable, sizes: Sequence[int],
             candidates: Sequence[T], run: Callable[[T], None]) -> T:
        """The fastest of ``candidates`` for ``structure`` at ``sizes``; ``run(candidate)``
        runs one (it may run several times, so it must not change its inputs)."""
        if not candidates:
            raise ValueError(f"autotune {family}: no candidates")
        if len(candidates) == 1 or not enabled():
            return candidates[0]
        key = family + ":" + hashlib.sha256(
            repr((structure, tuple(anchor(s) for s in sizes))).encode()).hexdigest()[:32]
        winners = self._load()
        found = winners.get(key)
        if found is not None:
            for candidate in candidates:
                if _plain(candidate) == found:
                    self.hits += 1
                    return candidate
        self.misses += 1
        times = [self.timer(lambda c=c: run(c)) for c in candidates]
        best = candidates[times.index(min(times))]
        winners[key] = _plain(best)
        self._save(key, winners[key])
        return best

    def _load(self) -> dict[str, Any]:
        if self._winners is None:
            self._winners = _read(self.path)
        return self._winners

    def _save(self, key: str, value: Any) -> None:
        """Merge into the file another process may have written meanwhile; replace it
        atomically, so a reader never sees half a file."""
        merged = _read(self.path)
        merged[key] = value
        folder = os.path.dirname(self.path)
        try:
            os.makedirs(folder, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=folder, suffix=".tmp")
            with os.fdopen(handle, "w") as file:
                json.dump({"scope": self.scope, "winners": merged}, file)
            os.replace(temporary, self.path)
        except OSError:
            pass  # a read-only cache only costs the next process a re-tune


def _read(path: str) -> dict[str, Any]:
    try:
        with open(path) as file:
            data = json.load(file)
    except (OSError, ValueError):
        return {}
    winners = data.get("winners") if isinstance(data, dict) else None
    return dict(winners) if isinstance(winners, dict) else {}
