"""The autodiff actor: walks a graph backward and emits the gradient ops.

``backward`` visits nodes in reverse creation order (a reverse topological
order, since a node is always created after its inputs), calls each node's
rule, sums each input gradient over broadcast dims, accumulates gradients
of tensors used several times, and frees each node's saved tensors once it
has run. Only device ops are emitted; nothing waits for a device, so the walk
runs on the actor's thread and ``backward`` returns at once. A graph of a structure
walked before replays that walk's recorded messages instead (``plans.py``).
"""

from __future__ import annotations

import heapq
import os
import sys
import threading
import time
from typing import Any

import msgspec

from ember import mixed_precision
from ember import tracing as _trace
from ember.actors import lanes as _lanes
from ember.actors.executor import format_site, kernel_error
from ember.actors.job_actor import JobActor
from ember.autodiff import plans
from ember.autodiff.graph import LEAF, SELECT, Node, no_record
from ember.errors import DeviceError, EmberError, ShapeError
from ember.ops._core import EAGER, call, issue, multi_call, next_id, pinned_site, user_site
from ember.ops.creation import ones_like
from ember.ops.gradient_rules import BackwardContext
from ember.tensor import Tensor


class Gradients:
    """The gradients of one ``backward`` call: ``t.grad(grads)`` or ``grads.get(t)``."""

    def __init__(self, by_node: dict[Node, Any]) -> None:
        self._by_node = by_node

    def get(self, tensor: Any) -> Any:
        """The gradient of tracked leaf ``tensor`` (on the inner device), else None."""
        node = getattr(tensor, "_node", None)
        return None if node is None else self._by_node.get(node)

    def __len__(self) -> int:
        return len(self._by_node)

    def __contains__(self, tensor: Any) -> bool:
        return self.get(tensor) is not None

    def tensors(self) -> list:
        """The gradient tensors, in the order their leaves were created."""
        return [g for _, g in sorted(self._by_node.items(), key=lambda kv: kv[0].seq)]

    def map(self, fn: Any) -> Gradients:
        """Replace every gradient ``g`` by ``fn(g)``, in place (gradient clipping); returns self."""
        self._by_node = {node: fn(g) for node, g in self._by_node.items()}
        return self

    def __repr__(self) -> str:
        return f"Gradients({len(self)} tensors)"


class AutodiffStatistics(msgspec.Struct, frozen=True):
    """Counters of the autodiff actor.

    ``plan_hits``: backward calls that replayed a cached plan; ``plan_misses``: those that
    walked with plans on (recorded as a plan where the structure was new);
    ``plans_refused``: recorded walks that cannot be replayed (``plans.py`` says which);
    ``thread_cpu_s``: CPU time of the actor's thread in its jobs.
    """

    backward_calls: int
    nodes_run: int
    plan_hits: int
    plan_misses: int
    plans_refused: int
    plans_cached: int
    thread_cpu_s: float


class _Recompute:
    """Materializes what rules read: kept tensors, or recomputed ones (checkpointing)."""

    def __init__(self) -> None:
        self._memo: dict[Node, Any] = {}

    def inputs(self, node: Node) -> tuple:
        saved = node.saved_inputs
        if saved is None:
            raise EmberError(f"{node.op}: its backward rule reads inputs it did not declare")
        kept = node.rule.kept_inputs
        return tuple(None if s is None or (kept is not None and i not in kept) else self._value(s)
                     for i, s in enumerate(saved))

    def output(self, node: Node) -> Any:
        if node.saved_output is not None:
            return node.saved_output
        return self._recompute(node)

    def _value(self, saved: Any) -> Any:
        return self._recompute(saved) if isinstance(saved, Node) else saved

    def _recompute(self, node: Node) -> Any:
        if node.saved_inputs is None and node.op != SELECT:
            raise EmberError(f"{node.op}: its backward rule reads the output, which it did not "
                             f"declare (differentiable(..., output=True))")
        if node.op == SELECT:
            return self._recompute(node.parents[0])[node.attrs[0]]
        value = self._memo.get(node)
        if value is None:
            inputs = tuple(self._value(s) for s in node.saved_inputs)
            if isinstance(node.shape, tuple) and node.shape and isinstance(node.shape[0], tuple):
                value = multi_call(node.op, inputs, node.shape, node.dtype, node.attrs)
            else:
                value = call(node.op, inputs, node.shape, node.dtype, node.attrs, node.device)
            self._memo[node] = value
        return value

    def forget(self, node: Node) -> None:
        # Every consumer of this node's output has run: its recomputed value is done.
        self._memo.pop(node, None)


