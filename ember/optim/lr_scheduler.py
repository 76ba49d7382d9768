"""Learning-rate schedulers: each ``step()`` sets ``optimizer.lr``, as ``torch.optim.lr_scheduler``.

The schedulers are PyTorch's, formula for formula, so a run gives the same
learning rates as torch for the same calls: constructing one performs its
first step (epoch 0), ``step()`` advances one epoch (or one iteration: the
unit is the caller's), and each ``get_lr`` is PyTorch's recursive
("chainable") form, computed from the optimizer's current lr, so that
``ChainedScheduler`` composes factors. ``SequentialLR`` switches schedulers at
milestones, restarting the next from its closed form at epoch 0. The first
scheduler built on an optimizer records ``optimizer.initial_lr`` (PyTorch's
``group["initial_lr"]``); every scheduler's ``base_lr`` is that value.

An ember optimizer has one learning rate (PyTorch's one param group), so
``get_last_lr()`` returns a list of one float, as torch does for one group.
``state_dict()`` holds plain numbers (nested for the composite schedulers).

Example:
    >>> opt = optim.AdamW(model.parameters(), lr=1e-3)
    >>> sched = lr_scheduler.SequentialLR(opt, [lr_scheduler.LinearWarmup(opt, 100, 0.01),
    ...                                         lr_scheduler.CosineAnnealingLR(opt, 900)],
    ...                                   milestones=[100])
    >>> for batch in loader:
    ...     opt.step(loss_fn(model(x), y).backward())
    ...     sched.step()
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from typing import Any

from ember.optim.optimizer import Optimizer


class LRScheduler:
    """Base of the schedulers: holds ``last_epoch`` and sets ``optimizer.lr`` on each step.

    Args:
        optimizer: the ember optimizer whose ``lr`` this drives.
        last_epoch: -1 (default) to start; another value only when resuming,
            which needs ``optimizer.initial_lr`` (restored with the optimizer's state).
    """

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(self).__name__}: {type(optimizer).__name__} is not an "
                            f"ember optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            if optimizer.initial_lr is None:
                optimizer.initial_lr = optimizer.lr
        elif optimizer.initial_lr is None:
            raise ValueError(f"{type(self).__name__}: resuming at last_epoch={last_epoch} needs "
                             f"optimizer.initial_lr; help: load the optimizer's state first")
        self.base_lr: float = optimizer.initial_lr
        self.last_epoch = last_epoch
        self._is_initial = False
        self._initial_step()

    def _initial_step(self) -> None:
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self) -> float:
        """The next lr, from the current one (PyTorch's chainable form)."""
        raise NotImplementedError

    def _closed_form_lr(self) -> float:
        """The lr at ``last_epoch``, from ``base_lr`` alone."""
        raise NotImplementedError

    def step(self) -> None:
        """Advance one epoch and set ``optimizer.lr``. Call it after ``optimizer.step``."""
        self._step_count += 1
        self._update_lr()

    def _update_lr(self, epoch: int | None = None) -> None:
        if epoch is None:
            self.last_epoch += 1
            lr = self.get_lr()
        else:
            self.last_epoch = epoch
            lr = self._closed_form_lr()
        self.optimizer.lr = lr
        self._last_lr = [self.optimizer.lr]

    def get_last_lr(self) -> list[float]:
        """The lr the last step set, as a list (one entry: one param group)."""
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        """Every attribute but the optimizer: plain numbers and lists."""
        return {k: list(v) if isinstance(v, tuple) else v
                for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned (only this scheduler's own attribute names)."""
        unknown = sorted(set(state_dict) - set(self.state_dict()))
        if unknown:
            raise ValueError(f"{type(self).__name__}.load_state_dict: unknown entries {unknown}")
        self.__dict__.update(state_dict)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(last_epoch={self.last_epoch}, lr={self.optimizer.lr})"


class StepLR(LRScheduler):
    """Multiply the lr by ``gamma`` every ``step_size`` epochs: ``base_lr · γ^⌊epoch / step_size⌋``.

    Args: optimizer; step_size (epochs between decays); gamma (default 0.1); last_epoch.
    """

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        if isinstance(step_size, bool) or not isinstance(step_size, int) or step_size <= 0:
            raise ValueError(f"StepLR: step_size must be a positive int, got {step_size!r}")
        self.step_size = step_size
        self.gamma = float(gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> float:
        lr = self.optimizer.lr
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return lr
        return lr * self.gamma

    def _closed_form_lr(self) -> float:
        return self.base_lr * self.gamma ** (self.last_epoch // self.step_size)


class ExponentialLR(LRScheduler):
    """Multiply the lr by ``gamma`` every epoch: ``base_lr · γ^epoch``."""

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = float(gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> float:
        lr = self.optimizer.lr
        return lr if self._is_initial else lr * self.gamma

    def _closed_form_lr(self) -> float:
        return self.base_lr * self.gamma ** self.last_epoch


class CosineAnnealingLR(LRScheduler):
    """Cosine from ``base_lr`` down to ``eta_min`` over ``T_max`` epochs (then back up, and so on).

    ``η_t = η_min + (base_lr - η_min) · (1 + cos(π t / T_max)) / 2``, computed
    recursively as PyTorch does (SGDR without restarts).

    Args: optimizer; T_max (epochs of the half period); eta_min (default 0); last_epoch.
    """

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0,  # noqa: N803
                 last_epoch: int = -1) -> None:
        if T_max <= 0:
            raise ValueError(f"CosineAnnealingLR: T_max must be positive, got {T_max}")
        self.T_max = T_max
        self.eta_min = float(eta_min)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> float:
        lr, base, low, t_max, epoch = (self.optimizer.lr, self.base_lr, self.eta_min,
                                       self.T_max, self.last_epoch)
        if self._is_initial:
            return lr
        if self._step_count == 1 and epoch > 0:
            return low + (base - low) * (1 + math.cos(epoch * math.pi / t_max)) / 2
        if (epoch - 1 - t_max) % (2 * t_max) == 0:
            return lr + (base - low) * (1 - math.cos(math.pi / t_max)) / 2
        return ((1 + math.cos(math.pi * epoch / t_max))
                / (1 + math.cos(math.pi * (epoch - 1) / t_max)) * (lr - low) + low)

    def _closed_form_lr(self) -> float:
        return (self.eta_min + (self.base_lr - self.eta_min)
                * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2)


class LinearLR(LRScheduler):
    """Scale the lr linearly from ``start_factor · base_lr`` to ``end_factor · base_lr``
    over ``total_iters`` epochs, then keep it (``torch.optim.lr_scheduler.LinearLR``).

    Args: optimizer; start_factor in (0, 1] (default 1/3); end_factor in [0, 1]
    (default 1); total_iters (default 5); last_epoch.
    """

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3,
                 end_factor: float = 1.0, total_iters: int = 5, last_epoch: int = -1) -> None:
        if start_factor > 1.0 or start_factor <= 0:
            raise ValueError(f"{type(self).__name__}: start_factor must be in (0, 1], got "
                             f"{start_factor}")
        if end_factor > 1.0 or end_factor < 0:
            raise ValueError(f"{type(self).__name__}: end_factor must be in [0, 1], got "
                             f"{end_factor}")
        self.start_factor = float(start_factor)
        self.end_factor = float(end_factor)
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> float:
        lr, start, end = self.optimizer.lr, self.start_factor, self.end_factor
        if self.last_epoch == 0:
            return lr * start
        if self._is_initial or self.last_epoch > self.total_iters:
            return lr
        return lr * (1.0 + (end - start)
                     / (self.total_iters * start + (self.last_epoch - 1) * (end - start)))

    def _closed_form_lr(self) -> float:
        return self.base_lr * (self.start_factor + (self.end_factor - self.start_factor)
                               * min(self.total_iters, self.last_epoch) / self.total_iters)


class LinearWarmup(LinearLR):
    """Linear warmup: ``LinearLR`` from ``start_factor · lr`` up to ``lr`` in ``warmup_steps``.

    Exactly ``LinearLR(optimizer, start_factor, end_factor=1.0,
    total_iters=warmup_steps)``: at step 0 the lr is ``start_factor · base_lr``,
    it grows linearly, and from step ``warmup_steps`` on it is ``base_lr``. As
    in PyTorch, ``start_factor`` must be > 0 (default 1/3, LinearLR's); chain a
    decay after it with ``SequentialLR(opt, [warmup, decay], milestones=[warmup_steps])``.
    """

    def __init__(self, optimizer: Optimizer, warmup_steps: int, start_factor: float = 1.0 / 3,
                 last_epoch: int = -1) -> None:
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) \
                or warmup_steps <= 0:
            raise ValueError(f"LinearWarmup: warmup_steps must be a positive int, got "
                             f"{warmup_steps!r}")
        super().__init__(optimizer, start_factor, 1.0, warmup_steps, last_epoch)


class SequentialLR(LRScheduler):
    """Run ``schedulers`` one after another, switching at each of ``milestones`` (epochs).

    PyTorch's: building it resets the lr to ``initial_lr`` and re-runs the first
    scheduler's first step; at a milestone the next scheduler restarts from
    its closed form at epoch 0.
    """

    def __init__(self, optimizer: Optimizer, schedulers: Sequence[LRScheduler],
                 milestones: Sequence[int], last_epoch: int = -1) -> None:
        _check_children("SequentialLR", optimizer, schedulers)
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(f"SequentialLR: expects one milestone fewer than schedulers, got "
                             f"{len(schedulers)} schedulers and {len(milestones)} milestones")
        self._schedulers = list(schedulers)
        self._milestones = [int(m) for m in milestones]
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        optimizer.lr = optimizer.initial_lr
        self._undo(self)
        index = bisect_right(self._milestones, 0)
        self._schedulers[index]._initial_step()
        self._last_lr = self._schedulers[index].get_last_lr()

    def _undo(self, scheduler: Any) -> None:
        """Take back the first step every (nested) scheduler made when it was built."""
        if hasattr(scheduler, "_schedulers"):
            for s in scheduler._schedulers:
                self._undo(s)
        elif hasattr(scheduler, "last_epoch"):
            scheduler.last_epoch -= 1

    def step(self) -> None:
        self.last_epoch += 1
        index = bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[index]
        if index > 0 and self._milestones[index - 1] == self.last_epoch:
            scheduler._update_lr(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()

    def state_dict(self) -> dict[str, Any]:
        return _composite_state(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        _load_composite(self, state_dict)


class ChainedScheduler(LRScheduler):
    """Step every scheduler in ``schedulers`` at each step: their factors multiply.

    ``ChainedScheduler(schedulers, optimizer=None)`` as PyTorch; the
    optimizer-first order ``ChainedScheduler(optimizer, schedulers)`` is accepted too.
    """

    def __init__(self, schedulers: Any, optimizer: Any = None) -> None:
        if isinstance(schedulers, Optimizer):
            schedulers, optimizer = optimizer, schedulers
        schedulers = list(schedulers or ())
        if not schedulers:
            raise ValueError("ChainedScheduler: expects at least one scheduler")
        optimizer = optimizer or schedulers[0].optimizer
        _check_children("ChainedScheduler", optimizer, schedulers)
        self._schedulers = schedulers
        self.optimizer = optimizer
        self._last_lr = [optimizer.lr]

    def step(self) -> None:
        for scheduler in self._schedulers:
            scheduler.step()
        self._last_lr = [self.optimizer.lr]

    def state_dict(self) -> dict[str, Any]:
        return _composite_state(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        _load_composite(self, state_dict)


def _check_children(name: str, optimizer: Optimizer, schedulers: Sequence[Any]) -> None:
    if len(schedulers) < 1:
        raise ValueError(f"{name}: expects at least one scheduler")
    for i, s in enumerate(schedulers):
        if not isinstance(s, LRScheduler):
            raise TypeError(f"{name}: item {i} is a {type(s).__name__}, not a scheduler")
        if s.optimizer is not optimizer:
            raise ValueError(f"{name}: scheduler {i} ({type(s).__name__}) drives another "
                             f"optimizer")


def _composite_state(scheduler: Any) -> dict[str, Any]:
    state = {k: v for k, v in scheduler.__dict__.items() if k not in ("optimizer", "_schedulers")}
    state["_schedulers"] = [s.state_dict() for s in scheduler._schedulers]
    return state


def _load_composite(scheduler: Any, state_dict: dict[str, Any]) -> None:
    state = dict(state_dict)
    children = state.pop("_schedulers")
    if len(children) != len(scheduler._schedulers):
        raise ValueError(f"{type(scheduler).__name__}.load_state_dict: {len(children)} "
                         f"schedulers in the state, {len(scheduler._schedulers)} here")
    unknown = sorted(set(state) - set(_composite_state(scheduler)))
    if unknown:
        raise ValueError(f"{type(scheduler).__name__}.load_state_dict: unknown entries {unknown}")
    scheduler.__dict__.update(state)
    for s, child in zip(scheduler._schedulers, children):
        s.load_state_dict(child)
