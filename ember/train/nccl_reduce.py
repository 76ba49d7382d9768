"""Gradients summed across processes over NCCL, on the GPU, in dtype buckets.

One NCCL rank per process (a Ray worker, or a process a benchmark starts): the
process's first device joins a communicator of ``world`` ranks made from one unique id
(rank 0 makes it with ``unique_id()``; whoever starts the ranks passes it to each).
A step's gradients travel as a few flat buffers, one per bucket:

    plan_buckets(shapes, dtypes)       parameters grouped by dtype, in model order,
                                       cut where a bucket would pass ``bucket_bytes``
    all_reduce_gradients(grads, ...)   each bucket flattened (one ``cat`` on the device),
                                       every bucket summed over the ranks by one
                                       ``collective_world_all_reduce`` op, then sliced
                                       back into the parameters' shapes

Every step is an ordinary op on the device actor: the all-reduce runs on the device's
stream after the kernels that computed the gradients, and the update after it; nothing
crosses to the host. The communicator interface (``rank``, ``world``,
``all_reduce(buffers)``) is all the bucketing needs, so it runs unchanged over a
stand-in on the CPU.

Why one rank per process rather than per device: a process's devices already sum their
replicas' gradients together (``replicas.all_reduce``, over NCCL between the GPUs of one
process) and the optimizer runs once per process, on its first device; the cross-process
sum is only needed there. So each process joins one communicator, made by one
``NcclCommunicator(world, uid, rank)`` on one device, and no thread of a process waits
for another thread's rank.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ember.autodiff.graph import no_record
from ember.device import Device
from ember.dtype import DType
from ember.op_kinds import OTHER, declare
from ember.ops._core import multi_call
from ember.ops.creation import zeros
from ember.ops.shape import cat
from ember.tensor import Tensor

# Every rank's buffers summed into every rank's outputs, over one process-spanning
# communicator; CUDA devices with NCCL run it, the other backends refuse it.
declare(OTHER, "collective_world_all_reduce")

# Bytes per bucket. PyTorch's DDP cuts at 25 MiB; fewer, larger buckets suit a step that
# issues them all at once (a guess, not tuned).
DEFAULT_BUCKET_BYTES = 32 << 20

_keys = itertools.count()


@dataclass(frozen=True)
class Slot:
    """Where one parameter's gradient lies in its bucket's flat buffer."""

    index: int
    offset: int
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class Bucket:
    """Parameters of one dtype whose gradients are summed as one flat buffer."""

    dtype: DType
    slots: tuple[Slot, ...]

    @property
    def size(self) -> int:
        return sum(s.size for s in self.slots)


def plan_buckets(shapes: Sequence[tuple[int, ...]], dtypes: Sequence[DType],
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> list[Bucket]:
    """Group parameters ``0 .. n-1`` into buckets: one dtype each, in parameter order.

    A bucket is closed when the next parameter of its dtype would take it past
    ``bucket_bytes``; a parameter larger than that gets a bucket of its own.

    Args:
        shapes: each parameter's shape.
        dtypes: each parameter's dtype.
        bucket_bytes: the most bytes a bucket of several parameters holds.

    Raises:
        ValueError: ``shapes`` and ``dtypes`` differ in length, or ``bucket_bytes < 1``.

    Example:
        >>> [b.size for b in plan_buckets([(2, 3), (4,)], [em.float32] * 2, 24)]
        [6, 4]
    """
    if len(shapes) != len(dtypes):
        raise ValueError(f"plan_buckets: {len(shapes)} shapes but {len(dtypes)} dtypes")
    if bucket_bytes < 1:
        raise ValueError(f"plan_buckets: bucket_bytes must be >= 1, got {bucket_bytes}")
    open_slots: dict[str, list[Slot]] = {}
    by_name: dict[str, DType] = {}
    buckets: list[Bucket] = []
    for index, (shape, dtype) in enumerate(zip(shapes, dtypes)):
        slot = Slot(index, 0, tuple(shape))
        current = open_slots.setdefault(dtype.name, [])
        by_name[dtype.name] = dtype
        used = sum(s.size for s in current)
        if current and (used + slot.size) * dtype.itemsize > bucket_bytes:
            buckets.append(Bucket(dtype, tuple(current)))
            current.clear()
            used = 0
        current.append(Slot(index, used, slot.shape))
    buckets.extend(Bucket(by_name[name], tuple(slots))
                   for name, slots in open_slots.items() if slots)
    return buckets


class Communicator(Protocol):
    """What the bucketed all-reduce needs of a communicator."""

    rank: int
    world: int

    def all_reduce(self, buffers: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        """Each buffer summed elementwise over every rank, as new tensors on its device."""
        ...


def all_reduce_gradients(grads: Sequence[Tensor | None], buckets: Sequence[Bucket],
                         communicator: Communicator, device: Device) -> list[Tensor]:
    """The sum over every rank of each parameter's gradient, on ``device``.

    Args:
        grads: this rank's gradient of each parameter (None where it has none: it then
            takes part as zeros, since every rank must send the same buffers).
        buckets: ``plan_buckets`` of the parameters' shapes and dtypes (the same on every
            rank).
        communicator: this rank's communicator.
        device: where ``grads`` live and the sums are made.

    Returns:
        One tensor per parameter, in ``grads``'s order.

    Raises:
        ValueError: a gradient's shape or dtype is not its bucket slot's.
    """
    with no_record():
        flat = []
        for bucket in buckets:
            parts = []
            for slot in bucket.slots:
                g = grads[slot.index]
                if g is None:
                    g = zeros(slot.shape, dtype=bucket.dtype, device=device)
                elif tuple(g.shape) != slot.shape or g.dtype != bucket.dtype:
                    raise ValueError(f"all_reduce_gradients: parameter {slot.index} has a "
                                     f"gradient of {tuple(g.shape)} {g.dtype.name}, planned as "
                                     f"{slot.shape} {bucket.dtype.name}")
                parts.append(g.reshape(-1))
            flat.append(parts[0] if len(parts) == 1 else cat(parts))
        reduced = communicator.all_reduce(tuple(flat)) if flat else ()
        out: list[Any] = [None] * len(grads)
        for bucket, total in zip(buckets, reduced):
            for slot in bucket.slots:
                piece = total if len(bucket.slots) == 1 else total[slot.offset:
                                                                    slot.offset + slot.size]
                out[slot.index] = piece.reshape(slot.shape)
    return out


def unique_id() -> bytes:
    """A new NCCL unique id: rank 0 makes it, every rank's ``NcclCommunicator`` takes it.

    Raises:
        ImportError: CuPy, or CuPy's NCCL, is not installed.
    """
    from ember.kernels.cupy.nccl_world import unique_id as make

    return make()


class NcclCommunicator:
    """This process's rank of a ``world``-rank NCCL communicator, on one CUDA device.

    Every rank constructs it at about the same time with the same ``uid`` (construction
    waits until all ``world`` ranks have joined). ``all_reduce`` then queues a sum over
    the ranks on the device's stream, like any op.

    Args:
        world: how many ranks (processes) take part.
        uid: ``unique_id()`` from rank 0, the same for every rank.
        rank: this process's rank, ``0 .. world - 1``.
        device: this rank's CUDA device (``em.cuda(k)``).

    Raises:
        ValueError: ``rank`` is outside ``0 .. world - 1`` or ``device`` is not CUDA.

    Example:
        >>> comm = NcclCommunicator(world, uid, rank, em.cuda(0))
        >>> (total,) = comm.all_reduce((em.ones(4, device=em.cuda(0)),))   # == world
    """

    def __init__(self, world: int, uid: bytes, rank: int, device: Device) -> None:
        if not 0 <= rank < world:
            raise ValueError(f"NcclCommunicator: rank {rank} is outside a world of {world}")
        if device.kind != "cuda":
            raise ValueError(f"NcclCommunicator: NCCL runs on CUDA devices, not {device.name}")
        from ember.kernels.cupy import nccl_world

        self.world, self.rank, self.device = world, rank, device
        self.key = f"world-{next(_keys)}"
        nccl_world.join(self.key, world, bytes(uid), rank, device.index)
        self._closed = False

    def all_reduce(self, buffers: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        """Each buffer summed elementwise over every rank: new tensors on this device.

        Every rank must call it with buffers of the same sizes and dtypes, in the same
        order (NCCL matches them by position).
        """
        for b in buffers:
            if b.device.inner != self.device.inner:
                raise ValueError(f"collective_world_all_reduce: a buffer on {b.device.name}, "
                                 f"but this rank's device is {self.device.name}")
        return multi_call("collective_world_all_reduce", tuple(buffers),
                          tuple(tuple(b.shape) for b in buffers),
                          tuple(b.dtype for b in buffers), (self.key,))

    def close(self) -> None:
        """Free the communicator once this device has run every op queued on it."""
        if self._closed:
            return
        self._closed = True
        from ember.kernels.cupy import nccl_world

        try:
            self.device.actor.sync()
        finally:
            nccl_world.leave(self.key)

    def __repr__(self) -> str:
        return f"NcclCommunicator(rank {self.rank} of {self.world}, {self.device.name})"


__all__ = ["Bucket", "Communicator", "DEFAULT_BUCKET_BYTES", "NcclCommunicator", "Slot",
           "all_reduce_gradients", "plan_buckets", "unique_id"]
