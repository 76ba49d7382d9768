"""The Learner on a ``dist.RayCluster``: data parallel over every worker's devices.

Each worker builds the model and optimizer from the user's ``model_fn`` and
``optimizer_fn`` and reads its shard of each global batch (``DataLoader(...,
shard=(rank, world))``). A step is two calls per worker:

    compute(batch) ──gradient object──▶ apply(gradients of every rank)
    (forward, backward, the sum           (the same sum, in rank order, on every
     over the worker's own devices)         worker: identical updates everywhere)

The gradients travel through Ray's object store: each ``apply`` receives every
rank's ``compute`` result as an argument, so Ray moves them worker to worker and the
driver only receives the step's metrics. On a cluster of ``transport="nccl"`` (GPUs) a
step is one call per worker instead: the gradients are summed over NCCL on the GPUs
(``nccl_reduce.py``, one rank per worker, from a unique id rank 0 makes at setup) and
each worker updates at once. The driver holds ``learner.model`` (and an
optimizer twin), updated from rank 0 at each epoch boundary, where it evaluates,
records the History and writes checkpoints. A worker process that dies is restarted
by Ray; every worker then starts again from the driver's state (the last epoch
boundary) and the epoch runs again, so the run ends with the weights an uninterrupted
run gives. Over NCCL the survivors' GPUs would wait forever for the dead rank, so every
worker is restarted and the communicator made again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import trio

from ember.autodiff.engine import Gradients
from ember.ops._core import resolve_device
from ember.ops.creation import random_state, set_random_state, tensor as make_tensor
from ember.tensor import Tensor
from ember.train import metrics as _metrics
from ember.train.dataloader import DataLoader
from ember.train.failures import caller_site, unwrapped
from ember.train.history import History
from ember.train.learner import _PRECISIONS, Learner
from ember.train.nccl_reduce import (NcclCommunicator, all_reduce_gradients, plan_buckets,
                                     unique_id)
from ember.train.progress import Progress
from ember.train.replicas import all_reduce, broadcast, replicate

# Restarts of the whole run after worker deaths before ``fit`` gives up (a guess: a
# worker that dies this often will not finish).
_MAX_RECOVERIES = 3
# How long to wait for Ray to restart dead workers before setting them up (a guess: a
# worker process starts within seconds; 60 polls of 0.5 s).
_RESTART_POLLS, _RESTART_POLL_S = 60, 0.5


class ClusterLearner(Learner):
    """``Learner(model_fn, optimizer_fn, loss_fn, cluster=cluster, ...)`` (see ``Learner``).

    Args:
        model_fn: ``model_fn(device) -> Module``, called once on the driver (its weights
            are the run's initial weights) and in each worker.
        optimizer_fn: ``optimizer_fn(params) -> optimizer``, called likewise.
        loss_fn: as for ``Learner``; runs in the workers.
        cluster: a ``dist.RayCluster``.
        metrics, checkpoint_dir, keep_checkpoints, grad_clip, progress, early_stopping:
            as for ``Learner``.
    """

    def __init__(self, model_fn: Callable, optimizer_fn: Callable, loss_fn: Callable, *,
                 cluster: Any, metrics: Sequence[str | _metrics.Metric] = ("loss",),
                 checkpoint_dir: str | os.PathLike | None = None, keep_checkpoints: int = 3,
                 grad_clip: float | None = None, progress: bool = True,
                 early_stopping: Any = None, **unsupported: Any) -> None:
        if unsupported:
            raise ValueError(f"Learner(cluster=...): {sorted(unsupported)} not supported on "
                             f"a cluster")
        from pathlib import Path

        self.cluster = cluster
        self.model_fn, self.optimizer_fn, self.loss_fn = model_fn, optimizer_fn, loss_fn
        device = resolve_device(None)
        self.devices = [device if device.is_autodiff else device.autodiff()]
        self.model = model_fn(self.devices[0]).to(self.devices[0])
        self.replicas = [self.model]
        self.optimizer = optimizer_fn(self.model.parameters())
        self.metric_specs = [_metrics.make(m) for m in metrics]
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
        self.keep_checkpoints = keep_checkpoints
        self.scheduler = None
        self.grad_clip = grad_clip
        self.progress = Progress(progress)
        self.accumulation_steps = 1
        self.early_stopping = early_stopping
        self.history = History()
        self.epoch = 0
        self.step = 0
        self._best: float | None = None
        self._stale_epochs = 0
        # What the one-process Learner's epoch code reads, at the values that are all a
        # cluster run supports.
        self.checkpoint_best: str | None = None
        self.log_file = None
        self._best_value: float | None = None
        self.on_bad_batch = "raise"
        self.bad_batches = 0
        self.precision = "fp32"  # precision= is refused above (a worker's forward is plain)
        self._autocast = _PRECISIONS["fp32"]
        self.scaler = None
        self._site: tuple[str, int] = ("<ember>", 0)
        self._batch = 0
        self._random_at_update = random_state()
        self._train_loader: DataLoader | None = None
        self._loader_state: dict[str, Any] | None = None
        self.recoveries = 0

    async def fit(self, train_loader: DataLoader, valid_loader: DataLoader | None = None,
                  epochs: int = 1) -> History:
        """Train on the cluster until ``epochs`` epochs in total; returns the History.

        Raises:
            What a worker raised (its own type; a note carries the worker's traceback
            with the user's line), never only Ray's wrapper.
        """
        self._site = caller_site()
        try:
            await self._fit_cluster(train_loader, valid_loader, epochs)
        except BaseException as exc:
            raise _original(unwrapped(exc)) from None
        return self.history

    async def _fit_cluster(self, loader: DataLoader, valid_loader: DataLoader | None,
                           epochs: int) -> None:
        import ray

        if self._loader_state is not None:
            loader.load_state_dict(self._loader_state)
            self._loader_state = None
        self._train_loader = loader
        dataset = ray.put(loader.dataset)
        spec = {"batch_size": loader.batch_size, "shuffle": loader.shuffle,
                "drop_last": loader.drop_last, "seed": loader.seed}
        want_outputs = any(isinstance(m, _metrics.Metric) for m in self.metric_specs)
        await self._setup(dataset, spec, want_outputs)
        while self.epoch < epochs:
            try:
                values = await self._train_epoch_cluster(loader, epochs)
            except ray.exceptions.RayActorError:
                if self.recoveries >= _MAX_RECOVERIES:
                    raise
                self.recoveries += 1
                if self._over_nccl:
                    self._restart_workers()
                self._batch = 0
                await self._setup_after_restart(dataset, spec, want_outputs)
                continue
            await self._gather_state()
            self.history.append("train", values)
            if valid_loader is not None:
                self.history.append("valid", await self._evaluate(valid_loader))
            self.epoch += 1
            self._batch = 0
            if self.checkpoint_dir is not None:
                await trio.to_thread.run_sync(self._write_checkpoint, self._snapshot())
            if self._should_stop():
                break

    async def _setup(self, dataset: Any, spec: dict, want_outputs: bool) -> None:
        """Every worker (re)built from the driver's model, optimizer and random state."""
        import ray

        state = await trio.to_thread.run_sync(self._host_state)
        fns = (self.model_fn, self.optimizer_fn, self.loss_fn, self.grad_clip)
        uid = None
        if self._over_nccl:
            uid = await trio.to_thread.run_sync(
                ray.get, self.cluster.workers[0].call.remote(_nccl_unique_id))
        calls = [w.call.remote(_setup_worker, fns, dataset, spec, state, want_outputs, uid)
                 for w in self.cluster.workers]
        # Over NCCL every rank joins the communicator in its own call, at once: ``_gather``
        # returns when all have, or raises as soon as one fails (the others would wait for
        # it). The object-store path keeps ``ray.get``, which waits out a worker's restart.
        await trio.to_thread.run_sync(_gather if uid is not None else ray.get, calls)

    async def _setup_after_restart(self, dataset: Any, spec: dict, want_outputs: bool) -> None:
        """``_setup`` (the last epoch boundary) once Ray has restarted the dead workers: a
        call that reaches one still restarting fails with ``ActorUnavailableError``."""
        import ray

        for attempt in range(_RESTART_POLLS):
            try:
                return await self._setup(dataset, spec, want_outputs)
            except ray.exceptions.ActorUnavailableError:
                if attempt == _RESTART_POLLS - 1:
                    raise
                if self._over_nccl:  # the ranks that joined wait for the missing one
                    self._restart_workers()
                await trio.sleep(_RESTART_POLL_S)

    def _restart_workers(self) -> None:
        import ray

        for worker in self.cluster.workers:
            ray.kill(worker, no_restart=False)

    @property
    def _over_nccl(self) -> bool:
        return getattr(self.cluster, "transport", "object_store") == "nccl"

    def _host_state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(),
                "optimizer": _to_host(self.optimizer.state_dict()),
                "random": list(random_state())}

    async def _train_epoch_cluster(self, loader: DataLoader, epochs: int) -> dict[str, float]:
        import ray

        batches = loader.batch_indices(self.epoch)
        self.progress.start_epoch(self.epoch + 1, epochs, len(batches))
        instances, loss_mean = self._fresh_metrics()
        start, seen = time.perf_counter(), 0
        workers = self.cluster.workers
        for b in range(self._batch, len(batches)):
            items = len(batches[b])
            if self._over_nccl:
                steps = [w.call.remote(_step_nccl, self.epoch, b, items) for w in workers]
                reports = await trio.to_thread.run_sync(_gather, steps)
            else:
                results = [w.call.options(num_returns=2).remote(_compute, self.epoch, b, items)
                           for w in workers]
                grads = [g for g, _ in results]
                applied = [w.call.remote(_apply, *grads) for w in workers]
                reports = await trio.to_thread.run_sync(
                    ray.get, [r for _, r in results] + applied)
                reports = reports[:len(workers)]
            loss = sum(r["loss"] for r in reports)
            loss_mean.add(loss, items)
            for r in reports:
                for m in instances:
                    if r["outputs"] is not None and len(r["targets"]):
                        m.update(r["outputs"], r["targets"])
            self.step += 1
            self._batch = b + 1
            seen += items
            self.progress.step(loss, seen / max(time.perf_counter() - start, 1e-9))
        values = self._compute(instances, loss_mean, lr=self.optimizer.lr,
                               samples_per_second=seen / max(time.perf_counter() - start, 1e-9))
        self.progress.end_epoch(values)
        return values

    async def _gather_state(self) -> None:
        """The driver's model and optimizer take rank 0's values (all ranks hold the same)."""
        import ray

        state = await trio.to_thread.run_sync(
            ray.get, self.cluster.workers[0].call.remote(_worker_state))
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])


