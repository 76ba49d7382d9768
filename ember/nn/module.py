"""``Module``: a tree of parameters, buffers and sub-modules that can be walked and moved.

Assigning a ``Param``, ``Buffer``, ``Module``, or a list / dict of modules to
an attribute registers it, in definition order; names are dotted paths
(``layers.0.weight``), as in PyTorch, so PyTorch state dicts map one to one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ember import dtype as _dtype
from ember.device import Device
from ember.errors import DTypeError, ShapeError
from ember.nn.param import Buffer, Param
from ember.ops import _core


# Per Module subclass: whether its forward is ember's own code (see Module.__call__).
_FORWARD_IS_EMBERS: dict[type, bool] = {}


class Module:
    """Base class of every layer and model: subclass it and define ``forward``.

    Example:
        >>> class MLP(nn.Module):
        ...     def __init__(self, device=None):
        ...         super().__init__()
        ...         self.fc1 = nn.Linear(4, 8, device=device)
        ...         self.fc2 = nn.Linear(8, 2, device=device)
        ...     def forward(self, x):
        ...         return self.fc2(self.fc1(x).relu())
    """

    def __init__(self) -> None:
        object.__setattr__(self, "_children", {})
        object.__setattr__(self, "training", True)

    # ----- registration ----------------------------------------------------------------

    def __setattr__(self, name: str, value: Any) -> None:
        children = self.__dict__.get("_children")
        if children is None:
            raise RuntimeError(f"{type(self).__name__}: call super().__init__() before "
                               f"assigning attributes")
        if _is_registrable(value):
            children[name] = value
        else:
            children.pop(name, None)
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        self._children.pop(name, None)
        object.__delattr__(self, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Ops record the first line outside ember that led to them (a stack walk each).
        # Inside one of ember's own modules every op would find the same line, this call's
        # caller: found once and pinned. A module of the user's own (a forward outside
        # ember) unpins it, so its ops name their own lines.
        pinned = _core.pinned_site_state()
        before = pinned.site
        ours = _FORWARD_IS_EMBERS.get(type(self))
        if ours is None:
            ours = _FORWARD_IS_EMBERS[type(self)] = _core.is_ember_code(type(self).forward)
        site = (before or _core.user_site()) if ours else None
        if site is before:
            return self.forward(*args, **kwargs)
        pinned.site = site
        try:
            return self.forward(*args, **kwargs)
        finally:
            pinned.site = before

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Compute the module's output; ``model(x)`` calls it (subclasses define it).

        Layers document their inputs and outputs, with shapes, in their class docstring.

        Raises:
            NotImplementedError: the subclass did not define ``forward``.
        """
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    # ----- walking ---------------------------------------------------------------------

    def named_slots(self, prefix: str = "") -> Iterator[tuple[str, Param]]:
        """Every ``Param`` and ``Buffer`` with its dotted name, in definition order."""
        for name, child in self._children.items():
            yield from _walk(child, f"{prefix}{name}")

    def named_parameters(self) -> Iterator[tuple[str, Param]]:
        """Trainable parameters with their dotted names, in definition order."""
        return ((n, p) for n, p in self.named_slots() if p.trainable)

    def parameters(self) -> list[Param]:
        """Every trainable ``Param`` (sub-modules' too), in definition order.

        Pass them to an optimizer: ``optim.Adam(model.parameters(), lr=1e-3)``. Each
        ``Param``'s ``.value`` is the current tensor (it changes after ``opt.step``).

        Example:
            >>> [p.shape for p in nn.Linear(4, 2).parameters()]
            [(2, 4), (2,)]
        """
        return [p for _, p in self.named_parameters()]

    def named_buffers(self) -> Iterator[tuple[str, Buffer]]:
        """Every ``Buffer`` (non-trainable saved state, e.g. BatchNorm's running stats)
        with its dotted name, in definition order.

        Example:
            >>> [name for name, _ in nn.BatchNorm1d(3).named_buffers()]
            ['running_mean', 'running_var', 'num_batches_tracked']
        """
        return ((n, p) for n, p in self.named_slots() if not p.trainable)

    def modules(self) -> Iterator[Module]:
        """This module and every sub-module, depth first."""
        yield self
        for child in self._children.values():
            for m in _child_modules(child):
                yield from m.modules()

    def num_params(self) -> int:
        """The number of trainable scalars, as PyTorch's ``sum(p.numel() for p in ...)``."""
        return sum(p.numel() for p in self.parameters())

    # ----- state -----------------------------------------------------------------------

    def to(self, *args: Any, device: Device | str | None = None, dtype: Any = None,
           non_blocking: bool = False) -> Module:
        """Move and/or convert every parameter and buffer (in place); returns the module.

        As PyTorch's: ``m.to(device)``, ``m.to(dtype)``, ``m.to(device, dtype)``,
        ``m.to(tensor)`` (its device and dtype), or keywords. A dtype converts the
        floating parameters and buffers only (``num_batches_tracked`` stays int64) and
        must itself be floating. Converted parameters are new leaves.

        Raises:
            DTypeError: a non-floating dtype, or an argument that is neither a device
                nor a dtype.

        Example:
            >>> model = nn.Linear(4, 2).to(em.bfloat16)
            >>> model.weight.dtype.name
            'bfloat16'
        """
        from ember.ops._core import resolve_device
        from ember.tensor import Tensor

        if len(args) > 2:
            raise TypeError(f"Module.to: expected at most a device and a dtype, got "
                            f"{len(args)} arguments")
        for arg in args:
            if isinstance(arg, Tensor):
                device, dtype = arg.device, arg.dtype
            elif _is_dtype(arg):
                dtype = arg
            else:
                device = arg
        target = None if device is None else resolve_device(device)
        kind = None if dtype is None else _dtype.as_dtype(dtype)
        if kind is not None and not kind.is_floating_point:
            raise DTypeError(f"Module.to: converts to floating dtypes only, got {kind.name}; "
                             f"help: integer buffers keep their dtype by themselves")
        for _, slot in self.named_slots():
            # detach: a moved parameter is a new leaf, not a function of the old one
            value = slot.value.detach()
            if kind is not None and value.dtype.is_floating_point:
                value = value.astype(kind)
            if target is not None:
                value = value.to(target)
            slot.value = value
        return self

    def train(self, mode: bool = True) -> Module:
        """Set training mode (``mode=True``) or evaluation mode on this module and every
        sub-module; returns the module.

        Dropout drops and batch norms use batch statistics only in training mode.
        """
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> Module:
        """Set evaluation mode (``train(False)``) on this module and its sub-modules; returns it."""
        return self.train(False)

    def state_dict(self) -> dict[str, np.ndarray]:
        """``{dotted name: NumPy array}`` of every parameter and buffer (waits for them)."""
        return {name: np.array(slot.value.numpy()) for name, slot in self.named_slots()}

    def load_state_dict(self, state: dict[str, Any], strict: bool = True) -> Module:
        """Replace parameter and buffer values from ``state`` (in place); returns the module.

        Raises:
            KeyError: with ``strict``, a missing or unexpected key (all are named).
            ShapeError / DTypeError: a value whose shape or dtype differs, naming its key.
        """
        from ember.ops.creation import tensor as make_tensor

        slots = dict(self.named_slots())
        if strict:
            missing = [k for k in slots if k not in state]
            unexpected = [k for k in state if k not in slots]
            if missing or unexpected:
                raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys "
                               f"{unexpected}")
        updates = {}
        for name, value in state.items():
            slot = slots.get(name)
            if slot is None:
                continue
            array = np.asarray(value)
            if tuple(array.shape) != slot.shape:
                raise ShapeError(f"load_state_dict: {name}: shape {tuple(array.shape)} does not "
                                 f"match the parameter's {slot.shape}")
            dtype = _dtype.from_numpy_dtype(array.dtype, "load_state_dict")
            if dtype is not slot.dtype:
                raise DTypeError(f"load_state_dict: {name}: dtype {dtype.name} does not match "
                                 f"the parameter's {slot.dtype.name}")
            updates[name] = array
        for name, array in updates.items():  # all checked first: no half-loaded module
            slot = slots[name]
            slot.value = make_tensor(array, device=slot.device)
        return self

    def save(self, path: str) -> None:
        """Write parameters, buffers and their ids to ``path`` (atomic; MessagePack)."""
        from ember.record.module_file import save_module

        save_module(self, path)

    def load(self, path: str) -> Module:
        """Load what ``save`` wrote (in place, strict checks); returns the module."""
        from ember.record.module_file import load_module

        load_module(self, path)
        return self

    # ----- display ---------------------------------------------------------------------

    def extra_repr(self) -> str:
        """The layer's settings shown in its ``repr`` (``in_features=4, out_features=2``)."""
        return ""

    def __repr__(self) -> str:
        lines = []
        for name, child in self._children.items():
            if isinstance(child, Module):
                body = repr(child).replace("\n", "\n  ")
                lines.append(f"({name}): {body}")
            elif isinstance(child, Param):
                lines.append(f"({name}): {child!r}")
            else:
                for key, item in _items(child):
                    body = repr(item).replace("\n", "\n  ")
                    lines.append(f"({name}.{key}): {body}")
        head = f"{type(self).__name__}({self.extra_repr()}"
        if not lines:
            return head + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"