class AutodiffActor(JobActor):
    """Walks graphs backward on a thread of its own; one per process.

    ``backward`` does what only the caller can (checks, the seed, claiming the graph and
    finding its leaves), promises each leaf's gradient as a handle, queues a gate on every
    device the walk will touch (``actors/lanes.py``), posts one message and returns the
    ``Gradients`` at once. The actor's thread runs each rule and issues the gradient ops
    into those gates, so whatever the caller submits meanwhile runs after them; or, for a
    graph whose structure it has walked before, replays that walk's recorded messages
    (``plans.py``; ``EMBER_BACKWARD_PLANS=0`` switches plans off). Walks inside an
    ``em.graphed`` step, or with ``EMBER_EAGER=1``, run on the caller's thread, unplanned.
    ``statistics()`` counts its work.
    """

    kind = "autodiff"

    def __init__(self) -> None:
        super().__init__()
        self.backward_calls = 0
        self.nodes_run = 0
        self.plan_hits = 0
        self.plan_misses = 0
        self.plans_refused = 0
        self.thread_cpu_s = 0.0
        # Cached backward plans (``plans.py``); None with EMBER_BACKWARD_PLANS=0.
        self.plans = plans.Cache() if plans.ENABLED else None

    def statistics(self) -> AutodiffStatistics:
        """Counters of the actor's work, and of its cache of backward plans."""
        return AutodiffStatistics(self.backward_calls, self.nodes_run, self.plan_hits,
                                  self.plan_misses, self.plans_refused,
                                  0 if self.plans is None else len(self.plans),
                                  self.thread_cpu_s)

    def backward(self, root: Any, grad: Any = None) -> Gradients:
        node = root._node
        if node is None:
            raise EmberError("backward: this tensor is not tracked (no tensor it was computed "
                             "from called require_grad() on an autodiff device)")
        if grad is None:
            if root.numel() != 1:
                raise ShapeError(f"backward: needs an explicit grad for a non-scalar output of "
                                 f"shape {root.shape}; help: reduce it first, e.g. "
                                 f"loss.sum().backward()")
            with no_record():
                grad = ones_like(root)
        else:
            _check_seed(root, grad)
        # Every op the walk issues would find the same first frame outside ember: this
        # call's caller. Found once, not by a stack walk per op.
        site = user_site()
        order, index, leaves, devices = _claim(node)
        self.backward_calls += 1
        if EAGER or not ACTORS or any(d.actor._in_step for d in devices):
            # On the caller's thread, maybe inside an autocast block: the dtypes the forward
            # recorded decide the gradient ops (the actor's thread is outside every block).
            with self._lock, no_record(), pinned_site(site), mixed_precision.suspended():
                return Gradients(self._walk(node, grad, _to_inner))
        promised = {leaf: Tensor._new(next_id(), leaf.shape, leaf.dtype, leaf.device.inner)
                    for leaf in leaves}
        outs: dict[Any, list[int]] = {d.actor: [] for d in devices}
        for leaf, handle in promised.items():
            outs[leaf.device.actor].append(handle._id)
        first_id = next_id()
        lanes = {actor: actor.open_lane(tuple(ids), first_id) for actor, ids in outs.items()}
        self.post((node, grad, {leaf: (h._id, h.shape, h.dtype, h.device)
                                 for leaf, h in promised.items()}, lanes, site,
                    threading.current_thread().name, order, index))
        return Gradients(promised)

    def run_job(self, job: tuple) -> None:
        cpu = time.thread_time()
        self._walk_job(*job)
        self.thread_cpu_s += time.thread_time() - cpu

    def _walk_job(self, root: Node, seed: Any, promised: dict, lanes: dict, site: tuple,
                  poster: str, order: list[Node], index: dict[Node, int]) -> None:
        """One backward walk, or the replay of a plan recorded from one, its ops issued into
        ``lanes``; closes them whatever happens."""
        error = None
        traces = _trace.active()
        start = _trace.now_ns() if traces else 0
        try:
            key = plans.structure(order, index) if self.plans is not None else None
            plan = None if key is None else self.plans.get(key)
            env = None if plan is None else plans.bind(plan, order, seed, promised)
            recorder = None
            if env is None and self.plans is not None:
                self.plan_misses += 1
                if key is not None and plan is None:
                    recorder = plans.Recorder(order, seed, promised)
            with (no_record(), pinned_site(site),
                  _lanes.fill(lanes if recorder is None else recorder.tap(lanes))):
                if env is not None:
                    plans.replay(plan, env, order, lanes, site)
                    self.plan_hits += 1
                    self.nodes_run += plan.nodes_run
                else:
                    self._walk_into(root, seed, promised, recorder)
            if recorder is not None:
                plan = recorder.plan()
                if plan is None:
                    self.plans_refused += 1
                else:
                    self.plans.put(key, plan)
        except BaseException as exc:  # reaches the readers of the promised gradients
            error = kernel_error("backward", site, exc)
        finally:
            for lane in lanes.values():
                lane.close(error)
        if traces:
            event = _trace.TraceEvent("backward", "autodiff", threading.current_thread().name,
                                      start, _trace.now_ns() - start, format_site(site), "actor",
                                      poster)
            for t in traces:
                t.record(event)

    def _walk_into(self, root: Node, seed: Any, promised: dict,
                   recorder: plans.Recorder | None) -> None:
        """Walk the graph, then issue each promised leaf gradient under its promised id."""
        by_leaf = self._walk(root, seed, recorder=recorder)
        seed = None
        for leaf, (out, shape, dtype, device) in promised.items():
            g = by_leaf.pop(leaf, None)
            if g is None:  # reached, but its path carried no gradient
                issue("full", (), shape, dtype, (0.0 if dtype.kind == "f" else 0,), device, out)
            else:
                issue("alias", (g,), shape, dtype, (), device, out)
            g = None

    def _walk(self, root: Node, seed: Any, finish: Any = None,
              recorder: plans.Recorder | None = None) -> dict[Node, Any]:
        """The leaves' gradients of the graph under ``root`` (each passed through
        ``finish`` as it is found, if given), issuing the gradient ops (and telling
        ``recorder`` where it released each node's tensors)."""
        grads: dict[Node, Any] = {root: seed}
        heap = [(-root.seq, root)]
        leaves: dict[Node, Any] = {}
        recompute = _Recompute()
        while heap:
            _, node = heapq.heappop(heap)
            grad = grads.pop(node)
            if node.op == LEAF:
                leaves[node] = grad if finish is None else finish(grad)
                continue
            if node.op == SELECT:
                parent = node.parents[0]
                slots = grads.get(parent)
                if slots is None:
                    slots = grads[parent] = [None] * len(parent.shape)
                    heapq.heappush(heap, (-parent.seq, parent))
                index = node.attrs[0]
                slots[index] = grad if slots[index] is None else slots[index] + grad
                continue
            input_grads = node.rule.fn(BackwardContext(node, recompute),
                                       tuple(grad) if isinstance(grad, list) else grad)
            for parent, g, shape, dtype in zip(node.parents, input_grads, node.input_shapes,
                                               node.input_dtypes):
                if parent is None or g is None:
                    continue
                if g.shape != shape or g.dtype is not dtype:  # else fits already: no call
                    g = _fit(g, shape, dtype)
                if parent in grads:
                    grads[parent] = grads[parent] + g
                else:
                    grads[parent] = g
                    heapq.heappush(heap, (-parent.seq, parent))
            # Holds no gradient past its node: a leaf's gradient that only the walk
            # holds moves to the inner device without an op (_to_inner).
            input_grads = g = grad = None
            node.saved_inputs = None
            node.saved_output = None
            recompute.forget(node)
            if recorder is not None:
                recorder.release(node)
            self.nodes_run += 1
        return leaves


