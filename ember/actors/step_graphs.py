"""Steps of ``em.graphed``: recognised when they repeat, captured once, replayed.

The worker collects a step's messages (ops and drops between ``StepBegin`` and
``StepEnd``) and runs them as one batch, so the planner fuses them the same way every
time. A step's *signature* is its messages with tensor ids renumbered (a produced
value by its order in the step, an input read from before the step by its order of
first read) plus each input's shape and dtype: two steps with the same signature
launch the same kernels on the same sizes and scalars.

The first step of a signature runs as it is (compiling and autotuning what it needs);
the second is captured by the backend's capturer (``backend.graph_capturer()``; only
CUDA has one) and launched; later ones copy their inputs into the graph's own input
buffers and replay it. A step runs as it is, uncaptured, when:

- its signature differs from every captured one (other shapes, dtypes, ops, scalar
  values: a learning rate or bias correction that changes every step makes every step
  new), or the device holds ``MAX_GRAPHS`` graphs already;
- it reads, syncs or transfers inside (a host read cannot be captured): the worker runs
  it at once instead of collecting it, so the reader never waits on a step that would
  only end after the read (an upload inside a step, from any thread, runs ahead of the
  step instead: it reads nothing, and the step reads it as an input);
- an input failed, or its capture failed (an op the capture refuses): that signature
  is refused from then on.

A graph writes its outputs into the same buffers at every replay, so before a replay
an output of the last one that a tensor still holds is copied out to a buffer of its
own: tensors stay immutable values.

A pure step (``em.graphed(fn, pure=True)``) also names its tensor arguments and its
results at its end. Once captured, its caller replays it without running ``fn``
(``ReplayStep``): the graph's inputs are those arguments, and the tensors the step read
besides them, which must still exist; its results are stored under new ids.

Index checks the step left on the device (``deferred.py``) are captured with it: their
kernels record into slots the graph keeps, and each replay makes them pending again,
tainting the outputs they tainted at capture (and all outputs with the inputs' taints).
"""

from __future__ import annotations

from typing import Any

from ember.errors import KernelError
from ember.ir import Call, Drop, MultiCall, ReplayStep, StepEnd

# Graphs a device keeps (each holds its own memory for as long as it lives).
MAX_GRAPHS = 8


def signature(messages: list, stored: Any) -> tuple[tuple, list[int], list[int]] | None:
    """(key, input ids, produced ids) of a step, or None if it reads a value that
    ``stored(id)`` does not know (a failed or missing input) or holds unhashable attrs.

    ``stored(id)`` gives (shape, dtype name) of a value stored before the step, or None.
    Drops of values the step neither reads nor makes change no kernel: left out.
    """
    # A tensor id's reference: its order among the values the step produced (>= 0), or
    # -1 - its order among the inputs. One dict, looked up inline: this runs per message
    # of every step (400 of an encoder layer's).
    refs: dict[int, int] = {}
    inputs: list[int] = []
    produced: list[int] = []
    parts: list[tuple] = []
    append = parts.append
    for msg in messages:
        kind = type(msg)
        if kind is Call or kind is MultiCall:
            read_ids = msg.inputs
            for i in read_ids:
                if i not in refs:
                    refs[i] = -1 - len(inputs)
                    inputs.append(i)
            if len(read_ids) == 1:  # most ops: no comprehension's frame (Python 3.11)
                read = (refs[read_ids[0]],)
            elif len(read_ids) == 2:
                read = (refs[read_ids[0]], refs[read_ids[1]])
            else:
                read = tuple([refs[i] for i in read_ids])
            if kind is Call:
                append((msg.op, msg.attrs, msg.shape, msg.dtype, read))
                refs[msg.out] = len(produced)
                produced.append(msg.out)
            else:
                append((msg.op, msg.attrs, msg.shapes, msg.dtypes, read))
                for out in msg.outs:
                    refs[out] = len(produced)
                    produced.append(out)
        elif kind is Drop:
            found = refs.get(msg.id)
            if found is not None:
                append(("drop", found))
    metas = []
    for tensor_id in inputs:
        meta = stored(tensor_id)
        if meta is None:
            return None
        metas.append(meta)
    key = (tuple(parts), tuple(metas))
    try:
        hash(key)
    except TypeError:
        return None
    return key, inputs, produced


