"""``run_in_threads``: the tests' way to run one function on several threads at once."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any


def run_in_threads(work: Callable[[Any], None], args: Iterable[Any], timeout_s: float,
                   hung: str = "a thread never finished") -> None:
    """Run ``work(arg)`` for each of ``args``, each on a thread of its own, all started
    before any is joined. Fails with ``hung`` if a thread outlives ``timeout_s`` (nothing
    may hang), and re-raises the first exception a thread raised."""
    errors: list[BaseException] = []

    def guarded(arg: Any) -> None:
        try:
            work(arg)
        except BaseException as exc:  # re-raised on the test's thread below
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(arg,)) for arg in args]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    assert not any(t.is_alive() for t in threads), hung
    if errors:
        raise errors[0]
