"""A sum over processes, over NCCL: the kernel of ``collective_world_all_reduce``.

Each process holds one rank of a communicator spanning ``world`` processes, made by
``join`` from a unique id that rank 0 made (``unique_id``) and that whoever started the
processes handed to every rank. The kernel queues, between ``groupStart`` and
``groupEnd``, one ``allReduce`` per input on the worker's current stream, so it runs
after the kernels that computed the inputs and before whatever reads the outputs. Each
process issues only its own rank, so there is no rendezvous between threads here (the
rendezvous of nccl.py is for the ranks of one process); a rank that never issues leaves
the others' kernels waiting on their GPUs, as NCCL does everywhere.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import cupy
from cupy.cuda import nccl

from ember.kernels.cupy.nccl import _nccl_type
from ember.kernels.cupy.table import KERNELS

# NVLink multicast (NVLS) can put a shared host's GPUs out of service: never turn it on.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

_communicators: dict[str, Any] = {}
_lock = threading.Lock()


def unique_id() -> bytes:
    """A new NCCL unique id (rank 0 makes it; it travels to every rank as bytes)."""
    uid = nccl.get_unique_id()
    # CuPy 14 gives bytes; CuPy 13 a tuple of C chars (-128 .. 127).
    return uid if isinstance(uid, bytes) else bytes(c & 0xFF for c in uid)


def join(key: str, world: int, uid: bytes, rank: int, device_index: int) -> None:
    """Make this process's rank of the communicator ``key`` on CUDA device
    ``device_index``; returns once all ``world`` ranks have joined."""
    with _lock:
        if key in _communicators:
            raise RuntimeError(f"NCCL communicator {key!r} joined twice in this process")
    with cupy.cuda.Device(device_index):
        try:
            comm = nccl.NcclCommunicator(world, uid, rank)
        except TypeError:  # CuPy 13 takes the id as a tuple of C chars
            comm = nccl.NcclCommunicator(world, tuple(c - 256 if c > 127 else c for c in uid),
                                         rank)
    with _lock:
        _communicators[key] = comm


def leave(key: str) -> None:
    """Free this process's rank of ``key`` (after its device has run every op using it)."""
    with _lock:
        comm = _communicators.pop(key, None)
    if comm is not None:
        comm.destroy()


def world_all_reduce_kernel(msg: Any, pool: Any, *inputs: cupy.ndarray) -> tuple:
    with _lock:
        comm = _communicators.get(msg.attrs[0])
    if comm is None:
        raise RuntimeError(f"collective_world_all_reduce: no NCCL communicator "
                           f"{msg.attrs[0]!r} in this process (closed, or never joined)")
    inputs = tuple(cupy.ascontiguousarray(x) for x in inputs)
    types = [_nccl_type(x.dtype) for x in inputs]
    outputs = tuple(cupy.empty_like(x) for x in inputs)
    stream = cupy.cuda.get_current_stream().ptr
    nccl.groupStart()
    try:
        for x, out, kind in zip(inputs, outputs, types):
            comm.allReduce(x.data.ptr, out.data.ptr, x.size, kind, nccl.NCCL_SUM, stream)
    finally:
        nccl.groupEnd()
    return outputs


KERNELS["collective_world_all_reduce"] = world_all_reduce_kernel
