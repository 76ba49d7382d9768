"""Ops whose output shape depends on the values: ``nonzero unique masked_select`` and the
``allclose`` answer. They read their input first (a blocking read, so not inside a trio
task), then build the result on the input's device."""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.errors import DTypeError
from ember.ops._core import broadcast_shapes, same_device
from ember.ops.creation import tensor
from ember.ops.more_math import isclose
from ember.ops.shape import expand
from ember.tensor import Tensor


def _check_tensor(op: str, x: Any) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: expected a tensor, got {type(x).__name__}")


def nonzero(x: Tensor, *, as_tuple: bool = False) -> Tensor | tuple[Tensor, ...]:
    """The indices of the nonzero elements, one row each (int64, shape ``(count, ndim)``),
    in row-major order; ``as_tuple=True`` gives one 1-D index tensor per dim."""
    _check_tensor("nonzero", x)
    where = np.nonzero(np.atleast_1d(x.numpy()))
    if as_tuple:
        return tuple(tensor(i.astype(np.int64), device=x.device.inner) for i in where)
    rows = np.stack(where, axis=1).astype(np.int64) if x.ndim else np.zeros(
        (len(where[0]), 0), np.int64)
    return tensor(rows, device=x.device.inner)


def unique(x: Tensor, sorted: bool = True, return_inverse: bool = False,  # noqa: A002
           return_counts: bool = False, dim: int | None = None) -> Any:
    """The distinct values of ``x`` (flattened), ascending, as ``torch.unique``; with
    ``return_inverse`` each element's position among them (shaped like ``x``), with
    ``return_counts`` how often each occurs.

    Raises:
        NotImplementedError: ``dim`` given (unique slices).
    """
    _check_tensor("unique", x)
    if dim is not None:
        raise NotImplementedError("unique: dim= is not supported; help: call it on the "
                                  "flattened tensor")
    values, inverse, counts = np.unique(x.numpy(), return_inverse=True, return_counts=True)
    device = x.device.inner
    out: list[Tensor] = [tensor(values, dtype=x.dtype, device=device)]
    if return_inverse:
        out.append(tensor(inverse.reshape(x.shape).astype(np.int64), device=device))
    if return_counts:
        out.append(tensor(counts.astype(np.int64), device=device))
    return out[0] if len(out) == 1 else tuple(out)


def masked_select(x: Tensor, mask: Tensor) -> Tensor:
    """The elements of ``x`` where ``mask`` (broadcast with it) is true, as a 1-D tensor.

    The gradient flows back to the selected elements.

    Raises:
        DTypeError: a mask that is not bool.
    """
    _check_tensor("masked_select", x)
    _check_tensor("masked_select", mask)
    same_device("masked_select", (x, mask))
    if mask.dtype.kind != "b":
        raise DTypeError(f"masked_select: the mask must be a bool tensor, got {mask.dtype.name}")
    shape = broadcast_shapes("masked_select", x.shape, mask.shape)
    if x.shape != shape:
        x = expand(x, shape)
    host = np.broadcast_to(mask.numpy(), shape)
    return x.reshape(-1)[np.ascontiguousarray(host).reshape(-1)]


def allclose(a: Tensor, b: Any, rtol: float = 1e-05, atol: float = 1e-08,
             equal_nan: bool = False) -> bool:
    """Whether every element of ``a`` is close to ``b`` (``isclose``); reads the answer."""
    return bool(isclose(a, b, rtol, atol, equal_nan).all().item())