def _claim(root: Node) -> tuple[list[Node], dict[Node, int], list[Node], list[Any]]:
    """Mark the graph under ``root`` consumed (a second backward through it raises here, on
    the caller's line); its nodes in the order a depth-first search from ``root`` finds
    them, each one's position in that order, its leaves (in creation order) and the devices
    it spans. The order depends on the graph's structure alone (``plans.structure``)."""
    index = {root: 0}
    order = [root]
    stack = [root]
    leaves: list[Node] = []
    devices: dict[str, Any] = {}
    claimed: list[Node] = []
    while stack:
        node = stack.pop()
        devices.setdefault(node.device.name, node.device)
        if node.op == LEAF:
            leaves.append(node)
            continue
        if node.consumed:
            raise EmberError(f"backward: the graph through {node.op} was already consumed by "
                             f"an earlier backward(); run the forward pass again")
        claimed.append(node)
        for parent in node.parents:
            if parent is not None and parent not in index:
                index[parent] = len(order)
                order.append(parent)
                stack.append(parent)
    for node in claimed:
        node.consumed = True
    leaves.sort(key=lambda leaf: leaf.seq)
    return order, index, leaves, list(devices.values())


def _check_seed(root: Any, grad: Any) -> None:
    if not isinstance(grad, Tensor):
        raise EmberError(f"backward: grad must be a tensor, got {type(grad).__name__}")
    if grad.shape != root.shape:
        raise ShapeError(f"backward: grad of shape {grad.shape} does not match the output's "
                         f"shape {root.shape}")
    if grad.device.name != root.device.name:
        raise DeviceError(f"backward: grad is on {grad.device}, the output on {root.device}")