class _Graph:
    """A captured step: the backend's graph, its input buffers, its outputs by the
    order the step produced them, and the ids that hold those outputs now."""

    __slots__ = ("checks", "copied", "donated", "graph", "holders", "memory", "outputs",
                 "statics", "taints")

    def __init__(self, graph: Any, statics: list, outputs: dict[int, Any], memory: Any) -> None:
        self.graph = graph
        self.statics = statics
        self.copied: list[int | None] = [None] * len(statics)  # the id each static holds
        self.donated: set[int] = set()  # statics of inputs the step drops (may be donated)
        self.outputs = outputs
        self.holders: dict[int, int] = {}
        self.memory = memory  # the graph's own memory, alive as long as the graph
        self.checks: list = []  # (check, (op, site)) of the deferred checks captured
        self.taints: dict[int, frozenset] = {}  # output order -> captured checks tainting it


class _Pure:
    """How a pure step's graph replays without its function: where each graph input
    comes from (``("arg", position)`` among the step's tensor arguments, or ``("id",
    tensor id)`` of a tensor it read besides them) and which produced value each result
    is (its order among the step's produced values)."""

    __slots__ = ("entry", "ops", "produced", "results", "sources")

    def __init__(self, entry: _Graph, sources: list, results: list[int], produced: int,
                 ops: int) -> None:
        self.entry, self.sources, self.results = entry, sources, results
        self.produced, self.ops = produced, ops


def _pure_plan(end: StepEnd, entry: _Graph, messages: list, inputs: list[int],
               produced: list[int], uploaded: set[int]) -> _Pure | None:
    """The replay plan of a captured pure step; None when a result is not a value the
    step made and stored (an argument handed back, a result twice) or when it read a
    value uploaded inside it besides its arguments (one that is new at every call):
    such a step keeps running its function."""
    position = {i: k for k, i in enumerate(produced)}
    results = [position.get(i) for i in end.results]
    if (any(k is None or k not in entry.outputs for k in results)
            or len(set(results)) != len(results)):
        return None
    args = {i: k for k, i in reversed(list(enumerate(end.args)))}
    if any(i in uploaded and i not in args for i in inputs):
        return None
    sources = [("arg", args[i]) if i in args else ("id", i) for i in inputs]
    ops = sum(1 for m in messages if type(m) is not Drop)
    return _Pure(entry, sources, results, len(produced), ops)


_SEEN, _REFUSED = "seen", "refused"
_NONE: frozenset = frozenset()


def _keep_checks(entry: _Graph, taints: Any, captured: list, produced: list[int]) -> None:
    """The checks a capture made are the graph's: their slots stay, and which outputs
    each taints is remembered for the replays."""
    taints.deferred.keep(captured)
    entry.checks = [(check, taints.pending[check]) for check in captured]
    mine = frozenset(captured)
    for k, tensor_id in enumerate(produced):
        taint = taints.of.get(tensor_id, _NONE) & mine
        if taint:
            entry.taints[k] = taint


