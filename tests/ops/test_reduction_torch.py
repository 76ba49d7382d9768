"""Reductions and sorting cross-checked against PyTorch itself, on a sample of calls.

The case tables (``cases_reduction.py``, ``cases_sorting.py``) use NumPy
references written to PyTorch's semantics; this file checks that reading of
the semantics against torch: dtypes, shapes, NaN, ties, empty inputs.
"""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

import ember as em
from tests.ops.cases_reduction import data, op_input, with_nans
from tests.ops.cases_sorting import tied
from tests.ops.harness import TOLERANCE

torch = pytest.importorskip("torch")

DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "bool")


def to_torch(a: np.ndarray):
    if a.dtype == ml_dtypes.bfloat16:  # torch.from_numpy knows no ml_dtypes; float32 is exact
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(a.copy())


def from_torch(t) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(ml_dtypes.bfloat16)
    return t.numpy()


def assert_matches(got: em.Tensor, want, what: str, atol: float | None = None) -> None:
    want = from_torch(want)
    assert got.dtype.name == str(want.dtype), (
        f"{what}: dtype {got.dtype.name} vs torch {want.dtype}")
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs torch {want.shape}"
    g = got.numpy()
    if got.dtype.is_floating_point:
        rtol, default_atol = TOLERANCE[got.dtype.name]
        np.testing.assert_allclose(g.astype(np.float64), want.astype(np.float64), rtol=rtol,
                                   atol=default_atol if atol is None else atol, equal_nan=True,
                                   err_msg=what)
    else:
        np.testing.assert_array_equal(g, want, err_msg=what)


def _torch_dims(dim, ndim: int):
    """torch spells "every dim" as an explicit tuple for amax / logsumexp."""
    return tuple(range(ndim)) if dim is None else dim


TORCH_REDUCTIONS = {
    "sum": lambda t, dim, keepdim: torch.sum(t, dim=_torch_dims(dim, t.ndim), keepdim=keepdim),
    "mean": lambda t, dim, keepdim: torch.mean(t, dim=_torch_dims(dim, t.ndim), keepdim=keepdim),
    "max": lambda t, dim, keepdim: torch.amax(t, dim=_torch_dims(dim, t.ndim), keepdim=keepdim),
    "min": lambda t, dim, keepdim: torch.amin(t, dim=_torch_dims(dim, t.ndim), keepdim=keepdim),
    "any": lambda t, dim, keepdim: torch.any(t, dim=_torch_dims(dim, t.ndim), keepdim=keepdim),
    "all": lambda t, dim, keepdim: torch.all(t, dim=_torch_dims(dim, t.ndim), keepdim=keepdim),
    "logsumexp": lambda t, dim, keepdim: torch.logsumexp(t, dim=_torch_dims(dim, t.ndim),
                                                         keepdim=keepdim),
    "var": lambda t, dim, keepdim: torch.var(t, dim=dim, keepdim=keepdim),
    "std": lambda t, dim, keepdim: torch.std(t, dim=dim, keepdim=keepdim),
    # torch.prod takes one int dim, or none at all (then no keepdim either).
    "prod": lambda t, dim, keepdim: (torch.prod(t) if dim is None
                                     else torch.prod(t, dim=dim, keepdim=keepdim)),
    "argmax": lambda t, dim, keepdim: torch.argmax(t, dim=dim, keepdim=keepdim),
    "argmin": lambda t, dim, keepdim: torch.argmin(t, dim=dim, keepdim=keepdim),
}
FLOAT_ONLY = ("mean", "var", "std")

# (shape, dim, keepdim): dims torch accepts for every op listed above (prod: one int).
SAMPLES = [((3, 5), None, False), ((3, 5), 1, True), ((3, 5), -2, False), ((2, 3, 4), 0, False),
           ((2, 3, 4), (0, 2), True), ((2, 0, 3), 0, False), ((1,), 0, True)]


def _cases():
    for op in TORCH_REDUCTIONS:
        for dtype in DTYPES:
            if op in FLOAT_ONLY and dtype in ("int32", "int64", "bool"):
                continue
            if op in ("argmax", "argmin") and dtype == "bool":
                continue  # torch has no argmax of bool; ember's is checked in the case table
            for shape, dim, keepdim in SAMPLES:
                if isinstance(dim, tuple) and op in ("prod", "argmax", "argmin"):
                    continue
                if op in ("max", "min", "argmax", "argmin") and dim in (None, 1, (0, 2)) \
                        and 0 in shape:
                    continue
                if op == "prod" and dim is None and keepdim:
                    continue
                yield pytest.param(op, dtype, shape, dim, keepdim,
                                   id=f"{op}-{dtype}-{shape}-{dim}-{keepdim}")


