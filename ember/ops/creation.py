"""Creating tensors: from host data, filled, ranges, identity, and seeded random numbers.

Random ops carry ``(seed, counter)`` in their message, so the numbers depend
only on the seed and the order of random calls, never on thread timing.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
from typing import Any

import numpy as np

from ember import dtype as _dtype
from ember.actors.ir import Upload
from ember.dtype import DType
from ember.errors import DTypeError, ShapeError
from ember.ops._core import call, make, next_id, parse_shape, resolve_device, resolve_dtype, user_site
from ember.tensor import Tensor

_SCALARS = (bool, int, float, np.generic)


def upload(array: np.ndarray, dtype: DType, device: Any) -> Tensor:
    device = resolve_device(device)
    out = next_id()
    device.actor.submit(Upload(out, array, user_site()), array.nbytes)
    return make(out, array.shape, dtype, device)


def _infer_array(data: Any, op: str) -> tuple[np.ndarray, DType]:
    """Host data as a private array and its ember dtype (PyTorch's inference for lists)."""
    if isinstance(data, np.ndarray):
        return data, _dtype.from_numpy_dtype(data.dtype, op)
    if isinstance(data, np.generic):
        return np.asarray(data), _dtype.from_numpy_dtype(data.dtype, op)
    try:
        array = np.asarray(data)
    except ValueError as exc:
        raise ShapeError(f"{op}: nested sequences of unequal lengths ({exc})") from None
    if array.dtype == object or array.dtype.kind in "USV":
        raise DTypeError(f"{op}: cannot make a tensor from {type(data).__name__} holding "
                         f"non-numeric values")
    if array.dtype.kind == "f":
        return array, _dtype.DEFAULT_FLOAT
    if array.dtype.kind in "iu":
        return array, _dtype.DEFAULT_INT
    return array, _dtype.from_numpy_dtype(array.dtype, op)


def tensor(data: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    """A tensor holding a copy of ``data`` (nested lists, a scalar or a NumPy array).

    Python floats become float32, ints int64, bools bool; a NumPy array keeps
    its dtype. ``dtype=`` converts.
    """
    if isinstance(data, Tensor):
        out = data if device is None else data.to(resolve_device(device))
        return out if dtype is None else out.astype(dtype)
    array, inferred = _infer_array(data, "tensor")
    target = resolve_dtype(dtype, inferred)
    return upload(np.array(array, dtype=target.np, copy=True, order="C"), target, device)


def from_numpy(array: np.ndarray, *, dtype: Any = None, device: Any = None) -> Tensor:
    """A tensor holding a copy of the NumPy array ``array`` (its dtype unless ``dtype=``)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy: expected a numpy.ndarray, got {type(array).__name__}")
    return tensor(array, dtype=dtype, device=device)


def _scalar_value(op: str, value: Any) -> Any:
    if isinstance(value, Tensor):
        raise TypeError(f"{op}: the fill value must be a Python scalar; help: use value.item()")
    if not isinstance(value, _SCALARS):
        raise TypeError(f"{op}: the fill value must be a Python scalar, got {type(value).__name__}")
    return value.item() if isinstance(value, np.generic) else value


def full(shape: Any, value: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    """A tensor of ``shape`` filled with ``value`` (dtype inferred from it unless given)."""
    value = _scalar_value("full", value)
    shape = parse_shape("full", (shape,) if isinstance(shape, int) else tuple(shape))
    target = resolve_dtype(dtype, _dtype.default_for_kind(_dtype.scalar_kind(value)))
    return call("full", (), shape, target, (value,), resolve_device(device))


def zeros(*shape: Any, dtype: Any = None, device: Any = None) -> Tensor:
    return call("full", (), parse_shape("zeros", shape), resolve_dtype(dtype, _dtype.DEFAULT_FLOAT),
                (0,), resolve_device(device))


def ones(*shape: Any, dtype: Any = None, device: Any = None) -> Tensor:
    return call("full", (), parse_shape("ones", shape), resolve_dtype(dtype, _dtype.DEFAULT_FLOAT),
                (1,), resolve_device(device))


def _like(t: Tensor, value: Any, dtype: Any, device: Any) -> Tensor:
    if not isinstance(t, Tensor):
        raise TypeError(f"*_like: expected a tensor, got {type(t).__name__}")
    return call("full", (), t.shape, resolve_dtype(dtype, t.dtype), (value,),
                t.device if device is None else resolve_device(device))


def zeros_like(t: Tensor, *, dtype: Any = None, device: Any = None) -> Tensor:
    return _like(t, 0, dtype, device)


def ones_like(t: Tensor, *, dtype: Any = None, device: Any = None) -> Tensor:
    return _like(t, 1, dtype, device)


def full_like(t: Tensor, value: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    return _like(t, _scalar_value("full_like", value), dtype, device)


def arange(start: Any, stop: Any = None, step: Any = 1, *, dtype: Any = None,
           device: Any = None) -> Tensor:
    """Values from ``start`` up to (not including) ``stop`` by ``step``."""
    if stop is None:
        start, stop = 0, start
    values = [_scalar_value("arange", v) for v in (start, stop, step)]
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    length = max(0, math.ceil((values[1] - values[0]) / values[2]))
    all_int = all(isinstance(v, int) for v in values)
    target = resolve_dtype(dtype, _dtype.DEFAULT_INT if all_int else _dtype.DEFAULT_FLOAT)
    return call("arange", (), (length,), target, (values[0], values[2]), resolve_device(device))


def linspace(start: float, stop: float, num: int, *, dtype: Any = None,
             device: Any = None) -> Tensor:
    """``num`` evenly spaced values from ``start`` to ``stop``, both included."""
    if not isinstance(num, int) or num < 0:
        raise ValueError(f"linspace: num must be an int >= 0, got {num!r}")
    start, stop = (_scalar_value("linspace", v) for v in (start, stop))
    target = resolve_dtype(dtype, _dtype.DEFAULT_FLOAT)
    return call("linspace", (), (num,), target, (start, stop), resolve_device(device))


def eye(n: int, m: int | None = None, *, dtype: Any = None, device: Any = None) -> Tensor:
    """The identity matrix of ``n`` rows and ``m`` (default ``n``) columns."""
    shape = parse_shape("eye", (n, n if m is None else m))
    return call("eye", (), shape, resolve_dtype(dtype, _dtype.DEFAULT_FLOAT), (),
                resolve_device(device))


# ----- random ---------------------------------------------------------------------------

class _RandomState:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seed = int.from_bytes(os.urandom(8), "little") >> 1
        self.counter = itertools.count()

    def next_key(self) -> tuple[int, int]:
        with self.lock:
            return self.seed, next(self.counter)


_random = _RandomState()


def manual_seed(seed: int) -> None:
    """Seed every device's random numbers: same seed and call order → same numbers."""
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"manual_seed: seed must be an int >= 0, got {seed!r}")
    with _random.lock:
        _random.seed = seed
        _random.counter = itertools.count()


def _float_dtype(op: str, dtype: Any) -> DType:
    target = resolve_dtype(dtype, _dtype.DEFAULT_FLOAT)
    if target.kind != "f":
        raise DTypeError(f"{op}: needs a floating dtype, got {target.name}")
    return target


def rand(*shape: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """Uniform random numbers in [0, 1)."""
    return call("rand", (), parse_shape("rand", shape), _float_dtype("rand", dtype),
                _random.next_key(), resolve_device(device))


def randn(*shape: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """Standard normal random numbers."""
    return call("randn", (), parse_shape("randn", shape), _float_dtype("randn", dtype),
                _random.next_key(), resolve_device(device))


def randint(low: int, high: int, shape: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    """Random integers in ``[low, high)``."""
    if not (isinstance(low, int) and isinstance(high, int)) or low >= high:
        raise ValueError(f"randint: needs ints with low < high, got low={low!r}, high={high!r}")
    target = resolve_dtype(dtype, _dtype.DEFAULT_INT)
    shape = parse_shape("randint", (shape,) if isinstance(shape, int) else tuple(shape))
    return call("randint", (), shape, target, (low, high, *_random.next_key()),
                resolve_device(device))
