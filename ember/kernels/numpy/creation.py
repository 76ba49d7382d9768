"""NumPy kernels that create tensors: fills, ranges, identity, counter-based random numbers."""

from __future__ import annotations

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


def _generator(seed: int, counter: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(key=seed, counter=counter << 64))


# Mantissa digits of the low-precision floats: their uniform numbers are multiples of
# 2**-digits, so rounding never reaches 1.0 (a float32 0.9999 would round to float16 1.0).
_DIGITS = {"float16": 11, "bfloat16": 8}


@kernel("rand")
def _rand(msg, pool):
    seed, counter = msg.attrs
    dtype = NP[msg.dtype]
    generator = _generator(seed, counter)
    if dtype in (np.float32, np.float64):
        return generator.random(msg.shape, dtype=dtype)
    digits = _DIGITS[msg.dtype]
    steps = generator.integers(0, 1 << digits, msg.shape, dtype=np.int32)
    return (steps.astype(np.float32) * np.float32(2.0 ** -digits)).astype(dtype)


@kernel("randn")
def _randn(msg, pool):
    seed, counter = msg.attrs
    dtype = NP[msg.dtype]
    gen_dtype = dtype if dtype in (np.float32, np.float64) else np.float32
    return _generator(seed, counter).standard_normal(msg.shape, dtype=gen_dtype).astype(
        dtype, copy=False)


@kernel("randint")
def _randint(msg, pool):
    low, high, seed, counter = msg.attrs
    return _generator(seed, counter).integers(low, high, msg.shape, dtype=np.int64).astype(
        NP[msg.dtype], copy=False)
