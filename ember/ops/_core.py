"""What every op shares: provenance, submission, dims, broadcasting, scalars."""

from __future__ import annotations

import itertools
import math
import os
from typing import Any

from ember import dtype as _dtype
from ember.ops.recording import record
from ember.device import Device, default_device
from ember.dtype import DType
from ember.errors import DeviceError, DimError, ShapeError
from ember.ir import Call, MultiCall
from ember.ops.memory import CHECKED_FROM, check_fits
from ember.sites import is_ember_code, pinned_site, pinned_site_state, user_site  # noqa: F401

_ids = itertools.count(1)
next_id = _ids.__next__

EAGER = os.environ.get("EMBER_EAGER", "0") not in ("", "0")

def make(out: int, shape: tuple[int, ...], dtype: DType, device: Device) -> Any:
    return _new_tensor(out, shape, dtype, device)


def _bind_tensor_class() -> None:
    global _new_tensor
    from ember.tensor import Tensor

    _new_tensor = Tensor._new


def _new_tensor(*args: Any) -> Any:  # replaced by Tensor._new on first use
    _bind_tensor_class()
    return _new_tensor(*args)


def call(op: str, inputs: tuple, shape: tuple[int, ...], dtype: DType,
         attrs: tuple = (), device: Device | None = None) -> Any:
    """Submit op ``op`` on tensors ``inputs`` and return the output tensor at once.

    Raises:
        DTypeError: ``device`` cannot hold ``dtype`` (float64 on wgpu).
    """
    if device is None:
        device = _result_device(inputs)
    out = next_id()
    actor = device._actor or device.actor
    if actor.check_dtype is not None:
        actor.check_dtype(dtype.name, op)
    n = len(inputs)
    ids = ((inputs[0]._id,) if n == 1 else (inputs[0]._id, inputs[1]._id) if n == 2
           else tuple([t._id for t in inputs]))
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes >= CHECKED_FROM:
        check_fits(op, shape, dtype, device)
    # A tiny op that runs at once finds its user's line only if it fails (the stack is
    # still there then): the walk up the stack is a sixth of such an op's cost.
    if not (nbytes <= actor.at_once_bytes
            and actor.run_at_once(Call(op, out, ids, attrs, shape, dtype.name, None))):
        actor.submit(Call(op, out, ids, attrs, shape, dtype.name, user_site()), nbytes)
    tensor = _new_tensor(out, shape, dtype, device)
    if device.is_autodiff:
        record(op, inputs, attrs, (tensor,))
    if EAGER:
        actor.check_now(out)
    return tensor


def issue(op: str, inputs: tuple, shape: tuple[int, ...], dtype: DType, attrs: tuple,
          device: Device, out: int) -> None:
    """Submit op ``op`` producing the id ``out`` that someone else's handle already names (a
    value another actor promised): no handle is made, nothing is recorded."""
    device.actor.submit(Call(op, out, tuple([t._id for t in inputs]), attrs, shape, dtype.name,
                             user_site()), math.prod(shape) * dtype.itemsize)


def issue_multi(op: str, inputs: tuple, shapes: tuple, dtypes: tuple, attrs: tuple,
                device: Device, outs: tuple[int, ...]) -> None:
    """``issue``'s twin for an op with several outputs: the ids ``outs`` are promised by
    handles someone else made (an optimizer step's new parameters and state)."""
    nbytes = sum(math.prod(s) * d.itemsize for s, d in zip(shapes, dtypes))
    device.actor.submit(MultiCall(op, outs, tuple([t._id for t in inputs]), attrs, shapes,
                                  tuple([d.name for d in dtypes]), user_site()), nbytes)


def multi_call(op: str, inputs: tuple, shapes: tuple, dtypes: tuple, attrs: tuple = (),
               rendezvous: bool = False) -> tuple:
    """Submit an op with several outputs; returns their tensors. ``rendezvous``: the op
    completes only once the other ranks' calls arrive (a collective), so EMBER_EAGER=1
    does not wait for it here: the caller has those calls still to make."""
    device = _result_device(inputs)
    outs = tuple(next_id() for _ in shapes)
    actor = device.actor
    if actor.check_dtype is not None:
        for d in dtypes:
            actor.check_dtype(d.name, op)
    nbytes = sum(math.prod(s) * d.itemsize for s, d in zip(shapes, dtypes))
    if nbytes >= CHECKED_FROM:
        for s, d in zip(shapes, dtypes):
            check_fits(op, s, d, device)
    actor.submit(MultiCall(op, outs, tuple(t._id for t in inputs), attrs, shapes,
                           tuple(d.name for d in dtypes), user_site()), nbytes)
    tensors = tuple(make(o, s, d, device) for o, s, d in zip(outs, shapes, dtypes))
    if device.is_autodiff:
        record(op, inputs, attrs, tensors)
    if EAGER and not rendezvous:
        for o in outs:
            actor.check_now(o)
    return tensors


