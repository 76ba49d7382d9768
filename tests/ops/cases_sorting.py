"""Sorting op cases: sort, argsort, topk.

The reference orders each lane with Python's ``sorted`` on ``(is_nan, value)``
keys: stable in both directions (``reverse=True`` keeps equal keys in their
original order, as ``torch.sort(stable=True, descending=True)`` does) and NaN
above every number, as in PyTorch. Inputs are drawn from a few integers so
that ties are common.
"""

from __future__ import annotations

import math

import numpy as np

from tests.ops.cases_reduction import ALL_DTYPES, data, with_nans
from tests.ops.grad_harness import GradCase
from tests.ops.harness import FLOAT_DTYPES, NP_DTYPES, SHAPES, Case

CASES: list[Case] = []


def _name(a: np.ndarray) -> str:
    return next(name for name, npd in NP_DTYPES.items() if np.dtype(npd) == a.dtype)


def tied(shape: tuple[int, ...], dtype: str, salt: str) -> np.ndarray:
    """Values from {-2, ..., 2} (False / True for bool): many ties, in any dtype."""
    if dtype == "bool":
        return data(shape, "bool", salt)
    return data(shape, "int64", salt).astype(NP_DTYPES[dtype])


def stable_order(a: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    if a.ndim == 0:
        return np.zeros((), np.int64)
    lanes = np.moveaxis(a, axis, -1)
    n = lanes.shape[-1]
    flat = lanes.reshape(math.prod(lanes.shape[:-1]), n)
    if flat.dtype.kind == "f" or flat.dtype.name == "bfloat16":
        flat = flat.astype(np.float64)
    order = np.empty(flat.shape, np.int64)
    for row, lane in enumerate(flat.tolist()):
        keys = [(True, 0.0) if v != v else (False, v) for v in lane]
        order[row] = sorted(range(n), key=keys.__getitem__, reverse=descending)
    return np.moveaxis(order.reshape(lanes.shape), -1, axis)


def sort_ref(dim: int, descending: bool):
    def ref(a: np.ndarray):
        order = stable_order(a, dim, descending)
        values = a.copy() if a.ndim == 0 else np.take_along_axis(a, order, dim)
        return values, order

    return ref


def topk_ref(k: int, dim: int, largest: bool):
    def ref(a: np.ndarray):
        values, order = sort_ref(dim, largest)(a)
        if a.ndim == 0:
            return values, order
        keep = [slice(None)] * a.ndim
        keep[dim] = slice(0, k)
        return values[tuple(keep)], order[tuple(keep)]

    return ref


def add_sort(a: np.ndarray, dim: int, descending: bool, label: str) -> None:
    # Indices are compared exactly, which pins the values; values go through the
    # harness's NaN-aware float comparison (its exact one takes bfloat16 NaNs as unequal).
    dtype = _name(a)
    tail = f"{label}/{a.shape}/dim={dim}/descending={descending}/{dtype}"
    CASES.append(Case(f"sort/{tail}", lambda x: x.sort(dim, descending),
                      sort_ref(dim, descending), [a], dtype=(dtype, "int64")))
    CASES.append(Case(f"argsort/{tail}", lambda x: x.argsort(dim, descending),
                      lambda x: sort_ref(dim, descending)(x)[1], [a], dtype="int64"))


def add_topk(a: np.ndarray, k: int, dim: int, largest: bool, label: str,
             sorted: bool = True) -> None:
    dtype = _name(a)
    unsorted = "" if sorted else "/sorted=False"
    CASES.append(Case(f"topk/{label}/{a.shape}/k={k}/dim={dim}/largest={largest}{unsorted}/{dtype}",
                      lambda x: x.topk(k, dim, largest, sorted), topk_ref(k, dim, largest), [a],
                      dtype=(dtype, "int64")))


def _dims(ndim: int) -> list[int]:
    return sorted({*range(ndim), -1}) if ndim else [0, -1]


# Every shape x dim x direction, float32 with ties.
for _shape in SHAPES:
    for _dim in _dims(len(_shape)):
        for _descending in (False, True):
            add_sort(tied(_shape, "float32", "sort"), _dim, _descending, "dims")
            _size = _shape[_dim] if _shape else 1
            for _k in sorted({0, 1, _size} & set(range(_size + 1))):
                add_topk(tied(_shape, "float32", "topk"), _k, _dim, _descending, "dims")

# Every dtype, ties everywhere.
for _dtype in ALL_DTYPES:
    for _shape, _dim in [((), 0), ((7,), 0), ((3, 6), -1), ((3, 6), 0), ((2, 0, 3), 2)]:
        for _descending in (False, True):
            add_sort(tied(_shape, _dtype, "dtypes"), _dim, _descending, "dtypes")
            _k = min(2, _shape[_dim]) if _shape else 1
            add_topk(tied(_shape, _dtype, "dtypes"), _k, _dim, _descending, "dtypes")

# Distinct random values (no ties), including the extremes of each integer type.
for _dtype in ALL_DTYPES[:-1]:
    _a = data((4, 9), _dtype, "random", low=-100, high=100)
    if _dtype in ("int32", "int64"):
        _info = np.iinfo(NP_DTYPES[_dtype])
        _a[0, :2] = _info.min, _info.max
    for _descending in (False, True):
        add_sort(_a, -1, _descending, "random")
        add_topk(_a, 3, 1, _descending, "random")

# NaN: the largest value, first when descending, ties among NaNs by index.
for _dtype in FLOAT_DTYPES:
    _a = with_nans(tied((4, 8), _dtype, "nan"), f"sort-nan/{_dtype}")
    _a[0, 3] = np.inf
    _a[1, 5] = -np.inf
    for _descending in (False, True):
        for _dim in (1, 0):
            add_sort(_a, _dim, _descending, "nan")
            add_topk(_a, 3, _dim, _descending, "nan")

# sorted=False is accepted and returns the same (sorted) order.
add_topk(tied((3, 6), "float32", "unsorted"), 4, -1, True, "unsorted", sorted=False)
add_topk(tied((3, 6), "int64", "unsorted"), 2, 0, False, "unsorted", sorted=False)


# ----- gradients --------------------------------------------------------------------------
# The values' gradient scatters back through the indices. Random float64 inputs have no
# ties, so sort and topk are smooth there (ties are checked against torch only, in
# test_reduction_grad_ties.py). torch's twin is its stable sort; topk's is torch.topk.

GRAD_CASES: list[GradCase] = []


def _grad_input(shape: tuple[int, ...], salt: str) -> np.ndarray:
    return data(shape, "float64", f"grad/{salt}")


def torch_sort(x, dim: int, descending: bool):
    import torch

    return torch.sort(x, dim=dim, descending=descending, stable=True)[0]


def add_sort_grad(a: np.ndarray, dim: int, descending: bool, label: str) -> None:
    GRAD_CASES.append(GradCase(f"sort/{label}/{a.shape}/dim={dim}/descending={descending}",
                               lambda x: x.sort(dim, descending)[0], [a],
                               torch_fn=lambda x: torch_sort(x, dim, descending)))


def add_topk_grad(a: np.ndarray, k: int, dim: int, largest: bool, label: str) -> None:
    GRAD_CASES.append(GradCase(f"topk/{label}/{a.shape}/k={k}/dim={dim}/largest={largest}",
                               lambda x: x.topk(k, dim, largest)[0], [a],
                               torch_fn=lambda x: x.topk(k, dim, largest)[0]))


for _shape in [(5,), (3, 4), (2, 3, 4), (), (1,), (1, 3, 1), (2, 0, 3)]:
    for _dim in _dims(len(_shape)):
        for _descending in (False, True):
            add_sort_grad(_grad_input(_shape, "sort"), _dim, _descending, "dims")
            _size = _shape[_dim] if _shape else 1
            for _k in sorted({0, 1, 2, _size} & set(range(_size + 1))):
                add_topk_grad(_grad_input(_shape, "topk"), _k, _dim, _descending, "dims")

# Both outputs of one sort, the values used twice, and a memory-bound op before the sort
# (recomputed under "balanced" checkpointing).
_S = _grad_input((3, 4), "compose")
GRAD_CASES.append(GradCase(
    "sort/compose/values-twice",
    lambda x: x.sort(1)[0] * x.sort(1, True)[0] + x.topk(2, 0)[0].sum(), [_S],
    torch_fn=lambda x: x.sort(1)[0] * torch_sort(x, 1, True) + x.topk(2, 0)[0].sum()))
GRAD_CASES.append(GradCase(
    "topk/compose/squared", lambda x: (x * x).topk(3, 1, False)[0] * 2.0,
    [_S], torch_fn=lambda x: (x * x).topk(3, 1, False)[0] * 2.0))
