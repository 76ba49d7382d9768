"""The caller's side of ``em.graphed``: steps opened and closed around ``fn``, and a pure
step's replays, which skip ``fn`` once its graph is captured (see step_graphs.py)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

from ember.device import Device
from ember.ir import ReplayStep
from ember.ops._core import make, next_id, resolve_device
from ember.precision import get_float32_matmul_precision
from ember.tensor import Tensor

_tokens = itertools.count(1)
_LEAF = object()


def _flatten(value: Any, leaves: list[Tensor]) -> Any:
    """The structure of ``value`` with its tensors taken out into ``leaves`` (tuples,
    lists, namedtuples and dicts are walked; anything else stays as it is)."""
    if isinstance(value, Tensor):
        leaves.append(value)
        return _LEAF
    if isinstance(value, list | tuple):
        return (type(value), tuple(_flatten(v, leaves) for v in value))
    if isinstance(value, dict):
        return (dict, tuple((k, _flatten(v, leaves)) for k, v in value.items()))
    return (None, value)


def _rebuild(tree: Any, leaves: Any) -> Any:
    if tree is _LEAF:
        return next(leaves)
    kind, items = tree
    if kind is None:
        return items
    if kind is dict:
        return {k: _rebuild(v, leaves) for k, v in items}
    values = [_rebuild(v, leaves) for v in items]
    if hasattr(kind, "_fields"):  # a namedtuple
        return kind(*values)
    return kind(values)


def _tensor_args(args: tuple, kwargs: dict) -> list[Tensor]:
    return ([a for a in args if isinstance(a, Tensor)]
            + [kwargs[k] for k in sorted(kwargs) if isinstance(kwargs[k], Tensor)])


def _call_key(args: tuple, kwargs: dict) -> tuple:
    """What selects a pure step's graph: each tensor argument's shape, dtype and device,
    which tensor arguments are the same tensor (a graph captured with ``f(x, x)`` reads
    one input), every other argument's value, and the float32 matmul precision (a replay
    skips ``fn``, whose matmuls would have read it)."""
    def part(value: Any) -> Any:
        if isinstance(value, Tensor):
            return (Tensor, value.shape, value.dtype.name, value.device.name)
        return value

    first: dict[int, int] = {}  # each tensor's first position: one pass (a Learner's
    # pure step passes every parameter and state tensor, ~75 of an encoder layer's)
    same = tuple(first.setdefault(t._id, k) for k, t in enumerate(_tensor_args(args, kwargs)))
    key = (tuple(part(a) for a in args), tuple((k, part(kwargs[k])) for k in sorted(kwargs)),
           same, get_float32_matmul_precision())
    try:
        hash(key)
    except TypeError:
        raise TypeError("graphed(pure=True): arguments other than tensors must be hashable "
                        "(they select the graph)") from None
    return key


class GraphedStep:
    """``em.graphed(fn)``: calls of ``fn`` as steps a CUDA device captures and replays."""

    def __init__(self, fn: Callable[..., Any], device: Device | str | None,
                 pure: bool = False) -> None:
        self.fn = fn
        self._device = device
        self._pure = pure
        self._tokens: dict[tuple, int] = {}
        # token -> (result structure, [(shape, dtype, device) of each result tensor])
        self._results: dict[int, tuple[Any, list[tuple]]] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        actor = resolve_device(self._device).actor
        if not self._pure:
            actor.step_begin()
            try:
                return self.fn(*args, **kwargs)
            finally:
                actor.step_end()
        key = _call_key(args, kwargs)
        token = self._tokens.get(key)
        if token is None:
            token = self._tokens[key] = next(_tokens)
        graphs = actor.graphs
        if graphs is not None and token in graphs.pure and token in self._results:
            return self._replay(actor, token, _tensor_args(args, kwargs))
        actor.step_begin()
        leaves: list[Tensor] = []
        try:
            result = self.fn(*args, **kwargs)
            self._results[token] = (_flatten(result, leaves),
                                    [(t.shape, t.dtype, t.device) for t in leaves])
            return result
        finally:
            actor.step_end(token, tuple(t._id for t in _tensor_args(args, kwargs)),
                           tuple(t._id for t in leaves))

    def _replay(self, actor: Any, token: int, tensor_args: list[Tensor]) -> Any:
        tree, layout = self._results[token]
        outs = tuple(next_id() for _ in layout)
        nbytes = sum(math.prod(shape) * dtype.itemsize for shape, dtype, _ in layout)
        actor.replay_step(ReplayStep(token, tuple(t._id for t in tensor_args), outs,
                                     tuple(shape for shape, _, _ in layout),
                                     tuple(dtype.name for _, dtype, _ in layout)), nbytes)
        handles = (make(out, shape, dtype, device)
                   for out, (shape, dtype, device) in zip(outs, layout))
        return _rebuild(tree, handles)

    @property
    def pure(self) -> bool:
        """Whether calls replay without running ``fn`` once captured (``pure=True``)."""
        return self._pure

    @property
    def device_captures(self) -> bool:
        """Whether the device captures and replays steps (a CUDA device); elsewhere calls
        just run ``fn``."""
        return resolve_device(self._device).actor.graphs is not None

    def graph_stats(self) -> dict[str, int]:
        """Steps captured, replayed and refused (a capture that failed) on the device so
        far, and the ops its latest capture ran on a second stream beside the first
        ("side_ops"); all 0 where the device captures no graphs."""
        graphs = resolve_device(self._device).actor.graphs
        if graphs is None:
            return {"captures": 0, "replays": 0, "refusals": 0, "side_ops": 0}
        return {"captures": graphs.captures, "replays": graphs.replays,
                "refusals": graphs.refusals,
                "side_ops": getattr(graphs.capturer, "side_ops", 0)}
