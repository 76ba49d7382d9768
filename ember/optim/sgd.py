"""``SGD``: stochastic gradient descent with momentum, Nesterov, dampening and weight decay."""

from __future__ import annotations

import functools
from typing import Any

from ember.kernels.multi_update import Program, check
from ember.optim.optimizer import Optimizer, UpdatePlan, check_hyperparams
from ember.tensor import Tensor


class SGD(Optimizer):
    """Stochastic gradient descent, PyTorch's ``torch.optim.SGD`` step for step::

        g = -grad if maximize else grad
        g = g + weight_decay · p                                  (weight_decay ≠ 0)
        b = g (first step), else momentum · b + (1 - dampening) · g   (momentum ≠ 0)
        g = g + momentum · b if nesterov else b                   (momentum ≠ 0)
        p = p - lr · g

    Args:
        params: ``model.parameters()`` (a list of ``nn.Param``) or a module.
        lr: learning rate. Default 1e-3 (PyTorch's).
        momentum, dampening, weight_decay: default 0.
        nesterov: Nesterov momentum (needs momentum > 0 and dampening 0). Default False.
        maximize: ascend instead. Default False.

    State per parameter: ``momentum_buffer`` (with momentum).

    Example:
        >>> opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        >>> opt.step(loss.backward())
    """

    def __init__(self, params: Any, lr: float = 1e-3, momentum: float = 0.0,
                 dampening: float = 0.0, nesterov: bool = False, weight_decay: float = 0.0,
                 maximize: bool = False) -> None:
        hyper = check_hyperparams("SGD", lr, momentum=momentum, dampening=dampening,
                                  weight_decay=weight_decay, nesterov=bool(nesterov),
                                  maximize=bool(maximize))
        if nesterov and (hyper["momentum"] <= 0 or hyper["dampening"] != 0):
            raise ValueError("SGD: Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, hyper)

    def state_keys(self, h: dict[str, Any]) -> tuple[str, ...]:
        return ("momentum_buffer",) if h["momentum"] != 0 else ()

    def init_single(self, param: Tensor, h: dict[str, Any]) -> dict[str, Any]:
        return {}  # the buffer starts as the first gradient

    def apply_single(self, grad: Tensor, param: Tensor, state: dict[str, Any],
                     h: dict[str, Any]) -> tuple[Tensor, dict[str, Any]]:
        if h["maximize"]:
            grad = -grad
        if h["weight_decay"] != 0:
            grad = grad + h["weight_decay"] * param
        momentum = h["momentum"]
        if momentum != 0:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = grad  # tensors are values: no clone needed
            else:
                dampening = h["dampening"]
                # (1 - 0) · g is g exactly: skip an op over the whole tensor.
                buf = buf * momentum + (grad if dampening == 0 else (1.0 - dampening) * grad)
            state = {"momentum_buffer": buf}
            grad = grad + momentum * buf if h["nesterov"] else buf
        return param - h["lr"] * grad, state

    def plan_single(self, grad: Tensor, param: Tensor, state: dict[str, Any],
                    h: dict[str, Any]) -> UpdatePlan:
        momentum = h["momentum"]
        first = momentum != 0 and state.get("momentum_buffer") is None
        program = _program(h["maximize"], h["weight_decay"] != 0, momentum != 0, first,
                           h["dampening"] != 0, h["nesterov"])
        tensors = (grad, param) if first or momentum == 0 else (
            grad, param, state["momentum_buffer"])
        host = (h["weight_decay"], momentum, 1.0 - h["dampening"], h["lr"])
        return UpdatePlan(program, tensors, host, {})


@functools.cache
def _program(maximize: bool, decay: bool, momentum: bool, first: bool, dampening: bool,
             nesterov: bool) -> Program:
    """``apply_single`` as a program: the same operations in the same order."""
    body: tuple = (("grad", "neg", "grad"),) if maximize else ()
    if decay:
        body += (("decayed", "mul", "param", "weight_decay"), ("grad", "add", "grad", "decayed"))
    tensors = ("grad", "param")
    outputs = ("param",)
    if momentum:
        outputs += ("momentum_buffer",)
        if first:
            # The buffer starts as the gradient, stored by the op (· 1 is exact, -0 too).
            body += (("momentum_buffer", "mul", "grad", 1.0),)
        else:
            tensors += ("momentum_buffer",)
            body += (("momentum_buffer", "mul", "momentum_buffer", "momentum"),)
            if dampening:
                body += (("damped", "mul", "grad", "one_minus_dampening"),
                         ("momentum_buffer", "add", "momentum_buffer", "damped"))
            else:
                body += (("momentum_buffer", "add", "momentum_buffer", "grad"),)
        if nesterov:
            body += (("ahead", "mul", "momentum_buffer", "momentum"),
                     ("grad", "add", "grad", "ahead"))
    direction = "momentum_buffer" if momentum and not nesterov else "grad"
    body += (("step", "mul", direction, "lr"), ("param", "sub", "param", "step"))
    return check(Program("sgd", tensors, (), ("weight_decay", "momentum", "one_minus_dampening",
                                              "lr"), (), body, outputs))
