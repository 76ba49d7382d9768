"""The IR: every message from a caller to a device actor is a frozen msgspec Struct.

Tensors are named by integer ids; an actor's environment maps ids to device
buffers. Messages hold no Python objects except ``Upload.data`` (the host
array being uploaded), so a stream can be logged, encoded and replayed.
The language between layers: ``ops/`` writes it, ``actors/`` carries it and
``kernels/`` plans and runs it, so it belongs to none of them and imports none.
"""

from __future__ import annotations

from typing import Any

import msgspec

Site = tuple[str, int]  # the user's (file, line) that created an op


class Call(msgspec.Struct, frozen=True, gc=False):
    """Run op ``op`` on the tensors ``inputs``, producing tensor ``out``."""

    op: str
    out: int
    inputs: tuple[int, ...]
    attrs: tuple[Any, ...]
    shape: tuple[int, ...]
    dtype: str
    site: Site


class MultiCall(msgspec.Struct, frozen=True, gc=False):
    """An op with several outputs (``sort`` gives values and indices)."""

    op: str
    outs: tuple[int, ...]
    inputs: tuple[int, ...]
    attrs: tuple[Any, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    site: Site


class Upload(msgspec.Struct, frozen=True, gc=False):
    """Store host data (a NumPy array the caller no longer touches) as tensor ``out``."""

    out: int
    data: Any
    site: Site


class Drop(msgspec.Struct, frozen=True, gc=False):
    """The handle of tensor ``id`` died: its buffer may return to the pool."""

    id: int


class Fetch(msgspec.Struct, frozen=True, gc=False):
    """Deliver tensor ``id`` as a host array to waiter ``ticket``."""

    id: int
    ticket: int


class Check(msgspec.Struct, frozen=True, gc=False):
    """Tell waiter ``ticket`` whether tensor ``id`` computed (no data moves)."""

    id: int
    ticket: int


class Barrier(msgspec.Struct, frozen=True, gc=False):
    """Resolve waiter ``ticket`` once everything before it has run."""

    ticket: int


class Send(msgspec.Struct, frozen=True, gc=False):
    """Hand tensor ``id``'s buffer to waiter ``ticket`` for another actor's Receive."""

    id: int
    ticket: int


class Receive(msgspec.Struct, frozen=True, gc=False):
    """Store, as tensor ``out``, what another actor sends through ``ticket``."""

    out: int
    ticket: int
    shape: tuple[int, ...]
    dtype: str
    site: Site


class StepBegin(msgspec.Struct, frozen=True, gc=False):
    """The messages up to the next ``StepEnd`` are one step of ``em.graphed`` (a unit a
    backend may capture as a CUDA graph and replay)."""


class StepEnd(msgspec.Struct, frozen=True, gc=False):
    """The end of the step that the last ``StepBegin`` opened. A pure step
    (``em.graphed(fn, pure=True)``) names itself (``token``), its tensor arguments and its
    results, so that once captured its graph can replay without ``fn`` (``ReplayStep``)."""

    token: int = 0
    args: tuple[int, ...] = ()
    results: tuple[int, ...] = ()


class ReplayStep(msgspec.Struct, frozen=True, gc=False):
    """Replay the graph of pure step ``token`` on the tensors ``args``; its results become
    ``outs`` (of ``shapes`` and ``dtypes``)."""

    token: int
    args: tuple[int, ...]
    outs: tuple[int, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]


class Gate(msgspec.Struct, frozen=True, gc=False):
    """Run here the ops another actor promised in lane ``token`` (``actors/lanes.py``); ``outs``:
    the ids it promised on this device, failed if the lane closes with an error."""

    token: int
    outs: tuple[int, ...]
