"""The optimizer actor: issues a step's multi-tensor updates from a thread of its own.

``Optimizer.step`` plans each parameter's update on the caller's thread (``plan_single``
reads the group's hyperparameters, which a scheduler may change right after ``step``
returns, so they are taken there), then hands the multi-tensor groups to ``promise``: it
makes the new parameters and state as promised handles (their shapes and dtypes are the
parameters'), swaps them into the ``Param``s and the optimizer's state, queues a gate on
each device the update touches (``actors/lanes.py``) and posts one message. The actor's
thread submits the ``optimizer_update`` ops into those gates, so a forward issued right
after ``step`` reads the updated values and no caller waits.

One thread serves every optimizer (as one autodiff actor serves every backward): steps
of different optimizers stay in the order they were called, the gates keep each device's
order, and a process lists one such actor however many optimizers it builds.

What cannot be promised stays on the caller's thread: the per-parameter fallback ops,
groups on a device inside an ``em.graphed`` step (the capture must see the update in the
step), ``EMBER_EAGER=1``, and everything with ``EMBER_OPTIMIZER_ACTOR=0``.
"""

from __future__ import annotations

import math
import os
import threading
from typing import Any

from ember import tracing as _trace
from ember.actors.job_actor import JobActor
from ember.autodiff.graph import no_record
from ember.kernels import multi_update
from ember.ops._core import EAGER, issue_multi, next_id, pinned_site, user_site
from ember.ops.memory import CHECKED_FROM, check_fits
from ember.runtime import register_actor
from ember.tensor import Tensor


class OptimizerActor(JobActor):
    """Submits the multi-tensor updates that ``promise`` handed it; one per process.

    ``info()`` is what ``em.list_actors()`` shows (kind ``"optimizer"``); ``steps`` and
    ``updates`` count the steps and the ``optimizer_update`` ops it has issued.
    """

    kind = "optimizer"

    def __init__(self) -> None:
        super().__init__()
        self.steps = 0
        self.updates = 0

    def takes(self, device_actor: Any) -> bool:
        """Whether a group on ``device_actor`` can be promised now (not inside a graphed
        step, whose capture must hold the update; not eager; the actor not turned off)."""
        return ACTORS and not EAGER and not device_actor._in_step

    def promise(self, groups: list[list], state: dict[str, dict[str, Any]]) -> None:
        """Promise each group's new parameters and state (swapped in at once), open a lane
        on each device they live on and post the updates; returns at once.

        ``groups``: lists of ``(Param, UpdatePlan)`` sharing a device, dtype and program;
        ``state``: the optimizer's state by ``Param.id``, updated here.

        Raises:
            DTypeError / OutOfMemoryError: the device cannot hold the outputs (as the
                update issued on the caller's thread would raise).
        """
        jobs = []
        outs_by_actor: dict[Any, list[int]] = {}
        reads_by_actor: dict[Any, list[int]] = {}
        for group in groups:
            program = group[0][1].program
            out_names = program.outputs[1:] + program.scalar_outputs
            stride = program.outputs_per_tensor
            inputs: list[Tensor] = []
            shapes: list[tuple[int, ...]] = []
            host = []
            for param, plan in group:
                inputs += plan.inputs
                shapes += ([param.shape] * len(program.outputs)
                           + [()] * len(program.scalar_outputs))
                host.append(plan.host)
            dtype = group[0][0].dtype
            # Where multi_call would put the outputs: on the autodiff twin if any input is.
            device = next((t.device for t in inputs if t.device.is_autodiff), inputs[0].device)
            _check(device, shapes, dtype)
            device_actor = device.actor
            # Lanes still being filled (a backward walk) must not free what this update
            # reads: its reads go into a lane, not through the stream that notes them.
            reads_by_actor.setdefault(device_actor, []).extend(t._id for t in inputs)
            outs = tuple(next_id() for _ in shapes)
            for k, (param, plan) in enumerate(group):
                made = [Tensor._new(out, shape, dtype, device) for out, shape in
                        zip(outs[k * stride:(k + 1) * stride], shapes[k * stride:])]
                entry = dict(plan.numbers)
                entry.update(zip(out_names, made[1:]))
                state[param.id] = entry
                param.value = made[0]
            outs_by_actor.setdefault(device_actor, []).extend(outs)
            jobs.append((tuple(inputs), tuple(shapes), (dtype,) * len(shapes),
                         (program, tuple(host)), device, outs))
        first_id = next_id()
        lanes = {actor: actor.open_lane(tuple(ids), first_id, tuple(reads_by_actor[actor]))
                 for actor, ids in outs_by_actor.items()}
        self.post([jobs, lanes, user_site(), threading.current_thread().name])

    def run_job(self, job: list) -> None:
        """One step's updates, issued into its lanes; closes them whatever happens."""
        from ember.actors import lanes as _lanes
        from ember.actors.executor import kernel_error

        jobs, lanes, site, poster = job
        job.clear()
        error = None
        traces = _trace.active()
        start = _trace.now_ns() if traces else 0
        try:
            with no_record(), pinned_site(site), _lanes.fill(lanes):
                # Each group's old values are let go of as it is issued, inside the lanes:
                # the device frees them in the lane's order.
                jobs.reverse()
                while jobs:
                    self._issue(*jobs.pop())
                    self.updates += 1
        except BaseException as exc:  # reaches the readers of the promised values
            error = kernel_error("optimizer step", site, exc)
        finally:
            for lane in lanes.values():
                lane.close(error)
            self.steps += 1
        if traces:
            from ember.actors.executor import format_site

            event = _trace.TraceEvent("optimizer step", "optimizer",
                                      threading.current_thread().name, start,
                                      _trace.now_ns() - start, format_site(site), "actor", poster)
            for t in traces:
                t.record(event)

    def _issue(self, inputs: tuple, shapes: tuple, dtypes: tuple, attrs: tuple, device: Any,
               outs: tuple[int, ...]) -> None:
        issue_multi(multi_update.OP, inputs, shapes, dtypes, attrs, device, outs)


def _check(device: Any, shapes: list[tuple[int, ...]], dtype: Any) -> None:
    """The checks ``multi_call`` makes, on the caller's line."""
    actor = device.actor
    if actor.check_dtype is not None:
        actor.check_dtype(dtype.name, multi_update.OP)
    if sum(math.prod(s) for s in shapes) * dtype.itemsize >= CHECKED_FROM:
        for shape in shapes:
            check_fits(multi_update.OP, shape, dtype, device)


# EMBER_OPTIMIZER_ACTOR=0: updates are issued on the caller's thread (for comparison and
# debugging).
ACTORS = os.environ.get("EMBER_OPTIMIZER_ACTOR", "1") not in ("", "0")
ACTOR = OptimizerActor()
register_actor(ACTOR.info)
