"""``Adam`` and ``AdamW``: adaptive moments with bias correction, optionally AMSGrad."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ember.dtype import DType, float32, float64
from ember.kernels.multi_update import Program, check
from ember.ops.creation import full, tensor, zeros
from ember.optim.optimizer import Optimizer, UpdatePlan, check_hyperparams
from ember.tensor import Tensor


class Adam(Optimizer):
    """Adam, PyTorch's ``torch.optim.Adam`` step for step (``t`` counts each parameter's steps)::

        g  = -grad if maximize else grad
        g  = g + weight_decay · p          (Adam; AdamW instead p = p · (1 - lr · weight_decay))
        m  = m + (1 - β1) · (g - m)        (lerp, as PyTorch)
        v  = β2 · v + (1 - β2) · g²
        v̂  = max(v̂, v)                     (amsgrad: the normalizer is the running max)
        p  = p - lr / (1 - β1ᵗ) · m / (√v / √(1 - β2ᵗ) + eps)

    Args:
        params: ``model.parameters()`` or a module.
        lr: default 1e-3. betas: default (0.9, 0.999). eps: default 1e-8.
        weight_decay: L2 penalty added to the gradient. Default 0.
        amsgrad: use the maximum of past second moments. Default False.
        maximize: ascend instead. Default False.
        capturable: keep ``t`` as a tensor on the parameter's device and compute the bias
            corrections there (PyTorch's ``capturable``), the learning rate a device value
            too (uploaded again when ``opt.lr`` changes), so every step issues the same
            kernels with the same scalars and an ``em.graphed`` training step replays as
            a CUDA graph, a scheduled learning rate included. The corrections are then
            rounded in the parameter's float (float32 below float64) instead of computed
            in Python's float64. Default False.

    State per parameter: ``step``, ``exp_avg``, ``exp_avg_sq`` (and ``max_exp_avg_sq``).

    Example:
        >>> opt = optim.Adam(model.parameters(), lr=3e-4)
        >>> opt.step(loss.backward())
    """

    decoupled = False

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, amsgrad: bool = False,
                 maximize: bool = False, capturable: bool = False) -> None:
        name = type(self).__name__
        super().__init__(params, check_hyperparams(
            name, lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=bool(amsgrad),
            maximize=bool(maximize), capturable=bool(capturable)))
        self._device_lrs: dict[tuple[int, str, str], tuple[float, Tensor]] = {}

    @property
    def capturable(self) -> bool:
        """The constructor's ``capturable`` flag: step counts and lr held on the device, so a
        step that includes the update can replay as one CUDA graph (see ``Optimizer.capturable``).
        """
        return self.hyperparams["capturable"]  # the constructor's flag

    def device_scalars(self) -> list[Tensor]:
        if not self.capturable:
            return []
        found = {id(t): t for t in (self._device_lr(p.value, h)
                                    for p, h in self._params_and_hyperparams())}
        return list(found.values())

    def _device_lr(self, param: Tensor, h: dict[str, Any]) -> Tensor:
        """The group's ``lr`` as a 0-d tensor on ``param``'s device, in the step count's
        float: one upload per group, device and value, read by every parameter's update."""
        dtype = _step_dtype(param)
        key = (id(h), param.device.inner.name, dtype.name)
        cached = self._device_lrs.get(key)
        if cached is None or cached[0] != h["lr"]:
            value = np.array(h["lr"], dtype=dtype.name)
            cached = self._device_lrs[key] = (h["lr"], tensor(value, device=param.device.inner))
        return cached[1]

    def state_keys(self, h: dict[str, Any]) -> tuple[str, ...]:
        keys = ("step", "exp_avg", "exp_avg_sq")
        return keys + ("max_exp_avg_sq",) if h["amsgrad"] else keys

    def init_single(self, param: Tensor, h: dict[str, Any]) -> dict[str, Any]:
        def zero() -> Tensor:
            return zeros(param.shape, dtype=param.dtype, device=param.device.inner)

        state = {"step": 0, "exp_avg": zero(), "exp_avg_sq": zero()}
        if h["amsgrad"]:
            state["max_exp_avg_sq"] = zero()
        return state

    def apply_single(self, grad: Tensor, param: Tensor, state: dict[str, Any],
                     h: dict[str, Any]) -> tuple[Tensor, dict[str, Any]]:
        lr, (beta1, beta2), eps, weight_decay = h["lr"], h["betas"], h["eps"], h["weight_decay"]
        step = state["step"]
        if h["capturable"]:
            step, lr = _device_step(step, param), self._device_lr(param, h)
        step = step + 1
        if h["maximize"]:
            grad = -grad
        if weight_decay != 0:
            if self.decoupled:
                param = param * (1.0 - lr * weight_decay)
            else:
                grad = grad + weight_decay * param
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m = m + (1.0 - beta1) * (grad - m)
        v = v * beta2 + (1.0 - beta2) * grad * grad
        new_state = {"step": step, "exp_avg": m, "exp_avg_sq": v}
        # Python floats, as PyTorch computes them (its step is read back to the host), or
        # 0-d tensors of a capturable step (from the step tensor, on the device).
        step_size = lr / (1.0 - beta1 ** step)
        bias_correction2_sqrt = (1.0 - beta2 ** step) ** 0.5
        if h["amsgrad"]:
            v = state["max_exp_avg_sq"].maximum(v)
            new_state["max_exp_avg_sq"] = v
        denom = v.sqrt() / bias_correction2_sqrt + eps
        return param + (-step_size * m) / denom, new_state

    def plan_single(self, grad: Tensor, param: Tensor, state: dict[str, Any],
                    h: dict[str, Any]) -> UpdatePlan:
        lr, (beta1, beta2), eps, weight_decay = h["lr"], h["betas"], h["eps"], h["weight_decay"]
        decay = weight_decay != 0
        program = _program(self.decoupled, decay, h["amsgrad"], h["maximize"],
                           h["capturable"])
        tensors = (grad, param, state["exp_avg"], state["exp_avg_sq"])
        if h["amsgrad"]:
            tensors += (state["max_exp_avg_sq"],)
        if h["capturable"]:
            # Bias corrections from the step count on the device (the prologue), so the
            # op's attrs stay the same from step to step: a graphed step replays.
            host = (1.0 - beta1, beta2, 1.0 - beta2, eps, weight_decay, beta1)
            inputs = tensors + (_device_step(state["step"], param), self._device_lr(param, h))
            return UpdatePlan(program, inputs, host, {})
        step = state["step"] + 1
        wd = (1.0 - lr * weight_decay) if self.decoupled else weight_decay
        host = (1.0 - beta1, beta2, 1.0 - beta2, eps, wd,
                -(lr / (1.0 - beta1 ** step)), (1.0 - beta2 ** step) ** 0.5)
        return UpdatePlan(program, tensors, host, {"step": step})


class AdamW(Adam):
    """Adam with decoupled weight decay (``torch.optim.AdamW``): ``p = p · (1 - lr · wd)``
    before the Adam update, instead of adding ``wd · p`` to the gradient.

    Args: as ``Adam``, with ``weight_decay`` defaulting to 1e-2.

    Example:
        >>> opt = optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        >>> opt.step(loss.backward())
    """

    decoupled = True

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False,
                 maximize: bool = False, capturable: bool = False) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize, capturable)


