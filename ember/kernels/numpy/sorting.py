"""NumPy kernels of sort, argsort and topk.

All orders come from NumPy's stable sort (radix sort for small integers and
bools, timsort otherwise), so ties are deterministic. NumPy already sorts NaN
last, which is where PyTorch puts its largest value.
"""

from __future__ import annotations

import numpy as np

from ember.dtype import is_bfloat16
from ember.kernels.numpy.table import kernel, namespace

# ml_dtypes' bfloat16 sorts NaN out of place (and slowly); float32 holds every
# bfloat16 exactly and in the same order.
_F32 = np.dtype(np.float32)


def _order(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """Int64 indices that stably sort ``x`` along ``axis`` (``x.ndim >= 1``)."""
    xp = namespace(x)
    keys = x.astype(_F32) if is_bfloat16(x.dtype) else x
    if not descending:
        return xp.argsort(keys, axis=axis, kind="stable").astype(np.int64, copy=False)
    # Descending and stable: a stable ascending sort of the reversed lane, read
    # backwards, lists equal keys by rising index in the original lane (negating
    # the keys instead would break ints' minimum, bools and NaN).
    backwards = xp.argsort(xp.flip(keys, axis), axis=axis, kind="stable")
    return xp.subtract(x.shape[axis] - 1, xp.flip(backwards, axis), dtype=np.int64)


@kernel("sort")
def _sort(msg, pool, x):
    axis, descending = msg.attrs
    xp = namespace(x)
    if x.ndim == 0:
        return x.copy(), xp.zeros((), np.int64)
    order = _order(x, axis, descending)
    return xp.take_along_axis(x, order, axis), order


@kernel("argsort")
def _argsort(msg, pool, x):
    axis, descending = msg.attrs
    if x.ndim == 0:
        return namespace(x).zeros((), np.int64)
    return _order(x, axis, descending)


@kernel("topk")
def _topk(msg, pool, x):
    # A full stable sort, then the first k: O(n log n) where a selection would be
    # O(n), but a partition picks among ties at the k-th value arbitrarily, and
    # the earliest-index rule would then need a second pass over those ties.
    k, axis, largest = msg.attrs
    xp = namespace(x)
    if x.ndim == 0:
        return x.copy(), xp.zeros((), np.int64)
    order = _order(x, axis, largest)
    if k < x.shape[axis]:
        first_k = [slice(None)] * x.ndim
        first_k[axis] = slice(0, k)
        order = order[tuple(first_k)].copy()  # an owned buffer, not a view of the full order
    return xp.take_along_axis(x, order, axis), order
