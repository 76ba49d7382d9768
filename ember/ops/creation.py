"""Creating tensors: from host data, filled, ranges, identity, and seeded random numbers.

Random ops carry ``(seed, counter)`` in their message, so the numbers depend
only on the seed and the order of random calls, never on thread timing or
on which device (of a kind) computes them.
"""

from __future__ import annotations

import math
import os
import threading
from typing import Any

import numpy as np

from ember import dtype as _dtype
from ember.dtype import DType
from ember.errors import DTypeError, ShapeError
from ember.ir import Upload
from ember.op_kinds import OTHER, declare
from ember.ops._core import call, make, next_id, parse_shape, resolve_device, resolve_dtype, user_site
from ember.tensor import Tensor

declare(OTHER, "full", "arange", "linspace", "eye", "rand", "randn", "randint")

_SCALARS = (bool, int, float, np.bool_, np.integer, np.floating)
_INT64 = np.iinfo(np.int64)


def upload(array: np.ndarray, dtype: DType, device: Any, op: str = "tensor") -> Tensor:
    """Hand ``array`` (which the caller never touches again) to the device as a tensor.

    Raises:
        DTypeError: naming ``op``: the device cannot hold ``dtype`` or these values
            (int64 past int32 on wgpu).
    """
    device = resolve_device(device)
    if device.actor.check_dtype is not None:
        device.actor.check_dtype(dtype.name, op, array)
    out = next_id()
    device.actor.submit(Upload(out, array, user_site()), array.nbytes)
    return make(out, array.shape, dtype, device)


def _infer_array(data: Any, op: str) -> tuple[np.ndarray, DType]:
    """Host data as an array and its ember dtype (PyTorch's inference for lists)."""
    if isinstance(data, np.ndarray):
        return data, _dtype.from_numpy_dtype(data.dtype, op)
    if isinstance(data, np.generic):
        return np.asarray(data), _dtype.from_numpy_dtype(data.dtype, op)
    try:
        array = np.asarray(data)
    except ValueError as exc:
        raise ShapeError(f"{op}: nested sequences of unequal lengths (a ragged list) cannot "
                         f"make a tensor ({exc})") from None
    kind = array.dtype.kind
    if kind == "f" or _dtype.is_bfloat16(array.dtype):
        return array, _dtype.DEFAULT_FLOAT
    if kind == "i":
        return array, _dtype.DEFAULT_INT
    if kind == "u" or (kind == "O" and _all_ints(array)):
        # NumPy holds Python ints past int64 as uint64 or objects; PyTorch refuses them.
        if kind == "O" or (array.size and array.max() > _INT64.max):
            raise OverflowError(f"{op}: a Python int in the data does not fit in int64")
        return array, _dtype.DEFAULT_INT
    if kind == "b":
        return array, _dtype.bool_
    raise DTypeError(f"{op}: cannot make a tensor from {type(data).__name__} holding "
                     f"non-numeric values (NumPy reads it as {array.dtype}); expected nested "
                     f"lists of bool / int / float")


def _all_ints(array: np.ndarray) -> bool:
    return array.size > 0 and all(isinstance(v, int) for v in array.flat)


