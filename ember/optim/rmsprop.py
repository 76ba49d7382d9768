"""``RMSprop``: gradients divided by a running root mean square, optionally centered."""

from __future__ import annotations

import functools
from typing import Any

from ember.kernels.multi_update import Program, check
from ember.ops.creation import zeros
from ember.optim.optimizer import Optimizer, UpdatePlan, check_hyperparams
from ember.tensor import Tensor


class RMSprop(Optimizer):
    """RMSprop, PyTorch's ``torch.optim.RMSprop`` step for step::

        g   = -grad if maximize else grad
        g   = g + weight_decay · p                    (weight_decay ≠ 0)
        s   = α · s + (1 - α) · g²
        a   = √(s - ḡ²) + eps, ḡ = ḡ + (1 - α)(g - ḡ) (centered)   else  √s + eps
        b   = momentum · b + g / a;  p = p - lr · b    (momentum > 0)
        p   = p - lr · g / a                          (otherwise)

    Args:
        params: ``model.parameters()`` or a module.
        lr: default 1e-2. alpha: smoothing constant, default 0.99. eps: default 1e-8.
        weight_decay, momentum: default 0. centered: default False. maximize: default False.

    State per parameter: ``step``, ``square_avg`` (``momentum_buffer``, ``grad_avg``).

    Example:
        >>> opt = optim.RMSprop(model.parameters(), lr=1e-2, alpha=0.99, momentum=0.9)
        >>> opt.step(loss.backward())
    """

    def __init__(self, params: Any, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False,
                 maximize: bool = False) -> None:
        super().__init__(params, check_hyperparams(
            "RMSprop", lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
            centered=bool(centered), maximize=bool(maximize)))

    def state_keys(self, h: dict[str, Any]) -> tuple[str, ...]:
        return (("step", "square_avg") + (("momentum_buffer",) if h["momentum"] > 0 else ())
                + (("grad_avg",) if h["centered"] else ()))

    def init_single(self, param: Tensor, h: dict[str, Any]) -> dict[str, Any]:
        state: dict[str, Any] = {"step": 0}
        for key in self.state_keys(h)[1:]:
            state[key] = zeros(param.shape, dtype=param.dtype, device=param.device.inner)
        return state

    def apply_single(self, grad: Tensor, param: Tensor, state: dict[str, Any],
                     h: dict[str, Any]) -> tuple[Tensor, dict[str, Any]]:
        alpha = h["alpha"]
        if h["maximize"]:
            grad = -grad
        if h["weight_decay"] != 0:
            grad = grad + h["weight_decay"] * param
        square_avg = state["square_avg"] * alpha + (1.0 - alpha) * grad * grad
        new_state: dict[str, Any] = {"step": state["step"] + 1, "square_avg": square_avg}
        if h["centered"]:
            grad_avg = state["grad_avg"]
            grad_avg = grad_avg + (1.0 - alpha) * (grad - grad_avg)
            new_state["grad_avg"] = grad_avg
            avg = (square_avg - grad_avg * grad_avg).sqrt() + h["eps"]
        else:
            avg = square_avg.sqrt() + h["eps"]
        if h["momentum"] > 0:
            buf = state["momentum_buffer"] * h["momentum"] + grad / avg
            new_state["momentum_buffer"] = buf
            return param - h["lr"] * buf, new_state
        return param + (-h["lr"] * grad) / avg, new_state

    def plan_single(self, grad: Tensor, param: Tensor, state: dict[str, Any],
                    h: dict[str, Any]) -> UpdatePlan:
        momentum, centered = h["momentum"] > 0, h["centered"]
        program = _program(h["maximize"], h["weight_decay"] != 0, centered, momentum)
        tensors = (grad, param, state["square_avg"])
        if momentum:
            tensors += (state["momentum_buffer"],)
        if centered:
            tensors += (state["grad_avg"],)
        host = (h["weight_decay"], h["alpha"], 1.0 - h["alpha"], h["eps"], h["momentum"],
                h["lr"], -h["lr"])
        return UpdatePlan(program, tensors, host, {"step": state["step"] + 1})


@functools.cache
def _program(maximize: bool, decay: bool, centered: bool, momentum: bool) -> Program:
    """``apply_single`` as a program: the same operations in the same order."""
    body: tuple = (("grad", "neg", "grad"),) if maximize else ()
    if decay:
        body += (("decayed", "mul", "param", "weight_decay"), ("grad", "add", "grad", "decayed"))
    body += (("kept", "mul", "square_avg", "alpha"),
             ("square", "mul", "grad", "one_minus_alpha"),
             ("square", "mul", "square", "grad"),
             ("square_avg", "add", "kept", "square"))
    if centered:
        body += (("delta", "sub", "grad", "grad_avg"),
                 ("delta", "mul", "delta", "one_minus_alpha"),
                 ("grad_avg", "add", "grad_avg", "delta"),
                 ("mean_square", "mul", "grad_avg", "grad_avg"),
                 ("avg", "sub", "square_avg", "mean_square"),
                 ("avg", "sqrt", "avg"))
    else:
        body += (("avg", "sqrt", "square_avg"),)
    body += (("avg", "add", "avg", "eps"),)
    if momentum:
        body += (("momentum_buffer", "mul", "momentum_buffer", "momentum"),
                 ("scaled", "div", "grad", "avg"),
                 ("momentum_buffer", "add", "momentum_buffer", "scaled"),
                 ("step", "mul", "momentum_buffer", "lr"),
                 ("param", "sub", "param", "step"))
    else:
        body += (("step", "mul", "grad", "neg_lr"),
                 ("step", "div", "step", "avg"),
                 ("param", "add", "param", "step"))
    extra = (("momentum_buffer",) if momentum else ()) + (("grad_avg",) if centered else ())
    return check(Program("rmsprop", ("grad", "param", "square_avg") + extra, (),
                         ("weight_decay", "alpha", "one_minus_alpha", "eps", "momentum", "lr",
                          "neg_lr"), (), body, ("param", "square_avg") + extra))