@functools.cache
def _program(decoupled: bool, decay: bool, amsgrad: bool, maximize: bool,
             capturable: bool) -> Program:
    """``apply_single`` as a program: the same operations in the same order."""
    tensors = ("grad", "param", "exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) * amsgrad)
    # Decoupled decay multiplies by (1 - lr · weight_decay): from the host, or from the
    # learning rate on the device.
    scale = "decay" if decoupled and not capturable else "weight_decay"
    host = ("one_minus_beta1", "beta2", "one_minus_beta2", "eps", scale)
    prologue: tuple = ()
    if capturable:
        host += ("beta1",)
        prologue = (
            ("step", "add", "step", 1.0),
            ("correction1", "pow", "beta1", "step"),
            ("correction1", "sub", 1.0, "correction1"),
            ("step_size", "div", "lr", "correction1"),
            ("neg_step_size", "neg", "step_size"),
            ("correction2", "pow", "beta2", "step"),
            ("correction2", "sub", 1.0, "correction2"),
            ("correction2_sqrt", "sqrt", "correction2"),
        )
        if decoupled and decay:
            prologue += (("decay", "mul", "lr", "weight_decay"),
                         ("decay", "sub", 1.0, "decay"))
    else:
        host += ("neg_step_size", "correction2_sqrt")
    body: tuple = (("grad", "neg", "grad"),) if maximize else ()
    if decay:
        if decoupled:
            body += (("param", "mul", "param", "decay"),)
        else:
            body += (("decayed", "mul", "param", "weight_decay"),
                     ("grad", "add", "grad", "decayed"))
    body += (
        ("delta", "sub", "grad", "exp_avg"),
        ("delta", "mul", "delta", "one_minus_beta1"),
        ("exp_avg", "add", "exp_avg", "delta"),
        ("second", "mul", "exp_avg_sq", "beta2"),
        ("square", "mul", "grad", "one_minus_beta2"),
        ("square", "mul", "square", "grad"),
        ("exp_avg_sq", "add", "second", "square"),
    )
    normalizer = "exp_avg_sq"
    if amsgrad:
        body += (("max_exp_avg_sq", "maximum", "max_exp_avg_sq", "exp_avg_sq"),)
        normalizer = "max_exp_avg_sq"
    body += (
        ("denom", "sqrt", normalizer),
        ("denom", "div", "denom", "correction2_sqrt"),
        ("denom", "add", "denom", "eps"),
        ("update", "mul", "exp_avg", "neg_step_size"),
        ("update", "div", "update", "denom"),
        ("param", "add", "param", "update"),
    )
    outputs = ("param", "exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) * amsgrad)
    name = "adamw" if decoupled else "adam"
    return check(Program(name, tensors, ("step", "lr") if capturable else (), host,
                         prologue, body, outputs, ("step",) if capturable else ()))


def _device_step(step: int | Tensor, param: Tensor) -> Tensor:
    """A capturable step count: a 0-d tensor on ``param``'s device (from a restored int)."""
    if isinstance(step, Tensor):
        return step
    return full((), float(step), dtype=_step_dtype(param), device=param.device.inner)


def _step_dtype(param: Tensor) -> DType:
    return float64 if param.dtype == float64 else float32