def _fit(grad: Any, shape: tuple, dtype: Any) -> Any:
    """Sum ``grad`` over the dims broadcasting added, and cast it to its input's dtype."""
    if grad.shape != shape:
        extra = len(grad.shape) - len(shape)
        if extra < 0:
            raise EmberError(f"backward: a rule returned a gradient of shape {grad.shape} for an "
                             f"input of shape {shape} (fewer dims: a bug in that rule)")
        inner = tuple(extra + i for i, size in enumerate(shape)
                      if size == 1 and grad.shape[extra + i] != 1)
        if inner:
            grad = grad.sum(dim=tuple(range(extra)) + inner, keepdim=True)
        elif extra:  # only added leading dims (a bias): summed away, no reshape after
            grad = grad.sum(dim=tuple(range(extra)))
        if grad.shape != shape:  # a keepdim sum may have made it already: no op for nothing
            grad = grad.reshape(shape)
    if grad.dtype is not dtype and dtype.kind == "f":
        grad = grad.astype(dtype)
    return grad


def _references_of_a_passed_local(value: Any) -> int:
    return sys.getrefcount(value)


def _count_when_only_passed() -> int:
    value = object()
    return _references_of_a_passed_local(value)


# sys.getrefcount of a handle that only the caller's local and this call hold (measured,
# not assumed: the count differs between Python versions).
_ONLY_PASSED = _count_when_only_passed()


def _to_inner(grad: Any) -> Any:
    """A leaf's gradient as a handle on the inner device (untracked, where gradients live).

    A handle that nothing else holds (the common case: a rule's fresh result) moves there
    itself, as nothing can see it change; a shared one (an add's gradient also flowing
    elsewhere) gets a new handle on the same buffer, one op.
    """
    inner = grad.device.inner
    if sys.getrefcount(grad) <= _ONLY_PASSED:
        grad.device = inner
        return grad
    return call("alias", (grad,), grad.shape, grad.dtype, (), inner)


# EMBER_AUTODIFF_ACTOR=0: walks run on the caller's thread (for comparison and debugging).
ACTORS = os.environ.get("EMBER_AUTODIFF_ACTOR", "1") not in ("", "0")
ACTOR = AutodiffActor()
