"""Data parallel on one host: a model replica per device, gradients averaged, replicas synced.

Replica 0 is the model itself (on the first device); the others are copies
sharing parameter ids. After every step the averaged gradient updates
replica 0 through the optimizer, and the new values are sent to the others,
so all replicas stay identical.
"""

from __future__ import annotations

import copy
from typing import Any

from ember.autodiff.engine import Gradients
from ember.device import Device
from ember.nn.module import Module


def replicate(model: Module, device: Device) -> Module:
    """A copy of ``model`` on ``device``: same structure, same values and parameter ids."""
    memo: dict[int, Any] = {}
    for _, slot in model.named_slots():
        memo[id(slot)] = type(slot)(slot.value.detach().to(device), id=slot.id)
    return copy.deepcopy(model, memo)


def all_reduce(primary: Module, replicas: list[Module], grads: list[Gradients]) -> Gradients:
    """The sum of every replica's gradients, on the primary's device, keyed for its params.

    Callers scale each replica's loss by its share of the batch, so the sum is the mean.
    """
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
    sources = [slot.value for _, slot in primary.named_slots()]
    for replica in replicas[1:]:
        for value, (_, slot) in zip(sources, replica.named_slots()):
            slot.value = value.detach().to(slot.device)
