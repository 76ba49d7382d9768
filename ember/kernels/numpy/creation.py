"""NumPy kernels that create tensors: fills, ranges, identity, counter-based random numbers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.kernels.numpy.table import NP, kernel


@kernel("full")
def _full(msg, pool):
    out = pool.empty(msg.shape, NP[msg.dtype])
    out.fill(msg.attrs[0])
    return out


@kernel("arange")
def _arange(msg, pool):
    start, step = msg.attrs
    n = msg.shape[0]
    dtype = NP[msg.dtype]
    xp = pool.xp
    if dtype.kind in "iu" and isinstance(start, int) and isinstance(step, int):
        return xp.arange(start, start + step * n, step, dtype=dtype)[:n]
    return (start + step * xp.arange(n, dtype=np.float64)).astype(dtype)


@kernel("linspace")
def _linspace(msg, pool):
    # PyTorch's two halves: the first counts up from start, the second down from stop,
    # so both ends are exact. Computed in float64, rounded once (integers truncate).
    start, stop = msg.attrs
    num = msg.shape[0]
    xp = pool.xp
    if num == 1:
        return xp.full(1, start, np.float64).astype(NP[msg.dtype])
    step = (stop - start) / max(num - 1, 1)
    index = xp.arange(num, dtype=np.float64)
    half = num // 2
    values = xp.empty(num, np.float64)
    values[:half] = start + step * index[:half]
    values[half:] = stop - step * (num - 1 - index[half:])
    return values.astype(NP[msg.dtype])


@kernel("eye")
def _eye(msg, pool):
    return pool.xp.eye(*msg.shape, dtype=NP[msg.dtype])


class NumpyRandom:
    """The random numbers of one op: a Philox stream keyed by the op's (seed, counter), so
    the same call gives the same numbers whatever ran before it. The random kernels
    below draw through this interface; the CUDA backend passes its own (cuRAND)."""

    def __init__(self, seed: int, counter: int) -> None:
        self.generator = np.random.Generator(np.random.Philox(key=seed, counter=counter << 64))

    def uniform(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        return self.generator.random(shape, dtype=dtype)

    def integers(self, low: int, high: int, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        return self.generator.integers(low, high, shape, dtype=dtype)

    def normal(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        return self.generator.standard_normal(shape, dtype=dtype)


# Mantissa digits of the low-precision floats: their uniform numbers are multiples of
# 2**-digits, so rounding never reaches 1.0 (a float32 0.9999 would round to float16 1.0).
_DIGITS = {"float16": 11, "bfloat16": 8}


def _rand(msg: Any, source: Any) -> Any:
    dtype = NP[msg.dtype]
    if dtype in (np.float32, np.float64):
        return source.uniform(msg.shape, dtype)
    digits = _DIGITS[msg.dtype]
    steps = source.integers(0, 1 << digits, msg.shape, np.int32)
    return (steps.astype(np.float32) * np.float32(2.0 ** -digits)).astype(dtype)


def _randn(msg: Any, source: Any) -> Any:
    dtype = NP[msg.dtype]
    drawn = dtype if dtype in (np.float32, np.float64) else np.float32
    return source.normal(msg.shape, drawn).astype(dtype, copy=False)


def _randint(msg: Any, source: Any) -> Any:
    low, high = msg.attrs[:2]
    return source.integers(low, high, msg.shape, np.int64).astype(NP[msg.dtype], copy=False)


def register_random(register: Callable, source: Callable[[int, int], Any]) -> None:
    """Register rand, randn and randint with ``register`` (a backend's kernel decorator),
    drawing from ``source(seed, counter)``, the last two of each op's attrs."""
    for name, draw in (("rand", _rand), ("randn", _randn), ("randint", _randint)):
        register(name)(lambda msg, pool, draw=draw: draw(msg, source(*msg.attrs[-2:])))


register_random(kernel, NumpyRandom)