def tensor(data: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    """A tensor holding a copy of ``data`` (nested lists, a scalar or a NumPy array).

    Python floats become float32, ints int64, bools bool (a mix takes the
    highest kind: ``[1, 2.5]`` is float32); a NumPy array or scalar keeps its
    dtype (uint16 widens to int32, uint32 to int64).
    ``dtype=`` converts. The data is copied: changing the source later does
    not change the tensor.

    Raises:
        ShapeError: ragged nested lists.
        DTypeError: strings, None, complex numbers or other non-numeric data.
        OverflowError: a Python int outside int64.

    Example::

        em.tensor([[1, 2], [3, 4]])          # int64, shape (2, 2)
        em.tensor(np.ones(3, np.float16))    # float16
    """
    if isinstance(data, Tensor):
        out = data if device is None else data.to(resolve_device(device))
        return out if dtype is None else out.astype(dtype)
    array, inferred = _infer_array(data, "tensor")
    target = resolve_dtype(dtype, inferred)
    device = resolve_device(device)
    # The device's own host buffer where it has one (a GPU's pinned memory, which its
    # worker copies from without waiting), else a plain copy.
    staged = None if device.actor.host_buffer is None else device.actor.host_buffer(
        array.shape, target.np)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN / inf to int: undefined, as in torch
        if staged is None:
            copied = np.array(array, dtype=target.np, copy=True, order="C")
        else:
            copied = staged
            np.copyto(copied, array, casting="unsafe")
    return upload(copied, target, device)


def from_numpy(array: np.ndarray, *, dtype: Any = None, device: Any = None) -> Tensor:
    """A tensor holding a copy of the NumPy array ``array`` (its dtype unless ``dtype=``).

    Example:
        >>> em.from_numpy(np.arange(3, dtype=np.int32)).dtype
        ember.int32
    """
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy: expected a numpy.ndarray, got {type(array).__name__}")
    return tensor(array, dtype=dtype, device=device)


def _scalar_value(op: str, value: Any) -> bool | int | float:
    if isinstance(value, Tensor):
        raise TypeError(f"{op}: expected a Python scalar, got a tensor; help: use t.item()")
    if not isinstance(value, _SCALARS) and not (isinstance(value, np.generic)
                                                and _dtype.is_bfloat16(value.dtype)):
        raise TypeError(f"{op}: expected a Python scalar, got {type(value).__name__}")
    return value.item() if isinstance(value, np.generic) else value


def _fill_value(op: str, value: bool | int | float, dtype: DType) -> bool | int | float:
    """``value`` as ``dtype`` holds it; ValueError where it cannot (as PyTorch's full)."""
    if dtype.kind == "b":
        return bool(value)
    if dtype.kind == "i":
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ValueError(f"{op}: cannot fill a {dtype.name} tensor with {value}")
            value = int(value)  # toward zero, as a cast
        info = np.iinfo(dtype.np)
        if not info.min <= value <= info.max:
            raise ValueError(f"{op}: {value} does not fit in {dtype.name}")
        return int(value)
    value = float(value)
    if dtype is _dtype.bfloat16:
        import ml_dtypes  # (np.finfo knows no bfloat16)

        largest = float(ml_dtypes.finfo(dtype.np).max)
    else:
        largest = float(np.finfo(dtype.np).max)
    if math.isfinite(value) and abs(value) > largest:
        raise ValueError(f"{op}: {value} overflows {dtype.name} (largest finite value {largest})")
    return value


def _shape_arg(op: str, shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (tuple, list)):
        return parse_shape(op, tuple(shape))
    return parse_shape(op, (shape,))


def full(shape: Any, value: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    """A tensor of ``shape`` (an int or a tuple) filled with ``value``.

    The dtype is inferred from the value (bool, int64, float32) unless given.

    Example:
        >>> em.full((2, 2), 7).tolist()
        [[7, 7], [7, 7]]
    """
    value = _scalar_value("full", value)
    shape = _shape_arg("full", shape)
    target = resolve_dtype(dtype, _dtype.default_for_kind(_dtype.scalar_kind(value)))
    return call("full", (), shape, target, (_fill_value("full", value, target),),
                resolve_device(device))


def zeros(*shape: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """A tensor of zeros; ``zeros(2, 3)`` and ``zeros((2, 3))`` are the same (float32 by default).

    Example:
        >>> em.zeros(2, 3).shape, em.zeros(2, dtype=em.int64).tolist()
        ((2, 3), [0, 0])
    """
    target = resolve_dtype(dtype, _dtype.DEFAULT_FLOAT)
    return call("full", (), parse_shape("zeros", shape), target, (_fill_value("zeros", 0, target),),
                resolve_device(device))


def ones(*shape: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """A tensor of ones; ``ones(2, 3)`` and ``ones((2, 3))`` are the same (float32 by default).

    Example:
        >>> em.ones((2,), device="cpu:0").tolist()
        [1.0, 1.0]
    """
    target = resolve_dtype(dtype, _dtype.DEFAULT_FLOAT)
    return call("full", (), parse_shape("ones", shape), target, (_fill_value("ones", 1, target),),
                resolve_device(device))


def _like(op: str, t: Tensor, value: Any, dtype: Any, device: Any) -> Tensor:
    if not isinstance(t, Tensor):
        raise TypeError(f"{op}: expected a tensor, got {type(t).__name__}")
    target = resolve_dtype(dtype, t.dtype)
    return call("full", (), t.shape, target, (_fill_value(op, value, target),),
                t.device if device is None else resolve_device(device))


def zeros_like(t: Tensor, *, dtype: Any = None, device: Any = None) -> Tensor:
    """Zeros of ``t``'s shape, dtype and device (unless given).

    Example:
        >>> em.zeros_like(em.tensor([1, 2])).tolist()
        [0, 0]
    """
    return _like("zeros_like", t, 0, dtype, device)


def ones_like(t: Tensor, *, dtype: Any = None, device: Any = None) -> Tensor:
    """Ones of ``t``'s shape, dtype and device (unless given).

    Example:
        >>> em.ones_like(em.tensor([1.5, 2.5])).tolist()
        [1.0, 1.0]
    """
    return _like("ones_like", t, 1, dtype, device)


def full_like(t: Tensor, value: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    """``value`` in ``t``'s shape, dtype and device (unless given).

    Example:
        >>> em.full_like(em.tensor([1, 2]), 9).tolist()
        [9, 9]
    """
    return _like("full_like", t, _scalar_value("full_like", value), dtype, device)


def arange(start: Any, stop: Any = None, step: Any = 1, *, dtype: Any = None,
           device: Any = None) -> Tensor:
    """Values from ``start`` up to (not including) ``stop`` by ``step``.

    ``arange(n)`` is ``arange(0, n)``. The dtype is int64 when every argument
    is an int, else float32. Values are ``start + i * step``, computed in
    float64 for floating dtypes; for integer dtypes the arguments are first
    truncated to ints (as in PyTorch).

    Raises:
        ValueError: a zero step, a non-finite bound, or a step whose sign
            points away from ``stop`` (PyTorch's rule; ``start == stop`` is empty).

    Example:
        >>> em.arange(5).tolist(), em.arange(0, 1, 0.25).tolist()
        ([0, 1, 2, 3, 4], [0.0, 0.25, 0.5, 0.75])
    """
    if stop is None:
        start, stop = 0, start
    start, stop, step = (_scalar_value("arange", v) for v in (start, stop, step))
    if not all(math.isfinite(v) for v in (start, stop, step)):
        raise ValueError(f"arange: bounds and step must be finite, got start={start}, "
                         f"stop={stop}, step={step}")
    all_int = all(isinstance(v, int) for v in (start, stop, step))
    target = resolve_dtype(dtype, _dtype.DEFAULT_INT if all_int else _dtype.DEFAULT_FLOAT)
    if target.kind == "b":
        raise DTypeError("arange: not defined for bool; help: build it as another dtype and "
                         "compare, or use .to(em.bool)")
    if target.kind == "i":
        start, stop, step = int(start), int(stop), int(step)
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    if (stop - start) * step < 0:
        raise ValueError(f"arange: the step's sign points away from stop (start={start}, "
                         f"stop={stop}, step={step}); help: use a step of the other sign")
    if isinstance(start, int) and isinstance(stop, int) and isinstance(step, int):
        length = -((start - stop) // step)  # exact ceil((stop - start) / step)
    else:
        length = math.ceil((stop - start) / step)
    return call("arange", (), (length,), target, (start, step), resolve_device(device))


def linspace(start: Any, stop: Any, num: int, *, dtype: Any = None,
             device: Any = None) -> Tensor:
    """``num`` evenly spaced values from ``start`` to ``stop``, both included.

    ``num=1`` gives ``[start]``; ``num=0`` an empty tensor. float32 by default;
    for an integer dtype the ends are truncated to ints and the values
    computed in float64 are truncated (PyTorch's rule).

    Example:
        >>> em.linspace(0, 1, 5).tolist()
        [0.0, 0.25, 0.5, 0.75, 1.0]
    """
    if isinstance(num, bool) or not hasattr(num, "__index__") or num.__index__() < 0:
        raise ValueError(f"linspace: num must be an int >= 0, got {num!r}")
    start, stop = (_scalar_value("linspace", v) for v in (start, stop))
    target = resolve_dtype(dtype, _dtype.DEFAULT_FLOAT)
    if target.kind == "b":
        raise DTypeError("linspace: not defined for bool (as in PyTorch); help: use a numeric "
                         "dtype and compare, e.g. em.linspace(0, 1, n) > 0.5")
    if target.kind != "f":
        start, stop = int(start), int(stop)  # as PyTorch: the ends truncate first
    return call("linspace", (), (num.__index__(),), target, (float(start), float(stop)),
                resolve_device(device))


def eye(n: int, m: int | None = None, *, dtype: Any = None, device: Any = None) -> Tensor:
    """The identity matrix of ``n`` rows and ``m`` (default ``n``) columns.

    Example:
        >>> em.eye(2).tolist()
        [[1.0, 0.0], [0.0, 1.0]]
    """
    shape = parse_shape("eye", (n, n if m is None else m))
    return call("eye", (), shape, resolve_dtype(dtype, _dtype.DEFAULT_FLOAT), (),
                resolve_device(device))


# ----- random ---------------------------------------------------------------------------

class _RandomState:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seed = int.from_bytes(os.urandom(8), "little")
        self.next_counter = 0

    def next_key(self) -> tuple[int, int]:
        with self.lock:
            counter = self.next_counter
            self.next_counter += 1
            return self.seed, counter


_random = _RandomState()


def manual_seed(seed: int) -> None:
    """Seed every device's random numbers: same seed and call order → same numbers.

    Any int is accepted; like PyTorch, seeds are taken modulo 2**64 (so -1
    and 2**64 - 1 are the same seed).

    Example:
        >>> em.manual_seed(0); a = em.rand(3).tolist()
        >>> em.manual_seed(0); a == em.rand(3).tolist()
        True
    """
    if isinstance(seed, bool) or not hasattr(seed, "__index__"):
        raise TypeError(f"manual_seed: seed must be an int, got {seed!r}")
    with _random.lock:
        _random.seed = seed.__index__() & (2**64 - 1)
        _random.next_counter = 0


def random_state() -> tuple[int, int]:
    """(seed, calls so far): everything that decides the next random numbers (checkpoints)."""
    with _random.lock:
        return _random.seed, _random.next_counter


def set_random_state(state: tuple[int, int]) -> None:
    """Restore what ``random_state`` returned: the same numbers follow."""
    seed, counter = state
    with _random.lock:
        _random.seed = int(seed)
        _random.next_counter = int(counter)


def _float_dtype(op: str, dtype: Any) -> DType:
    target = resolve_dtype(dtype, _dtype.DEFAULT_FLOAT)
    if target.kind != "f":
        raise DTypeError(f"{op}: needs a floating dtype, got {target.name}; help: use "
                         f"em.randint for integers")
    return target


def rand(*shape: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """Uniform random numbers in [0, 1) (never 1, in every float dtype).

    Example:
        >>> x = em.rand(2, 3)
        >>> x.shape, x.dtype, bool(((x >= 0) & (x < 1)).all().item())
        ((2, 3), ember.float32, True)
    """
    return call("rand", (), parse_shape("rand", shape), _float_dtype("rand", dtype),
                _random.next_key(), resolve_device(device))


def randn(*shape: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """Standard normal random numbers (mean 0, standard deviation 1).

    Example:
        >>> em.randn(4, 8, dtype=em.float64).dtype
        ember.float64
    """
    return call("randn", (), parse_shape("randn", shape), _float_dtype("randn", dtype),
                _random.next_key(), resolve_device(device))


def randint(low: int, high: Any = None, shape: Any = None, *, dtype: Any = None,
            device: Any = None) -> Tensor:
    """Uniform random integers in ``[low, high)``; int64 by default.

    ``randint(high, shape)`` (PyTorch's short form) means ``randint(0, high, shape)``.

    Example:
        >>> x = em.randint(0, 10, (100,))
        >>> x.dtype, 0 <= x.min().item() and x.max().item() < 10
        (ember.int64, True)
    """
    if shape is None:
        if high is None or not isinstance(high, (tuple, list, int)):
            raise TypeError("randint: expected randint(low, high, shape) or randint(high, shape)")
        low, high, shape = 0, low, high
    for name, v in (("low", low), ("high", high)):
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            raise TypeError(f"randint: {name} must be an int, got {v!r}")
    low, high = low.__index__(), high.__index__()
    if low >= high:
        raise ValueError(f"randint: needs low < high, got low={low}, high={high}")
    target = resolve_dtype(dtype, _dtype.DEFAULT_INT)
    if target.kind in "ib":
        info = np.iinfo(target.np) if target.kind == "i" else None
        lo, hi = (info.min, info.max) if info is not None else (0, 1)
        if low < lo or high - 1 > hi:
            raise ValueError(f"randint: [{low}, {high}) does not fit in {target.name}")
    elif low < _INT64.min or high - 1 > _INT64.max:
        raise ValueError(f"randint: [{low}, {high}) does not fit in int64")
    shape = _shape_arg("randint", shape)
    return call("randint", (), shape, target, (low, high, *_random.next_key()),
                resolve_device(device))
