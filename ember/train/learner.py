"""``Learner``: training as concurrent trio tasks, on one device or several.

One epoch runs a nursery of three tasks joined by bounded memory channels:

    loader task ──batches──▶ step task ──step records──▶ metrics task
    (worker threads build     (forward, backward,        (one batched read per
     and upload batches)       optimizer step: never      step, metric updates,
                               waits on a device)         progress display)

and a checkpoint task lives for the whole fit, writing atomic checkpoints in a
worker thread from tensor handles captured at the epoch boundary (tensors are
immutable, so a snapshot is just the handles). Reading a loss never stalls the
next step, and the next batch is on the device before the step needs it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import trio

from ember.autodiff.engine import Gradients
from ember.autodiff.graph import no_record
from ember.device import Device
from ember.errors import KernelError
from ember.graphed_step import GraphedStep
from ember.mixed_precision import autocast
from ember.nn.module import Module
from ember.optim.grad_scaler import GradScaler
from ember.optim.lr_scheduler import ReduceLROnPlateau
from ember.ops._core import resolve_device
from ember.ops.creation import random_state, set_random_state
from ember.tensor import Tensor
from ember.train import metrics as _metrics
from ember.train.dataloader import DataLoader
from ember.train.failures import call_user, caller_site, pinned, unwrapped
from ember.train.history import History
from ember.train.progress import Progress
from ember.train.replicas import all_reduce, broadcast, replicate

# precision= -> the block forwards run in ("fp32": none, so a caller's own autocast block
# still applies).
_PRECISIONS: dict[str, Callable[[], Any]] = {
    "fp32": contextlib.nullcontext,
    "bf16": lambda: autocast(dtype="bfloat16"),
    "fp16": lambda: autocast(dtype="float16"),
}
_CHECKPOINT = re.compile(r"^epoch-(\d+)\.ember$")
BEST = "best.ember"
# Ctrl-C reaches the Learner's tasks at their awaits, between steps, never inside one:
# the interrupted checkpoint then holds a consistent state (weights, optimizer, scheduler,
# position and random state all after the same update).
_ki_protected = trio.lowlevel.enable_ki_protection


@dataclass
class EarlyStopping:
    """Stop when ``metric`` of ``split`` has not improved by ``min_delta`` for ``patience`` epochs.

    Example:
        >>> learner = train.Learner(model, opt, F.cross_entropy,
        ...                         early_stopping=train.EarlyStopping("loss", patience=5))
    """

    metric: str = "loss"
    patience: int = 3
    mode: str = "min"
    split: str = "valid"
    min_delta: float = 0.0


@dataclass
class _StepRecord:
    loss: Tensor
    outputs: list[Tensor]
    targets: list[Tensor]
    items: int
    lr: float


class Learner:
    """Trains ``model`` with ``optimizer`` on ``loss_fn(model(inputs), targets)``.

    Args:
        model: the module (moved to the first device's autodiff twin).
        optimizer: an ``ember.optim`` optimizer over ``model.parameters()``.
        loss_fn: ``loss_fn(output, target) -> scalar tensor``.
        metrics: names ("loss", "accuracy", "top5_accuracy", "lr", "samples_per_second") or
            ``train.Metric`` instances; each is computed on train and valid splits.
        devices: one device or several (data parallel: a replica per device, each batch
            split across them, gradients averaged, replicas kept identical).
        checkpoint_dir: where checkpoints go (one per epoch, the last ``keep_checkpoints``).
        checkpoint_best: ``"valid.loss"`` (or ``"<split>.<metric>"``): also keep the
            checkpoint of the best epoch by that metric as ``best.ember`` in
            ``checkpoint_dir``; a metric named ``*accuracy`` is maximized, others minimized.
        log_file: append one JSON line per epoch to this file: ``{"epoch": n, "step": s,
            "train": {...}, "valid": {...}}``.
        scheduler: stepped once per epoch (``scheduler_interval="step"``: per step); a
            ``ReduceLROnPlateau`` is stepped once per epoch with the valid loss (the train
            loss without a valid loader).
        grad_clip: clip the gradient norm to this value before each update.
        progress: show a progress bar (only on a terminal).
        accumulation_steps: sum gradients over this many batches per update.
        early_stopping: an ``EarlyStopping`` rule.
        graphed: run steps as ``em.graphed`` steps where the devices capture CUDA graphs:
            each kind of step (the full batch, the last partial one) is captured at its
            second call and replayed from then on, so the devices' workers skip their
            per-op host work. The forward and backward of each replica are one step; with
            one device, no accumulation and a capturable optimizer (``Adam(...,
            capturable=True)``), the update, clipping and all, joins them in one graph.
            ``"pure"`` (one device, no accumulation, a capturable optimizer) also skips
            the Python of a step once captured, as ``em.graphed(..., pure=True)``: the
            model's values, the optimizer's state and the batch go in, their new values
            come out, and the model's ``forward`` must do nothing else (no Python side
            effects; random ops or reads inside just keep every step running it). Default
            True (a device without graphs runs steps as they are).
        precision: ``"fp32"`` (the default), ``"bf16"`` or ``"fp16"``: forwards and losses
            (training and evaluation) run under ``em.autocast`` in that dtype, with the
            parameters and their updates in float32. ``"fp16"`` also scales the loss with
            an ``optim.GradScaler`` (``learner.scaler``; steps whose gradients overflow
            are skipped) and runs steps ungraphed (the scale changes between steps).

    ``Learner(model_fn, optimizer_fn, loss_fn, cluster=cluster, ...)`` trains data parallel
    on a ``dist.RayCluster`` instead (``ember.train.cluster.ClusterLearner``).

    Example:
        >>> device = em.cpu().autodiff()
        >>> model = nn.Sequential(nn.Linear(64, 32, device=device), nn.ReLU(),
        ...                       nn.Linear(32, 10, device=device))
        >>> learner = train.Learner(model, optim.Adam(model.parameters(), lr=1e-3),
        ...                         F.cross_entropy, metrics=("loss", "accuracy"), progress=False)
        >>> history = learner.fit_sync(train_loader, valid_loader, epochs=5)  # await fit(...)
        >>> history.valid["accuracy"][-1]
    """

    def __new__(cls, *args: Any, cluster: Any = None, **kwargs: Any) -> Learner:
        if cluster is not None and cls is Learner:
            from ember.train.cluster import ClusterLearner

            return super().__new__(ClusterLearner)
        return super().__new__(cls)

    def __init__(self, model: Module, optimizer: Any, loss_fn: Callable, *,
                 metrics: Sequence[str | _metrics.Metric] = ("loss",),
                 devices: Device | str | Sequence[Device | str] | None = None,
                 checkpoint_dir: str | os.PathLike | None = None, scheduler: Any = None,
                 grad_clip: float | None = None, progress: bool = True,
                 accumulation_steps: int = 1, early_stopping: EarlyStopping | None = None,
                 keep_checkpoints: int = 3, scheduler_interval: str = "epoch",
                 graphed: bool | str = True, on_bad_batch: str = "raise",
                 checkpoint_best: str | None = None,
                 log_file: str | os.PathLike | None = None, precision: str = "fp32") -> None:
        if accumulation_steps < 1:
            raise ValueError(f"Learner: accumulation_steps must be >= 1, got {accumulation_steps}")
        if graphed not in (True, False, "pure"):
            raise ValueError(f"Learner: graphed must be True, False or 'pure', got {graphed!r}")
        if precision not in _PRECISIONS:
            raise ValueError(f"Learner: precision must be 'fp32', 'bf16' or 'fp16', got "
                             f"{precision!r}")
        self.precision = precision
        self._autocast = _PRECISIONS[precision]
        self.scaler = GradScaler() if precision == "fp16" else None
        if self.scaler is not None:
            graphed = False  # a captured step would keep its first loss scale
        if scheduler_interval not in ("epoch", "step"):
            raise ValueError("Learner: scheduler_interval must be 'epoch' or 'step'")
        if on_bad_batch not in ("raise", "skip"):
            raise ValueError(f"Learner: on_bad_batch must be 'raise' or 'skip', got "
                             f"{on_bad_batch!r}")
        # A batch whose step failed (a target out of range) left the weights as they were
        # (the optimizer keeps the last good values on the device): "raise" stops with its
        # error, "skip" counts it in bad_batches and goes on.
        self.on_bad_batch = on_bad_batch
        self.bad_batches = 0
        if checkpoint_best is not None:
            split, _, metric = checkpoint_best.partition(".")
            if split not in ("train", "valid") or not metric:
                raise ValueError(f"Learner: checkpoint_best must be 'valid.<metric>' or "
                                 f"'train.<metric>', got {checkpoint_best!r}")
            if checkpoint_dir is None:
                raise ValueError("Learner: checkpoint_best needs a checkpoint_dir")
        if isinstance(scheduler, ReduceLROnPlateau) and scheduler_interval != "epoch":
            raise ValueError("Learner: a ReduceLROnPlateau steps once per epoch, on a metric")
        if devices is None:
            first = next(iter(model.parameters()), None)
            devices = [first.device if first is not None else resolve_device(None)]
        elif isinstance(devices, Device | str):
            devices = [devices]
        self.devices = [_training_device(d) for d in devices]
        self.model = model.to(self.devices[0])
        self.replicas = [self.model] + [replicate(self.model, d) for d in self.devices[1:]]
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.metric_specs = [_metrics.make(m) for m in metrics]
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
        self.scheduler = scheduler
        self.scheduler_interval = scheduler_interval
        self.checkpoint_best = checkpoint_best
        self.log_file = Path(log_file) if log_file is not None else None
        self._best_value: float | None = None  # checkpoint_best's value at best.ember
        self.grad_clip = grad_clip
        self.progress = Progress(progress)
        self.accumulation_steps = accumulation_steps
        self.early_stopping = early_stopping
        self.keep_checkpoints = keep_checkpoints
        self.history = History()
        # The whole training step as one graphed step where it can be one graph (else
        # None), or each replica's forward and backward as a step of its device.
        steps = [GraphedStep(self._gradients, d) for d in self.devices]
        whole = len(self.devices) == 1 and accumulation_steps == 1 and optimizer.capturable
        if graphed == "pure" and not whole:
            raise ValueError("Learner: graphed='pure' needs one device, accumulation_steps=1 "
                             "and a capturable optimizer (e.g. optim.Adam(..., capturable=True))")
        captured = bool(graphed) and all(step.device_captures for step in steps)
        pure = graphed == "pure"
        self._whole_step = (GraphedStep(self._pure_step if pure else self._train_step,
                                        self.devices[0], pure=pure)
                            if captured and whole else None)
        self._replica_steps = (steps if captured and self._whole_step is None
                               else [self._gradients] * len(self.devices))
        self._pure_step_ran = False
        self.epoch = 0
        self.step = 0
        self._best: float | None = None
        self._stale_epochs = 0
        self._site: tuple[str, int] = ("<ember>", 0)  # the user's call of fit / evaluate
        # Where in the epoch training stands: batches whose update is applied, and the
        # random state after the last update (a resumed run draws the same numbers next).
        self._batch = 0
        self._random_at_update = random_state()
        self._train_loader: DataLoader | None = None
        self._loader_state: dict[str, Any] | None = None  # a resumed loader's, until fit

    # ----- public entry points ---------------------------------------------------------

    async def fit(self, train_loader: DataLoader, valid_loader: DataLoader | None = None,
                  epochs: int = 1) -> History:
        """Train until ``epochs`` epochs in total (so a resumed learner continues).

        Raises:
            Exception: the failure itself (a ``KernelError`` naming the user's line, or
                what the dataset or ``loss_fn`` raised), never the exception groups of its
                tasks.
        """
        self._site = caller_site()
        try:
            await self._fit(train_loader, valid_loader, epochs)
        except BaseException as exc:
            failure = unwrapped(exc)
            if self.checkpoint_dir is not None and _is_interrupt(failure):
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(self._write_checkpoint,
                                                  self._snapshot(interrupted=True), INTERRUPTED)
            if failure is exc:
                raise
        else:
            return self.history
        raise failure

    @_ki_protected
    async def _fit(self, train_loader: DataLoader, valid_loader: DataLoader | None,
                   epochs: int) -> None:
        if self._loader_state is not None:
            train_loader.load_state_dict(self._loader_state)
            self._loader_state = None
        self._train_loader = train_loader
        checkpoint_send, checkpoint_receive = trio.open_memory_channel(1)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._checkpoint_task, checkpoint_receive)
            async with checkpoint_send:
                while self.epoch < epochs:
                    train_values = await self._train_epoch(train_loader, epochs)
                    self.history.append("train", train_values)
                    if valid_loader is not None:
                        self.history.append("valid", await self._evaluate(valid_loader))
                    self.epoch += 1
                    self._batch = 0
                    if isinstance(self.scheduler, ReduceLROnPlateau):
                        split = "valid" if valid_loader is not None else "train"
                        self.scheduler.step(self.history.state_dict()[split]["loss"][-1])
                    elif self.scheduler is not None and self.scheduler_interval == "epoch":
                        self.scheduler.step()
                    if self.log_file is not None:
                        await trio.to_thread.run_sync(self._log_epoch)
                    if self.checkpoint_dir is not None:
                        best = self._is_best()
                        snapshot = self._snapshot()
                        await checkpoint_send.send((snapshot, None))
                        if best:
                            await checkpoint_send.send((snapshot, BEST))
                    if self._should_stop():
                        break

    def fit_sync(self, train_loader: DataLoader, valid_loader: DataLoader | None = None,
                 epochs: int = 1) -> History:
        """``fit`` for plain scripts."""
        return trio.run(self.fit, train_loader, valid_loader, epochs)

    async def evaluate(self, loader: DataLoader) -> dict[str, float]:
        """Every metric over ``loader`` with the model in eval mode; returns {name: value}.

        Raises:
            Exception: the failure itself, as ``fit`` does.
        """
        self._site = caller_site()
        return await self._evaluate(loader)

    def evaluate_sync(self, loader: DataLoader) -> dict[str, float]:
        """``evaluate`` for plain scripts."""
        return trio.run(self.evaluate, loader)

    async def _evaluate(self, loader: DataLoader) -> dict[str, float]:
        for replica in self.replicas:
            replica.eval()
        instances, loss_mean = self._fresh_metrics()
        batches = loader.host_batches(loader.batch_indices(0))
        try:
            while (arrays := await trio.to_thread.run_sync(next, batches, None)) is not None:
                with no_record(), pinned(self._site):
                    parts = self._place(loader, arrays)
                    outputs, losses = [], []
                    for replica, (inputs, targets) in zip(self.replicas, parts):
                        with self._autocast():
                            out = replica(*inputs)
                            loss = call_user(self.loss_fn, out, *targets)
                        outputs.append((out, targets[0]))
                        losses.append((loss, targets[0].shape[0]))
                host = await _read_all([t for pair in outputs for t in pair] +
                                       [loss for loss, _ in losses])
                self._update(instances, loss_mean, host, outputs, losses)
        finally:
            batches.close()
            for replica in self.replicas:
                replica.train()
        return self._compute(instances, loss_mean, lr=None, samples_per_second=None)

    def resume(self, checkpoint: str | os.PathLike | None = None) -> Learner:
        """Continue from the newest epoch checkpoint in a folder (default: the learner's own),
        or from one checkpoint file (such as the ``interrupted.ember`` a Ctrl-C leaves)."""
        from ember.record import load

        path = Path(checkpoint or self.checkpoint_dir)
        if path.is_dir():
            found = _checkpoints(path)
            if not found:
                raise FileNotFoundError(f"resume: no epoch checkpoint in {path}")
            directory, path = path, found[-1]
        else:
            directory = path.parent
        state = load(path)
        self.model.load_state_dict({k: np.asarray(v) for k, v in state["model"].items()})
        broadcast(self.model, self.replicas)
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state.get("scheduler") is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        set_random_state(tuple(state["random"]))
        self.epoch = int(state["epoch"])
        self.step = int(state["step"])
        loader = state.get("loader")
        self._loader_state = None if loader is None else {"seed": int(loader["seed"])}
        self._batch = 0 if loader is None else int(loader["batch"])
        self._random_at_update = random_state()
        self.history = History.from_state_dict(state["history"])
        best = state.get("best")
        self._best = None if best is None else float(best)
        self._stale_epochs = int(state.get("stale_epochs", 0))
        best_value = state.get("best_value")
        self._best_value = None if best_value is None else float(best_value)
        if self.checkpoint_dir is None:
            self.checkpoint_dir = directory
        return self

    # ----- one epoch -------------------------------------------------------------------

    @_ki_protected
    async def _train_epoch(self, loader: DataLoader, epochs: int) -> dict[str, float]:
        batches = loader.batch_indices(self.epoch)
        self.progress.start_epoch(self.epoch + 1, epochs, len(batches))
        batches = batches[self._batch:]  # resumed inside the epoch: the rest of it
        self._random_at_update = random_state()
        record_send, record_receive = trio.open_memory_channel(4)
        instances, loss_mean = self._fresh_metrics()
        timing = {"start": time.perf_counter(), "items": 0}
        async with trio.open_nursery() as nursery:
            if loader.prefetch == 0:
                batch_receive = _OnDemand(loader, batches, self._place)
            else:
                batch_send, batch_receive = trio.open_memory_channel(loader.prefetch - 1)
                nursery.start_soon(self._loader_task, loader, batches, batch_send)
            nursery.start_soon(self._step_task, loader, batch_receive, record_send)
            nursery.start_soon(self._metrics_task, record_receive, instances, loss_mean, timing)
        elapsed = time.perf_counter() - timing["start"]
        values = self._compute(instances, loss_mean, lr=self.optimizer.lr,
                               samples_per_second=timing["items"] / max(elapsed, 1e-9))
        self.progress.end_epoch(values)
        return values

    @_ki_protected
    async def _loader_task(self, loader: DataLoader, batches: list[np.ndarray],
                           send: trio.MemorySendChannel) -> None:
        arrays = loader.host_batches(batches)  # worker processes, with num_workers > 0
        try:
            async with send:
                while (host := await trio.to_thread.run_sync(next, arrays, None)) is not None:
                    await send.send(await trio.to_thread.run_sync(self._place, loader, host))
        finally:
            arrays.close()

    def _place(self, loader: DataLoader, arrays: tuple[np.ndarray, ...]) -> list:
        """Split a host batch across the replicas' devices and upload each part."""
        with pinned(self._site):
            return self._split(loader, arrays)

    def _split(self, loader: DataLoader, arrays: tuple[np.ndarray, ...]) -> list:
        n = len(self.devices)
        rows = arrays[0].shape[0]
        bounds = [round(rows * k / n) for k in range(n + 1)]
        parts = []
        for k, device in enumerate(self.devices):
            pieces = [a[bounds[k]:bounds[k + 1]] for a in arrays]
            tensors = loader.place(tuple(pieces), device)
            parts.append((tensors[:1], tensors[1:]))
        return parts

    @_ki_protected
    async def _step_task(self, loader: DataLoader, receive: trio.MemoryReceiveChannel,
                         send: trio.MemorySendChannel) -> None:
        async with send, receive:
            pending: list[list[Gradients]] = []
            async for parts in receive:
                items = sum(p[1][0].shape[0] for p in parts)
                try:
                    with pinned(self._site):  # not across an await: other tasks walk theirs
                        if self._whole_step is not None:
                            record = (self._pure_call(parts, items) if self._whole_step.pure
                                      else self._whole_step(parts, items))
                        else:
                            record, grads = self._forward_backward(parts, items)
                            pending.append(grads)
                            if len(pending) == self.accumulation_steps and self.scaler is None:
                                self._apply(pending)
                                pending = []
                except KernelError:
                    # A batch's failure usually reaches the metrics' read; with EMBER_EAGER=1
                    # it raises here, at its op, before the batch's update.
                    if self.on_bad_batch == "raise":
                        raise
                    self.bad_batches += 1
                    continue
                if len(pending) == self.accumulation_steps:  # with a scaler: it reads
                    await self._apply_scaled(pending)
                    pending = []
                await send.send(record)
            if pending:
                if self.scaler is not None:
                    await self._apply_scaled(pending)
                else:
                    with pinned(self._site):
                        self._apply(pending)

    def _train_step(self, parts: list, items: int) -> _StepRecord:
        """Forward, backward and update of one batch (``_whole_step``'s function)."""
        record, grads = self._forward_backward(parts, items)
        self._apply([grads])
        return record

    def _pure_call(self, parts: list, items: int) -> _StepRecord:
        """One batch through the pure whole step: the model's values, the optimizer's
        state tensors and scalars and the batch in; their new values out, adopted here
        whether the step ran its function or replayed its graph."""
        ((inputs, targets),) = parts
        slots = [slot for _, slot in self.model.named_slots()]
        state = _state_tensors(self.optimizer)
        scalars = self.optimizer.device_scalars()
        layout = (len(slots), tuple(key for key, _ in state), len(scalars), len(inputs), items)
        self._pure_step_ran = False
        changed, values, new_keys, new_state, loss, outputs = self._whole_step(
            *(slot.value for slot in slots), *(t for _, t in state), *scalars, *inputs,
            *targets, layout=layout)
        for k, value in zip(changed, values):
            if slots[k].value is not value:
                slots[k].value = value
        for (param_id, key), value in zip(new_keys, new_state):
            self.optimizer.state.setdefault(param_id, {})[key] = value
        if not self._pure_step_ran:
            self.optimizer.count_replayed_step(len(changed))
        self._advance()
        return _StepRecord(loss, outputs, [targets[0]], items, self.optimizer.lr)

    def _pure_step(self, *tensors: Tensor, layout: tuple) -> tuple:
        """``_pure_call``'s function: the step from the values given, returning which slots
        changed, their values, the optimizer's state and the record's loss and outputs."""
        self._pure_step_ran = True
        n_slots, state_keys, n_scalars, n_inputs, items = layout
        slots = [slot for _, slot in self.model.named_slots()]
        values = tensors[:n_slots]
        for slot, value in zip(slots, values):  # the values given (the same, first time)
            if slot.value is not value:
                slot.value = value
        given_state = tensors[n_slots:n_slots + len(state_keys)]
        for (param_id, key), value in zip(state_keys, given_state):
            self.optimizer.state[param_id][key] = value
        batch = tensors[n_slots + len(state_keys) + n_scalars:]
        record, grads = self._forward_backward([(batch[:n_inputs], batch[n_inputs:])], items)
        self._optimize([grads])
        changed = tuple(k for k, (slot, value) in enumerate(zip(slots, values))
                        if slot.value is not value)
        state = _state_tensors(self.optimizer)
        return (changed, [slots[k].value for k in changed], tuple(key for key, _ in state),
                [t for _, t in state], record.loss, record.outputs)

    def _forward_backward(self, parts: list, items: int) -> tuple[_StepRecord, list[Gradients]]:
        grads, outputs, targets, losses = [], [], [], []
        scale = 1.0 / self.accumulation_steps
        for step, replica, (inputs, target) in zip(self._replica_steps, self.replicas, parts):
            share = target[0].shape[0] / items
            out, loss, replica_grads = step(replica, inputs, target, share * scale)
            grads.append(replica_grads)
            with no_record():
                outputs.append(out)
                targets.append(target[0])
                losses.append(loss.to(self.devices[0].inner) * share)
        with no_record():
            total = losses[0]
            for part in losses[1:]:
                total = total + part
        return _StepRecord(total, outputs, targets, items, self.optimizer.lr), grads

    def _gradients(self, replica: Module, inputs: tuple, target: tuple,
                   weight: float) -> tuple[Tensor, Tensor, Gradients]:
        """One replica's forward and backward: (output, loss, gradients of loss · weight)."""
        with self._autocast():
            out = replica(*inputs)
            loss = call_user(self.loss_fn, out, *target)
        if self.scaler is not None:
            weight *= self.scaler.get_scale()
        grads = (loss * weight).backward()
        return out.detach(), loss.detach(), grads

    def _apply(self, pending: list[list[Gradients]]) -> None:
        """The update of one step, and the step counted (a scheduler stepped with it)."""
        self._optimize(pending)
        self._advance(len(pending))

    async def _apply_scaled(self, pending: list[list[Gradients]]) -> None:
        """``_apply`` with the GradScaler: its step awaits whether the gradients overflowed
        (a skipped step still counts as a step, as torch's scheduler steps count it)."""
        with pinned(self._site):
            grads = self._reduced(pending)
        await self.scaler.step_async(self.optimizer, grads)
        with pinned(self._site):
            self.scaler.update()
            if len(self.replicas) > 1:
                broadcast(self.model, self.replicas)
            self._advance(len(pending))

    def _reduced(self, pending: list[list[Gradients]]) -> Gradients:
        """The step's gradients: all-reduced (replicas and accumulated batches), unscaled
        (with a GradScaler) and clipped."""
        flat_models = self.replicas * len(pending)
        flat_grads = [g for step in pending for g in step]
        grads = all_reduce(self.model, flat_models, flat_grads)
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer, grads)
        if self.grad_clip is not None:
            from ember.optim import clip_grad_norm

            clip_grad_norm(grads, self.grad_clip)
        return grads

    def _optimize(self, pending: list[list[Gradients]]) -> None:
        """All-reduce, clip, update, sync replicas."""
        self.optimizer.step(self._reduced(pending))
        if len(self.replicas) > 1:
            broadcast(self.model, self.replicas)

    def _advance(self, batches: int = 1) -> None:
        self.step += 1
        self._batch += batches
        if self.scheduler is not None and self.scheduler_interval == "step":
            self.scheduler.step()
        self._random_at_update = random_state()

    @_ki_protected
    async def _metrics_task(self, receive: trio.MemoryReceiveChannel, instances: list,
                            loss_mean: _metrics.Mean | None, timing: dict) -> None:
        async with receive:
            async for record in receive:
                pairs = list(zip(record.outputs, record.targets))
                try:
                    host = await _read_all([t for pair in pairs for t in pair] + [record.loss])
                except KernelError:
                    if self.on_bad_batch == "raise":
                        raise
                    self.bad_batches += 1
                    continue
                self._update(instances, loss_mean, host, pairs, [(None, record.items)])
                timing["items"] += record.items
                elapsed = time.perf_counter() - timing["start"]
                self.progress.step(float(host[-1]), timing["items"] / max(elapsed, 1e-9))

    # ----- metrics ---------------------------------------------------------------------

    def _fresh_metrics(self) -> tuple[list[_metrics.Metric], _metrics.Mean | None]:
        instances = [m for m in self.metric_specs if isinstance(m, _metrics.Metric)]
        for m in instances:
            m.reset()
        return instances, _metrics.Mean("loss")

    @staticmethod
    def _update(instances: list, loss_mean: _metrics.Mean, host: list, pairs: list,
                losses: list) -> None:
        n_pairs = len(pairs)
        for k in range(n_pairs):
            output, target = host[2 * k], host[2 * k + 1]
            for m in instances:
                m.update(output, target)
        for j, (_, count) in enumerate(losses):
            loss_mean.add(float(host[2 * n_pairs + j]), count)

    def _compute(self, instances: list, loss_mean: _metrics.Mean, lr: float | None,
                 samples_per_second: float | None) -> dict[str, float]:
        values: dict[str, float] = {}
        for spec in self.metric_specs:
            if spec == "loss":
                values["loss"] = loss_mean.compute()
            elif spec == "lr" and lr is not None:
                values["lr"] = float(lr)
            elif spec == "samples_per_second" and samples_per_second is not None:
                values["samples_per_second"] = samples_per_second
            elif isinstance(spec, _metrics.Metric):
                values[spec.name] = spec.compute()
        return values

    def _should_stop(self) -> bool:
        rule = self.early_stopping
        if rule is None:
            return False
        series = (self.history.valid if rule.split == "valid" else self.history.train)
        values = series.get(rule.metric)
        if not values:
            raise ValueError(f"early stopping: no {rule.split} metric {rule.metric!r} recorded")
        value = values[-1]
        better = (self._best is None or
                  (value < self._best - rule.min_delta if rule.mode == "min"
                   else value > self._best + rule.min_delta))
        if better:
            self._best, self._stale_epochs = value, 0
        else:
            self._stale_epochs += 1
        return self._stale_epochs >= rule.patience

    # ----- checkpoints -----------------------------------------------------------------

    def _snapshot(self, interrupted: bool = False) -> dict[str, Any]:
        """Handles to everything a checkpoint holds (no reads): at an epoch boundary, or
        ``interrupted`` after the last update, where the run stopped."""
        loader = self._train_loader
        return {
            "model": {name: slot.value for name, slot in self.model.named_slots()},
            "optimizer": self.optimizer.state_dict(),
            "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
            "random": list(self._random_at_update if interrupted else random_state()),
            "loader": None if loader is None else {"seed": loader.seed, "batch": self._batch},
            "epoch": self.epoch,
            "step": self.step,
            "history": self.history.state_dict(),
            "best": self._best,
            "stale_epochs": self._stale_epochs,
            "best_value": self._best_value,
            "scaler": None if self.scaler is None else self.scaler.state_dict(),
        }

    def _is_best(self) -> bool:
        """Whether this epoch's ``checkpoint_best`` metric beats the best so far (recorded)."""
        if self.checkpoint_best is None:
            return False
        split, _, metric = self.checkpoint_best.partition(".")
        values = self.history.state_dict()[split].get(metric)
        if not values:
            raise ValueError(f"Learner: checkpoint_best: no {split} metric {metric!r} recorded "
                             f"(metrics: {sorted(self.history.state_dict()[split])})")
        value, best = float(values[-1]), self._best_value
        better = (best is None or (value > best if metric.endswith("accuracy")
                                   else value < best))
        if better:
            self._best_value = value
        return better

    def _log_epoch(self) -> None:
        record = {"epoch": self.epoch, "step": self.step}
        for split, series in self.history.state_dict().items():
            if series:
                record[split] = {name: values[-1] for name, values in series.items()}
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "a") as f:
            f.write(json.dumps(record) + "\n")

    async def _checkpoint_task(self, receive: trio.MemoryReceiveChannel) -> None:
        async with receive:
            async for snapshot, name in receive:
                await trio.to_thread.run_sync(self._write_checkpoint, snapshot, name)

    def _write_checkpoint(self, snapshot: dict[str, Any], name: str | None = None) -> None:
        from ember.record import save

        directory = self.checkpoint_dir
        directory.mkdir(parents=True, exist_ok=True)
        save(snapshot, directory / (name or f"epoch-{snapshot['epoch']:04d}.ember"))
        for old in _checkpoints(directory)[:-self.keep_checkpoints]:
            old.unlink(missing_ok=True)


