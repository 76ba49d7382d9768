"""A device actor: one mailbox and one worker thread per device.

Callers append IR messages to the actor's stream and return at once. The
worker drains the stream in batches (everything queued when it wakes) and
runs each message through the device's backend, keeping an environment
that maps tensor ids to buffers. Reads and syncs are messages too; their
results travel back through ``Waiter``s.

Liveness: a dying ``Tensor`` handle posts ``Drop``; the buffer leaves the
environment and goes back to the backend's pool once no view holds it.
Failure: an exception inside an op marks its outputs failed; anything
computed from them fails with the same error; every read of them raises
``KernelError``; the worker carries on with everything else. A check a GPU
backend leaves on the device fails its values when a read resolves it
(``deferred.py``).
Back-pressure: at most ``max_ops`` ops and ``max_bytes`` output bytes may be
in flight; past that, submitting waits for the worker to catch up.
Turns (GPU backends, ``launches_async``): a caller hands the worker what it queued
at a message that ends fusible runs, once ``_TURN_MESSAGES`` wait (inside an
``em.graphed`` step: at its end), and waits while a batch runs (``_take_turn``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import numpy as np

from ember.actors import trace as _trace
from ember.actors.deferred import Taints
from ember.actors.ir import (Barrier, Call, Check, Drop, Fetch, MultiCall, Receive,
                             ReplayStep, Send, StepBegin, StepEnd, Upload)
from ember.actors.step_graphs import StepGraphs
from ember.actors.stats import Stats
from ember.actors.waiter import Later, Waiter
from ember.dtype import storage_name
from ember.errors import KernelError
from ember.kernels.fusion.planner import (ELEMENTWISE, MAX_MEMBERS, REDUCTIONS, VIEWS,
                                          FusedGroup)

_tickets = itertools.count(1)
# Buffers on their way between actors: ticket -> (source actor, waiter).
_transfers: dict[int, tuple[DeviceActor, Waiter]] = {}

# Defaults for back-pressure; generous guesses, overridable per process.
DEFAULT_MAX_OPS = int(os.environ.get("EMBER_MAX_OPS_IN_FLIGHT", "65536"))
# Bytes: EMBER_MAX_BYTES_IN_FLIGHT, else the backend's ``max_bytes_in_flight`` (a GPU's
# share of its memory: queued outputs of 1 GiB each would cut a fused chain into
# batches at 4 GiB), else 4 GiB.
_MAX_BYTES_SETTING = os.environ.get("EMBER_MAX_BYTES_IN_FLIGHT")
DEFAULT_MAX_BYTES = 4 << 30
# The worker reports progress (and wakes blocked submitters) every so many ops.
_PROGRESS_EVERY = 256
# How long a woken worker waits for more ops before running a batch, unless a
# read, a sync or a full batch cuts it short. A guess: ~200 tiny ops' submission.
LINGER_S = float(os.environ.get("EMBER_LINGER_US", "1000")) / 1e6
_BATCH_OPS = 1024
# Turns: a caller hands over what it queued once this many messages wait and one that
# ends fusible runs arrives (a guess: a few hand-overs per training step).
_TURN_MESSAGES = 64
# A caller that waits for a batch (turns) goes on after this long regardless: the worker
# may wait for something the caller has yet to submit (another rank of a collective that
# does not report it).
_TURN_LIMIT_S = 0.05
# EMBER_TURNS=0: callers of a GPU device never wait for its worker (for comparison).
TURNS = os.environ.get("EMBER_TURNS", "1") not in ("", "0")
# EMBER_FUSION=0 runs every op on its own (identical results; for debugging and comparison).
FUSION = os.environ.get("EMBER_FUSION", "1") not in ("", "0")


# The most trailing messages a drain holds back (two groups' worth of members).
_HOLD_MAX = 2 * MAX_MEMBERS
_JOINABLE = ELEMENTWISE | REDUCTIONS | VIEWS


def _open_tail(batch: list) -> int:
    """How many trailing messages of a drained batch to leave queued for the next drain:
    a run of ops that could fuse with what comes next (and the drops among them).

    A batch is whatever was queued when the worker woke, so while the caller outpaces the
    worker its edge falls anywhere, often inside a softmax's or a layer norm's ops; the
    planner then makes groups of the pieces, each a new kernel structure (on the H200 an
    encoder layer's step met 6 such new structures, 0.1 to 0.3 s of compiling and
    autotuning each). Held back, the run is planned whole with the ops that follow it.
    Not held: a batch that is all such a run (the caller would wait on room that a held
    batch never frees) or a tail longer than ``_HOLD_MAX``.
    """
    tail = 0
    for msg in reversed(batch):
        kind = type(msg)
        if kind is Drop or (kind is Call and msg.op in _JOINABLE):
            tail += 1
            if tail > _HOLD_MAX:
                return 0
        else:
            return tail
    return 0


_worker_of_thread = threading.local()  # .actor: the actor whose worker this thread is


def waiting_on_others() -> contextlib.AbstractContextManager:
    """Around a worker's wait for other threads (the other ranks of a collective), which a
    caller taking turns may be about to feed: that caller goes on instead of waiting for
    the batch. Off a worker thread, or where callers take no turns, nothing."""
    actor = getattr(_worker_of_thread, "actor", None)
    if actor is None or not actor._takes_turns:
        return contextlib.nullcontext()
    return actor._waiting_on_others()


def _ends_runs(msg: Any) -> bool:
    """Whether ``msg`` closes any fusible run before it (a matmul, a multi-output op): a
    batch cut after it splits no group, so steps repeat the same groups."""
    kind = type(msg)
    return (kind is Call and msg.op not in _JOINABLE) or kind is MultiCall


def format_site(site: tuple[str, int]) -> str:
    return f"{site[0]}:{site[1]}"


def _kernel_error(op: str, site: tuple[str, int], cause: BaseException) -> KernelError:
    where = format_site(site)
    err = KernelError(f"{op} failed: {type(cause).__name__}: {cause}\n  created at {where}", op, where)
    err.__cause__ = cause
    return err


def _fresh(err: KernelError) -> KernelError:
    """A new exception per read, so tracebacks of different readers do not pile up."""
    copy = KernelError(str(err), err.op, err.site)
    copy.__cause__ = err.__cause__
    return copy


class DeviceActor:
    """The actor behind one device (``cpu:0``, ``cuda:1`` ...)."""

    def __init__(self, name: str, backend: Any, max_ops: int = DEFAULT_MAX_OPS,
                 max_bytes: int | None = None) -> None:
        self.name = name
        self.backend = backend
        # The backend's dtype refusal, run by ops as they submit (None: it holds every
        # dtype), so that a dtype the device cannot hold raises on the caller's line:
        # check_dtype(dtype_name, op, values=None), values being an upload's host array.
        self.check_dtype: Any = getattr(backend, "check_dtype", None)
        # A GPU's reads queued on its stream, waited for by the reader (None: read now).
        self._backend_read_later: Any = getattr(backend, "read_later", None)
        # The backend's host array for an upload's data, made on the uploading thread
        # (a GPU's pinned memory): host_buffer(shape, numpy dtype) -> array or None.
        self.host_buffer: Any = getattr(backend, "host_buffer", None)
        self.max_ops = max_ops
        if max_bytes is None:
            max_bytes = (int(_MAX_BYTES_SETTING) if _MAX_BYTES_SETTING
                         else getattr(backend, "max_bytes_in_flight", DEFAULT_MAX_BYTES))
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        self._pending: deque = deque()
        self._wake = threading.Event()  # work is queued
        self._urgent = threading.Event()  # someone waits: stop lingering
        self._waiters: dict[int, Waiter] = {}
        # Turns: the worker's batches on a GPU are host work (launches the device runs
        # later) that needs the GIL, which a caller issuing meanwhile holds: CPython hands
        # it back every 5 ms only, and each launch gives it up again, so the worker (and
        # the GPU) would starve until the caller stops. Instead the caller waits.
        self._takes_turns = TURNS and bool(getattr(backend, "launches_async", False))
        self._running = False  # the worker runs a batch
        self._blocked = False  # ... and waits on another thread within it
        self._batches_done = 0
        # A caller is inside an em.graphed step, which the worker only collects until its
        # end: no hand-over before that.
        self._in_step = False
        # Queued: submitted, not yet taken by the worker. Claimed: taken, not yet run.
        self._queued_bytes = 0
        self._claimed_ops = 0
        self._claimed_bytes = 0
        self._submit_count = itertools.count(1).__next__  # atomic under concurrent submitters
        self._submitted = 0
        self._stopping = False
        # Worker-owned state.
        self._env: dict[int, Any] = {}
        self._failed: dict[int, KernelError] = {}
        deferred = getattr(backend, "deferred", None)
        self._taints = Taints(deferred) if deferred is not None else None
        self._executed = 0
        self._kernels = 0
        self._batches = 0
        self._bytes_held = 0
        self._peak_bytes_held = 0
        self._groups = 0
        self._ops_fused = 0
        make_planner = getattr(backend, "fusion_planner", None)
        self._planner = make_planner() if FUSION and make_planner is not None else None
        # em.graphed's steps: the messages of the open step (None: none open), and the
        # backend's capture of repeated steps (None: it has none; steps run as they are).
        self._step: list | None = None
        self._step_uploads: set[int] = set()  # uploads run ahead of the open step
        self._stepping = False  # set by the first step_begin: batches then look for steps
        make_capturer = getattr(backend, "graph_capturer", None)
        self.graphs = StepGraphs(make_capturer()) if make_capturer is not None else None
        self._thread = threading.Thread(target=self._loop, name=f"ember-{name}", daemon=True)
        self._thread.start()

    # ----- caller side -------------------------------------------------------------

    def submit(self, msg: Any, nbytes: int) -> None:
        """Queue a compute message producing ``nbytes``; waits only when too much is in flight.

        Lock-free on the common path: the deque append is atomic, and the byte
        count may lose an update under concurrent submitters, which only makes
        the bound approximate.
        """
        pending = self._pending
        pending.append(msg)
        self._submitted = self._submit_count()
        self._queued_bytes += nbytes
        n = len(pending)
        if n == 1:
            self._wake.set()
        elif n >= _BATCH_OPS and not self._urgent.is_set():  # a set costs a lock and a notify
            self._urgent.set()
        if self._takes_turns and (self._running or (n >= _TURN_MESSAGES and _ends_runs(msg)
                                                    and not self._in_step)):
            self._take_turn()
        if (n + self._claimed_ops > self.max_ops
                or self._queued_bytes + self._claimed_bytes > self.max_bytes):
            self._throttle()

    def _take_turn(self) -> None:
        """Let the worker run: hand it what is queued (unless a batch runs already) and
        wait until a batch has run, the worker waits on another thread, or
        ``_TURN_LIMIT_S`` passed. Both need the GIL, so the caller loses no time it could
        have used, and the GPU gets the launches at once."""
        if threading.get_ident() == self._thread.ident:
            return
        with self._lock:
            if not self._running:
                self._urge()
            done = self._batches_done
            deadline = time.perf_counter() + _TURN_LIMIT_S
            while (self._batches_done == done and not self._blocked and not self._stopping
                   and self._thread.is_alive()):
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                self._room.wait(left)

    @contextlib.contextmanager
    def _waiting_on_others(self) -> Iterator[None]:
        with self._lock:
            self._blocked = True
            self._room.notify_all()
        try:
            yield
        finally:
            with self._lock:
                self._blocked = False

    def _throttle(self) -> None:
        with self._lock:
            self._urge()
            self._wait_for_room()

    def _urge(self) -> None:
        self._urgent.set()
        self._wake.set()

    def _wait_for_room(self) -> None:
        # Called with the lock held. A half-drained backlog is enough room.
        while not self._stopping and (
            len(self._pending) + self._claimed_ops > self.max_ops // 2
            or self._queued_bytes + self._claimed_bytes > self.max_bytes // 2
        ):
            if not self._thread.is_alive():
                return
            self._room.wait(0.5)

    def drop(self, tensor_id: int) -> None:
        """The handle of ``tensor_id`` died (called from ``Tensor.__del__``); never waits."""
        pending = self._pending
        pending.append(Drop(tensor_id))
        if len(pending) == 1:
            self._wake.set()

    def _post_urgent(self, msg: Any) -> None:
        self._pending.append(msg)
        self._urge()

    def _request(self, make: Any) -> Waiter:
        ticket = next(_tickets)
        waiter = Waiter()
        self._waiters[ticket] = waiter
        if self._stopping or not self._thread.is_alive():
            waiter.resolve(error=KernelError(f"device {self.name} has shut down"))
        self._post_urgent(make(ticket))
        return waiter

    def fetch(self, tensor_id: int) -> Waiter:
        """A waiter that resolves to the tensor's data as a read-only host array."""
        return self._request(lambda ticket: Fetch(tensor_id, ticket))

    def export(self, tensor_id: int) -> Waiter:
        """A waiter that resolves to the tensor's buffer as the backend hands it to another
        device (a GPU array once its stream has written it): DLPack's zero-copy export."""
        return self._request(lambda ticket: Send(tensor_id, ticket))

    def check(self, tensor_id: int) -> Waiter:
        """A waiter that resolves once the tensor is computed (raising if it failed)."""
        return self._request(lambda ticket: Check(tensor_id, ticket))

    def barrier(self) -> Waiter:
        """A waiter that resolves once everything queued so far has run."""
        return self._request(Barrier)

    def send(self, tensor_id: int) -> int:
        """Queue the hand-over of a buffer to another actor's ``Receive``; returns its ticket."""
        ticket = next(_tickets)
        waiter = Waiter()
        self._waiters[ticket] = waiter
        _transfers[ticket] = (self, waiter)
        self._post_urgent(Send(tensor_id, ticket))
        return ticket

    def alive(self) -> bool:
        return self._thread.is_alive()

    def step_begin(self) -> None:
        """Open a step of ``em.graphed``: what is submitted until ``step_end`` is one unit."""
        self._stepping = True
        self.submit(StepBegin(), 0)
        self._in_step = True

    def step_end(self, token: int = 0, args: tuple[int, ...] = (),
                 results: tuple[int, ...] = ()) -> None:
        """Close the step; a pure one names itself, its tensor arguments and results."""
        self._in_step = False
        self.submit(StepEnd(token, args, results), 0)
        if self._takes_turns:  # the step runs (or replays) whole, at once
            self._take_turn()

    def replay_step(self, msg: ReplayStep, nbytes: int) -> None:
        """Queue the replay of a captured pure step (``StepGraphs.replay_pure``)."""
        self.submit(msg, nbytes)

    def wait(self, waiter: Waiter) -> Any:
        return waiter.wait(self.alive, self.name)

    def statistics(self) -> Stats:
        pool = self.backend.statistics()
        return Stats(
            ops_submitted=self._submitted,
            ops_executed=self._executed,
            kernels_launched=self._kernels,
            ops_fused=self._ops_fused,
            groups=self._groups,
            plan_cache_hits=self._planner.plan_cache_hits if self._planner is not None else 0,
            autotune_hits=pool.get("autotune_hits", 0),
            autotune_misses=pool.get("autotune_misses", 0),
            bytes_held=self._bytes_held,
            peak_bytes_held=self._peak_bytes_held,
            queue_depth=len(self._pending),
            ops_in_flight=len(self._pending) + self._claimed_ops,
            buffers_pooled=pool["buffers_pooled"],
            bytes_pooled=pool["bytes_pooled"],
            batches=self._batches,
        )

    def stop(self, timeout: float = 2.0) -> None:
        """Discard queued work, fail outstanding waiters, end the worker."""
        with self._lock:
            self._stopping = True
            self._pending.clear()
            self._room.notify_all()
        self._urge()
        self._thread.join(timeout)

    # ----- worker side -------------------------------------------------------------

    def _loop(self) -> None:
        np.seterr(all="ignore")  # inf and nan are results, as in PyTorch, not warnings
        pending = self._pending
        wake, urgent = self._wake, self._urgent
        _worker_of_thread.actor = self
        try:
            # A GPU backend makes its device, stream and pool this thread's own.
            start_worker = getattr(self.backend, "start_worker", None)
            if start_worker is not None:
                start_worker()
            held = 0  # messages at the front of the queue that the last drain held back
            held_since = 0.0
            while True:
                if not held:
                    wake.wait()
                    wake.clear()
                # Linger so a stream of tiny ops arrives as one batch (and the caller
                # is not slowed by a worker waking per op), unless a reader waits.
                if not urgent.is_set():
                    urgent.wait(LINGER_S if not held
                                else max(0.0, held_since + LINGER_S - time.perf_counter()))
                urgent.clear()
                if self._stopping:
                    break
                with self._lock:
                    # popleft, not list + clear: drops are appended without the lock.
                    batch = [pending.popleft() for _ in range(len(pending))]
                    now = time.perf_counter()
                    if len(batch) > held:
                        held = _open_tail(batch)
                        held_since = now
                    elif now - held_since >= LINGER_S:
                        # Nothing new for a whole linger (a caller waiting for room
                        # urges the worker, but may be a moment from submitting more):
                        # the caller paused, so the held run ends here.
                        held = 0
                    if held:
                        pending.extendleft(reversed(batch[-held:]))
                        del batch[-held:]
                    self._claimed_ops = len(batch)
                    self._claimed_bytes = self._queued_bytes
                    self._queued_bytes = 0
                    self._running = bool(batch)
                if batch:
                    self._run_batch(batch)
        except BaseException as exc:  # a bug in the runtime itself: readers get it, never a hang
            self._stopping = True
            error = KernelError(f"the worker of {self.name} crashed: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            self._fail_waiters(error)
            return
        self._fail_waiters(KernelError(f"device {self.name} has shut down"))

    def _fail_waiters(self, error: KernelError) -> None:
        waiters, self._waiters = self._waiters, {}
        for waiter in waiters.values():
            if not waiter.done:
                waiter.resolve(error=error)

    def _run_batch(self, batch: list) -> None:
        self._batches += 1
        if self._stepping:
            self._run_with_steps(batch)
        else:
            self.run_messages(batch)
        with self._lock:
            # Messages are released every _PROGRESS_EVERY, bytes once per batch.
            self._claimed_ops = 0
            self._claimed_bytes = 0
            self._running = False
            self._batches_done += 1
            self._room.notify_all()

    def _run_with_steps(self, batch: list) -> None:
        """Run ``batch``, collecting the messages of steps (which may span batches) and
        running each step whole at its end."""
        plain: list = []
        for msg in batch:
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
        self.run_messages(plain)

    def run_messages(self, batch: list) -> None:
        """Plan ``batch`` and run its messages (on the worker)."""
        if not batch:
            return
        if self._planner is not None:
            batch = self._planner.plan(batch, self._stored_dtype, self._stored_shape)
        handlers = self._handlers
        traces = _trace.active()
        for i, msg in enumerate(batch, 1):
            if traces:
                start = _trace.now_ns()
                handlers[type(msg)](self, msg)
                self._trace_event(traces, msg, start)
            else:
                handlers[type(msg)](self, msg)
            if i % _PROGRESS_EVERY == 0:
                self._report_progress(_PROGRESS_EVERY)

    # What StepGraphs reads and writes of the worker's state (on the worker).

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
        self._store(tensor_id, value)

    def swap(self, tensor_id: int, value: Any) -> None:
        """Hold ``value`` under a stored ``tensor_id`` instead (an equal copy)."""
        owned = self.backend.owned_nbytes
        self._bytes_held += owned(value) - owned(self._env[tensor_id])
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
            self._bytes_held -= self.backend.owned_nbytes(value)

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
                self._executed += 1
        self._executed += ops
        self._kernels += 1

    def _report_progress(self, count: int) -> None:
        with self._lock:
            self._claimed_ops -= count
            self._room.notify_all()

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

    def _store(self, tensor_id: int, value: Any) -> None:
        self._env[tensor_id] = value
        self._bytes_held += self.backend.owned_nbytes(value)
        if self._bytes_held > self._peak_bytes_held:
            self._peak_bytes_held = self._bytes_held

    def _inputs_failed(self, inputs: tuple[int, ...]) -> KernelError | None:
        failed = self._failed
        for i in inputs:
            if i in failed:
                return failed[i]
        return None

    def _on_call(self, msg: Call) -> None:
        self._executed += 1
        if self._failed:
            err = self._inputs_failed(msg.inputs)
            if err is not None:
                self._failed[msg.out] = err
                return
        env = self._env
        try:
            value = self.backend.run(msg, [env[i] for i in msg.inputs])
        except Exception as exc:
            self._failed[msg.out] = _kernel_error(msg.op, msg.site, exc)
            self._taint((), (), msg.op, msg.site)  # checks it made before it failed
            return
        self._kernels += 1
        self._store(msg.out, value)
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
            values = self.backend.run_fused(group, self._planner.program(group),
                                            [env[i] for i in group.inputs])
        except Exception:
            return self._run_unfused(members)
        self._executed += len(members)
        self._kernels += 1
        self._groups += 1
        self._ops_fused += len(members)
        # Donors are dead and read by nothing later: drop them now (their own Drops, later
        # in the batch, find nothing). Uncounted before the outputs, which may live in their
        # buffers, are counted; released after those are stored, so the pool sees an
        # output's reference and never takes back a buffer an output lives in.
        dead = [env.pop(donor) for donor in group.donors]
        self._bytes_held -= sum(map(self.backend.owned_nbytes, dead))
        for tensor_id, value in values:
            self._store(tensor_id, value)
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
        self._executed += 1
        err = self._inputs_failed(msg.inputs) if self._failed else None
        if err is None:
            env = self._env
            try:
                values = self.backend.run(msg, [env[i] for i in msg.inputs])
            except Exception as exc:
                err = _kernel_error(msg.op, msg.site, exc)
                self._taint((), (), msg.op, msg.site)
        if err is not None:
            for out in msg.outs:
                self._failed[out] = err
            return
        self._kernels += 1
        for out, value in zip(msg.outs, values, strict=True):
            self._store(out, value)
        self._taint(msg.inputs, msg.outs, msg.op, msg.site)

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
            error = _kernel_error("check", ("<runtime>", 0), exc)
            errors = dict.fromkeys(self._taints.of, error)
            self._taints.of.clear()
            self._taints.pending.clear()
        else:
            made: dict[int, KernelError] = {}  # one error per failed check
            errors = {}
            for tensor_id, (op, site, cause) in failed.items():
                error = made.get(id(cause))
                if error is None:
                    error = made[id(cause)] = _kernel_error(op, site, cause)
                errors[tensor_id] = error
        for tensor_id, error in errors.items():
            value = self._env.pop(tensor_id, None)
            if value is not None:
                self._bytes_held -= self.backend.release(value)
            self._failed[tensor_id] = error

    def _on_replay_step(self, msg: ReplayStep) -> None:
        self.graphs.replay_pure(self, msg)

    def _on_upload(self, msg: Upload) -> None:
        self._executed += 1
        try:
            self._store(msg.out, self.backend.upload(msg.data))
        except Exception as exc:
            self._failed[msg.out] = _kernel_error("upload", msg.site, exc)

    def _on_drop(self, msg: Drop) -> None:
        if self._taints is not None:
            self._taints.of.pop(msg.id, None)
        value = self._env.pop(msg.id, None)
        if value is None:
            self._failed.pop(msg.id, None)
            return
        self._bytes_held -= self.backend.release(value)

    def _on_fetch(self, msg: Fetch) -> None:
        waiter = self._waiters.pop(msg.ticket)
        later = self._read_later(msg.id)
        if later is not None:
            waiter.resolve(later)
            return
        self._resolve_if_tainted(msg.id)
        err = self._failed.get(msg.id)
        if err is not None:
            waiter.resolve(error=_fresh(err))
            return
        try:
            value = self.backend.to_host(self._env[msg.id])
        except Exception as exc:
            waiter.resolve(error=_kernel_error("read", ("<runtime>", 0), exc))
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
            # Rare, so the reader has the worker resolve every check now, as a read did
            # before: their slots reset for later replays, the values they spoiled
            # failed; this value's error is the one it raises.
            self.wait(self.check(tensor_id))
            check = next(check for check in taint if check in errors)  # as _resolve_checks
            op, site = origins[check]
            raise _kernel_error(op, site, errors[check])

        return self._backend_read_later(value, taint, failed)

    def _on_check(self, msg: Check) -> None:
        waiter = self._waiters.pop(msg.ticket)
        self._resolve_if_tainted(msg.id)
        err = self._failed.get(msg.id)
        waiter.resolve(error=_fresh(err) if err is not None else None)

    def _on_barrier(self, msg: Barrier) -> None:
        waiter = self._waiters.pop(msg.ticket)
        # A GPU backend has only queued its kernels: a sync waits for the device too.
        synchronize = getattr(self.backend, "synchronize", None)
        try:
            if synchronize is not None:
                synchronize()
            if self._taints is not None and self._taints.pending:
                self._resolve_checks()
        except Exception as exc:
            waiter.resolve(error=_kernel_error("sync", ("<runtime>", 0), exc))
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
        self._executed += 1
        source, waiter = _transfers.pop(msg.ticket)
        try:
            with self._waiting_on_others():
                exported = source.wait(waiter)
            value = self.backend.import_(exported, msg.shape, msg.dtype)
        except KernelError as exc:
            self._failed[msg.out] = exc
            return
        except Exception as exc:
            self._failed[msg.out] = _kernel_error("to", msg.site, exc)
            return
        self._kernels += 1
        self._store(msg.out, value)

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
    }


