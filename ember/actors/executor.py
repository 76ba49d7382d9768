"""A device's executor: what runs the messages a device actor's mailbox hands out.

It owns the device's environment (tensor id -> buffer), the failed values, the checks a
GPU backend left on the device (``deferred.py``) and the counters; it plans each batch
with the backend's fusion planner and runs every message through the backend. Exactly
one thread runs it at a time: the worker, or a blocked reader holding the actor's turn
(``DeviceActor.read``). Step capture (``step_graphs.py``) talks to it directly.

Failure: an exception inside an op marks its outputs failed; anything computed from
them fails with the same error; every read of them raises ``KernelError``; everything
else carries on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import msgspec

from ember import tracing as _trace
from ember.actors import lanes as _lanes
from ember.actors.deferred import Taints
from ember.actors.step_graphs import StepGraphs
from ember.actors.waiter import Later, Waiter
from ember.dtype import storage_name
from ember.errors import KernelError, OutOfMemoryError
from ember.ir import (Barrier, Call, Check, Drop, Fetch, Gate, MultiCall, Receive,
                      ReplayStep, Send, StepBegin, StepEnd, Upload)
from ember.kernels import multi_update
from ember.kernels.fusion.planner import FusedGroup
from ember.sites import user_site

# The executor reports progress (and so wakes blocked submitters) every so many ops.
_PROGRESS_EVERY = 256


def format_site(site: tuple[str, int]) -> str:
    return f"{site[0]}:{site[1]}"


def kernel_error(op: str, site: tuple[str, int], cause: BaseException) -> KernelError:
    where = format_site(site)
    kind = OutOfMemoryError if isinstance(cause, MemoryError) else KernelError
    err = kind(f"{op} failed: {type(cause).__name__}: {cause}\n  created at {where}", op, where)
    err.__cause__ = cause
    return err


def fresh(err: KernelError) -> KernelError:
    """A new exception per read, so tracebacks of different readers do not pile up."""
    copy = type(err)(str(err), err.op, err.site)
    copy.__cause__ = err.__cause__
    return copy


class Executor:
    """The worker-side state of one device and the handlers of its messages."""

    def __init__(self, name: str, backend: Any, waiters: dict[int, Waiter],
                 transfers: dict[int, tuple[Any, Waiter]], fusion: bool,
                 on_progress: Callable[[int], None],
                 waiting_on_others: Callable[[], Any]) -> None:
        self.name = name
        self.backend = backend
        self._waiters = waiters  # ticket -> waiter, registered by the callers
        self._transfers = transfers  # ticket -> (source actor, waiter), shared by all actors
        self._on_progress = on_progress
        self._waiting_on_others = waiting_on_others
        self._backend_read_later: Any = getattr(backend, "read_later", None)
        self._synchronize: Any = getattr(backend, "synchronize", None)
        self._env: dict[int, Any] = {}
        self._failed: dict[int, KernelError] = {}
        deferred = getattr(backend, "deferred", None)
        self._taints = Taints(deferred) if deferred is not None else None
        self.executed = 0
        self.kernels = 0
        self.bytes_held = 0
        self.peak_bytes_held = 0
        self.groups = 0
        self.ops_fused = 0
        self.gates = 0  # gates queued and not yet reached (lanes.py)
        make_planner = getattr(backend, "fusion_planner", None)
        self.planner = make_planner() if fusion and make_planner is not None else None
        # em.graphed's steps: the messages of the open step (None: none open), and the
        # backend's capture of repeated steps (None: it has none; steps run as they are).
        self._step: list | None = None
        self._step_uploads: set[int] = set()  # uploads run ahead of the open step
        self.stepping = False  # set by the first step_begin: batches then look for steps
        make_capturer = getattr(backend, "graph_capturer", None)
        self.graphs = StepGraphs(make_capturer()) if make_capturer is not None else None

    # ----- batches -------------------------------------------------------------------

    def run_batch(self, batch: list) -> None:
        """Run a batch the mailbox handed out, in order."""
        if self.stepping:
            self._run_with_steps(batch)
        else:
            self.run_messages(batch)

    def _run_with_steps(self, batch: list) -> None:
        """Run ``batch``, collecting the messages of steps (which may span batches) and
        running each step whole at its end."""
        plain: list = []
        for at, msg in enumerate(batch):
            try:
                plain = self._collect(msg, plain)
            except BaseException as exc:
                self.abandon(self._step or (), exc)
                self.abandon(batch[at + 1:], exc)
                self._step = None
                raise
        self.run_messages(plain)

    def run_open_step(self) -> None:
        """Run the open step's messages so far as they are (a reader needs one of them)."""
        step, self._step = self._step, None
        if step:
            self.run_messages(step)

    def _collect(self, msg: Any, plain: list) -> list:
        """Add ``msg`` to the open step or to ``plain`` (the messages outside steps still to
        run), running what a step boundary ends; returns ``plain``."""
        kind = type(msg)
        if kind is StepBegin:
            plain.extend(self._step or ())  # a step left open runs as it is
            self.run_messages(plain)
            plain = []
            self._step = []
            self._step_uploads = set()
        elif kind is StepEnd:
            if self._step is not None:
                step, self._step = self._step, None
                if self.graphs is not None:
                    self.graphs.run(self, step, msg, self._step_uploads)
                else:
                    self.run_messages(step)
        elif self._step is None:
            plain.append(msg)
        elif kind is Call or kind is MultiCall or kind is Drop:
            self._step.append(msg)
        elif kind is Upload:
            # Reads nothing, so it may run ahead of the open step: a batch a loader
            # thread uploads meanwhile (or a value the step itself uploads) becomes
            # one of the step's inputs instead of keeping the step from its graph.
            self.run_messages([msg])
            self._step_uploads.add(msg.out)
        else:
            # A read, sync or transfer inside a step: the step so far runs now,
            # uncaptured (a reader must not wait for a step's end that comes after it).
            plain.extend(self._step)
            plain.append(msg)
            self._step = None
        return plain

    def run_messages(self, batch: list) -> None:
        """Plan ``batch`` and run its messages."""
        if not batch:
            return
        if self.gates:
            # Planned apart at each gate: the planner cannot see what a lane reads, so a
            # value dropped after the gate must not look dead before it.
            cut = next((i for i, msg in enumerate(batch) if type(msg) is Gate), None)
            if cut is not None and len(batch) > 1:
                self.run_messages(batch[:cut])
                self.run_messages([batch[cut]])
                self.run_messages(batch[cut + 1:])
                return
        if self.planner is not None:
            batch = self.planner.plan(batch, self._stored_dtype, self._stored_shape)
        handlers = self._handlers
        traces = _trace.active()
        i = 0
        try:
            for i, msg in enumerate(batch, 1):
                if traces:
                    start = _trace.now_ns()
                    handlers[type(msg)](self, msg)
                    self._trace_event(traces, msg, start)
                else:
                    handlers[type(msg)](self, msg)
                if i % _PROGRESS_EVERY == 0:
                    self._on_progress(_PROGRESS_EVERY)
        except BaseException as exc:  # Ctrl-C in a reader's run, or a runtime bug
            self.abandon(batch[max(i - 1, 0):], exc)
            raise

    def run_one(self, msg: Any) -> None:
        """Run one op or upload submitted while nothing was queued (``run_at_once``)."""
        if _trace.active():
            if msg.site is None:
                msg = msgspec.structs.replace(msg, site=user_site())
            self.run_messages([msg])
        elif type(msg) is Call:
            self._on_call(msg)
        else:
            self._on_upload(msg)

    def drop_now(self, tensor_id: int) -> None:
        """Free a value whose handle died (its drop taken off the queue by ``run_at_once``)."""
        if self._taints is not None:
            self._taints.of.pop(tensor_id, None)
        value = self._env.pop(tensor_id, None)
        if value is None:
            self._failed.pop(tensor_id, None)
            return
        self.bytes_held -= self.backend.release(value)

    @property
    def in_step(self) -> bool:
        """Whether an ``em.graphed`` step is being collected (its ops must not run apart)."""
        return self._step is not None

    def abandon(self, messages: Any, cause: BaseException) -> None:
        """Fail what ``messages`` would have made and answer their waiters: a run stopped
        by an exception that is not an op's (each failed read then says so, never hangs)."""
        error = KernelError(f"interrupted before it ran: {type(cause).__name__}: {cause}")
        error.__cause__ = cause
        for msg in messages:
            kind = type(msg)
            if kind is FusedGroup:
                self.abandon(msg.members, cause)
            elif kind is Call or kind is Upload or kind is Receive:
                self._fail_unmade(msg.out, error)
                if kind is Receive:
                    self._transfers.pop(msg.ticket, None)
            elif kind is MultiCall or kind is ReplayStep:
                for out in msg.outs:
                    self._fail_unmade(out, error)
            elif kind is Fetch or kind is Check or kind is Barrier or kind is Send:
                waiter = self._waiters.pop(msg.ticket, None)
                if waiter is not None and not waiter.done:
                    waiter.resolve(error=error)
            elif kind is Gate:
                self.gates -= 1
                _lanes.take(msg.token)
                for out in msg.outs:
                    self._fail_unmade(out, error)

    # ----- replies (on whoever holds the actor's turn) ---------------------------------

    def read(self, tensor_id: int) -> Any:
        """A computed tensor's data as a host array, or a ``Later`` (a GPU's copy in
        flight, which the reader waits for outside the turn); raises its error."""
        later = self._read_later(tensor_id)
        if later is not None:
            return later
        self._resolve_if_tainted(tensor_id)
        err = self._failed.get(tensor_id)
        if err is not None:
            raise fresh(err)
        try:
            return self.backend.to_host(self._env[tensor_id])
        except Exception as exc:
            raise kernel_error("read", ("<runtime>", 0), exc) from None

    def check_now(self, tensor_id: int) -> None:
        """Raise the error of a tensor whose computation failed (no data moves)."""
        self._resolve_if_tainted(tensor_id)
        err = self._failed.get(tensor_id)
        if err is not None:
            raise fresh(err)

    def synchronize(self) -> None:
        """Wait until the device has run everything launched so far; resolve its checks."""
        try:
            if self._synchronize is not None:
                self._synchronize()
            if self._taints is not None and self._taints.pending:
                self._resolve_checks()
        except Exception as exc:
            raise kernel_error("sync", ("<runtime>", 0), exc) from None

    def computed(self, tensor_id: int) -> bool:
        """Whether a read of ``tensor_id`` can be served without running anything: its
        value (or failure) is here and no pending check taints it."""
        if tensor_id in self._failed:
            return True
        if tensor_id not in self._env:
            return False
        taints = self._taints
        return taints is None or tensor_id not in taints.of

    # ----- what StepGraphs reads and writes ------------------------------------------

    @property
    def env(self) -> dict[int, Any]:
        return self._env

    @property
    def failed(self) -> dict[int, KernelError]:
        return self._failed

    def stored_meta(self, tensor_id: int) -> tuple[tuple[int, ...], str] | None:
        """(shape, dtype name) of a computed value, None if missing or failed."""
        value = self._env.get(tensor_id)
        return None if value is None else (tuple(value.shape), storage_name(value.dtype))

    def store(self, tensor_id: int, value: Any) -> None:
        self._env[tensor_id] = value
        self.bytes_held += self.backend.owned_nbytes(value)
        if self.bytes_held > self.peak_bytes_held:
            self.peak_bytes_held = self.bytes_held

    def swap(self, tensor_id: int, value: Any) -> None:
        """Hold ``value`` under a stored ``tensor_id`` instead (an equal copy)."""
        owned = self.backend.owned_nbytes
        self.bytes_held += owned(value) - owned(self._env[tensor_id])
        self._env[tensor_id] = value

    @property
    def taints(self) -> Taints | None:
        """The checks left on the device and what they taint (None: the backend leaves none)."""
        return self._taints

    def forget(self, tensor_id: int) -> None:
        """Drop what a refused capture stored under ``tensor_id``."""
        self._failed.pop(tensor_id, None)
        if self._taints is not None:
            self._taints.of.pop(tensor_id, None)
        value = self._env.pop(tensor_id, None)
        if value is not None:
            self.bytes_held -= self.backend.owned_nbytes(value)

    def replayed(self, messages: list, produced: list[int | None], ops: int = 0) -> None:
        """Count a replayed step's ops (``ops`` more than ``messages`` holds) and run its
        drops of values it did not make."""
        made = set(produced)
        for msg in messages:
            kind = type(msg)
            if kind is Drop:
                if msg.id not in made:
                    self._on_drop(msg)
            else:
                self.executed += 1
        self.executed += ops
        self.kernels += 1

    # ----- handlers ------------------------------------------------------------------

    def _fail_unmade(self, tensor_id: int, error: KernelError) -> None:
        if tensor_id not in self._env and tensor_id not in self._failed:
            self._failed[tensor_id] = error

    def _trace_event(self, traces: list, msg: Any, start: int) -> None:
        kind = type(msg)
        category = "op"
        if kind is Call or kind is MultiCall:
            name, site = msg.op, format_site(msg.site)
        elif kind is FusedGroup:
            name = "+".join(m.op for m in msg.members)
            site = ", ".join(dict.fromkeys(format_site(m.site) for m in msg.members))
            category = "group"
        elif kind is Upload or kind is Receive:
            name, site = kind.__name__.lower(), format_site(msg.site)
        else:
            name, site = kind.__name__.lower(), ""
        event = _trace.TraceEvent(name, self.name, threading.current_thread().name, start,
                                  _trace.now_ns() - start, site, category)
        for t in traces:
            t.record(event)

    def _inputs_failed(self, inputs: tuple[int, ...]) -> KernelError | None:
        failed = self._failed
        for i in inputs:
            if i in failed:
                return failed[i]
        return None

    def _on_call(self, msg: Call) -> None:
        self.executed += 1
        if self._failed:
            err = self._inputs_failed(msg.inputs)
            if err is not None:
                self._failed[msg.out] = err
                return
        env = self._env
        ids = msg.inputs
        # Most ops read one or two values: no comprehension's frame (Python 3.11).
        if len(ids) == 2:
            args = [env[ids[0]], env[ids[1]]]
        elif len(ids) == 1:
            args = [env[ids[0]]]
        else:
            args = [env[i] for i in ids]
        try:
            value = self.backend.run(msg, args)
        except Exception as exc:
            # No site: an op run at once, whose caller's stack is still below this frame.
            self._failed[msg.out] = kernel_error(msg.op, msg.site or user_site(), exc)
            self._taint((), (), msg.op, msg.site)  # checks it made before it failed
            return
        self.kernels += 1
        env[msg.out] = value  # store(), inlined: the path of every op
        self.bytes_held += self.backend.owned_nbytes(value)
        if self.bytes_held > self.peak_bytes_held:
            self.peak_bytes_held = self.bytes_held
        if self._taints is not None:
            self._taint(msg.inputs, (msg.out,), msg.op, msg.site)

    def _stored_dtype(self, tensor_id: int) -> str | None:
        value = self._env.get(tensor_id)
        return None if value is None else storage_name(value.dtype)

    def _stored_shape(self, tensor_id: int) -> tuple[int, ...] | None:
        value = self._env.get(tensor_id)
        return None if value is None else tuple(value.shape)

    def _on_fused(self, group: FusedGroup) -> None:
        members = group.members
        if self._failed and self._inputs_failed(group.inputs) is not None:
            return self._run_unfused(members)
        env = self._env
        try:
            values = self.backend.run_fused(group, self.planner.program(group),
                                            [env[i] for i in group.inputs])
        except Exception:
            return self._run_unfused(members)
        self.executed += len(members)
        self.kernels += 1
        self.groups += 1
        self.ops_fused += len(members)
        # Donors are dead and read by nothing later: drop them now (their own Drops, later
        # in the batch, find nothing). Uncounted before the outputs, which may live in their
        # buffers, are counted; released after those are stored, so the pool sees an
        # output's reference and never takes back a buffer an output lives in.
        dead = [env.pop(donor) for donor in group.donors]
        self.bytes_held -= sum(map(self.backend.owned_nbytes, dead))
        for tensor_id, value in values:
            self.store(tensor_id, value)
        if self._taints is not None:
            self._taint(group.inputs, [tensor_id for tensor_id, _ in values], "fused", None)
        while dead:
            value = dead.pop()  # a local, as release expects of its caller
            self.backend.release(value)

    def _run_unfused(self, members: tuple) -> None:
        # A failure fails only what depends on it: members run one by one (kernels are
        # pure, so running them again is safe) and each failure marks its own outputs.
        for member in members:
            self._on_call(member)

    def _on_multi_call(self, msg: MultiCall) -> None:
        self.executed += 1
        err = self._inputs_failed(msg.inputs) if self._failed else None
        if err is not None and msg.op == multi_update.OP and self._keep_last_good(msg):
            return
        if err is None:
            env = self._env
            try:
                values = self.backend.run(msg, [env[i] for i in msg.inputs])
            except Exception as exc:
                err = kernel_error(msg.op, msg.site, exc)
                self._taint((), (), msg.op, msg.site)
        if err is not None:
            for out in msg.outs:
                self._failed[out] = err
            return
        self.kernels += 1
        for out, value in zip(msg.outs, values, strict=True):
            self.store(out, value)
        self._taint(msg.inputs, msg.outs, msg.op, msg.site)

    def _keep_last_good(self, msg: MultiCall) -> bool:
        """An optimizer update whose gradients failed (a bad batch) leaves every parameter
        and state at its last good value: each output names its input's buffer. The
        failure still reaches whoever reads that step's loss or gradients."""
        kept = multi_update.last_good_inputs(msg)
        env = self._env
        if kept is None or any(i not in env for i in kept):
            return False
        for out, i, shape, dtype in zip(msg.outs, kept, msg.shapes, msg.dtypes, strict=True):
            alias = Call("alias", out, (i,), (), shape, dtype, msg.site)
            self.store(out, self.backend.run(alias, [env[i]]))
        return True

    def _taint(self, inputs: Any, outs: Any, op: str, site: Any) -> None:
        """After an op ran (or failed): taint ``outs`` with the checks it made and its
        inputs' (nothing to do, the common case, unless some are pending)."""
        taints = self._taints
        if taints is None or not (taints.of or taints.created):
            return
        taints.mark(inputs, outs, op, site)
        if taints.too_many():
            self._resolve_checks()

    def _resolve_if_tainted(self, tensor_id: int) -> None:
        if self._taints is not None and tensor_id in self._taints.of:
            self._resolve_checks()

    def _resolve_checks(self) -> None:
        """Resolve the deferred checks; fail every value a failed one spoiled."""
        try:
            failed = self._taints.resolve()
        except Exception as exc:  # the read itself failed: nothing tainted can be trusted
            error = kernel_error("check", ("<runtime>", 0), exc)
            errors = dict.fromkeys(self._taints.of, error)
            self._taints.of.clear()
            self._taints.pending.clear()
        else:
            made: dict[int, KernelError] = {}  # one error per failed check
            errors = {}
            for tensor_id, (op, site, cause) in failed.items():
                error = made.get(id(cause))
                if error is None:
                    error = made[id(cause)] = kernel_error(op, site, cause)
                errors[tensor_id] = error
        for tensor_id, error in errors.items():
            value = self._env.pop(tensor_id, None)
            if value is not None:
                self.bytes_held -= self.backend.release(value)
            self._failed[tensor_id] = error

    def _on_gate(self, msg: Gate) -> None:
        """Run the ops another actor promised here, once it has issued them all."""
        self.gates -= 1
        lane = _lanes.take(msg.token)
        messages, ran = lane.messages, 0
        while True:
            lane.ready.clear()  # before reading the length: no arrival goes unnoticed
            closed = lane.done.is_set()
            arrived = len(messages)
            if arrived > ran:
                self.run_messages(messages[ran:arrived])
                ran = arrived
            elif closed:
                break
            else:
                lane.awaited = True
                with self._waiting_on_others():
                    lane.ready.wait()
                lane.awaited = False
        if lane.error is not None:
            error = lane.error if isinstance(lane.error, KernelError) else kernel_error(
                "promised op", ("<runtime>", 0), lane.error)
            for out in msg.outs:
                self._fail_unmade(out, error)

    def _on_replay_step(self, msg: ReplayStep) -> None:
        self.graphs.replay_pure(self, msg)

    def _on_upload(self, msg: Upload) -> None:
        self.executed += 1
        try:
            self.store(msg.out, self.backend.upload(msg.data))
        except Exception as exc:
            self._failed[msg.out] = kernel_error("upload", msg.site, exc)

    def _on_drop(self, msg: Drop) -> None:
        self.drop_now(msg.id)

    def _on_fetch(self, msg: Fetch) -> None:
        waiter = self._waiters.pop(msg.ticket)
        try:
            value = self.read(msg.id)
        except KernelError as exc:
            waiter.resolve(error=exc)
            return
        waiter.resolve(value)

    def _read_later(self, tensor_id: int) -> Later | None:
        """The read of a stored value as a copy in flight that its reader waits for (a
        GPU backend's ``read_later``), the checks tainting it read along and judged
        by the reader; None where the read is made now. Passed checks stay pending
        here (resolved at a sync, a transfer or past ``MAX_PENDING``)."""
        value = self._env.get(tensor_id)
        if self._backend_read_later is None or value is None:
            return None
        taints = self._taints
        taint = taints.of.get(tensor_id) if taints is not None else None
        if not taint:
            return self._backend_read_later(value)
        origins = {check: taints.pending[check] for check in taint}

        def failed(errors: dict) -> None:
            # Rare, so the reader has the checks resolved now, as a read did before: their
            # slots reset for later replays, the values they spoiled failed; this value's
            # error is the one it raises.
            self.resolve_for_reader(tensor_id)
            check = next(check for check in taint if check in errors)  # as _resolve_checks
            op, site = origins[check]
            raise kernel_error(op, site, errors[check])

        return self._backend_read_later(value, taint, failed)

    # Set by the actor: resolve a tensor's checks from a reader's thread (a Check message,
    # or the reader's own turn).
    resolve_for_reader: Callable[[int], None]

    def _on_check(self, msg: Check) -> None:
        waiter = self._waiters.pop(msg.ticket)
        try:
            self.check_now(msg.id)
        except KernelError as exc:
            waiter.resolve(error=exc)
            return
        waiter.resolve()

    def _on_barrier(self, msg: Barrier) -> None:
        waiter = self._waiters.pop(msg.ticket)
        try:
            self.synchronize()
        except KernelError as exc:
            waiter.resolve(error=exc)
            return
        waiter.resolve()

    def _on_send(self, msg: Send) -> None:
        waiter = self._waiters.pop(msg.ticket)
        self._resolve_if_tainted(msg.id)
        err = self._failed.get(msg.id)
        if err is not None:
            waiter.resolve(error=err)
        else:
            waiter.resolve(self.backend.export(self._env[msg.id]))

    def _on_receive(self, msg: Receive) -> None:
        self.executed += 1
        source, waiter = self._transfers.pop(msg.ticket)
        try:
            source.flush()  # its Send may sit in a lane behind a gate nobody has woken for
            with self._waiting_on_others():
                exported = source.wait(waiter)
            value = self.backend.import_(exported, msg.shape, msg.dtype)
        except KernelError as exc:
            self._failed[msg.out] = exc
            return
        except Exception as exc:
            self._failed[msg.out] = kernel_error("to", msg.site, exc)
            return
        self.kernels += 1
        self.store(msg.out, value)

    _handlers = {
        Call: _on_call,
        MultiCall: _on_multi_call,
        Upload: _on_upload,
        Drop: _on_drop,
        Fetch: _on_fetch,
        Check: _on_check,
        Barrier: _on_barrier,
        Send: _on_send,
        Receive: _on_receive,
        FusedGroup: _on_fused,
        ReplayStep: _on_replay_step,
        Gate: _on_gate,
    }
