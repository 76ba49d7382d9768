"""Collectives across the CUDA devices of one host, over NCCL (``cupy.cuda.nccl``).

Two kernels, run as ``MultiCall``s on each rank's worker thread (rank ``k`` is the
``k``-th device of the group; ``attrs`` = (device indices, round id, rank)):

- ``collective_all_reduce``: every rank gets the elementwise sum of all ranks' inputs;
- ``collective_broadcast``: every rank gets rank 0's inputs.

The workers are threads of one process, so the communicators of a device set are made
once, together (``NcclCommunicator.initAll``), and a round is issued by one thread for
every rank between ``groupStart`` and ``groupEnd`` once all ranks have arrived
(rendezvous.py says why no rank issues alone). Each rank's part runs on its own
worker's stream, ordered after the kernels that computed its inputs; its outputs are
allocated from its own pool before it arrives.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import cupy
import numpy as np
from cupy.cuda import nccl

from ember.kernels.cupy.rendezvous import Rendezvous
from ember.kernels.cupy.table import KERNELS

# NVLink multicast (NVLS) can put a shared host's GPUs out of service: never turn it on.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

_NCCL_TYPES = {
    np.dtype(np.float32): nccl.NCCL_FLOAT32,
    np.dtype(np.float64): nccl.NCCL_FLOAT64,
    np.dtype(np.float16): nccl.NCCL_FLOAT16,
    np.dtype(np.int32): nccl.NCCL_INT32,
    np.dtype(np.int64): nccl.NCCL_INT64,
    np.dtype(np.uint8): nccl.NCCL_UINT8,
}


class _Group:
    """The communicators and rendezvous of one device set, made once per process."""

    def __init__(self, indices: tuple[int, ...]) -> None:
        self.indices = indices
        self.rendezvous = Rendezvous(len(indices))
        self._comms: list[Any] | None = None

    def comms(self) -> list[Any]:
        # Made by the first issuing thread, inside the rendezvous, so no rank runs meanwhile.
        if self._comms is None:
            self._comms = nccl.NcclCommunicator.initAll(list(self.indices))
        return self._comms


_groups: dict[tuple[int, ...], _Group] = {}
_groups_lock = threading.Lock()


def _group(indices: tuple[int, ...]) -> _Group:
    with _groups_lock:
        group = _groups.get(indices)
        if group is None:
            group = _groups[indices] = _Group(indices)
        return group


def _nccl_type(dtype: np.dtype) -> int:
    found = _NCCL_TYPES.get(np.dtype(dtype))
    if found is None:
        if np.dtype(dtype).name == "bfloat16" and hasattr(nccl, "NCCL_BFLOAT16"):
            return nccl.NCCL_BFLOAT16
        raise TypeError(f"NCCL collectives take float16/32/64, int32/64 or uint8, not {dtype}")
    return found


def _run(msg: Any, inputs: tuple, outputs: tuple,
         launch: Callable[[Any, int, list, Any], None]) -> tuple:
    """Arrive with this rank's buffers and stream; the last rank launches every rank's part."""
    indices, round_id, rank = msg.attrs
    group = _group(tuple(indices))
    stream = cupy.cuda.get_current_stream()
    for x in inputs:
        _nccl_type(x.dtype)  # refuse a dtype here, on this rank, before anyone issues

    def issue(parts: list) -> None:
        # NCCL selects each rank's device while it sets up and launches; the issuing
        # worker's own device is restored after, for its next kernels.
        with cupy.cuda.Device(cupy.cuda.runtime.getDevice()):
            comms = group.comms()
            nccl.groupStart()
            try:
                for k, (comm, (ins, outs, rank_stream)) in enumerate(zip(comms, parts)):
                    with cupy.cuda.Device(group.indices[k]):
                        launch(comm, k, list(zip(ins, outs)), rank_stream)
            finally:
                nccl.groupEnd()

    group.rendezvous.arrive(round_id, rank, (inputs, outputs, stream), issue)
    return outputs


def _all_reduce(comm: Any, rank: int, pairs: list, stream: Any) -> None:
    for x, out in pairs:
        comm.allReduce(x.data.ptr, out.data.ptr, x.size, _nccl_type(x.dtype), nccl.NCCL_SUM,
                       stream.ptr)


def _broadcast(comm: Any, rank: int, pairs: list, stream: Any) -> None:
    for x, out in pairs:
        # Rank 0 sends from its input; the others receive into their outputs.
        buffer = x if rank == 0 else out
        comm.broadcast(buffer.data.ptr, buffer.data.ptr, x.size, _nccl_type(x.dtype), 0,
                       stream.ptr)


def all_reduce_kernel(msg: Any, pool: Any, *inputs: cupy.ndarray) -> tuple:
    inputs = tuple(cupy.ascontiguousarray(x) for x in inputs)
    outputs = tuple(cupy.empty_like(x) for x in inputs)
    return _run(msg, inputs, outputs, _all_reduce)


def broadcast_kernel(msg: Any, pool: Any, *inputs: cupy.ndarray) -> tuple:
    inputs = tuple(cupy.ascontiguousarray(x) for x in inputs)
    rank = msg.attrs[2]
    # Rank 0 keeps its values: views of its inputs (owning nothing), not copies.
    outputs = tuple(x.view() if rank == 0 else cupy.empty_like(x) for x in inputs)
    return _run(msg, inputs, outputs, _broadcast)


KERNELS["collective_all_reduce"] = all_reduce_kernel
KERNELS["collective_broadcast"] = broadcast_kernel