INTERRUPTED = "interrupted.ember"


class _OnDemand:
    """An epoch's batches loaded when the step task asks for each (``prefetch=0``), in
    place of the loader task's channel."""

    def __init__(self, loader: DataLoader, batches: list[np.ndarray], place: Callable) -> None:
        self._loader, self._batches, self._place = loader, iter(batches), place

    async def __aenter__(self) -> _OnDemand:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        return None

    def __aiter__(self) -> _OnDemand:
        return self

    async def __anext__(self) -> list:
        indices = next(self._batches, None)
        if indices is None:
            raise StopAsyncIteration
        arrays = await trio.to_thread.run_sync(self._loader.host_batch, indices)
        return await trio.to_thread.run_sync(self._place, self._loader, arrays)


def _training_device(spec: Device | str) -> Device:
    device = resolve_device(spec)
    return device if device.is_autodiff else device.autodiff()


def _is_interrupt(exc: BaseException) -> bool:
    """Ctrl-C or cancellation, alone or inside the exception groups of trio nurseries."""
    if isinstance(exc, BaseExceptionGroup):
        return any(_is_interrupt(e) for e in exc.exceptions)
    return isinstance(exc, KeyboardInterrupt | trio.Cancelled)


def _state_tensors(optimizer: Any) -> list[tuple[tuple[str, str], Tensor]]:
    """((param id, state name), tensor) of every tensor in ``optimizer``'s state, in its
    parameters' order."""
    found = []
    for group in optimizer.param_groups:
        for param in group["params"]:
            found += _param_state_tensors(optimizer, param, optimizer.state_keys(group))
    return found


def _param_state_tensors(optimizer: Any, param: Any,
                         keys: Sequence[str]) -> list[tuple[tuple[str, str], Tensor]]:
    found = []
    state = optimizer.state.get(param.id, {})
    for key in keys:
        value = state.get(key)
        if isinstance(value, Tensor):
            found.append(((param.id, key), value))
    return found


def _checkpoints(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir()
             if (m := _CHECKPOINT.match(p.name))]
    return [p for _, p in sorted(found)]


async def _read_all(tensors: list[Tensor]) -> list[np.ndarray]:
    """Read several tensors with one wait per device: every fetch is posted before awaiting."""
    waiters = [t.device.actor.fetch(t._id) if t._host is None else None for t in tensors]
    results = []
    for t, waiter in zip(tensors, waiters):
        results.append(t._host if waiter is None else await waiter.wait_async())
    return results


__all__ = ["EarlyStopping", "Learner"]

