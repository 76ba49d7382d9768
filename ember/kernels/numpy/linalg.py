"""NumPy kernel of ``matmul``: BLAS through ``np.matmul``, written straight into a pooled buffer.

float16 and bfloat16 compute in float32 and round once on output, as
PyTorch's CPU kernels do (NumPy's float16 matmul has no BLAS path, and
NumPy has no bfloat16 math of its own).
"""

from __future__ import annotations

import numpy as np

from ember.dtype import LOW_PRECISION as _LOW_PRECISION
from ember.kernels.numpy import blas_threads
from ember.kernels.numpy.table import NP, kernel, namespace
from ember.precision import read_matmul_attrs

_F32 = np.dtype(np.float32)


def _product(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    xp = namespace(a)
    if a.ndim > 2 and b.ndim == 2:
        # (..., m, k) @ (k, n) as one (M, k) @ (k, n) GEMM: NumPy's stacked loop runs a
        # small GEMM per leading index, up to ~40x slower with a transposed rhs.
        flat = a.reshape(-1, a.shape[-1])
        blas_threads.matmul(xp, flat, b, out=out.reshape(-1, out.shape[-1]))
        return out
    return blas_threads.matmul(xp, a, b, out=out)


def read_operands(msg, a, b) -> tuple:
    """``a`` and ``b`` as a matmul message reads them: transposed views where its attrs
    say (NumPy's and CuPy's arrays alike), and its float32 precision."""
    precision, transpose_a, transpose_b = read_matmul_attrs(msg.attrs)
    if transpose_a:
        a = a.swapaxes(-1, -2)
    if transpose_b:
        b = b.swapaxes(-1, -2)
    return a, b, precision


@kernel("matmul")
def _matmul(msg, pool, a, b):
    a, b, _ = read_operands(msg, a, b)
    out_dtype = NP[msg.dtype]
    if out_dtype in _LOW_PRECISION:
        product = _product(a.astype(_F32), b.astype(_F32), namespace(a).empty(msg.shape, _F32))
        return product.astype(out_dtype)
    if a.dtype != out_dtype:
        a = a.astype(out_dtype)
    if b.dtype != out_dtype:
        b = b.astype(out_dtype)
    return _product(a, b, pool.empty(msg.shape, out_dtype))


# ----- decompositions and solves (float32 / float64; batched over leading dims) ----------
#
# Written against the array module of the input, so the CUDA table runs them on CuPy
# (cuSOLVER) unchanged. A singular or non-positive-definite matrix raises LinAlgError on
# the worker, which the read reports as a KernelError naming the op.


def _typed(msg_dtype: str, *arrays):
    out = NP[msg_dtype]
    return tuple(a.astype(out, copy=False) for a in arrays)


@kernel("linalg_inv")
def _inv(msg, pool, a):
    return _typed(msg.dtype, namespace(a).linalg.inv(a))[0]


@kernel("linalg_solve")
def _solve(msg, pool, a, b):
    return _typed(msg.dtype, namespace(a).linalg.solve(a, b))[0]


@kernel("linalg_det")
def _det(msg, pool, a):
    xp = namespace(a)
    if a.shape[-1] == 0:  # the empty product
        return xp.ones(a.shape[:-2], NP[msg.dtype])
    return xp.asarray(_typed(msg.dtype, xp.linalg.det(a))[0])


@kernel("linalg_cholesky")
def _cholesky(msg, pool, a):
    return _typed(msg.dtype, namespace(a).linalg.cholesky(a))[0]


@kernel("linalg_qr")
def _qr(msg, pool, a):
    q, r = namespace(a).linalg.qr(a, mode="reduced")
    return _typed(msg.dtypes[0], q, r)


@kernel("linalg_svd")
def _svd(msg, pool, a):
    (full_matrices,) = msg.attrs
    u, s, vh = namespace(a).linalg.svd(a, full_matrices=full_matrices)
    return _typed(msg.dtypes[0], u, s, vh)


@kernel("linalg_eigh")
def _eigh(msg, pool, a):
    values, vectors = namespace(a).linalg.eigh(a, UPLO="L")
    return _typed(msg.dtypes[0], values, vectors)
