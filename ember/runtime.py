"""Runtime entry points: ``em.run``, ``em.sync``, ``em.sync_async``, ``em.stats``, ``em.trace``,
``em.list_actors``."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import trio

from ember import tracing as _trace
from ember.actors.registry import live_actors
from ember.actors.stats import ActorInfo, Stats
from ember.device import Device
from ember.graphed_step import GraphedStep
from ember.ops._core import resolve_device


def run(async_fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    """Run ``async_fn(*args)`` under trio and return its result (for plain scripts).

    Example:
        >>> async def main():
        ...     x = em.arange(3) * 2
        ...     return (await x).tolist()     # await reads without blocking the event loop
        >>> em.run(main)
        [0, 2, 4]
    """
    return trio.run(async_fn, *args)


def _actors(device: Device | str | None) -> list:
    if device is None:  # every device not shut down (one whose worker died restarts)
        return [a for a in live_actors() if not a.stopped]
    return [resolve_device(device).actor]


def sync(device: Device | str | None = None) -> None:
    """Block until the device's stream (every device's, when None) has run.

    Example:
        >>> y = em.randn(1000, 1000) @ em.randn(1000, 1000)
        >>> em.sync()     # every device's queued work has run (e.g. before stopping a timer)
    """
    from ember.tensor import _refuse_inside_trio

    _refuse_inside_trio("sync")
    for actor in _actors(device):
        actor.sync()


async def sync_async(device: Device | str | None = None) -> None:
    """Park the trio task until the device's stream (every device's, when None) has run.

    Example:
        >>> async def step():
        ...     y = em.randn(100, 100).exp()
        ...     await em.sync_async()
    """
    for actor in _actors(device):
        actor.raise_if_died()
        await actor.barrier().wait_async()


def list_actors() -> list[ActorInfo]:
    """Every live actor: the devices used so far, the autodiff actor, and the optimizers'
    and data loaders' actors where they run (``ActorInfo`` records).

    Example:
        >>> _ = em.zeros(1).numpy()
        >>> "device" in {actor.kind for actor in em.list_actors()}
        True
    """
    from ember.autodiff.engine import ACTOR

    infos = [a.info() for a in live_actors() if not a.stopped] + [ACTOR.info()]
    return infos + [info() for info in _extra_actors]


# Other kinds of actor register a callable returning their ActorInfo (optimizers, loaders).
_extra_actors: list[Callable[[], ActorInfo]] = []


def register_actor(info: Callable[[], ActorInfo]) -> None:
    """List another kind of actor in ``list_actors()``: ``info`` returns its record."""
    _extra_actors.append(info)


def stats(device: Device | str | None = None) -> Stats:
    """Counters of one device, or totals over every device used so far.

    Example:
        >>> before = em.stats().ops_submitted
        >>> _ = (em.ones(4) + 1).numpy()
        >>> em.stats().ops_submitted > before
        True
    """
    total = Stats()
    for actor in _actors(device):
        total = total + actor.statistics()
    return total


@contextlib.contextmanager
def trace() -> Iterator[_trace.Trace]:
    """Record every op executed while the block runs: ``with em.trace() as tr: ...``.

    The devices are synced on entry and on exit, so the trace holds the ops submitted
    in the block (and none queued before it); ``tr.events`` lists them and
    ``tr.save(path)`` writes a Chrome trace.

    Example:
        >>> with em.trace() as tr:
        ...     y = (em.ones(4) + 1).exp().sum()
        >>> len(tr.events) > 0
        True
        >>> tr.save("trace.json")   # open it in ui.perfetto.dev or chrome://tracing
    """
    for actor in _actors(None):
        actor.sync()
    recording = _trace.start()
    try:
        yield recording
        for actor in _actors(None):
            actor.sync()
    finally:
        _trace.stop(recording)


def graphed(fn: Callable[..., Any], device: Device | str | None = None, *,
            pure: bool = False) -> GraphedStep:
    """``fn`` (a training step, say) as a step whose kernels a CUDA device captures once
    as a CUDA graph and replays whenever a later call issues the same ops on the same
    shapes, dtypes and scalar values; elsewhere (CPU, WebGPU) calls just run ``fn``.

    The ops ``fn`` submits to ``device`` (default: the default device) run as one batch
    at the step's end: the first call of a kind runs them (compiling and autotuning),
    the second captures and launches them, later ones replay (copying the step's inputs
    into the graph's own buffers first); the host's per-op work on the device's worker
    is skipped. Results are the eager ones, bit for bit (the same kernels). What keeps
    a call from replaying: other shapes, dtypes or ops, a scalar that changes per call
    (Adam without ``capturable=True``, whose learning rate and bias corrections are
    device values with it; seeded random ops), a read, sync or transfer inside ``fn``
    (the step then runs at once, uncaptured; an upload runs ahead of the step, which
    reads it as an input), or a capture the device refused (that kind of step then
    always runs as it is).

    ``pure=True`` promises that ``fn``'s results depend only on its arguments (tensors,
    and hashable values that select a graph per value) and on tensors it reads that stay
    the same objects from call to call (weights of a model it does not train), and that
    ``fn`` has no other effect. Once its step is captured, calls replay the graph
    without running ``fn`` at all: the caller's Python, op submission and autodiff, is
    skipped too, as with ``torch.cuda.make_graphed_callables``. Results are new tensors
    with no autodiff history. A tensor read besides the arguments that has since died
    fails the replay's results (``KernelError``); one replaced by a new value is not
    seen (the graph reads the old one while it lives): pass such tensors as arguments.

    Example:
        >>> def gradients():
        ...     grads = layer(x).sum().backward()
        ...     return [p.grad(grads) for p in layer.parameters()]
        >>> step = em.graphed(gradients, em.cuda(0))
        >>> grads = step()     # runs; then captured; replayed from the third call on
        >>> infer = em.graphed(lambda batch: model(batch).argmax(-1), em.cuda(0), pure=True)
        >>> labels = infer(batch)  # from the third call on, a graph launch and nothing else
    """
    return GraphedStep(fn, device, pure)