def _result_device(inputs: tuple) -> Device:
    # Inputs passed their device check already; the autodiff twin wins, if present.
    device = inputs[0].device
    if not device.is_autodiff:
        for t in inputs:
            if t.device.is_autodiff:
                return t.device
    return device


def same_device(op: str, tensors: tuple) -> Device:
    """The device all ``tensors`` share; DeviceError naming every device otherwise.

    A device and its autodiff twin are one place: tensors of both mix, and the
    result is on the autodiff device (the untracked ones act as constants).
    """
    device = tensors[0].device
    for t in tensors[1:]:
        other = t.device
        if other is not device:
            if other.name != device.name:
                names = ", ".join(str(x.device) for x in tensors)
                raise DeviceError(f"{op}: tensors are on different devices ({names}); "
                                  f"help: move them with .to(device) first")
            if other.is_autodiff and not device.is_autodiff:
                device = other
    return device


def resolve_device(device: Any) -> Device:
    if device is None:
        return default_device()
    if isinstance(device, Device):
        return device
    from ember.device import device as parse

    return parse(device)


def resolve_dtype(dtype: Any, default: DType) -> DType:
    return default if dtype is None else _dtype.as_dtype(dtype)


def normalize_dim(op: str, dim: int, ndim: int | tuple[int, ...]) -> int:
    """A dim in ``[-ndim, ndim)`` as a non-negative index (0-d tensors accept 0 and -1).

    ``ndim`` may be the tensor's shape, which the error then names.

    Raises:
        DimError: (an ``IndexError``) the dim is out of range.
    """
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"{op}: dim must be an int, got {type(dim).__name__}")
    shape = ndim if isinstance(ndim, tuple) else None
    if shape is not None:
        ndim = len(shape)
    bound = max(ndim, 1)
    if not -bound <= dim < bound:
        of_shape = f" (shape {shape})" if shape is not None else ""
        raise DimError(f"{op}: dim {dim} is out of range for a tensor of {ndim} dims"
                       f"{of_shape} (expected a dim in [{-bound}, {bound - 1}])")
    return dim + bound if dim < 0 else dim


def normalize_dims(op: str, dims: Any, ndim: int | tuple[int, ...]) -> tuple[int, ...]:
    """``None`` → every dim; an int or a tuple → sorted unique non-negative dims."""
    shape = ndim
    if isinstance(ndim, tuple):
        ndim = len(ndim)
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, int):
        dims = (dims,)
    out = []
    for d in dims:
        d = normalize_dim(op, d, shape)
        if d in out:
            raise ShapeError(f"{op}: dim {d} appears more than once in {tuple(dims)}")
        out.append(d)
    return tuple(sorted(out)) if ndim else ()


_broadcast_cache: dict[tuple, tuple[int, ...]] = {}


def broadcast_shapes(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy's broadcasting; ShapeError naming the op and every shape on a mismatch."""
    cached = _broadcast_cache.get(shapes)
    if cached is not None:
        return cached
    ndim = max(len(s) for s in shapes)
    out = []
    for i in range(-ndim, 0):
        size = 1
        for s in shapes:
            if -i <= len(s):
                d = s[i]
                if d != 1:
                    if size != 1 and d != size:
                        listed = ", ".join(str(tuple(x)) for x in shapes)
                        raise ShapeError(f"{op}: incompatible shapes for broadcasting: {listed}")
                    size = d
        out.append(size)
    result = tuple(out)
    if len(_broadcast_cache) < 4096:
        _broadcast_cache[shapes] = result
    return result


def parse_shape(op: str, args: tuple) -> tuple[int, ...]:
    """``f(2, 3)`` and ``f((2, 3))`` both mean shape (2, 3)."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    shape = []
    for s in args:
        if isinstance(s, bool) or not hasattr(s, "__index__"):
            raise TypeError(f"{op}: shape entries must be ints, got {s!r}")
        s = int(s.__index__())
        if s < 0:
            raise ShapeError(f"{op}: negative dimension {s} in shape {tuple(args)}")
        shape.append(s)
    return tuple(shape)


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)
