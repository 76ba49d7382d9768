"""The rendezvous NCCL collectives meet at (no GPU needed): the last rank issues every
rank's part at once, a missing rank makes the others raise instead of hang."""

from __future__ import annotations

import pytest

from ember.kernels.cupy.rendezvous import CollectiveError, Rendezvous
from tests.threads import run_in_threads


def _ranks(rendezvous: Rendezvous, round_id: int, ranks: list[int], issue) -> dict[int, object]:
    """Run ``arrive`` for ``ranks`` on threads of their own; what each got (None or error)."""
    results: dict[int, object] = {}

    def arrive(rank: int) -> None:
        try:
            rendezvous.arrive(round_id, rank, f"part{rank}", issue)
            results[rank] = None
        except CollectiveError as exc:
            results[rank] = exc

    run_in_threads(arrive, ranks, 10, "a rank hung")
    return results


def test_last_rank_issues_all_parts_in_rank_order_once():
    rendezvous = Rendezvous(3, timeout_s=10)
    issued = []
    results = _ranks(rendezvous, 1, [2, 0, 1], issued.append)
    assert issued == [["part0", "part1", "part2"]]
    assert results == {0: None, 1: None, 2: None}
    assert rendezvous.issued == 1


def test_rounds_are_independent():
    rendezvous = Rendezvous(2, timeout_s=10)
    issued = []
    for round_id in (7, 8):
        _ranks(rendezvous, round_id, [0, 1], issued.append)
    assert len(issued) == 2


def test_a_missing_rank_times_out_the_others_and_nothing_is_issued():
    rendezvous = Rendezvous(3, timeout_s=0.2)
    issued = []
    results = _ranks(rendezvous, 1, [0, 1], issued.append)
    assert issued == []
    for rank in (0, 1):
        assert "rank(s) [2] did not arrive within 0.2 s" in str(results[rank])
    with pytest.raises(CollectiveError, match="gave up waiting for rank 2"):
        rendezvous.arrive(1, 2, "late", issued.append)
    assert issued == []


def test_an_issue_failure_reaches_every_rank():
    def issue(parts):
        raise OSError("NCCL said no")

    results = _ranks(Rendezvous(2, timeout_s=10), 1, [0, 1], issue)
    for rank in (0, 1):
        assert "OSError: NCCL said no" in str(results[rank])


def test_bad_ranks_are_refused():
    rendezvous = Rendezvous(2, timeout_s=0.1)
    with pytest.raises(CollectiveError, match="outside a group of 2"):
        rendezvous.arrive(1, 2, None, lambda parts: None)