# ----- the workers' side (run inside each worker's Ray actor) ---------------------------

def _gather(refs: list) -> list:
    """``ray.get(refs)``, raising as soon as any one fails: over NCCL the others may then
    never finish (their GPUs wait for the failed rank)."""
    import ray

    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        ray.get(ready)
    return ray.get(refs)


def _nccl_unique_id(context: dict) -> bytes:
    return unique_id()


def _setup_worker(context: dict, fns: tuple, dataset: Any, spec: dict, state: dict,
                  want_outputs: bool, uid: bytes | None = None) -> None:
    model_fn, optimizer_fn, loss_fn, grad_clip = fns
    kind, count = context["device"], context["devices_per_worker"]
    devices = [resolve_device(f"{kind}:{k}").autodiff() for k in range(count)]
    model = model_fn(devices[0]).to(devices[0])
    model.load_state_dict(state["model"])
    optimizer = optimizer_fn(model.parameters())
    if state["optimizer"]["params"]:
        optimizer.load_state_dict(state["optimizer"])
    set_random_state(tuple(state["random"]))
    context.update(
        devices=devices, model=model, replicas=[model] + [replicate(model, d)
                                                          for d in devices[1:]],
        optimizer=optimizer, loss_fn=loss_fn, grad_clip=grad_clip, want_outputs=want_outputs,
        loader=DataLoader(dataset, prefetch=0, device=devices[0],
                          shard=(context["rank"], context["world"]), **spec),
        epoch=None)
    if uid is not None:
        if context.get("communicator") is not None:
            context["communicator"].close()
        params = model.parameters()
        context["communicator"] = NcclCommunicator(context["world"], uid,
                                                   context["rank"], devices[0])
        context["buckets"] = plan_buckets([p.shape for p in params], [p.dtype for p in params])