class StepGraphs:
    """The step signatures of one device and what became of each."""

    def __init__(self, capturer: Any) -> None:
        self.capturer = capturer
        self._entries: dict[tuple, Any] = {}
        self._graphs = 0
        self.captures = 0
        self.replays = 0
        self.refusals = 0
        # Captured pure steps by token; read by callers (is it replayable alone?).
        self.pure: dict[int, _Pure] = {}

    def run(self, executor: Any, messages: list, end: StepEnd | None = None,
            uploaded: set[int] = _NONE) -> None:
        """Run one step's messages on ``executor``'s worker: as they are, captured or replayed;
        ``end`` (its StepEnd) names a pure step; ``uploaded``: values uploaded while the
        step was open (run ahead of it)."""
        found = signature(messages, executor.stored_meta)
        if found is None:
            return executor.run_messages(messages)
        key, inputs, produced = found
        entry = self._entries.get(key)
        if isinstance(entry, _Graph):
            self._replay(executor, entry, messages, inputs, produced)
        elif entry is None or entry is _REFUSED or self._graphs >= MAX_GRAPHS:
            if entry is None and len(self._entries) < 64 * MAX_GRAPHS:
                self._entries[key] = _SEEN
            return executor.run_messages(messages)
        else:
            entry = self._capture(executor, key, messages, inputs, produced)
        # A pure step whose graph exists (captured now, or for another step of the same
        # signature: another model's copy of the same layer) replays alone from now on.
        if entry is not None and end is not None and end.token and end.token not in self.pure:
            plan = _pure_plan(end, entry, messages, inputs, produced, uploaded)
            if plan is not None:
                self.pure[end.token] = plan

    def replay_pure(self, executor: Any, msg: ReplayStep) -> None:
        """Replay pure step ``msg.token`` on its arguments (on the worker)."""
        plan = self.pure[msg.token]
        env, failed = executor.env, executor.failed
        inputs = [msg.args[where] if kind == "arg" else where for kind, where in plan.sources]
        error = next((failed[i] for i in inputs if i in failed), None)
        if error is None and any(i not in env for i in inputs):
            error = KernelError("graphed: a replay of a pure step found a tensor it read "
                                "besides its arguments gone (dropped, or replaced by a new "
                                "value); pass every tensor that changes between calls as an "
                                "argument")
        if error is not None:
            for out in msg.outs:
                failed[out] = error
            return
        produced: list[int | None] = [None] * plan.produced
        for out, k in zip(msg.outs, plan.results):
            produced[k] = out
        self._replay(executor, plan.entry, [], inputs, produced, plan.ops)

    def _capture(self, executor: Any, key: tuple, messages: list, inputs: list[int],
                 produced: list[int]) -> _Graph | None:
        env = executor.env
        originals = {i: env[i] for i in inputs}
        capturer = self.capturer
        taints = executor.taints
        with capturer.memory() as memory:
            statics = [capturer.copy(originals[i]) for i in inputs]
            for i, static in zip(inputs, statics):
                executor.swap(i, static)
            graph = None
            if taints is not None:
                taints.captured = []
            try:
                capturer.begin()
                try:
                    executor.run_messages(messages)
                finally:
                    graph = capturer.end()
            except Exception:
                graph = None
            finally:
                captured = taints.captured if taints is not None else None
                if taints is not None:
                    taints.captured = None
            if graph is not None and not any(i in executor.failed for i in produced):
                capturer.launch(graph)
                for i in inputs:  # the inputs' own buffers again, for whoever holds them
                    if i in env:
                        executor.swap(i, originals[i])
                outputs = {k: env[i] for k, i in enumerate(produced) if i in env}
                entry = self._entries[key] = _Graph(graph, statics, outputs, memory)
                entry.holders = {k: produced[k] for k in outputs}
                dropped = {m.id for m in messages if type(m) is Drop}
                entry.donated = {p for p, i in enumerate(inputs) if i in dropped}
                if captured:
                    _keep_checks(entry, taints, captured, produced)
                self._graphs += 1
                self.captures += 1
                return entry
        # Refused: forget what the capture stored and run the step as it is.
        for i in produced:
            executor.forget(i)
        for i, value in originals.items():
            if i in env:
                executor.swap(i, value)
            else:  # dropped inside the capture: stored again, for the step's own run
                executor.store(i, value)
        self._entries[key] = _REFUSED
        self.refusals += 1
        executor.run_messages(messages)
        return None

    def _replay(self, executor: Any, entry: _Graph, messages: list, inputs: list[int],
                produced: list[int | None], ops: int = 0) -> None:
        """Launch ``entry`` on ``inputs``, its outputs stored under ``produced`` (None:
        not kept)."""
        env = executor.env
        capturer = self.capturer
        # A held output whose holder this step reads and drops (a parameter the step
        # replaces) is read into its static below, before the launch overwrites it, and
        # never again: no copy out.
        dying = {m.id for m in messages if type(m) is Drop} if messages else _NONE
        held = [(holder, array) for k, array in entry.outputs.items()
                if (holder := entry.holders.get(k)) is not None and holder not in dying
                and env.get(holder) is array]
        if held:
            copies = capturer.copy_out([array for _, array in held])
            for (holder, _), copy in zip(held, copies, strict=True):
                executor.swap(holder, copy)
        copied = entry.copied
        for p, (static, i) in enumerate(zip(entry.statics, inputs)):
            # The same id holds the same value (ids are never reused, values never change),
            # unless the graph itself wrote this static (a buffer its step donated).
            if copied[p] != i or p in entry.donated:
                capturer.copy_into(static, env[i])
                copied[p] = i
        capturer.launch(entry.graph)
        entry.holders = {}
        for k, array in entry.outputs.items():
            if produced[k] is not None:
                executor.store(produced[k], array)
                entry.holders[k] = produced[k]
        taints = executor.taints
        if taints is not None and (entry.checks or taints.of):
            taints.replayed(entry.checks, inputs, {produced[k]: entry.taints.get(k, _NONE)
                                                   for k in entry.holders})
        executor.replayed(messages, produced, ops)
        self.replays += 1
