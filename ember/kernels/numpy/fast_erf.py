"""A vectorized float32 erf: ~4× faster than SciPy's, which evaluates element by element.

float32: erf(x) = x · P(x²) / Q(x²) on x clamped to [-4, 4] (erf(±4) rounds to ±1
in float32), P and Q of degree 5, fitted here by weighted least squares with
Lawson's iterations for the smallest maximum relative error of erf(x)/x. Evaluated
in float32 the result is within 7 ulp of the exact erf (max relative error 4.6e-7,
checked on a dense grid in tests/ops/test_fast_erf.py). It runs in blocks of the
fused executor's chunk size, so each Horner step reads and writes cached memory.

float64 (and every other dtype) keeps SciPy's correctly rounded erf.
"""

from __future__ import annotations

import numpy as np

from ember.kernels.numpy import lazy_scipy

_F32 = np.dtype(np.float32)
_CLAMP = np.float32(4.0)
# Coefficients of P and Q, lowest degree first (Q(0) = 1).
_P = tuple(np.float32(c) for c in (
    1.1283791393563545, 0.1935436584738836, 0.053101510056072734, 0.0038832688799546266,
    0.00028456187501204114, 1.9867639519388636e-06))
_Q = tuple(np.float32(c) for c in (
    1.0, 0.5048561575591719, 0.1153493745033122, 0.01520710382458313,
    0.0011855484611980119, 3.741977011079839e-05))
# Elements per block: the fused executor's chunk size, so a chunk is one block (each of
# the ~25 NumPy calls per block costs about 1 µs of dispatch; measured on custom_gelu).
_BLOCK = 1 << 16


def erf(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out[...] = erf(x)``; ``out`` has ``x``'s shape and dtype."""
    if x.dtype != _F32:
        return lazy_scipy.special().erf(x, out=out)
    if not out.flags.c_contiguous:
        np.copyto(out, erf(x, np.empty(out.shape, _F32)))
        return out
    flat_x, flat_out = x.reshape(-1), out.reshape(-1)
    size = flat_x.size
    scratch = np.empty((3, min(size, _BLOCK)), _F32)
    for start in range(0, size, _BLOCK):
        stop = min(start + _BLOCK, size)
        _erf_block(flat_x[start:stop], flat_out[start:stop], *scratch[:, :stop - start])
    return out


def _erf_block(x: np.ndarray, out: np.ndarray, t: np.ndarray, p: np.ndarray,
               q: np.ndarray) -> None:
    clamped = out  # out holds the clamped x until the last step
    np.clip(x, -_CLAMP, _CLAMP, out=clamped)
    np.multiply(clamped, clamped, out=t)
    _horner(_P, t, p)
    _horner(_Q, t, q)
    p *= clamped
    np.divide(p, q, out=out)
    np.clip(out, -1.0, 1.0, out=out)


def _horner(coefficients: tuple, t: np.ndarray, acc: np.ndarray) -> np.ndarray:
    np.multiply(t, coefficients[-1], out=acc)
    for c in coefficients[-2:0:-1]:
        acc += c
        acc *= t
    acc += coefficients[0]
    return acc