def _local_step(context: dict, epoch: int, batch: int,
                items: int) -> tuple[Gradients, Callable[[], dict]]:
    """This worker's forward and backward of one batch: (its devices' gradient sum, on its
    first device; what reads its report: weighted loss, outputs, targets)."""
    if context["epoch"] != epoch:
        context["batches"], context["epoch"] = context["loader"].batch_indices(epoch), epoch
    arrays = context["loader"].host_batch(context["batches"][batch])
    devices, replicas = context["devices"], context["replicas"]
    rows = arrays[0].shape[0]
    bounds = [round(rows * k / len(devices)) for k in range(len(devices) + 1)]
    grads, losses, outputs, targets = [], [], [], []
    for k, (device, replica) in enumerate(zip(devices, replicas)):
        inputs, *target = context["loader"].place(
            tuple(a[bounds[k]:bounds[k + 1]] for a in arrays), device)
        share = (bounds[k + 1] - bounds[k]) / items  # of the global batch: sums to the mean
        out = replica(inputs)
        loss = context["loss_fn"](out, *target)
        grads.append((loss * share).backward())
        losses.append((loss.detach(), share))
        if context["want_outputs"]:
            outputs.append(out.detach())
            targets.append(target[0])
    total = all_reduce(context["model"], replicas, grads)

    def report() -> dict:
        return {"loss": sum(float(loss.numpy()) * share for loss, share in losses),
                "outputs": np.concatenate([o.numpy() for o in outputs]) if outputs else None,
                "targets": np.concatenate([t.numpy() for t in targets]) if targets else None}

    return total, report


