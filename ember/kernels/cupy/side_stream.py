"""Products side by side inside a captured step: which of two streams each op of a capture
runs on, and which waits between the streams keep it correct.

Most of a training step's matrix products on an H200 fill less than a wave of the GPU
(an encoder layer's 2048×768 products are 96 tiles of 128×128 on 132 SMs), and a
backward pass makes them in independent pairs: a linear's input gradient G·W and its
weight gradient Gᵀ·X read the same G and not each other. Two of them on two streams
finish sooner than one after the other (``benchmarks/probes/probe_streams.py``). A CUDA graph
keeps the two branches, so its replays get the overlap for nothing; eager runs stay on
one stream, where the events would cost host time that eager steps lack.

``TwoStreams`` (pure Python) places each op as it comes, by data flow:

- a product goes to the stream where it would start first, by an estimate of each
  stream's queued work (a product's multiply-adds, an op's bytes) and of when its inputs
  are ready; a view op goes where its input was made (if it copies, the copy reads it
  there); every other op runs on the main stream;
- before an op runs, its stream waits for the exact points of the other stream that
  made its inputs (an event recorded after every op), nothing more;
- memory: CuPy's pool hands a freed block out again only to the stream that allocated
  it. A value dropped while the other stream may still read it is held until its own
  stream has waited past that read, so its memory is never handed out early. CUDA
  kernels here write only their fresh outputs (generated kernels donate no inputs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

MAIN, SIDE = 0, 1
# Ops whose CUDA kernels are cuBLAS products (table.py: matmul; a float32 sum or mean
# over leading dims is ones @ x), and ops whose results are views of their input.
PRODUCTS = frozenset({"matmul", "sum", "mean"})
VIEWS = frozenset({"reshape", "permute", "expand", "alias"})
# Rough H200 rates for the placement estimate (float32 products, memory-bound kernels)
# and a launch's fixed cost; only their proportions matter.
_FLOPS_PER_S = 45e12
_BYTES_PER_S = 3.5e12
_KERNEL_S = 3e-6
# Dropped values held past this many bytes: both streams wait for each other, and all go.
HOLD_LIMIT = 256 << 20
# Where a buffer made before the capture comes from: the main stream's start.
_BEFORE = (MAIN, 0, 0.0)


def seconds(op: str, inputs: Sequence[Any], shape: tuple[int, ...] | None = None) -> float:
    """An estimate of ``op``'s GPU time on ``inputs`` (objects with shape and nbytes) making
    a result of ``shape``. A product's inner size is what its first operand holds per
    output row (either operand may be read transposed)."""
    if op == "matmul" and len(inputs) == 2 and shape:
        a = inputs[0].shape
        rows = shape[-2] if len(shape) > 1 and len(a) > 1 else 1
        inner = math.prod(a[-2:]) // max(rows, 1)
        return _KERNEL_S + 2 * math.prod(shape) * inner / _FLOPS_PER_S
    return _KERNEL_S + sum(x.nbytes for x in inputs) / _BYTES_PER_S


class TwoStreams:
    """One capture's placement of ops on the main and side streams.

    ``streams`` does the stream work: ``record(s)`` records an event after the work given
    to stream ``s`` so far and returns it, ``wait(s, event)`` makes ``s`` wait for one,
    and ``on(s)`` is a context in which launches go to stream ``s``. ``key(array)`` names
    the allocation an array lives in (a view: its base's).
    """

    def __init__(self, streams: Any, key: Callable[[Any], int]) -> None:
        self._streams = streams
        self._key = key
        # Per stream: the events after each of its ops (point p: events[s][p]; point 0 is
        # the capture's start on the main stream, the side stream's ops count from 1),
        # when its queued work ends (estimated), and the other stream's last point it has
        # waited for (-1: the side stream has not joined the capture yet).
        self._events: list[list[Any]] = [[streams.record(MAIN)], [None]]
        self._busy = [0.0, 0.0]
        self._waited = [0, -1]
        self._made: dict[int, tuple[int, int, float]] = {}  # key: (stream, point, ready at)
        self._read: dict[int, list[int]] = {}  # key: last point reading it, per stream
        self._held: list[tuple[Any, int, int]] = []  # (value, its stream, other's point)
        self._held_bytes = 0
        self.side_ops = 0

    def run(self, op: str, inputs: Sequence[Any], launch: Callable[[], Any],
            outputs: Callable[[Any], Sequence[Any]] | None = None,
            shape: tuple[int, ...] | None = None) -> Any:
        """``launch()``'s result, run on the stream ``op`` is placed on; ``outputs(result)``
        lists the arrays it made (default: the result, or a tuple of them); ``shape``: the
        result's, if one."""
        keys = [self._key(x) for x in inputs]
        made = self._made
        sources = [made.get(k, _BEFORE) for k in keys]
        ready = max((at for _, _, at in sources), default=0.0)
        if op in PRODUCTS:
            cost = seconds(op, inputs, shape)
            starts = [max(self._busy[s], ready) for s in (MAIN, SIDE)]
            stream = SIDE if starts[SIDE] < starts[MAIN] else MAIN
        elif op in VIEWS and sources:
            stream, cost = sources[0][0], 0.0
        else:
            stream, cost = MAIN, seconds(op, inputs)
        other = 1 - stream
        needed = max((point for s, point, _ in sources if s == other), default=-1)
        if stream == SIDE:  # it joins the capture at the main stream's start at least
            needed = max(needed, 0)
        if needed > self._waited[stream]:
            self._wait(stream, needed)
        with self._streams.on(stream):
            result = launch()
        finish = max(self._busy[stream], ready) + cost
        self._busy[stream] = finish
        events = self._events[stream]
        events.append(self._streams.record(stream))
        point = len(events) - 1
        read = self._read
        for k in keys:
            last = read.get(k)
            if last is None:
                read[k] = last = [0, 0]
            last[stream] = point
        inputs_keys = set(keys)
        for array in (outputs(result) if outputs is not None
                      else result if isinstance(result, tuple) else (result,)):
            k = self._key(array)
            if k not in inputs_keys:  # a new buffer, not a view of an input
                made[k] = (stream, point, finish)
        if stream == SIDE:
            self.side_ops += 1
        return result

    def _wait(self, stream: int, point: int) -> None:
        """``stream`` waits for the other's ``point``; the holds it passed are let go."""
        self._streams.wait(stream, self._events[1 - stream][point])
        self._waited[stream] = max(self._waited[stream], point)
        if self._held:
            kept = [(v, s, p) for v, s, p in self._held if not (s == stream and p <= point)]
            self._held_bytes = sum(v.nbytes for v, _, _ in kept)
            self._held = kept

    def hold(self, value: Any) -> None:
        """Keep a dropped ``value`` while the stream other than its own may still read it."""
        k = self._key(value)
        own = self._made.get(k, _BEFORE)[0]
        other = 1 - own
        last = self._read.get(k)
        if last is None or last[other] == 0 or last[other] <= self._waited[own]:
            return  # the other stream never read it, or its own has waited past the read
        self._held.append((value, own, last[other]))
        self._held_bytes += value.nbytes
        if self._held_bytes > HOLD_LIMIT:
            self._sync_both()

    def _sync_both(self) -> None:
        for stream in (MAIN, SIDE):
            last = len(self._events[1 - stream]) - 1
            if last > self._waited[stream]:
                self._wait(stream, last)
        self._held, self._held_bytes = [], 0

    def join(self) -> None:
        """The main stream waits for all of the side stream's work, if it joined the
        capture (a capture's end: every stream it forked must be joined); every held
        value goes."""
        events = self._events[SIDE]
        if self._waited[SIDE] >= 0:
            if len(events) == 1:  # joined the capture, ran nothing: its point to wait on
                events.append(self._streams.record(SIDE))
            if len(events) - 1 > self._waited[MAIN]:
                self._wait(MAIN, len(events) - 1)
        self._held, self._held_bytes = [], 0
