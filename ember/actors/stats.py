"""``em.stats()``: immutable counters of the device actors."""

from __future__ import annotations

import msgspec


class Stats(msgspec.Struct, frozen=True):
    """Counters of one device actor, or totals over all of them.

    Fields the fusion and autotune layers fill stay 0 on a backend without them.
    """

    ops_submitted: int = 0
    ops_executed: int = 0
    kernels_launched: int = 0
    ops_fused: int = 0
    groups: int = 0
    plan_cache_hits: int = 0
    autotune_hits: int = 0
    autotune_misses: int = 0
    bytes_held: int = 0
    peak_bytes_held: int = 0  # the most bytes_held has been since the device started
    queue_depth: int = 0
    ops_in_flight: int = 0
    buffers_pooled: int = 0
    bytes_pooled: int = 0
    batches: int = 0

    def as_dict(self) -> dict[str, int]:
        return {f: getattr(self, f) for f in self.__struct_fields__}

    def __add__(self, other: Stats) -> Stats:
        return Stats(**{f: getattr(self, f) + getattr(other, f) for f in self.__struct_fields__})


class ActorInfo(msgspec.Struct, frozen=True):
    """One live actor (``em.list_actors()``): its name, kind (``"device"``, ``"autodiff"``,
    ``"optimizer"`` or ``"loader"``), the thread that runs it (``""`` before it starts),
    the messages it has been sent and how many wait in its mailbox.

    Example:
        >>> _ = em.zeros(1).numpy()
        >>> info = next(a for a in em.list_actors() if a.name == "cpu:0")
        >>> info.kind, info.messages > 0
        ('device', True)
    """

    name: str
    kind: str
    thread: str
    messages: int
    queue_depth: int