def _compute(context: dict, epoch: int, batch: int, items: int) -> tuple[list, dict]:
    """``_local_step`` with the gradient sum read to host arrays (for the object store)."""
    total, report = _local_step(context, epoch, batch, items)
    host = []
    for param in context["model"].parameters():
        g = param.grad(total)
        host.append(np.zeros(param.shape, param.dtype.np) if g is None else g.numpy())
    return host, report()


def _apply(context: dict, *ranks: list[np.ndarray]) -> None:
    """The update from every rank's gradients, summed in rank order (the same on every
    worker, so the replicas stay identical without a broadcast)."""
    params, device = context["model"].parameters(), context["devices"][0]
    summed = [sum(parts[1:], parts[0]) for parts in zip(*ranks)]
    _update(context, Gradients({p.value._node: make_tensor(g, device=device)
                                for p, g in zip(params, summed)}))


def _step_nccl(context: dict, epoch: int, batch: int, items: int) -> dict:
    """One step with the gradients summed over NCCL on the device (every worker gets the
    same sum, so the replicas stay identical), then the update; returns the report."""
    total, report = _local_step(context, epoch, batch, items)
    params = context["model"].parameters()
    summed = all_reduce_gradients([p.grad(total) for p in params], context["buckets"],
                                  context["communicator"], context["devices"][0])
    _update(context, Gradients({p.value._node: g for p, g in zip(params, summed)}))
    return report()  # read after the sum and the update are queued, not before


def _update(context: dict, grads: Gradients) -> None:
    model = context["model"]
    if context["grad_clip"] is not None:
        from ember.optim import clip_grad_norm

        clip_grad_norm(grads, context["grad_clip"])
    context["optimizer"].step(grads)
    if len(context["replicas"]) > 1:
        broadcast(model, context["replicas"])


def _worker_state(context: dict) -> dict:
    return {"model": context["model"].state_dict(),
            "optimizer": _to_host(context["optimizer"].state_dict())}


def _to_host(value: Any) -> Any:
    """``value`` with every tensor read to a NumPy array (for Ray's transport)."""
    if isinstance(value, Tensor):
        return value.numpy()
    if isinstance(value, dict):
        return {k: _to_host(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_to_host(v) for v in value)
    return value


def _original(exc: BaseException) -> BaseException:
    """A worker's exception as the user wrote it: Ray's ``RayTaskError`` gives way to its
    cause, with the worker's traceback (the user's file and line) as a note."""
    import ray

    if isinstance(exc, ray.exceptions.RayTaskError) and exc.cause is not None:
        cause = exc.cause
        cause.add_note(f"raised in a Ray worker: {str(exc).rstrip()}")
        return cause
    return exc


__all__ = ["ClusterLearner"]