@pytest.mark.filterwarnings("ignore:.*degrees of freedom:UserWarning")  # torch's, for var of 1
@pytest.mark.parametrize(("op", "dtype", "shape", "dim", "keepdim"), list(_cases()))
def test_reduction_matches_torch(op, dtype, shape, dim, keepdim):
    a = op_input(op, shape, dtype)
    if dtype in ("float32", "float64", "float16", "bfloat16") and a.size > 4:
        a = with_nans(a, f"torch/{op}/{dtype}") if op not in ("var", "std") else a
    x = em.tensor(a)
    got = getattr(x, op)(dim=dim, keepdim=keepdim)
    assert_matches(got, TORCH_REDUCTIONS[op](to_torch(a), dim, keepdim), f"{op} {dtype} {shape}",
                   atol=1e-5 if dtype == "float32" else None)


@pytest.mark.parametrize("correction", [0, 1, 2, 5, 6, 1.5])
@pytest.mark.parametrize("op", ["var", "std"])
def test_var_corrections_match_torch(op, correction):
    a = data((3, 5), "float64", "torch-var")
    a[1] = 2.0  # a constant row: 0 / 0 once the correction reaches the count
    got = getattr(em.tensor(a), op)(dim=1, correction=correction)
    with warnings.catch_warnings():  # torch warns when the correction reaches the count
        warnings.simplefilter("ignore", UserWarning)
        want = getattr(torch, op)(to_torch(a), dim=1, correction=correction)
    assert_matches(got, want, f"{op} correction={correction}")


def test_logsumexp_extremes_match_torch():
    a = np.array([[1000.0, 1001.0, 999.0], [-np.inf, -np.inf, -np.inf], [np.inf, 1.0, -np.inf],
                  [np.nan, 1.0, 2.0], [-1e30, -1e30, 0.0]], np.float32)
    assert_matches(em.tensor(a).logsumexp(1), torch.logsumexp(to_torch(a), 1), "logsumexp")
    ints = np.array([[1, 2, 3], [100, 100, 100]], np.int32)
    assert_matches(em.tensor(ints).logsumexp(1), torch.logsumexp(to_torch(ints), 1),
                   "logsumexp of int32")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumsum_matches_torch(dtype, dim):
    a = data((4, 6), dtype, "torch-cumsum")
    assert_matches(em.tensor(a).cumsum(dim), torch.cumsum(to_torch(a), dim), f"cumsum {dtype}",
                   atol=1e-5 if dtype == "float32" else None)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dim", [0, 1])
def test_sort_matches_stable_torch_sort(dtype, descending, dim):
    a = tied((5, 9), dtype, "torch-sort")
    if dtype in ("float32", "float64", "float16", "bfloat16"):
        a = with_nans(a, f"torch-sort/{dtype}")
    values, indices = em.tensor(a).sort(dim, descending)
    want = torch.sort(to_torch(a), dim=dim, descending=descending, stable=True)
    assert_matches(indices, want.indices, "sort indices")
    assert_matches(values, want.values, "sort values")
    assert_matches(em.tensor(a).argsort(dim, descending), want.indices, "argsort")


@pytest.mark.parametrize("dtype", DTYPES[:-1])  # torch has no topk of bool on the CPU
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("k", [0, 1, 4, 9])
def test_topk_values_match_torch(dtype, largest, k):
    # Distinct values (a permutation per row): torch does not promise which of
    # tied values topk picks, so ties are left to the case table.
    a = (np.argsort(data((3, 9), "float64", "torch-topk"), axis=1) - 4).astype(np.float64)
    if dtype not in ("int32", "int64"):
        a[0, 3] = np.nan
    a = a.astype(em.dtype.as_dtype(dtype).np)
    values, indices = em.tensor(a).topk(k, largest=largest)
    want = torch.topk(to_torch(a), k, largest=largest)
    assert_matches(values, want.values, f"topk values {dtype}")
    picked = np.take_along_axis(a, indices.numpy(), 1)
    np.testing.assert_array_equal(picked.astype(np.float64), values.numpy().astype(np.float64))
