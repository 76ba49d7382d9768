"""``Adagrad``: per-coordinate learning rates from the sum of squared gradients."""

from __future__ import annotations

from typing import Any

from ember.ops.creation import full
from ember.optim.optimizer import Optimizer, check_hyperparams
from ember.tensor import Tensor


class Adagrad(Optimizer):
    """Adagrad, PyTorch's ``torch.optim.Adagrad`` step for step (``t`` counts the steps)::

        g   = -grad if maximize else grad
        g   = g + weight_decay · p                    (weight_decay ≠ 0)
        s   = s + g²                                  (s starts at initial_accumulator_value)
        p   = p - lr / (1 + (t - 1) · lr_decay) · g / (√s + eps)

    Args:
        params: ``model.parameters()`` or a module.
        lr: default 1e-2. lr_decay, weight_decay, initial_accumulator_value: default 0.
        eps: default 1e-10. maximize: default False.

    State per parameter: ``step``, ``sum``.
    """

    def __init__(self, params: Any, lr: float = 1e-2, lr_decay: float = 0.0,
                 weight_decay: float = 0.0, initial_accumulator_value: float = 0.0,
                 eps: float = 1e-10, maximize: bool = False) -> None:
        super().__init__(params, check_hyperparams(
            "Adagrad", lr, lr_decay=lr_decay, weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value, eps=eps,
            maximize=bool(maximize)))

    def state_keys(self) -> tuple[str, ...]:
        return ("step", "sum")

    def init_single(self, param: Tensor) -> dict[str, Any]:
        start = full(param.shape, self.hyperparams["initial_accumulator_value"],
                     dtype=param.dtype, device=param.device.inner)
        return {"step": 0, "sum": start}

    def apply_single(self, grad: Tensor, param: Tensor,
                     state: dict[str, Any]) -> tuple[Tensor, dict[str, Any]]:
        h = self.hyperparams
        step = state["step"] + 1
        if h["maximize"]:
            grad = -grad
        if h["weight_decay"] != 0:
            grad = grad + h["weight_decay"] * param
        clr = h["lr"] / (1 + (step - 1) * h["lr_decay"])
        total = state["sum"] + grad * grad
        std = total.sqrt() + h["eps"]
        return param + (-clr * grad) / std, {"step": step, "sum": total}
