"""Cached backward plans: a training loop builds a graph of the same structure every step,
so the autodiff actor replays the messages its first walk issued instead of running every
rule's Python again.

A graph's *structure* (``structure``) is its nodes in the order ``_claim`` finds them (a
depth-first search from the root), each with its op, attrs, input shapes and dtypes,
output shape and dtype, device, checkpointing mode and the positions of its parents (-1
for an untracked input). Every rule decides from these alone, except those registered
with ``differentiable(..., replay=False)``, whose graphs walk every time.

A *plan* (``Recorder``) is what one walk put into its lanes, each tensor id written as a
slot of the replay's environment:

- a value from before the walk: a tensor some node kept (``saved_inputs``,
  ``saved_output``) or the seed, named by place (node position and index), bound from the
  graph at hand. A value several places named in the recorded graph must be one value in
  this one too, else the plan does not apply (``bind``);
- a promised leaf gradient, named by its leaf's position;
- a value the walk made, given a fresh id.

It also holds the points where the walk released each node's kept tensors (their drops
follow from the handles' finalizers, as in the walk) and the drops of what the walk made.
Replay appends the same messages in the same order to this step's lanes: the devices see
what a walk would have sent, and fuse it the same way. Checkpointed graphs are included:
their recomputed forward ops are messages of the walk like any other.

A walk that sends a message a plan cannot rebind (a transfer between devices) or names a
value from outside the graph records nothing, and walks again next time.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any, NamedTuple

import msgspec

from ember.autodiff.graph import Node
from ember.ir import Call, Drop, MultiCall, Upload
from ember.ops._core import next_id

# EMBER_BACKWARD_PLANS=0: every backward walks (for comparison and debugging).
ENABLED = os.environ.get("EMBER_BACKWARD_PLANS", "1") not in ("", "0")
# Plans kept, least recently used dropped first: a guess at a few dozen graph shapes a
# program alternates between (train and eval batch sizes, a last short batch, buckets).
CAPACITY = 32

_CALL, _MULTI, _UPLOAD, _DROP, _RELEASE = range(5)
_SEED = (-1, 0)  # the place of the seed gradient among a plan's external values

_encode = msgspec.msgpack.Encoder().encode


def _attrs_key(attrs: tuple) -> Any:
    """``attrs`` as a key that tells 1, 1.0, True and -0.0 from 0.0 apart (equal in Python,
    not to a kernel): their MessagePack bytes, or where they are not plain data (a NumPy
    scalar) themselves with their types."""
    if not attrs:
        return attrs
    try:
        return _encode(attrs)
    except TypeError:
        return attrs, tuple(map(type, attrs))


def structure(order: list[Node], index: dict[Node, int]) -> tuple | None:
    """The structure key of the graph whose nodes ``_claim`` found in ``order``
    (``index``: each node's position), or None where a rule in it must not be replayed."""
    entries = []
    append = entries.append
    for node in order:
        rule = node.rule
        if rule is not None and not rule.replay:
            return None
        device = node.device
        append((node.op, _attrs_key(node.attrs), node.input_shapes, node.input_dtypes,
                node.shape, node.dtype, device.name, device.checkpointing,
                tuple([-1 if p is None else index[p] for p in node.parents])))
    key = tuple(entries)
    try:
        hash(key)
    except TypeError:  # attrs that are not hashable: this graph is not cached
        return None
    return key


class Plan(NamedTuple):
    """One recorded walk (see the module's docstring)."""

    slots: int
    devices: tuple[str, ...]  # the devices' names; a step names its device by position here
    externals: tuple  # (slot, places): a value from before the walk, by its places
    outs: tuple  # (slot, leaf position): a promised gradient
    steps: tuple  # the messages and releases, in the walk's order
    nodes_run: int


class Cache:
    """The plans by structure key, least recently used evicted past ``capacity``."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._plans: OrderedDict[tuple, Plan] = OrderedDict()

    def get(self, key: tuple) -> Plan | None:
        plan = self._plans.get(key)
        if plan is not None:
            self._plans.move_to_end(key)
        return plan

    def put(self, key: tuple, plan: Plan) -> None:
        self._plans[key] = plan
        self._plans.move_to_end(key)
        while len(self._plans) > self.capacity:
            self._plans.popitem(last=False)

    def clear(self) -> None:
        self._plans.clear()

    def __len__(self) -> int:
        return len(self._plans)


def _value(order: list[Node], seed: Any, place: tuple[int, int]) -> int:
    """The id of the tensor at ``place``: (node position, i) is its ``saved_inputs[i]``,
    (node position, -1 - k) its ``saved_output`` (the k-th of several); ``_SEED`` the seed."""
    if place == _SEED:
        return seed._id
    position, i = place
    node = order[position]
    if i >= 0:
        return node.saved_inputs[i]._id
    out = node.saved_output
    return (out[-1 - i] if type(out) is tuple else out)._id


def bind(plan: Plan, order: list[Node], seed: Any, promised: dict) -> list[int] | None:
    """The replay's environment for this graph: its values and promised ids in their slots
    (0 where the replay makes them), or None where the plan does not apply to it."""
    env = [0] * plan.slots
    try:
        for slot, places in plan.externals:
            value = _value(order, seed, places[0])
            for place in places[1:]:
                if _value(order, seed, place) != value:
                    return None
            env[slot] = value
        for slot, position in plan.outs:
            env[slot] = promised[order[position]][0]
    except (AttributeError, IndexError, KeyError, TypeError):  # kept otherwise than recorded
        return None
    return env


def replay(plan: Plan, env: list[int], order: list[Node], lanes: dict, site: tuple) -> None:
    """Append the plan's messages to ``lanes`` (by device actor), with the ids of ``env``
    and the user's ``site``, releasing the nodes' kept tensors where the walk did."""
    by_name = {actor.name: lane for actor, lane in lanes.items()}
    appends = [by_name[device].append for device in plan.devices]
    for step in plan.steps:
        kind = step[0]
        if kind == _CALL:
            _, device, op, out, ins, attrs, shape, dtype, nbytes = step
            tensor_id = env[out]
            if not tensor_id:
                tensor_id = env[out] = next_id()
            appends[device](Call(op, tensor_id, (env[ins[0]],) if len(ins) == 1
                                 else tuple([env[i] for i in ins]), attrs, shape, dtype, site),
                            nbytes)
        elif kind == _DROP:
            appends[step[1]](Drop(env[step[2]]))
        elif kind == _RELEASE:
            node = order[step[1]]
            node.saved_inputs = None
            node.saved_output = None
        elif kind == _MULTI:
            _, device, op, outs, ins, attrs, shapes, dtypes, nbytes = step
            for o in outs:
                if not env[o]:
                    env[o] = next_id()
            appends[device](MultiCall(op, tuple([env[o] for o in outs]),
                                      tuple([env[i] for i in ins]), attrs, shapes, dtypes,
                                      site), nbytes)
        else:  # _UPLOAD: a fresh copy, as the device may adopt the array it is given
            _, device, out, data, nbytes = step
            if not env[out]:
                env[out] = next_id()
            appends[device](Upload(env[out], data.copy(), site), nbytes)


class _Tap:
    """Stands in for a lane while a walk is recorded: notes each message, then passes it on
    (``DeviceActor`` calls only ``append`` and ``holds`` on a lane it fills)."""

    __slots__ = ("lane", "device", "recorder")

    def __init__(self, lane: Any, device: int, recorder: Recorder) -> None:
        self.lane = lane
        self.device = device
        self.recorder = recorder

    def append(self, msg: Any, nbytes: int = 0) -> None:
        self.recorder.note(self.device, msg, nbytes)
        self.lane.append(msg, nbytes)

    def holds(self, tensor_id: int) -> bool:
        return self.lane.holds(tensor_id)


class Recorder:
    """Records one walk of the graph ``order`` into a ``Plan`` (``plan()``; None if it
    cannot be replayed)."""

    def __init__(self, order: list[Node], seed: Any, promised: dict) -> None:
        self._position = {node: i for i, node in enumerate(order)}
        places: dict[int, list] = {}
        for i, node in enumerate(order):
            for j, value in enumerate(node.saved_inputs or ()):
                if value is not None and type(value) is not Node:
                    places.setdefault(value._id, []).append((i, j))
            out = node.saved_output
            if out is not None:
                for k, value in enumerate(out if type(out) is tuple else (out,)):
                    places.setdefault(value._id, []).append((i, -1 - k))
        places.setdefault(seed._id, []).append(_SEED)
        self._places = places
        self._leaf_of = {entry[0]: self._position[leaf] for leaf, entry in promised.items()}
        self._slot_of: dict[int, int] = {}
        self._made: dict[int, int] = {}  # id -> slot, for the values the walk made
        self._made_on: dict[int, int] = {}  # slot -> its device, for the values the walk made
        self._devices: list[str] = []
        self._dropped: set[int] = set()
        self._externals: list = []
        self._outs: list = []
        self._steps: list = []
        self.nodes_run = 0
        self.refused: str | None = None  # why this walk cannot be replayed

    def tap(self, lanes: dict) -> dict:
        """``lanes`` (by device actor) as the walk should fill them while it is recorded."""
        self._devices = [actor.name for actor in lanes]
        return {actor: _Tap(lane, i, self) for i, (actor, lane) in enumerate(lanes.items())}

    def release(self, node: Node) -> None:
        """The walk has released ``node``'s kept tensors."""
        self.nodes_run += 1
        self._steps.append((_RELEASE, self._position[node]))

    def note(self, device: int, msg: Any, nbytes: int) -> None:
        if self.refused is not None:
            return
        kind = type(msg)
        if kind is Call:
            ins = self._inputs(msg.inputs)
            if ins is not None:
                self._steps.append((_CALL, device, msg.op, self._output(msg.out, device), ins,
                                    msg.attrs, msg.shape, msg.dtype, nbytes))
        elif kind is Drop:
            slot = self._made.get(msg.id)
            if slot is not None:  # drops of earlier values follow from the releases
                self._dropped.add(slot)
                self._steps.append((_DROP, device, slot))
        elif kind is MultiCall:
            ins = self._inputs(msg.inputs)
            if ins is not None:
                self._steps.append((_MULTI, device, msg.op,
                                    tuple([self._output(o, device) for o in msg.outs]), ins, msg.attrs,
                                    msg.shapes, msg.dtypes, nbytes))
        elif kind is Upload:
            self._steps.append((_UPLOAD, device, self._output(msg.out, device), msg.data.copy(),
                                nbytes))
        else:
            self.refused = f"the walk sent a {kind.__name__} message"

    def _inputs(self, ids: tuple[int, ...]) -> tuple[int, ...] | None:
        slots = []
        for tensor_id in ids:
            slot = self._slot_of.get(tensor_id)
            if slot is None:
                places = self._places.get(tensor_id)
                if places is None:
                    self.refused = f"the walk read tensor {tensor_id}, from outside the graph"
                    return None
                slot = self._slot_of[tensor_id] = len(self._slot_of)
                self._externals.append((slot, tuple(places)))
            slots.append(slot)
        return tuple(slots)

    def _output(self, tensor_id: int, device: int) -> int:
        slot = self._slot_of[tensor_id] = len(self._slot_of)
        position = self._leaf_of.get(tensor_id)
        if position is None:
            self._made[tensor_id] = slot
            self._made_on[slot] = device
        else:
            self._outs.append((slot, position))
        return slot

    def plan(self) -> Plan | None:
        """The recorded plan; None if the walk cannot be replayed."""
        if self.refused is not None or len(self._outs) != len(self._leaf_of):
            return None
        # What the walk made and still held at its end was dropped after it: the replay,
        # which holds no handles, drops it at its end.
        steps = self._steps + [(_DROP, self._made_on[slot], slot)
                               for slot in self._made.values() if slot not in self._dropped]
        return Plan(len(self._slot_of), tuple(self._devices), tuple(self._externals),
                    tuple(self._outs), tuple(steps), self.nodes_run)
