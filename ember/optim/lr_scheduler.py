"""Learning-rate schedulers: each ``step()`` sets every param group's ``lr``, as
``torch.optim.lr_scheduler``.

The schedulers are PyTorch's, formula for formula, so a run gives the same
learning rates as torch for the same calls: constructing one performs its
first step (epoch 0), ``step()`` advances one epoch (or one iteration: the
unit is the caller's), and each ``get_lr`` is PyTorch's recursive
("chainable") form, computed from the optimizer's current lr, so that
``ChainedScheduler`` composes factors. ``SequentialLR`` switches schedulers at
milestones, restarting the next from its closed form at epoch 0. The first
scheduler built on an optimizer records each group's ``group["initial_lr"]`` (PyTorch's);
a scheduler's ``base_lrs`` are those values, one per group, and ``get_last_lr()`` lists
the groups' lrs. ``ReduceLROnPlateau`` steps on a metric instead (``step(metric)``).
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
    """Base of the schedulers: holds ``last_epoch`` and sets each group's lr on each step.

    A scheduler defines ``_next_lr(lr, base_lr)`` (PyTorch's chainable ``get_lr`` for one
    group) and ``_closed_lr(base_lr)`` (the lr at ``last_epoch``), applied to every group.

    Args:
        optimizer: the ember optimizer whose ``lr`` this drives.
        last_epoch: -1 (default) to start; another value only when resuming,
            which needs each group's ``initial_lr`` (restored with the optimizer's state).
    """

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(self).__name__}: {type(optimizer).__name__} is not an "
                            f"ember optimizer")
        self.optimizer = optimizer
        for index, group in enumerate(optimizer.param_groups):
            if last_epoch == -1:
                group.setdefault("initial_lr", group["lr"])
            elif "initial_lr" not in group:
                raise ValueError(f"{type(self).__name__}: resuming at last_epoch={last_epoch} "
                                 f"needs group {index}'s initial_lr; help: load the "
                                 f"optimizer's state first")
        self.base_lrs: list[float] = [g["initial_lr"] for g in optimizer.param_groups]
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

    @property
    def base_lr(self) -> float:
        """The first group's base lr."""
        return self.base_lrs[0]

    def get_lr(self) -> list[float]:
        """The next lr of each group, from the current one (PyTorch's chainable form)."""
        return [self._next_lr(group["lr"], base)
                for group, base in zip(self.optimizer.param_groups, self.base_lrs)]

    def _next_lr(self, lr: float, base_lr: float) -> float:
        raise NotImplementedError

    def _closed_lr(self, base_lr: float) -> float:
        """The lr at ``last_epoch``, from ``base_lr`` alone."""
        raise NotImplementedError

    def _closed_lrs(self) -> list[float]:
        return [self._closed_lr(base) for base in self.base_lrs]

    def step(self) -> None:
        """Advance one epoch and set each group's lr. Call it after ``optimizer.step``."""
        self._step_count += 1
        self._update_lr()

    def _update_lr(self, epoch: int | None = None) -> None:
        if epoch is None:
            self.last_epoch += 1
            lrs = self.get_lr()
        else:
            self.last_epoch = epoch
            lrs = self._closed_lrs()
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group["lr"] = float(lr)
        self._last_lr = _group_lrs(self.optimizer)

    def get_last_lr(self) -> list[float]:
        """The lr the last step set, one per param group."""
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        """Every attribute but the optimizer: plain numbers and lists."""
        return {k: list(v) if isinstance(v, tuple) else v
                for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned (only this scheduler's own attribute names).
        A state saved before param groups (one ``base_lr``) still loads."""
        state_dict = dict(state_dict)
        if "base_lr" in state_dict:
            state_dict["base_lrs"] = [state_dict.pop("base_lr")] * len(self.base_lrs)
        unknown = sorted(set(state_dict) - set(self.state_dict()))
        if unknown:
            raise ValueError(f"{type(self).__name__}.load_state_dict: unknown entries {unknown}")
        self.__dict__.update(state_dict)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(last_epoch={self.last_epoch}, "
                f"lr={_group_lrs(self.optimizer)})")


class StepLR(LRScheduler):
    """Multiply the lr by ``gamma`` every ``step_size`` epochs: ``base_lr · γ^⌊epoch / step_size⌋``.

    Args: optimizer; step_size (epochs between decays); gamma (default 0.1); last_epoch.

    Example:
        >>> sched = lr_scheduler.StepLR(opt, step_size=30, gamma=0.1)
        >>> for epoch in range(100):
        ...     train_one_epoch()
        ...     sched.step()
    """

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        if isinstance(step_size, bool) or not isinstance(step_size, int) or step_size <= 0:
            raise ValueError(f"StepLR: step_size must be a positive int, got {step_size!r}")
        self.step_size = step_size
        self.gamma = float(gamma)
        super().__init__(optimizer, last_epoch)

    def _next_lr(self, lr: float, base_lr: float) -> float:
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return lr
        return lr * self.gamma

    def _closed_lr(self, base_lr: float) -> float:
        return base_lr * self.gamma ** (self.last_epoch // self.step_size)


class ExponentialLR(LRScheduler):
    """Multiply the lr by ``gamma`` every epoch: ``base_lr · γ^epoch``.

    Example:
        >>> sched = lr_scheduler.ExponentialLR(opt, gamma=0.95)  # sched.step() once per epoch
    """

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = float(gamma)
        super().__init__(optimizer, last_epoch)

    def _next_lr(self, lr: float, base_lr: float) -> float:
        return lr if self._is_initial else lr * self.gamma

    def _closed_lr(self, base_lr: float) -> float:
        return base_lr * self.gamma ** self.last_epoch


class CosineAnnealingLR(LRScheduler):
    """Cosine from ``base_lr`` down to ``eta_min`` over ``T_max`` epochs (then back up, and so on).

    ``η_t = η_min + (base_lr - η_min) · (1 + cos(π t / T_max)) / 2``, computed
    recursively as PyTorch does (SGDR without restarts).

    Args: optimizer; T_max (epochs of the half period); eta_min (default 0); last_epoch.

    Example:
        >>> sched = lr_scheduler.CosineAnnealingLR(opt, T_max=100, eta_min=1e-5)
    """

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0,  # noqa: N803
                 last_epoch: int = -1) -> None:
        if T_max <= 0:
            raise ValueError(f"CosineAnnealingLR: T_max must be positive, got {T_max}")
        self.T_max = T_max
        self.eta_min = float(eta_min)
        super().__init__(optimizer, last_epoch)

    def _next_lr(self, lr: float, base_lr: float) -> float:
        base, low, t_max, epoch = base_lr, self.eta_min, self.T_max, self.last_epoch
        if self._is_initial:
            return lr
        if self._step_count == 1 and epoch > 0:
            return low + (base - low) * (1 + math.cos(epoch * math.pi / t_max)) / 2
        if (epoch - 1 - t_max) % (2 * t_max) == 0:
            return lr + (base - low) * (1 - math.cos(math.pi / t_max)) / 2
        return ((1 + math.cos(math.pi * epoch / t_max))
                / (1 + math.cos(math.pi * (epoch - 1) / t_max)) * (lr - low) + low)

    def _closed_lr(self, base_lr: float) -> float:
        return (self.eta_min + (base_lr - self.eta_min)
                * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2)


class LinearLR(LRScheduler):
    """Scale the lr linearly from ``start_factor · base_lr`` to ``end_factor · base_lr``
    over ``total_iters`` epochs, then keep it (``torch.optim.lr_scheduler.LinearLR``).

    Args: optimizer; start_factor in (0, 1] (default 1/3); end_factor in [0, 1]
    (default 1); total_iters (default 5); last_epoch.

    Example:
        >>> sched = lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=10)
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

    def _next_lr(self, lr: float, base_lr: float) -> float:
        start, end = self.start_factor, self.end_factor
        if self.last_epoch == 0:
            return lr * start
        if self._is_initial or self.last_epoch > self.total_iters:
            return lr
        return lr * (1.0 + (end - start)
                     / (self.total_iters * start + (self.last_epoch - 1) * (end - start)))

    def _closed_lr(self, base_lr: float) -> float:
        return base_lr * (self.start_factor + (self.end_factor - self.start_factor)
                               * min(self.total_iters, self.last_epoch) / self.total_iters)


class LinearWarmup(LinearLR):
    """Linear warmup: ``LinearLR`` from ``start_factor · lr`` up to ``lr`` in ``warmup_steps``.

    Exactly ``LinearLR(optimizer, start_factor, end_factor=1.0,
    total_iters=warmup_steps)``: at step 0 the lr is ``start_factor · base_lr``,
    it grows linearly, and from step ``warmup_steps`` on it is ``base_lr``. As
    in PyTorch, ``start_factor`` must be > 0 (default 1/3, LinearLR's); chain a
    decay after it with ``SequentialLR(opt, [warmup, decay], milestones=[warmup_steps])``.

    Example:
        >>> sched = lr_scheduler.LinearWarmup(opt, warmup_steps=500)  # sched.step() per batch
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

    Example:
        >>> warmup = lr_scheduler.LinearWarmup(opt, warmup_steps=100)
        >>> decay = lr_scheduler.CosineAnnealingLR(opt, T_max=900)
        >>> sched = lr_scheduler.SequentialLR(opt, [warmup, decay], milestones=[100])
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
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
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

    Example:
        >>> sched = lr_scheduler.ChainedScheduler([
        ...     lr_scheduler.ExponentialLR(opt, gamma=0.9),
        ...     lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)])
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
        self._last_lr = _group_lrs(optimizer)

    def step(self) -> None:
        for scheduler in self._schedulers:
            scheduler.step()
        self._last_lr = _group_lrs(self.optimizer)

    def state_dict(self) -> dict[str, Any]:
        return _composite_state(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        _load_composite(self, state_dict)


class MultiStepLR(LRScheduler):
    """Multiply the lr by ``gamma`` at each of ``milestones`` (epochs):
    ``base_lr · γ^(number of milestones ≤ epoch)``; a milestone listed twice decays twice.

    Args: optimizer; milestones (increasing epochs); gamma (default 0.1); last_epoch.

    Example:
        >>> sched = lr_scheduler.MultiStepLR(opt, milestones=[30, 80], gamma=0.1)
    """

    def __init__(self, optimizer: Optimizer, milestones: Sequence[int], gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        self.milestones = sorted(int(m) for m in milestones)
        self.gamma = float(gamma)
        super().__init__(optimizer, last_epoch)

    def _next_lr(self, lr: float, base_lr: float) -> float:
        return lr * self.gamma ** self.milestones.count(self.last_epoch)

    def _closed_lr(self, base_lr: float) -> float:
        return base_lr * self.gamma ** bisect_right(self.milestones, self.last_epoch)


class LambdaLR(LRScheduler):
    """``base_lr · lr_lambda(epoch)``: one function for every group, or one per group.

    Args: optimizer; lr_lambda (a function of the epoch, or a list of them, one per
    param group); last_epoch. ``state_dict`` leaves the functions out (PyTorch's).

    Example:
        >>> sched = lr_scheduler.LambdaLR(opt, lambda epoch: 0.95 ** epoch)
    """

    def __init__(self, optimizer: Optimizer, lr_lambda: Any, last_epoch: int = -1) -> None:
        groups = len(optimizer.param_groups) if isinstance(optimizer, Optimizer) else 1
        if isinstance(lr_lambda, list | tuple):
            if len(lr_lambda) != groups:
                raise ValueError(f"LambdaLR: expected {groups} lr_lambdas, got "
                                 f"{len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * groups
        for fn in self.lr_lambdas:
            if not callable(fn):
                raise TypeError(f"LambdaLR: lr_lambda must be callable, got "
                                f"{type(fn).__name__}")
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [base * fn(self.last_epoch) for fn, base in zip(self.lr_lambdas, self.base_lrs)]

    def _closed_lrs(self) -> list[float]:
        return self.get_lr()

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        del state["lr_lambdas"]
        return state


class OneCycleLR(LRScheduler):
    """The 1cycle policy (``torch.optim.lr_scheduler.OneCycleLR``), stepped once per batch.

    The lr rises from ``max_lr / div_factor`` to ``max_lr`` over the first ``pct_start``
    of ``total_steps``, then anneals to ``initial_lr / final_div_factor`` (with
    ``three_phase``, back down to the initial lr first); the momentum (SGD's ``momentum``
    or Adam's β1) moves the other way between ``max_momentum`` and ``base_momentum``.

    Args: optimizer; max_lr (a number or one per group); total_steps, or epochs and
    steps_per_epoch; pct_start (0.3); anneal_strategy ("cos" | "linear"); cycle_momentum
    (True); base_momentum (0.85); max_momentum (0.95); div_factor (25);
    final_div_factor (1e4); three_phase (False); last_epoch.

    Raises:
        ValueError: no way to know the total steps, a bad ``pct_start`` or strategy, or a
            step past ``total_steps``.

    Example:
        >>> sched = lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=1000)  # step per batch
    """

    def __init__(self, optimizer: Optimizer, max_lr: Any, total_steps: int | None = None,
                 epochs: int | None = None, steps_per_epoch: int | None = None,
                 pct_start: float = 0.3, anneal_strategy: str = "cos",
                 cycle_momentum: bool = True, base_momentum: Any = 0.85,
                 max_momentum: Any = 0.95, div_factor: float = 25.0,
                 final_div_factor: float = 1e4, three_phase: bool = False,
                 last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"OneCycleLR: {type(optimizer).__name__} is not an ember optimizer")
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError("OneCycleLR: give total_steps, or epochs and steps_per_epoch")
            if epochs <= 0 or steps_per_epoch <= 0:
                raise ValueError(f"OneCycleLR: epochs and steps_per_epoch must be positive, "
                                 f"got {epochs} and {steps_per_epoch}")
            total_steps = epochs * steps_per_epoch
        elif isinstance(total_steps, bool) or not isinstance(total_steps, int) \
                or total_steps <= 0:
            raise ValueError(f"OneCycleLR: total_steps must be a positive int, got "
                             f"{total_steps!r}")
        if not 0 <= pct_start <= 1:
            raise ValueError(f"OneCycleLR: pct_start must be in [0, 1], got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"OneCycleLR: anneal_strategy must be 'cos' or 'linear', got "
                             f"{anneal_strategy!r}")
        self.total_steps = total_steps
        self.anneal_strategy = anneal_strategy
        self.cycle_momentum = bool(cycle_momentum)
        self._phases = _one_cycle_phases(float(pct_start) * total_steps, total_steps,
                                         three_phase)
        groups = optimizer.param_groups
        self._use_beta1 = "betas" in optimizer.hyperparams
        if self.cycle_momentum and not self._use_beta1 \
                and "momentum" not in optimizer.hyperparams:
            raise ValueError("OneCycleLR: cycle_momentum needs an optimizer with momentum "
                             "or betas; help: cycle_momentum=False")
        if last_epoch == -1:
            for group, top in zip(groups, _per_group("max_lr", max_lr, len(groups))):
                group["initial_lr"] = top / div_factor
                group["max_lr"] = top
                group["min_lr"] = group["initial_lr"] / final_div_factor
            if self.cycle_momentum:
                highs = _per_group("max_momentum", max_momentum, len(groups))
                lows = _per_group("base_momentum", base_momentum, len(groups))
                for group, high, low in zip(groups, highs, lows):
                    self._set_momentum(group, high)
                    group["max_momentum"], group["base_momentum"] = high, low
        super().__init__(optimizer, last_epoch)

    def _set_momentum(self, group: dict[str, Any], value: float) -> None:
        if self._use_beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> list[float]:
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"OneCycleLR: tried to step {step} times; the specified number "
                             f"of total steps is {self.total_steps}")
        lrs = []
        for group in self.optimizer.param_groups:
            start = 0.0
            for i, (end, lr_from, lr_to, mom_from, mom_to) in enumerate(self._phases):
                if step <= end or i == len(self._phases) - 1:
                    pct = (step - start) / (end - start)
                    lrs.append(self._anneal(group[lr_from], group[lr_to], pct))
                    if self.cycle_momentum:
                        self._set_momentum(group, self._anneal(group[mom_from],
                                                               group[mom_to], pct))
                    break
                start = end
        return lrs

    def _closed_lr(self, base_lr: float) -> float:
        raise NotImplementedError("OneCycleLR has no closed form; it cannot follow a "
                                  "milestone of SequentialLR")


def _one_cycle_phases(up: float, total: int, three_phase: bool) -> list[tuple]:
    """(end step, lr from, lr to, momentum from, momentum to) per phase, PyTorch's."""
    if three_phase:
        return [(up - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                (2 * up - 2, "max_lr", "initial_lr", "base_momentum", "max_momentum"),
                (total - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum")]
    return [(up - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
            (total - 1, "max_lr", "min_lr", "base_momentum", "max_momentum")]


def _per_group(name: str, value: Any, groups: int) -> list[float]:
    if isinstance(value, list | tuple):
        if len(value) != groups:
            raise ValueError(f"OneCycleLR: expected {groups} values of {name}, got {len(value)}")
        return [float(v) for v in value]
    return [float(value)] * groups


class ReduceLROnPlateau(LRScheduler):
    """Multiply each group's lr by ``factor`` once the metric has not improved for
    ``patience`` steps (``torch.optim.lr_scheduler.ReduceLROnPlateau``): ``step(metric)``.

    Improvement is ``metric < best · (1 - threshold)`` for ``mode="min"`` and
    ``threshold_mode="rel"`` (``best - threshold`` with ``"abs"``; mirrored for
    ``"max"``). After a reduction, ``cooldown`` steps pass before bad steps count again;
    no lr goes below its ``min_lr``, and a change smaller than ``eps`` is skipped.

    Args: optimizer; mode ("min" | "max"); factor (0.1); patience (10); threshold (1e-4);
    threshold_mode ("rel" | "abs"); cooldown (0); min_lr (a number or one per group, 0);
    eps (1e-8).

    Example:
        >>> sched = lr_scheduler.ReduceLROnPlateau(opt, patience=2)
        >>> sched.step(history.valid["loss"][-1])
    """

    def __init__(self, optimizer: Optimizer, mode: str = "min", factor: float = 0.1,
                 patience: int = 10, threshold: float = 1e-4, threshold_mode: str = "rel",
                 cooldown: int = 0, min_lr: Any = 0.0, eps: float = 1e-8) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"ReduceLROnPlateau: {type(optimizer).__name__} is not an ember "
                            f"optimizer")
        if factor >= 1.0:
            raise ValueError(f"ReduceLROnPlateau: factor must be < 1.0, got {factor}")
        if mode not in ("min", "max"):
            raise ValueError(f"ReduceLROnPlateau: mode must be 'min' or 'max', got {mode!r}")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"ReduceLROnPlateau: threshold_mode must be 'rel' or 'abs', got "
                             f"{threshold_mode!r}")
        groups = len(optimizer.param_groups)
        if isinstance(min_lr, list | tuple):
            if len(min_lr) != groups:
                raise ValueError(f"ReduceLROnPlateau: expected {groups} min_lrs, got "
                                 f"{len(min_lr)}")
            self.min_lrs = [float(v) for v in min_lr]
        else:
            self.min_lrs = [float(min_lr)] * groups
        self.optimizer = optimizer
        self.mode, self.threshold_mode = mode, threshold_mode
        self.factor, self.patience, self.threshold = float(factor), patience, float(threshold)
        self.cooldown, self.eps = cooldown, float(eps)
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs = 0
        self.cooldown_counter = 0
        self.last_epoch = 0
        self._last_lr = _group_lrs(optimizer)

    def step(self, metric: Any = None) -> None:  # type: ignore[override]
        """Record one value of the watched metric (a number, or a 0-d tensor: read)."""
        if metric is None:
            raise TypeError("ReduceLROnPlateau.step: expects the metric, e.g. "
                            "sched.step(valid_loss)")
        current = float(metric.item() if hasattr(metric, "item") else metric)
        self.last_epoch += 1
        if self._is_better(current):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for group, low in zip(self.optimizer.param_groups, self.min_lrs):
                new = max(group["lr"] * self.factor, low)
                if group["lr"] - new > self.eps:
                    group["lr"] = new
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = _group_lrs(self.optimizer)

    def _is_better(self, value: float) -> bool:
        best, threshold = self.best, self.threshold
        if self.mode == "min":
            bound = best * (1.0 - threshold) if self.threshold_mode == "rel" else best - threshold
            return value < bound
        bound = best * (threshold + 1.0) if self.threshold_mode == "rel" else best + threshold
        return value > bound


def _group_lrs(optimizer: Optimizer) -> list[float]:
    return [group["lr"] for group in optimizer.param_groups]


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
