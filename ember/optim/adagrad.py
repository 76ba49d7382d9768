"""``Adagrad``: per-coordinate learning rates from the sum of squared gradients."""

from __future__ import annotations

import functools
from typing import Any

from ember.kernels.multi_update import Program, check
from ember.ops.creation import full
from ember.optim.optimizer import Optimizer, UpdatePlan, check_hyperparams
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

    Example:
        >>> opt = optim.Adagrad(model.parameters(), lr=1e-2)
        >>> opt.step(loss.backward())
    """

    def __init__(self, params: Any, lr: float = 1e-2, lr_decay: float = 0.0,
                 weight_decay: float = 0.0, initial_accumulator_value: float = 0.0,
                 eps: float = 1e-10, maximize: bool = False) -> None:
        super().__init__(params, check_hyperparams(
            "Adagrad", lr, lr_decay=lr_decay, weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value, eps=eps,
            maximize=bool(maximize)))

    def state_keys(self, h: dict[str, Any]) -> tuple[str, ...]:
        return ("step", "sum")

    def init_single(self, param: Tensor, h: dict[str, Any]) -> dict[str, Any]:
        start = full(param.shape, h["initial_accumulator_value"],
                     dtype=param.dtype, device=param.device.inner)
        return {"step": 0, "sum": start}

    def apply_single(self, grad: Tensor, param: Tensor, state: dict[str, Any],
                     h: dict[str, Any]) -> tuple[Tensor, dict[str, Any]]:
        step = state["step"] + 1
        if h["maximize"]:
            grad = -grad
        if h["weight_decay"] != 0:
            grad = grad + h["weight_decay"] * param
        clr = h["lr"] / (1 + (step - 1) * h["lr_decay"])
        total = state["sum"] + grad * grad
        std = total.sqrt() + h["eps"]
        return param + (-clr * grad) / std, {"step": step, "sum": total}

    def plan_single(self, grad: Tensor, param: Tensor, state: dict[str, Any],
                    h: dict[str, Any]) -> UpdatePlan:
        step = state["step"] + 1
        clr = h["lr"] / (1 + (step - 1) * h["lr_decay"])
        program = _program(h["maximize"], h["weight_decay"] != 0)
        host = (h["weight_decay"], h["eps"], -clr)
        return UpdatePlan(program, (grad, param, state["sum"]), host, {"step": step})


@functools.cache
def _program(maximize: bool, decay: bool) -> Program:
    """``apply_single`` as a program: the same operations in the same order."""
    body: tuple = (("grad", "neg", "grad"),) if maximize else ()
    if decay:
        body += (("decayed", "mul", "param", "weight_decay"), ("grad", "add", "grad", "decayed"))
    body += (("square", "mul", "grad", "grad"),
             ("sum", "add", "sum", "square"),
             ("std", "sqrt", "sum"),
             ("std", "add", "std", "eps"),
             ("step", "mul", "grad", "neg_clr"),
             ("step", "div", "step", "std"),
             ("param", "add", "param", "step"))
    return check(Program("adagrad", ("grad", "param", "sum"), (),
                         ("weight_decay", "eps", "neg_clr"), (), body, ("param", "sum")))