def _is_registrable(value: Any) -> bool:
    if isinstance(value, Param | Module):
        return True
    if isinstance(value, list | tuple) and value:
        return all(isinstance(v, Param | Module) for v in value)
    if isinstance(value, dict) and value:
        return all(isinstance(v, Param | Module) for v in value.values())
    return False


def _items(container: Any) -> list[tuple[str, Any]]:
    if isinstance(container, dict):
        return [(str(k), v) for k, v in container.items()]
    return [(str(i), v) for i, v in enumerate(container)]


def _walk(child: Any, name: str) -> Iterator[tuple[str, Param]]:
    if isinstance(child, Param):
        yield name, child
    elif isinstance(child, Module):
        yield from child.named_slots(name + ".")
    else:
        for key, item in _items(child):
            yield from _walk(item, f"{name}.{key}")


def _child_modules(child: Any) -> Iterator[Module]:
    if isinstance(child, Module):
        yield child
    elif isinstance(child, list | tuple | dict):
        for _, item in _items(child):
            if isinstance(item, Module):
                yield item


def _is_dtype(value: Any) -> bool:
    """Whether ``Module.to``'s positional argument names a dtype (else it is a device)."""
    if isinstance(value, Device):
        return False
    try:
        _dtype.as_dtype(value)
    except (DTypeError, TypeError, ValueError):
        return False
    return True


def copy_module(module: Module) -> Module:
    """A copy of ``module`` whose parameters and buffers are new slots (fresh ids, new
    leaves) holding the same values; other attributes are shared. Tensors are immutable,
    so sharing values is safe: the copies train apart. (PyTorch deep-copies layers in
    ``TransformerEncoder``; this is that copy.)"""
    new = object.__new__(type(module))
    new.__dict__.update(module.__dict__)
    children: dict[str, Any] = {}
    object.__setattr__(new, "_children", children)
    for name, child in module._children.items():
        copied = _copy_child(child)
        children[name] = copied
        if module.__dict__.get(name) is child:
            object.__setattr__(new, name, copied)
    return new


def _copy_child(child: Any) -> Any:
    if isinstance(child, Param):
        return type(child)(child.value.detach())
    if isinstance(child, Module):
        return copy_module(child)
    if isinstance(child, dict):
        return {k: _copy_child(v) for k, v in child.items()}
    return type(child)(_copy_child(v) for v in child)
