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
    if dtype.kind in "iu" and isinstance(start, int) and isinstance(step, int):
        return np.arange(start, start + step * n, step, dtype=dtype)[:n]
    return (start + step * np.arange(n, dtype=np.float64)).astype(dtype)


@kernel("linspace")
def _linspace(msg, pool):
    start, stop = msg.attrs
    return np.linspace(start, stop, msg.shape[0], dtype=np.float64).astype(NP[msg.dtype])


@kernel("eye")
def _eye(msg, pool):
    return np.eye(*msg.shape, dtype=NP[msg.dtype])


def _generator(seed: int, counter: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(key=seed, counter=counter << 64))


@kernel("rand")
def _rand(msg, pool):
    seed, counter = msg.attrs
    dtype = NP[msg.dtype]
    gen_dtype = dtype if dtype in (np.float32, np.float64) else np.float32
    return _generator(seed, counter).random(msg.shape, dtype=gen_dtype).astype(dtype, copy=False)


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
