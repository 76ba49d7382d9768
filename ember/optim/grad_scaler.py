"""``GradScaler``: dynamic loss scaling for float16 training, as ``torch.amp.GradScaler``.

float16 gradients underflow below 6e-8; scaling the loss by ``S`` scales every gradient
by ``S``, which keeps them representable. ``step`` divides the gradients by ``S`` again
and skips the optimizer step when any of them is inf or NaN (``S`` was too large);
``update`` then halves ``S``, or doubles it after ``growth_interval`` good steps in a row.

The scale lives on the host (a Python float rounded to float32, as torch's float32 scale
tensor): ``scale(loss)`` is a multiply by a Python scalar and ``update`` is host
arithmetic. Deciding whether to step takes one read per step, as torch's ``step`` does
(``found_inf.item()``): every gradient is reduced on its device to one number that is
NaN when the gradient holds an inf or a NaN (``sum(g * 0)``, fused into one reduction per
gradient), the numbers are summed into one, and that one is read. A skipped step never
reaches the optimizer, so parameters and optimizer state (moments, step counts) keep their
values.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember.errors import EmberError

_READY, _UNSCALED, _STEPPED = "ready", "unscaled", "stepped"


def _float32(value: float) -> float:
    return float(np.float32(value))


class GradScaler:
    """Scale the loss, unscale the gradients, skip steps whose gradients overflowed.

    Args:
        init_scale: the first scale. Default 2**16.
        growth_factor: the scale's factor after ``growth_interval`` steps in a row without
            inf / NaN gradients. Default 2.0.
        backoff_factor: the scale's factor after a step with inf / NaN gradients.
            Default 0.5.
        growth_interval: good steps in a row before the scale grows. Default 2000.
        enabled: False makes every method a pass-through (``scale`` returns its input,
            ``step`` steps). Default True.

    Raises:
        ValueError: ``growth_factor`` not above 1, ``backoff_factor`` not in (0, 1), or
            ``growth_interval`` not a positive int.

    Example:
        >>> scaler = optim.GradScaler()
        >>> with em.autocast(dtype=em.float16):
        ...     loss = F.cross_entropy(model(x), y)
        >>> grads = scaler.scale(loss).backward()
        >>> scaler.step(opt, grads)     # skipped if a gradient is inf / NaN
        >>> scaler.update()
    """

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True) -> None:
        if not growth_factor > 1.0:
            raise ValueError(f"GradScaler: growth_factor must be above 1, got {growth_factor}")
        if not 0.0 < backoff_factor < 1.0:
            raise ValueError(f"GradScaler: backoff_factor must be in (0, 1), got "
                             f"{backoff_factor}")
        if isinstance(growth_interval, bool) or not isinstance(growth_interval, int) \
                or growth_interval < 1:
            raise ValueError(f"GradScaler: growth_interval must be a positive int, got "
                             f"{growth_interval!r}")
        self._enabled = bool(enabled)
        self._scale = _float32(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = growth_interval
        self._growth_tracker = 0
        # Per optimizer (by id) since the last update: its stage, the Gradients it
        # unscaled and their overflow flag (a 0-d tensor, NaN when a gradient overflowed).
        self._per_optimizer: dict[int, tuple[str, Any, Any]] = {}
        self._found_inf: bool | None = None
        self._skipped_steps = 0

    def is_enabled(self) -> bool:
        """Whether the scaler scales (``enabled=True``)."""
        return self._enabled

    def get_scale(self) -> float:
        """The current scale (1.0 when disabled)."""
        return self._scale if self._enabled else 1.0

    def scale(self, outputs: Any) -> Any:
        """``outputs`` (a tensor, or a list / tuple of them) multiplied by the scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        if not hasattr(outputs, "dtype"):
            raise TypeError(f"GradScaler.scale: expected a tensor or a list / tuple of "
                            f"tensors, got {type(outputs).__name__}")
        return outputs * self._scale

    def unscale_(self, optimizer: Any, grads: Any) -> None:
        """Divide every gradient in ``grads`` by the scale, in place, and note whether any
        overflowed (read by ``step``); for gradient clipping between ``backward`` and
        ``step``. Once per optimizer between two ``update`` calls.

        Raises:
            EmberError: ``unscale_`` or ``step`` was already called for ``optimizer``
                since the last ``update``.
        """
        if not self._enabled:
            return
        stage = self._per_optimizer.get(id(optimizer))
        if stage is not None:
            raise EmberError(f"GradScaler.unscale_: already called "
                             f"{'unscale_' if stage[0] == _UNSCALED else 'step'} for this "
                             f"optimizer since the last update()")
        self._per_optimizer[id(optimizer)] = (_UNSCALED, grads, self._unscale(optimizer, grads))

    def _unscale(self, optimizer: Any, grads: Any) -> Any:
        inverse = _float32(1.0 / self._scale)
        grads.map(lambda g: g * inverse)
        # Only the gradients the optimizer would apply decide (as torch's per-optimizer
        # check); each reduces to 0, or NaN where it holds an inf or a NaN.
        checks = [g for g in (grads.get(p.value) for p in optimizer.params) if g is not None]
        if not checks:
            return None
        from ember.ops.shape import stack

        return stack([(g * 0.0).sum().astype("float32") for g in checks]).sum()

    def step(self, optimizer: Any, grads: Any) -> bool:
        """Unscale ``grads`` (unless ``unscale_`` did) and take ``optimizer.step(grads)``
        unless a gradient is inf or NaN. Reads one number: whether to step.

        Returns:
            True when the step was taken, False when it was skipped.

        Raises:
            EmberError: ``step`` was already called for ``optimizer`` since the last
                ``update``, or ``grads`` are not the ones ``unscale_`` unscaled.
        """
        if not self._enabled:
            optimizer.step(grads)
            return True
        found = self._overflow_flag(optimizer, grads)
        return self._finish(optimizer, grads,
                            found is not None and not math.isfinite(found.item()))

    async def step_async(self, optimizer: Any, grads: Any) -> bool:
        """``step`` for async code: the one read is awaited (parks the trio task)."""
        if not self._enabled:
            optimizer.step(grads)
            return True
        found = self._overflow_flag(optimizer, grads)
        return self._finish(optimizer, grads,
                            found is not None and not np.isfinite(await found).all())

    def _overflow_flag(self, optimizer: Any, grads: Any) -> Any:
        """The 0-d tensor that is NaN when a gradient of ``optimizer`` overflowed (None
        without gradients), unscaling ``grads`` first unless ``unscale_`` did."""
        stage = self._per_optimizer.get(id(optimizer))
        if stage is None:
            return self._unscale(optimizer, grads)
        if stage[0] == _STEPPED:
            raise EmberError("GradScaler.step: already called for this optimizer since the "
                             "last update()")
        if stage[1] is not grads:
            raise EmberError("GradScaler.step: these gradients are not the ones unscale_ "
                             "unscaled for this optimizer; help: pass the same Gradients")
        return stage[2]

    def _finish(self, optimizer: Any, grads: Any, overflowed: bool) -> bool:
        self._per_optimizer[id(optimizer)] = (_STEPPED, None, None)
        self._found_inf = bool(self._found_inf) or overflowed
        if overflowed:
            self._skipped_steps += 1
            return False
        optimizer.step(grads)
        return True

    def update(self, new_scale: float | None = None) -> None:
        """The scale for the next iteration: ``new_scale`` when given; else halved
        (``backoff_factor``) after a skipped step, and grown (``growth_factor``) after
        ``growth_interval`` good steps in a row, as torch's schedule.

        Raises:
            EmberError: no ``step`` (or ``unscale_``) since the last ``update``.
        """
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = _float32(new_scale)
        else:
            if self._found_inf is None:
                raise EmberError("GradScaler.update: no step() since the last update(); "
                                 "help: call scaler.step(optimizer, grads) first")
            if self._found_inf:
                self._scale = _float32(self._scale * self._backoff_factor)
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    grown = _float32(self._scale * self._growth_factor)
                    if math.isfinite(grown):  # torch keeps the scale where growing overflows
                        self._scale = grown
                    self._growth_tracker = 0
        self._per_optimizer.clear()
        self._found_inf = None

    @property
    def skipped_steps(self) -> int:
        """How many steps were skipped for inf / NaN gradients."""
        return self._skipped_steps

    def state_dict(self) -> dict[str, Any]:
        """``{"scale", "growth_factor", "backoff_factor", "growth_interval",
        "_growth_tracker"}``, torch's keys (empty when disabled)."""
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval,
                "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned (or torch's ``GradScaler.state_dict()``).

        Raises:
            ValueError: an empty dict (saved from a disabled scaler) or a missing key.
        """
        if not state_dict:
            raise ValueError("GradScaler.load_state_dict: the state is empty (saved from a "
                             "disabled scaler)")
        missing = {"scale", "growth_factor", "backoff_factor", "growth_interval",
                   "_growth_tracker"} - set(state_dict)
        if missing:
            raise ValueError(f"GradScaler.load_state_dict: missing {sorted(missing)}")
        self._scale = _float32(float(state_dict["scale"]))
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])

    def __repr__(self) -> str:
        return (f"GradScaler(scale={self.get_scale()}, growth_tracker={self._growth_tracker}, "
                f"enabled={self._enabled})")
