"""Conversions: dtype casts, moves between devices, detach, DLPack."""

from __future__ import annotations

from typing import Any

import numpy as np

from ember import dtype as _dtype
from ember.actors.ir import Receive
from ember.device import Device
from ember.errors import DTypeError
from ember.ops._core import call, make, next_id, resolve_device, user_site
from ember.tensor import Tensor


def astype(x: Tensor, dtype: Any) -> Tensor:
    """``x`` converted to ``dtype`` (floats to ints truncate toward zero, as in PyTorch)."""
    target = _dtype.as_dtype(dtype)
    if target is x.dtype:
        return x
    return call("cast", (x,), x.shape, target)


def to(x: Tensor, target: Any) -> Tensor:
    """``x`` on another device (``Device`` or name) or in another dtype."""
    if isinstance(target, Device):
        return _transfer(x, target)
    if isinstance(target, str) and target not in _dtype.BY_NAME and target != "bool_":
        return _transfer(x, resolve_device(target))
    try:
        return astype(x, target)
    except DTypeError:
        raise DTypeError(f"to: expected a device or a dtype, got {target!r}") from None


def _transfer(x: Tensor, device: Device) -> Tensor:
    if device is x.device:
        return x
    if device.name == x.device.name:
        # Same actor, other autodiff flag: a new handle on the same buffer.
        return call("alias", (x,), x.shape, x.dtype, (), device)
    ticket = x.device.actor.send(x._id)
    out = next_id()
    device.actor.submit(Receive(out, ticket, x.shape, x.dtype.name, user_site()),
                        x.numel() * x.dtype.itemsize)
    return make(out, x.shape, x.dtype, device)


def detach(x: Tensor) -> Tensor:
    """A new handle to the same values, outside any gradient graph."""
    return call("alias", (x,), x.shape, x.dtype)


def dlpack(x: Tensor, **kwargs: Any) -> Any:
    """Export through DLPack (blocks until ``x`` is computed); the memory is shared."""
    return _shared_array(x).__dlpack__(**kwargs)


def dlpack_device(x: Tensor) -> tuple[int, int]:
    return _shared_array(x).__dlpack_device__()


def _shared_array(x: Tensor) -> np.ndarray:
    host = x.numpy()
    try:
        shared = host.view()
        shared.flags.writeable = True
        return shared
    except ValueError:  # a broadcast view: DLPack consumers get a private copy
        return np.ascontiguousarray(host)


def from_dlpack(obj: Any, *, device: Any = None) -> Tensor:
    """A tensor sharing the memory of a DLPack producer (a NumPy array, a CPU torch tensor ...)."""
    array = np.from_dlpack(obj)
    from ember.ops.creation import upload

    return upload(array, _dtype.from_numpy_dtype(array.dtype, "from_dlpack"), device)
