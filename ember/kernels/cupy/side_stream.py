"""Products side by side inside a captured step: which stream each op of a capture runs on.

Most of a training step's matrix products on an H200 fill less than a wave of the GPU
(an encoder layer's 2048×768 products are 96 tiles of 128×128 on 132 SMs), and a
backward pass makes them in independent pairs: a linear's input gradient G·W, its weight
gradient Gᵀ·X and its bias's column sum read the same G and not each other. Two of them
on two streams finish sooner than one after the other (``benchmarks/probe_streams.py``).
A CUDA graph keeps the two branches, so its replays get the overlap for nothing; eager
runs stay on one stream, where the events would cost host time that eager steps lack.

The rule (``SideBySide``, pure Python): a product that follows a product run on the main
stream, and reads no memory that product wrote, runs on the side stream, starting from
the point just before that product (the fork); so do the products after it that still
read nothing the main one wrote (in order, on the side stream). Any other op joins
first: the main stream waits for the side stream's work. So memory either stream frees
is only reused after the work that read it: CuPy's pool hands a freed block out again
only to the stream that allocated it, the main stream allocates again only after the
join, and a value dropped while a fork is open is held until the join (the forked main
product may still be reading it when the next side product allocates).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

# Ops whose CUDA kernels are cuBLAS products (table.py: matmul; a float32 sum or mean
# over leading dims is ones @ x).
PRODUCTS = frozenset({"matmul", "sum", "mean"})

Span = tuple[int, int]


def overlaps(reads: Sequence[Span], written: Sequence[Span]) -> bool:
    """Whether any [start, end) byte range of ``reads`` meets one of ``written``."""
    return any(start < w_end and w_start < end
               for start, end in reads for w_start, w_end in written)


class SideBySide:
    """One capture's placement of ops on the main and side streams.

    ``streams`` does the stream work: ``fork()`` marks the main stream's current point,
    ``side()`` is a context in which launches go to the side stream (which first waits for
    the fork point), ``join()`` makes the main stream wait for everything the side stream
    has been given. ``span(array)`` is the byte range of the allocation an array lives in.
    """

    def __init__(self, streams: Any, span: Callable[[Any], Span]) -> None:
        self._streams = streams
        self._span = span
        self._written: list[Span] | None = None  # the forked product's outputs; None: no fork
        self._side_busy = False
        self._held: list = []  # values dropped while the fork is open
        self.side_ops = 0  # ops this capture ran on the side stream

    def run(self, op: str, inputs: Sequence[Any], launch: Callable[[], Any]) -> Any:
        """``launch()``'s result, run on the stream the rule picks for ``op`` on ``inputs``."""
        span = self._span
        if (self._written is not None and op in PRODUCTS
                and not overlaps([span(x) for x in inputs], self._written)):
            with self._streams.side(first=not self._side_busy):
                result = launch()
            self._side_busy = True
            self.side_ops += 1
            return result
        self.join()
        if op not in PRODUCTS:
            return launch()
        self._streams.fork()
        result = launch()
        outputs = result if isinstance(result, tuple) else (result,)
        self._written = [span(x) for x in outputs]
        return result

    def hold(self, value: Any) -> None:
        """Keep a dropped ``value`` until the join: a side product issued after the drop
        could otherwise be handed its memory while the forked main product still reads it."""
        if self._written is not None:
            self._held.append(value)

    def join(self) -> None:
        """End the fork: the main stream waits for the side stream's work, if it has any;
        the values dropped meanwhile are let go."""
        if self._side_busy:
            self._side_busy = False
            self._streams.join()
        self._written = None
        self._held.clear()
