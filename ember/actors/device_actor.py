"""A device actor: one mailbox, one worker thread and one executor per device.

Callers append IR messages to the actor's mailbox and return at once. Whoever holds the
actor's *turn* drains the mailbox in order and runs what it took through the executor
(``executor.py``): the worker thread, or a reader that found the worker idle with little
queued — a blocking read, a sync or an eager check runs that small work itself instead of
waking the worker and sleeping until it answers (a thread wake costs tens of
microseconds), and a value already computed is read with no message at all. Awaits (trio) and readers that
find the turn taken post a message and wait for the worker.

Waking: on a backend a caller may run (``caller_context``), small ops do not wake the
worker: they wait for a read, a sync, a full batch or an op worth overlapping with the
caller (``_WAKE_BYTES``). Elsewhere the first queued message wakes it. A woken worker
lingers so that a stream of small ops arrives as one batch.
Back-pressure: at most ``max_ops`` ops and ``max_bytes`` output bytes may be in flight;
past that, submitting waits for the batches to catch up.
Turns (GPU backends, ``launches_async``): a caller hands the worker what it queued at a
message that ends fusible runs, once ``_TURN_MESSAGES`` wait (inside an ``em.graphed``
step: at its end), and waits while a batch runs (``_take_turn``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterator
from typing import Any

import numpy as np

from ember.actors import lanes as _lanes
from ember.actors.executor import Executor
from ember.actors.stats import ActorInfo, Stats
from ember.actors.waiter import Later, Waiter
from ember.errors import KernelError
from ember.ir import (Barrier, Call, Check, Drop, Fetch, Gate, MultiCall, ReplayStep, Send,
                      StepBegin, StepEnd, Upload)
from ember.kernels import worker_hooks
from ember.kernels.fusion.planner import MAX_MEMBERS
from ember.op_kinds import JOINABLE as _JOINABLE

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
# How long a woken worker waits for more ops before running a batch, unless a
# read, a sync or a full batch cuts it short. A guess: ~200 tiny ops' submission.
LINGER_S = float(os.environ.get("EMBER_LINGER_US", "1000")) / 1e6
_BATCH_OPS = 1024
# An op whose output is at least this large wakes a lazily woken worker: its kernel
# runs while the caller goes on (smaller ones cost less than the wake). A guess.
_WAKE_BYTES = 1 << 18
# EMBER_AT_ONCE=0: tiny ops always queue (for comparison).
AT_ONCE = os.environ.get("EMBER_AT_ONCE", "1") not in ("", "0")
# Tiny ops run at once when nothing but this many drops is queued (``run_at_once``).
_AT_ONCE_DROPS = 4
# A reader runs what is queued itself only while its outputs come to at most this many
# bytes: small work, where a thread wake would cost more than the work. Larger work goes
# to the worker, which keeps it off the caller's thread (a guess).
_INLINE_BYTES = 1 << 20
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
# EMBER_CALLER_RUNS=0: readers always hand their reads to the worker (for comparison).
CALLER_RUNS = os.environ.get("EMBER_CALLER_RUNS", "1") not in ("", "0")


# The most trailing messages a drain holds back (two groups' worth of members).
_HOLD_MAX = 2 * MAX_MEMBERS


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


# .actor: the actor whose batch this thread runs now (its worker's, or a reader's turn).
_running_on_thread = threading.local()
# Every actor made, for waits on other threads (weakly: tests make and drop their own).
_actors: weakref.WeakSet = weakref.WeakSet()


def waiting_on_others() -> contextlib.AbstractContextManager:
    """Around a batch's wait for other threads (the other ranks of a collective). Those may
    sit in mailboxes that nobody woke (small ops wait for a read), so every worker starts
    on what it has queued; and a caller taking turns with this batch's actor, who may be
    about to feed the wait, goes on instead of waiting for the batch."""
    for actor in list(_actors):
        actor.flush()
    actor = getattr(_running_on_thread, "actor", None)
    if actor is None or not actor._takes_turns:
        return contextlib.nullcontext()
    return actor._waiting_on_others()


worker_hooks.install_waiting_on_others(waiting_on_others)  # kernels/ cannot import this module


def _ends_runs(msg: Any) -> bool:
    """Whether ``msg`` closes any fusible run before it (a matmul, a multi-output op): a
    batch cut after it splits no group, so steps repeat the same groups."""
    kind = type(msg)
    return (kind is Call and msg.op not in _JOINABLE) or kind is MultiCall


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
        # The backend's host array for an upload's data, made on the uploading thread
        # (a GPU's pinned memory): host_buffer(shape, numpy dtype) -> array or None.
        self.host_buffer: Any = getattr(backend, "host_buffer", None)
        # Makes what a thread other than the worker enters to run batches, or None while
        # it may not (None: only the worker may run them).
        self._caller_context: Any = getattr(backend, "caller_context", None) if CALLER_RUNS else None
        # Told as each batch starts (True) and ends (False): a CPU backend shares the
        # cores between the devices at work.
        self._working: Any = getattr(backend, "working", None)
        self.max_ops = max_ops
        if max_bytes is None:
            max_bytes = (int(_MAX_BYTES_SETTING) if _MAX_BYTES_SETTING
                         else getattr(backend, "max_bytes_in_flight", DEFAULT_MAX_BYTES))
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        # Held by whoever drains and runs batches: the worker or a reader.
        self._turn = threading.Lock()
        self._pending: deque = deque()
        self._wake = threading.Event()  # work is queued
        self._urgent = threading.Event()  # someone waits: stop lingering
        # Submitting wakes the worker at the first message only where nobody else may run.
        self._wake_at_once = self._caller_context is None
        # Ops whose outputs are at most this many bytes run on the submitting thread when
        # nothing is queued or running (``run_at_once``); -1: never (not even empty ones).
        self.at_once_bytes = (getattr(backend, "at_once_bytes", -1)
                               if AT_ONCE and self._caller_context is not None else -1)
        # What those ops run in: one context, entered again and again (a backend with
        # ``at_once_bytes`` makes its ``caller_context`` reusable); only the turn's holder
        # enters it.
        self._at_once_context = self._caller_context() if self.at_once_bytes >= 0 else None
        self._waiters: dict[int, Waiter] = {}
        # Turns: the worker's batches on a GPU are host work (launches the device runs
        # later) that needs the GIL, which a caller issuing meanwhile holds: CPython hands
        # it back every 5 ms only, and each launch gives it up again, so the worker (and
        # the GPU) would starve until the caller stops. Instead the caller waits.
        self._takes_turns = TURNS and bool(getattr(backend, "launches_async", False))
        self._running = False  # a batch runs
        self._runner: int | None = None  # ... on this thread
        self._blocked = False  # ... and waits on another thread within it
        self._batches_done = 0
        self._batches = 0
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
        self._open_lanes: list[_lanes.Lane] = []  # opened here, maybe still being filled
        # The error of a worker that died since the last sync reported it (it restarts).
        self._crash: KernelError | None = None
        self.executor = Executor(name, backend, self._waiters, _transfers, FUSION,
                                 self._report_progress, self._waiting_on_others)
        self.executor.resolve_for_reader = self.check_now
        _actors.add(self)
        self._thread = self._new_worker()

    def _new_worker(self) -> threading.Thread:
        thread = threading.Thread(target=self._loop, name=f"ember-{self.name}", daemon=True)
        thread.start()
        return thread

    def _revive(self) -> None:
        """Start a fresh worker if the last one died (a BaseException in a kernel)."""
        if not self._thread.is_alive() and not self._stopping:
            with self._lock:
                if not self._thread.is_alive() and not self._stopping:
                    self._thread = self._new_worker()

    # ----- caller side: submitting ---------------------------------------------------

    def submit(self, msg: Any, nbytes: int) -> None:
        """Queue a compute message producing ``nbytes``; waits only when too much is in flight.

        Lock-free on the common path: the deque append is atomic, and the byte
        count may lose an update under concurrent submitters, which only makes
        the bound approximate.
        """
        if _lanes.filling:  # another actor issues its promised ops: they go to its lane
            lane = _lanes.lane_of(self)
            if lane is not None:
                lane.append(msg, nbytes)
                return
        if self._open_lanes:
            self._note_reads(msg.inputs if type(msg) is Call or type(msg) is MultiCall else ())
        pending = self._pending
        if nbytes <= self.at_once_bytes and type(msg) is Upload and self.run_at_once(msg):
            return
        pending.append(msg)
        self._submitted = self._submit_count()
        self._queued_bytes += nbytes
        n = len(pending)
        if (n == 1 and self._wake_at_once or nbytes >= _WAKE_BYTES) and not self._wake.is_set():
            # Set already: the worker has yet to take the last wake-up (or died, and the
            # next read's _urge revives it). A set costs a lock and a notify.
            self._wake.set()
            self._revive()
        elif n >= _BATCH_OPS and not self._urgent.is_set():  # a set costs a lock and a notify
            self._urge()
        if self._takes_turns and (self._running or (n >= _TURN_MESSAGES and _ends_runs(msg)
                                                    and not self._in_step)):
            self._take_turn()
        if (n + self._claimed_ops > self.max_ops
                or self._queued_bytes + self._claimed_bytes > self.max_bytes):
            self._throttle()

    def run_at_once(self, msg: Any) -> bool:
        """Run a tiny op or upload on this thread now, if nothing but a few drops is queued
        and nothing runs; returns whether it ran (if not, the caller submits it). Its kernel costs less than queuing it would, and the
        planner would not fuse it (the backend's ``at_once_bytes`` is below its fusion
        threshold), so the read that follows finds it computed. Collectives and other
        ops that wait on other threads never run here: the caller may be about to feed
        that wait."""
        kind = type(msg)
        turn = self._turn
        if (not (kind is Call and msg.op in _JOINABLE or kind is Upload)
                or len(self._pending) > _AT_ONCE_DROPS or self._in_step or self._open_lanes
                or _lanes.filling or not turn.acquire(False)):
            return False
        try:
            executor, pending = self.executor, self._pending
            if executor.in_step or self._stopping:
                return False
            if pending:  # the drops of handles that died since the last op run first
                queued = list(pending)  # one step under the GIL: others append meanwhile
                for drop in queued:
                    if type(drop) is not Drop:
                        return False
                for _ in queued:
                    executor.drop_now(pending.popleft().id)
            self._submitted = self._submit_count()
            with self._at_once_context:
                executor.run_one(msg)
            return True
        finally:
            turn.release()

    def open_lane(self, outs: tuple[int, ...], first_id: int,
                  reads: tuple[int, ...] = ()) -> _lanes.Lane:
        """Queue a gate here for ops another actor promises (``lanes.py``), producing the
        ids ``outs`` on this device among others (every id below ``first_id`` existed
        before) and reading ``reads``, which lanes still being filled must then not free;
        that actor fills the returned lane."""
        if reads and self._open_lanes:
            self._note_reads(reads)
        lane = _lanes.Lane(first_id)
        self.executor.gates += 1
        self.submit(Gate(lane.token, outs), 0)
        self._open_lanes.append(lane)
        return lane

    def _note_reads(self, ids: tuple[int, ...]) -> None:
        """The caller queues a read of ``ids`` behind the gates of lanes still being filled."""
        lanes = [lane for lane in self._open_lanes if not lane.done.is_set()]
        self._open_lanes = lanes
        for lane in lanes:
            lane.read_after.update(ids)

    def flush(self) -> None:
        """Have the worker start on everything queued, now; returns at once."""
        self._urge()

    def _take_turn(self) -> None:
        """Let the worker run: hand it what is queued (unless a batch runs already) and
        wait until a batch has run, the worker waits on another thread, or
        ``_TURN_LIMIT_S`` passed. Both need the GIL, so the caller loses no time it could
        have used, and the GPU gets the launches at once."""
        if threading.get_ident() == self._runner:
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
        self._revive()

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
        if _lanes.filling:  # released by a walk: freed in the lane's order, not after it
            lane = _lanes.lane_of(self)
            if lane is not None and lane.holds(tensor_id):
                lane.append(Drop(tensor_id))
                return
        pending = self._pending
        if not pending and self._drop_here(tensor_id):
            return
        pending.append(Drop(tensor_id))
        if len(pending) == 1 and self._wake_at_once:
            self._wake.set()

    def _drop_here(self, tensor_id: int) -> bool:
        """Free the value now, on this thread, if the device is idle; returns whether it
        did. Nothing queued can read it: every op that reads it was submitted while its
        handle lived, so with the queue empty and the turn taken all of them have run."""
        if (self._at_once_context is None or self._in_step or self._open_lanes
                or not self._turn.acquire(False)):
            return False
        try:
            executor = self.executor
            if executor.in_step or self._stopping:
                return False
            executor.drop_now(tensor_id)
            return True
        finally:
            self._turn.release()

    # ----- caller side: reads that run here ------------------------------------------

    def read(self, tensor_id: int) -> Any:
        """The tensor's data as a read-only host array, blocking; raises its error.

        Runs what is queued on this thread when the worker is idle; a value computed
        already costs no message."""
        executor = self.executor
        if self._caller_context is not None:
            if executor.taints is None and executor.computed(tensor_id):
                # Final whatever runs meanwhile: nothing queued needs to run first.
                return executor.read(tensor_id)
            context = self._context_here()
            if (context is not None and self._queued_bytes <= _INLINE_BYTES
                    and self._turn.acquire(False)):
                try:
                    with context:
                        self._run_here()
                        value = executor.read(tensor_id)
                finally:
                    self._turn.release()
                return value.result() if isinstance(value, Later) else value
        return self.wait(self.fetch(tensor_id))

    def check_now(self, tensor_id: int) -> None:
        """Block until the tensor is computed; raise its error if it failed."""
        context = self._context_here()
        if context is not None and self._turn.acquire(False):
            try:
                with context:
                    self._run_here()
                    self.executor.check_now(tensor_id)
            finally:
                self._turn.release()
            return
        self.wait(self.check(tensor_id))

    def raise_if_died(self) -> None:
        """Raise, once, for a worker that died since the last call (a fresh one takes over)."""
        crash, self._crash = self._crash, None
        if crash is not None:
            self._revive()
            raise KernelError(f"{crash}; the values it was computing failed, and a fresh "
                              f"worker has taken over") from crash.__cause__

    def sync(self) -> None:
        """Block until everything queued so far has run on the device; raise once for a
        worker that died since the last sync (``raise_if_died``)."""
        self.raise_if_died()
        context = self._context_here()
        if (context is not None and self._queued_bytes <= _INLINE_BYTES
                and self._turn.acquire(False)):
            try:
                with context:
                    self._run_here()
                    self.executor.synchronize()
            finally:
                self._turn.release()
            return
        self.wait(self.barrier())

    def _context_here(self) -> Any:
        """What this thread enters to run batches itself; None where it may not (the
        backend allows only its worker, or the worker has not started yet)."""
        make = self._caller_context
        return None if make is None else make()

    def _run_here(self) -> None:
        """Run everything queued on this thread (which holds the turn), and the open
        ``em.graphed`` step so far, uncaptured: a reader must not wait for a step's end
        that comes after it."""
        if self._pending:
            if self._stopping:
                raise KernelError(f"device {self.name} has shut down")
            with self._lock:
                batch = self._claim(len(self._pending))
            try:
                self._run_batch(batch)
            except Exception as exc:  # a bug in the runtime itself: the reader gets it
                error = KernelError(f"running the queued work of {self.name} failed: "
                                    f"{type(exc).__name__}: {exc}")
                raise error from exc
        self.executor.run_open_step()

    # ----- caller side: messages -----------------------------------------------------

    def _post_urgent(self, msg: Any) -> None:
        self._pending.append(msg)
        self._urge()

    def _request(self, make: Any) -> Waiter:
        ticket = next(_tickets)
        waiter = Waiter()
        self._waiters[ticket] = waiter
        if self._stopping:
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
        lane = _lanes.lane_of(self) if _lanes.filling else None
        if lane is not None:  # a transfer the autodiff walk issues: in its lane's order
            lane.append(Send(tensor_id, ticket))
        else:
            if self._open_lanes:
                self._note_reads((tensor_id,))
            self._post_urgent(Send(tensor_id, ticket))
        return ticket

    @property
    def graphs(self) -> Any:
        """The backend's capture of ``em.graphed`` steps (None: it has none)."""
        return self.executor.graphs

    @graphs.setter
    def graphs(self, graphs: Any) -> None:
        self.executor.graphs = graphs

    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def stopped(self) -> bool:
        """Whether ``stop`` ended this actor (a worker that died is restarted instead)."""
        return self._stopping

    def step_begin(self) -> None:
        """Open a step of ``em.graphed``: what is submitted until ``step_end`` is one unit."""
        self.executor.stepping = True
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
        executor = self.executor
        planner = executor.planner
        return Stats(
            ops_submitted=self._submitted,
            ops_executed=executor.executed,
            kernels_launched=executor.kernels,
            ops_fused=executor.ops_fused,
            groups=executor.groups,
            plan_cache_hits=planner.plan_cache_hits if planner is not None else 0,
            autotune_hits=pool.get("autotune_hits", 0),
            autotune_misses=pool.get("autotune_misses", 0),
            bytes_held=executor.bytes_held,
            peak_bytes_held=executor.peak_bytes_held,
            queue_depth=len(self._pending),
            ops_in_flight=len(self._pending) + self._claimed_ops,
            buffers_pooled=pool["buffers_pooled"],
            bytes_pooled=pool["bytes_pooled"],
            batches=self._batches,
        )

    def info(self) -> ActorInfo:
        """This actor as ``em.list_actors()`` lists it."""
        return ActorInfo(self.name, "device", self._thread.name, self._submitted,
                         len(self._pending))

    def stop(self, timeout: float = 2.0) -> None:
        """Discard queued work, fail outstanding waiters, end the worker."""
        with self._lock:
            self._stopping = True
            self._pending.clear()
            self._room.notify_all()
        self._urge()
        self._thread.join(timeout)

    # ----- worker side ---------------------------------------------------------------

    def _loop(self) -> None:
        np.seterr(all="ignore")  # inf and nan are results, as in PyTorch, not warnings
        pending = self._pending
        wake, urgent = self._wake, self._urgent
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
                with self._turn:
                    with self._lock:
                        batch = list(pending)
                        now = time.perf_counter()
                        if len(batch) > held:
                            held = _open_tail(batch)
                            held_since = now
                        elif now - held_since >= LINGER_S:
                            # Nothing new for a whole linger (a caller waiting for room
                            # urges the worker, but may be a moment from submitting more):
                            # the caller paused, so the held run ends here.
                            held = 0
                        batch = self._claim(len(batch) - held)
                    if batch:
                        self._run_batch(batch)
                if held and not pending:  # a reader ran the held run meanwhile
                    held = 0
        except BaseException as exc:  # a BaseException in a kernel, or a runtime bug
            error = KernelError(f"the worker of {self.name} died: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            self._crash = error
            self._fail_waiters(error)
            return
        self._fail_waiters(KernelError(f"device {self.name} has shut down"))

    def _claim(self, count: int) -> list:
        """Take the first ``count`` queued messages to run (with the lock held)."""
        pending = self._pending
        # popleft, not list + clear: drops are appended without the lock.
        batch = [pending.popleft() for _ in range(count)]
        self._claimed_ops = len(batch)
        self._claimed_bytes = self._queued_bytes
        self._queued_bytes = 0
        self._running = bool(batch)
        return batch

    def _fail_waiters(self, error: KernelError) -> None:
        waiters, self._waiters = self._waiters, {}
        self.executor._waiters = self._waiters
        for waiter in waiters.values():
            if not waiter.done:
                waiter.resolve(error=error)

    def _run_batch(self, batch: list) -> None:
        self._batches += 1
        self._runner = threading.get_ident()
        outer, _running_on_thread.actor = getattr(_running_on_thread, "actor", None), self
        working = self._working
        if working is not None:
            working(True)
        try:
            self.executor.run_batch(batch)
        except BaseException as exc:
            self.executor.abandon(batch, exc)
            raise
        finally:
            if working is not None:
                working(False)
            _running_on_thread.actor = outer
            with self._lock:
                # Messages are released every _PROGRESS_EVERY, bytes once per batch.
                self._claimed_ops = 0
                self._claimed_bytes = 0
                self._running = False
                self._runner = None
                self._batches_done += 1
                self._room.notify_all()

    def _report_progress(self, count: int) -> None:
        with self._lock:
            self._claimed_ops -= count
            self._room.notify_all()

