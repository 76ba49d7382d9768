"""``Optimizer``: the thin stateful shell around a pure per-parameter update.

An algorithm is two pure functions over one parameter (MLX's split):
``init_single(param, h) -> state`` and ``apply_single(grad, param, state, h) ->
(new_param, new_state)``. They compute with ordinary ember ops, which return
futures, so nothing waits. The shell keeps each parameter's state in a dict
keyed by ``Param.id``, runs the update for every parameter that has a
gradient, under ``no_record()`` (an update is not part of any graph), and
swaps the new value into the ``Param`` (on an autodiff device it becomes a
fresh tracked leaf, ready for the next forward).

An algorithm may also write its update as a ``Program`` (``plan_single``): data that
every backend runs over all the parameters of one device and dtype at once, as one
``optimizer_update`` op (one compiled loop on the CPU, one kernel on CUDA), so a step
submits one op per group instead of about ten per parameter. ``multi_tensor = False``
(an attribute) keeps the per-parameter ops; they compute the same numbers.

Hyperparameters are plain Python numbers, PyTorch's names and defaults, kept per
parameter group as PyTorch keeps them: ``opt.param_groups`` is a list of dicts, each with
``"params"`` and every hyperparameter; ``opt.hyperparams`` (PyTorch's ``defaults``) holds
the constructor's values, which a group given as a dict overrides key by key. The
algorithm's functions take the hyperparameters of the parameter's group (``h``), and a
multi-tensor op carries them as each tensor's host numbers, so groups with different
values still share one op. ``opt.lr`` reads the first group's learning rate and sets
every group's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, NamedTuple

import msgspec
import numpy as np

from ember.autodiff.graph import no_record
from ember.errors import DTypeError, ShapeError
from ember.kernels import multi_update
from ember.kernels.multi_update import Program
from ember.nn.param import Param
from ember.op_kinds import OTHER, declare
from ember.optim.actor import ACTOR
from ember.ops._core import multi_call, pinned_site, user_site
from ember.tensor import Tensor

declare(OTHER, multi_update.OP)


class OptimizerStatistics(msgspec.Struct, frozen=True):
    """Counters of an optimizer: ``step`` calls, parameters, and per-parameter updates."""

    steps: int
    params: int
    params_with_state: int
    updates: int
    skipped: int  # parameters a step found no gradient for


class UpdatePlan(NamedTuple):
    """One parameter's part of a multi-tensor update (``Optimizer.plan_single``).

    ``program``'s first output is the new parameter, its other outputs (and scalar
    outputs) are state entries of the same names; ``inputs``: its ``tensors`` then its
    ``scalars``, as tensors; ``host``: its host numbers; ``numbers``: state entries kept
    on the host (a step count), as they are after this update.
    """

    program: Program
    inputs: tuple[Tensor, ...]
    host: tuple[float, ...]
    numbers: dict[str, Any]


class Optimizer:
    """Base of every optimizer: keeps state by ``Param.id``; subclasses define the update.

    Args:
        params: a list (or iterable) of ``nn.Param``, e.g. ``model.parameters()``,
            or a ``Module`` (its parameters are taken), or a list of dicts (parameter
            groups, PyTorch's): ``{"params": [...], "lr": 0.1, ...}``, each key not
            given taking the constructor's value.
        hyperparams: name → Python number (or tuple of numbers), ``lr`` among them.

    Subclasses implement ``init_single`` and ``apply_single`` and list the
    names of their state tensors in ``state_keys``; ``plan_single`` (optional) gives
    the same update as a program for the multi-tensor path. Each takes ``h``, the
    hyperparameters of the parameter's group.

    Example:
        >>> opt = optim.SGD([{"params": model.backbone.parameters(), "lr": 1e-4},
        ...                  {"params": model.head.parameters()}], lr=1e-2, momentum=0.9)
        >>> opt.param_groups[1]["lr"]
        0.01
        >>> grads = loss.backward()
        >>> opt.step(grads)       # returns at once; later forwards see the updated parameters
    """

    # Whether ``step`` submits one multi-tensor op per device and dtype (where the
    # algorithm has a program) rather than each parameter's update op by op.
    multi_tensor = True

    def __init__(self, params: Any, hyperparams: dict[str, Any]) -> None:
        self.hyperparams: dict[str, Any] = dict(hyperparams)
        self.param_groups: list[dict[str, Any]] = []
        self.state: dict[str, dict[str, Any]] = {}
        name = type(self).__name__
        if isinstance(params, list | tuple):
            params = list(params)
            if params and all(isinstance(g, dict) for g in params):
                for group in params:
                    self.add_param_group(group)
                if not self.param_groups:
                    raise ValueError(f"{name}: got an empty parameter list")
            elif any(isinstance(g, dict) for g in params):
                raise TypeError(f"{name}: params mixes parameter groups (dicts) and parameters")
        if not self.param_groups:
            self.add_param_group({"params": params})
        self._steps = 0
        self._updates = 0
        self._skipped = 0

    # ----- the algorithm (pure, per parameter) -------------------------------------------

    def init_single(self, param: Tensor, h: dict[str, Any]) -> dict[str, Any]:
        """The state of a parameter before its first update (tensors and numbers)."""
        raise NotImplementedError

    def apply_single(self, grad: Tensor, param: Tensor, state: dict[str, Any],
                     h: dict[str, Any]) -> tuple[Tensor, dict[str, Any]]:
        """(new parameter value, new state) from the gradient and its group's ``h``."""
        raise NotImplementedError

    def state_keys(self, h: dict[str, Any]) -> tuple[str, ...]:
        """The names a parameter's state may hold, with the hyperparameters ``h``."""
        raise NotImplementedError

    def plan_single(self, grad: Tensor, param: Tensor, state: dict[str, Any],
                    h: dict[str, Any]) -> UpdatePlan | None:
        """``apply_single``'s update as a program and its operands, or None where this
        parameter keeps the per-parameter ops. Default None."""
        return None

    # ----- the shell ---------------------------------------------------------------------

    @property
    def params(self) -> list[Param]:
        """Every parameter, group after group."""
        return [p for group in self.param_groups for p in group["params"]]

    @params.setter
    def params(self, params: Any) -> None:
        if len(self.param_groups) != 1:
            raise TypeError(f"{type(self).__name__}: params can be set only with one "
                            f"parameter group; help: set param_groups[i]['params']")
        self.param_groups[0]["params"] = _param_list(type(self).__name__, params)

    @property
    def defaults(self) -> dict[str, Any]:
        """PyTorch's name for ``hyperparams``: the constructor's values."""
        return self.hyperparams

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group (PyTorch's): ``{"params": [...], **hyperparameters}``; a
        hyperparameter not given takes the constructor's value.

        Raises:
            TypeError / ValueError: a parameter already in another group, no parameter,
                or a hyperparameter out of range.
        """
        name = type(self).__name__
        if not isinstance(param_group, dict) or "params" not in param_group:
            raise TypeError(f"{name}: a parameter group is a dict with a 'params' entry")
        group = dict(param_group)
        group["params"] = _param_list(name, group["params"])
        seen = {p.id for p in self.params}
        for p in group["params"]:
            if p.id in seen:
                raise ValueError(f"{name}: a parameter appears in more than one group "
                                 f"(id {p.id})")
        given = {k: v for k, v in group.items() if k in self.hyperparams}
        if given:
            values = {**self.hyperparams, **given}
            checked = check_hyperparams(name, values.pop("lr"), **values)
            group.update({k: checked[k] for k in given})
        for key, value in self.hyperparams.items():
            group.setdefault(key, value)
        self.param_groups.append(group)

    @property
    def lr(self) -> float:
        """The first group's learning rate; setting it sets every group's."""
        return self.param_groups[0]["lr"]

    @lr.setter
    def lr(self, value: float) -> None:
        value = _check_lr(type(self).__name__, value)
        self.hyperparams["lr"] = value
        for group in self.param_groups:
            group["lr"] = value

    @property
    def initial_lr(self) -> float | None:
        """The first group's ``initial_lr`` (set by the first scheduler attached), or None."""
        return self.param_groups[0].get("initial_lr")

    @initial_lr.setter
    def initial_lr(self, value: float | None) -> None:
        for group in self.param_groups:
            if value is None:
                group.pop("initial_lr", None)
            else:
                group["initial_lr"] = value

    @property
    def capturable(self) -> bool:
        """Whether every step issues the same kernels with the same scalars (step counts
        and learning rate held on the device), so that a training step which includes the
        update replays as one CUDA graph (``em.graphed``; the ``Learner`` then captures
        the update with the forward and backward). False unless the algorithm says so."""
        return False

    def device_scalars(self) -> list[Tensor]:
        """The tensors the next ``step`` reads besides parameters, gradients and state (a
        capturable optimizer's learning rate on the device), made current: what a
        replayed step must be handed, since its graph reads only what it is given."""
        return []

    def count_replayed_step(self, updates: int) -> None:
        """Count a step whose updates a replayed graph made (``step`` did not run)."""
        self._steps += 1
        self._updates += updates

    def step(self, grads: Any) -> None:
        """Update every parameter that has a gradient in ``grads``; returns at once.

        ``grads`` is what ``loss.backward()`` returned. A parameter without a
        gradient there (unused by the loss, or already updated since that
        backward) is skipped, as PyTorch skips a ``None`` grad. Nothing is
        read: the new values and state are futures. The multi-tensor updates are
        issued by the optimizer actor (``optim/actor.py``) from its own thread; a
        forward issued after ``step`` still sees the new values.
        """
        # Every update op would find the same first line outside ember: found once.
        with no_record(), pinned_site(user_site()):
            groups: dict[tuple, list] = {}
            for param, h in self._params_and_hyperparams():
                value = param.value
                grad = grads.get(value)
                if grad is None:
                    self._skipped += 1
                    continue
                state = self.state.get(param.id)
                if state is None:
                    state = self.init_single(value, h)
                self._updates += 1
                plan = self.plan_single(grad, value, state, h) if self.multi_tensor else None
                if (plan is None or value.dtype.name not in multi_update.DTYPES
                        or grad.dtype != value.dtype):
                    param.value, self.state[param.id] = self.apply_single(grad, value, state, h)
                    continue
                key = (value.device.actor, value.dtype, id(plan.program))
                group = groups.get(key)
                if group is None:
                    groups[key] = [(param, plan)]
                else:
                    group.append((param, plan))
            promised = []
            for (device_actor, _, _), group in groups.items():
                if ACTOR.takes(device_actor):
                    promised.append(group)
                else:
                    self._update_group(group)
            if promised:
                ACTOR.promise(promised, self.state)
        self._steps += 1

    def _params_and_hyperparams(self) -> list[tuple[Param, dict[str, Any]]]:
        return [(p, group) for group in self.param_groups for p in group["params"]]

    def _update_group(self, group: list[tuple[Param, UpdatePlan]]) -> None:
        """One ``optimizer_update`` op over the group's parameters; their new values and
        state are its outputs."""
        program = group[0][1].program
        out_names = program.outputs[1:] + program.scalar_outputs
        inputs: list[Tensor] = []
        shapes: list[tuple[int, ...]] = []
        host = []
        for param, plan in group:
            inputs += plan.inputs
            shape = param.shape
            shapes += [shape] * len(program.outputs) + [()] * len(program.scalar_outputs)
            host.append(plan.host)
        dtype = group[0][0].dtype
        outs = multi_call(multi_update.OP, tuple(inputs), tuple(shapes),
                          (dtype,) * len(shapes), (program, tuple(host)))
        stride = program.outputs_per_tensor
        for k, (param, plan) in enumerate(group):
            mine = outs[k * stride:(k + 1) * stride]
            state = dict(plan.numbers)
            state.update(zip(out_names, mine[1:]))
            self.state[param.id] = state
            param.value = mine[0]

    def statistics(self) -> OptimizerStatistics:
        """Counters of this optimizer: steps taken, parameters, parameters with state, updates
        issued and steps skipped (a failed step leaves the parameters at their last good value).

        Example:
            >>> opt.statistics().steps
            0
        """
        return OptimizerStatistics(steps=self._steps, params=len(self.params),
                                   params_with_state=len(self.state), updates=self._updates,
                                   skipped=self._skipped)

    # ----- state -------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Plain numbers and tensors, ready for ``em.save``; waits for nothing.

        ``{"type": name, "hyperparams": {...}, "initial_lr": float | None,
        "steps": int, "params": [{"id": Param.id, "state": {...}}, ...],
        "param_groups": [{"params": [position, ...], "lr": ..., ...}, ...]}``:
        ``params`` follows the parameters' order (group after group), so each entry is
        keyed by both position and id; each of ``param_groups`` lists its parameters'
        positions and its hyperparameters (and ``initial_lr`` once scheduled), as
        PyTorch's; ``hyperparams`` and ``initial_lr`` are the first group's (the whole
        state of a file saved before groups). A state holds the step count (an int) and the algorithm's tensors
        under PyTorch's names (``exp_avg``, ``momentum_buffer``...).
        """
        groups, position = [], 0
        for group in self.param_groups:
            count = len(group["params"])
            entry = {k: _plain(v) for k, v in group.items() if k != "params"}
            entry["params"] = list(range(position, position + count))
            groups.append(entry)
            position += count
        return {
            "type": type(self).__name__,
            "hyperparams": {k: _plain(self.param_groups[0][k]) for k in self.hyperparams},
            "initial_lr": self.initial_lr,
            "steps": self._steps,
            "params": [{"id": p.id, "state": dict(self.state.get(p.id, {}))}
                       for p in self.params],
            "param_groups": groups,
        }

    def load_state_dict(self, state_dict: dict[str, Any], match_ids: bool = False) -> None:
        """Restore what ``state_dict`` returned (tensors or NumPy arrays); checks it all first.

        A state saved before parameter groups existed (no ``param_groups``) gives its
        hyperparameters and ``initial_lr`` to every group.

        Args:
            state_dict: from ``state_dict()`` (possibly through ``em.save`` / ``em.load``).
            match_ids: also require each entry's id to be its parameter's
                ``Param.id`` (ids survive ``Module.save`` / ``load``, not
                ``load_state_dict`` from arrays). Default False: entries match
                parameters by position, as in PyTorch, and every state tensor
                must have its parameter's shape.

        Raises:
            ValueError: another optimizer type, another number of parameters or groups,
                a group of another size, an id that differs, or an unknown
                hyperparameter or state name.
            ShapeError / DTypeError: a state tensor that does not fit its parameter.
        """
        name = type(self).__name__
        kind = state_dict.get("type")
        if kind != name:
            raise ValueError(f"{name}.load_state_dict: the state is a {kind}'s")
        entries = state_dict["params"]
        if len(entries) != len(self.params):
            raise ValueError(f"{name}.load_state_dict: the state has {len(entries)} parameters, "
                             f"the optimizer {len(self.params)}")
        hyperparams = self._loaded_hyperparams(state_dict["hyperparams"], "hyperparams")
        saved_groups = state_dict.get("param_groups")
        if saved_groups is None:
            initial_lr = state_dict.get("initial_lr")
            extra = {} if initial_lr is None else {"initial_lr": initial_lr}
            saved_groups = [{**hyperparams, **extra} for _ in self.param_groups]
        elif len(saved_groups) != len(self.param_groups):
            raise ValueError(f"{name}.load_state_dict: the state has {len(saved_groups)} "
                             f"parameter groups, the optimizer {len(self.param_groups)}")
        groups = []
        for index, (group, saved) in enumerate(zip(self.param_groups, saved_groups)):
            saved = dict(saved)
            positions = saved.pop("params", None)
            if positions is not None and len(positions) != len(group["params"]):
                raise ValueError(f"{name}.load_state_dict: group {index} has "
                                 f"{len(positions)} parameters in the state, "
                                 f"{len(group['params'])} here")
            initial_lr = saved.pop("initial_lr", None)
            known = {k: v for k, v in saved.items() if k in self.hyperparams}
            loaded = self._loaded_hyperparams(known, f"group {index}")
            others = {k: v for k, v in saved.items() if k not in self.hyperparams}
            loaded = {"params": group["params"], **others, **loaded}
            if initial_lr is not None:
                loaded["initial_lr"] = float(initial_lr)
            groups.append(loaded)
        restored = {}
        for position, ((param, h), entry) in enumerate(zip(self._params_and_hyperparams(),
                                                            entries)):
            if match_ids and entry["id"] != param.id:
                raise ValueError(f"{name}.load_state_dict: parameter {position} has id "
                                 f"{param.id}, the state's entry {entry['id']} (match_ids=True)")
            state = dict(entry["state"])
            if not state:
                continue
            allowed = set(self.state_keys(groups[self._group_of(position)]))
            extra = sorted(set(state) - allowed)
            if extra:
                raise ValueError(f"{name}.load_state_dict: parameter {position}: unknown state "
                                 f"{extra} (expected some of {sorted(allowed)})")
            restored[param.id] = {k: _restore(name, position, k, v, param)
                                  for k, v in state.items()}
        self.param_groups = groups
        self._steps = int(state_dict.get("steps", 0))
        self.state = restored

    def _loaded_hyperparams(self, saved: dict[str, Any], where: str) -> dict[str, Any]:
        """Saved hyperparameters checked against this optimizer's names (tuples again)."""
        name = type(self).__name__
        differ = sorted(set(saved) ^ set(self.hyperparams))
        if differ:
            raise ValueError(f"{name}.load_state_dict: {where}: hyperparameters differ: "
                             f"{differ}")
        return {k: tuple(v) if isinstance(self.hyperparams[k], tuple) else v
                for k, v in saved.items()}

    def _group_of(self, position: int) -> int:
        """The index of the group holding the parameter at ``position``."""
        for index, group in enumerate(self.param_groups):
            position -= len(group["params"])
            if position < 0:
                return index
        raise IndexError(position)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.hyperparams.items())
        groups = len(self.param_groups)
        where = f", {groups} groups" if groups > 1 else ""
        return f"{type(self).__name__}({len(self.params)} params{where}, {args})"


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _restore(name: str, position: int, key: str, value: Any, param: Param) -> Any:
    """A state entry as the optimizer keeps it: a tensor on the parameter's device, or a number."""
    if key == "step":
        return int(value)
    if isinstance(value, Tensor | np.ndarray):
        if tuple(value.shape) != param.shape:
            raise ShapeError(f"{name}.load_state_dict: parameter {position}: {key} has shape "
                             f"{tuple(value.shape)}, the parameter {param.shape}")
        device = param.device.inner
        if isinstance(value, np.ndarray):
            from ember.ops.creation import tensor

            value = tensor(value, device=device)
        elif value.device.name != device.name or value.device.is_autodiff:
            value = value.to(device)
        if value.dtype.kind != "f":
            raise DTypeError(f"{name}.load_state_dict: parameter {position}: {key} has dtype "
                             f"{value.dtype.name}, expected a floating tensor")
        return value.astype(param.dtype)  # PyTorch casts floating state to the param's dtype
    raise TypeError(f"{name}.load_state_dict: parameter {position}: {key} must be a tensor, "
                    f"got {type(value).__name__}")


def _param_list(name: str, params: Any) -> list[Param]:
    from ember.nn.module import Module

    if isinstance(params, Module):
        params = params.parameters()
    if isinstance(params, Tensor | Param) or not isinstance(params, Iterable):
        raise TypeError(f"{name}: params must be a list of nn.Param (e.g. model.parameters()), "
                        f"got {type(params).__name__}")
    params = list(params)
    if not params:
        raise ValueError(f"{name}: got an empty parameter list")
    seen = set()
    for p in params:
        if not isinstance(p, Param):
            hint = "; help: wrap it, nn.Param(t)" if isinstance(p, Tensor) else ""
            raise TypeError(f"{name}: params must be nn.Param, got {type(p).__name__}{hint}")
        if not p.trainable:
            raise TypeError(f"{name}: a Buffer is not trainable; pass model.parameters()")
        if p.id in seen:
            raise ValueError(f"{name}: a parameter appears twice (id {p.id})")
        seen.add(p.id)
    return params


def _check_lr(name: str, lr: Any) -> float:
    lr = _number(name, "lr", lr)
    if lr < 0.0:
        raise ValueError(f"{name}: invalid learning rate: {lr}")
    return lr


def _number(name: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise TypeError(f"{name}: {key} must be a number, got {type(value).__name__}")
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{name}: {key} must not be NaN")
    return value


def check_hyperparams(name: str, lr: Any, **values: Any) -> dict[str, Any]:
    """PyTorch's range checks on the common hyperparameters; returns them as floats.

    ``lr``, ``eps``, ``weight_decay``, ``momentum``, ``alpha``, ``lr_decay`` and
    ``initial_accumulator_value`` must be >= 0; each beta in [0, 1).
    """
    checked: dict[str, Any] = {"lr": _check_lr(name, lr)}
    for key, value in values.items():
        if key == "betas":
            betas = tuple(_number(name, key, b) for b in value)
            if len(betas) != 2:
                raise ValueError(f"{name}: betas must be two numbers, got {value!r}")
            for i, b in enumerate(betas):
                if not 0.0 <= b < 1.0:
                    raise ValueError(f"{name}: invalid beta parameter at index {i}: {b}")
            checked[key] = betas
        elif isinstance(value, bool):
            checked[key] = value
        else:
            number = _number(name, key, value)
            if number < 0.0:
                raise ValueError(f"{name}: invalid {key} value: {number}")
            checked[key] = number
    return checked
