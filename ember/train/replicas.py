"""Data parallel on one host: a model replica per device, gradients averaged, replicas synced.

Replica 0 is the model itself (on the first device); the others are copies
sharing parameter ids. After every step the averaged gradient updates
replica 0 through the optimizer, and the new values are sent to the others,
so all replicas stay identical.

Where every replica's device runs collectives (the CUDA devices of one host, over
NCCL), gradients are all-reduced and values broadcast by the devices themselves, each
rank's part queued on its own device like any op; elsewhere (CPU devices) the
gradients travel to the first device and the values back with ``.to``.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from ember.autodiff.engine import Gradients
from ember.autodiff.graph import no_record
from ember.device import Device
from ember.nn.module import Module
from ember.op_kinds import OTHER, declare
from ember.ops._core import multi_call
from ember.ops.creation import zeros

# NCCL's collectives over CUDA devices; the other backends refuse them.
declare(OTHER, "collective_all_reduce", "collective_broadcast")

# Round ids shared by the ranks of one collective (every rank's call carries the same one).
_rounds = itertools.count(1)


def replicate(model: Module, device: Device) -> Module:
    """A copy of ``model`` on ``device``: same structure, same values and parameter ids."""
    memo: dict[int, Any] = {}
    for _, slot in model.named_slots():
        memo[id(slot)] = type(slot)(slot.value.detach().to(device), id=slot.id)
    return copy.deepcopy(model, memo)


def all_reduce(primary: Module, replicas: list[Module], grads: list[Gradients]) -> Gradients:
    """The sum of every replica's gradients, on the primary's device, keyed for its params.

    Callers scale each replica's loss by its share of the batch, so the sum is the mean.
    ``replicas`` may repeat (accumulated batches): each one's gradients are summed on its
    device before the devices reduce.
    """
    devices = collective_devices(replicas)
    if devices is not None:
        return _all_reduce_collective(primary, replicas, grads, devices)
    primary_slots = primary.parameters()
    replica_slots = [r.parameters() for r in replicas]
    device = primary_slots[0].device if primary_slots else None
    by_node = {}
    for i, param in enumerate(primary_slots):
        total = None
        for slots, g in zip(replica_slots, grads):
            part = slots[i].grad(g)
            if part is None:
                continue
            part = part.to(device.inner)
            total = part if total is None else total + part
        if total is not None:
            by_node[param.value._node] = total
    return Gradients(by_node)


def broadcast(primary: Module, replicas: list[Module]) -> None:
    """Copy the primary's parameter and buffer values to every other replica."""
    devices = collective_devices(replicas)
    if devices is not None and len(devices) == len(replicas):
        return _broadcast_collective(replicas, devices)
    sources = [slot.value for _, slot in primary.named_slots()]
    for replica in replicas[1:]:
        for value, (_, slot) in zip(sources, replica.named_slots()):
            slot.value = value.detach().to(slot.device)


def collective_devices(replicas: list[Module]) -> list[Device] | None:
    """The replicas' distinct devices, in order, if their backends all run collectives
    together (more than one device, each with ``collectives``); else None."""
    by_name: dict[str, Device] = {}
    for replica in replicas:
        first = next(iter(replica.parameters()), None)
        if first is None:
            return None
        by_name.setdefault(first.device.name, first.device.inner)
    devices = list(by_name.values())
    if len(devices) < 2 or len({d.kind for d in devices}) != 1:
        return None
    if not all(getattr(d.actor.backend, "collectives", False) for d in devices):
        return None
    return devices


def _attrs(devices: list[Device]) -> tuple[tuple[int, ...], int]:
    return tuple(d.index for d in devices), next(_rounds)


def _all_reduce_collective(primary: Module, replicas: list[Module], grads: list[Gradients],
                           devices: list[Device]) -> Gradients:
    params = primary.parameters()
    rank_of = {d.name: k for k, d in enumerate(devices)}
    sums: list[list[Any]] = [[None] * len(params) for _ in devices]
    with no_record():
        for replica, g in zip(replicas, grads):
            slots = replica.parameters()
            local = sums[rank_of[slots[0].device.name]]
            for i, slot in enumerate(slots):
                part = slot.grad(g)
                if part is not None:
                    local[i] = part if local[i] is None else local[i] + part
        present = [i for i in range(len(params)) if any(s[i] is not None for s in sums)]
        if not present:
            return Gradients({})
        group, round_id = _attrs(devices)
        reduced = ()
        for k, device in enumerate(devices):
            # A parameter unused on one rank still takes part there, as zeros: every rank
            # must issue the same collective.
            parts = tuple(sums[k][i] if sums[k][i] is not None
                          else zeros(params[i].shape, dtype=params[i].dtype, device=device)
                          for i in present)
            outs = multi_call("collective_all_reduce", parts, tuple(p.shape for p in parts),
                              tuple(p.dtype for p in parts), (group, round_id, k),
                              rendezvous=True)
            if k == 0:
                reduced = outs
    return Gradients({params[i].value._node: t for i, t in zip(present, reduced)})


def _broadcast_collective(replicas: list[Module], devices: list[Device]) -> None:
    group, round_id = _attrs(devices)
    with no_record():
        for k, replica in enumerate(replicas):
            slots = [slot for _, slot in replica.named_slots()]
            values = tuple(slot.value.detach() for slot in slots)
            outs = multi_call("collective_broadcast", values, tuple(v.shape for v in values),
                              tuple(v.dtype for v in values), (group, round_id, k),
                              rendezvous=True)
            if k > 0:
                for slot, value in zip(slots, outs):
                    slot.value = value
