"""Reduction op cases: sum mean prod max min var std any all logsumexp argmax argmin cumsum.

References are NumPy written to PyTorch's semantics: float results are
computed in float64 and rounded once to the output dtype; sums and products
of bool / integers are int64; mean/var/std of nothing are nan; an empty dim
tuple means every dim except for any/all. Calls that PyTorch rejects (max
over an empty dim, mean of ints ...) are in ``test_reduction_errors.py``.
"""

from __future__ import annotations

import math
import warnings
import zlib

import numpy as np

from tests.ops.grad_harness import GradCase
from tests.ops.harness import FLOAT_DTYPES, NP_DTYPES, SHAPES, Case, rng

ALL_DTYPES = (*FLOAT_DTYPES, "int32", "int64", "bool")

# Float32 results that accumulate many rounded terms: the float64 reference
# differs by a few ulps of the largest partial sum, not of the (maybe tiny) result.
ACCUMULATED_ATOL = {"float32": 1e-5}

# Dim variants per ndim: None, each sign of int, tuples (unsorted, negative), and ().
DIMS = {
    0: [None, 0, -1],
    1: [None, 0, -1, (0,)],
    2: [None, 0, 1, -1, (0, 1), (-1, 0), ()],
    3: [None, 0, -2, 2, (0, 2), (1, -1), (0, 1, 2), ()],
}

REDUCTIONS = ("sum", "mean", "prod", "max", "min", "any", "all", "logsumexp", "var", "std")
ARG_REDUCTIONS = ("argmax", "argmin")
FLOAT_ONLY = ("mean", "var", "std")
NEED_ELEMENTS = ("max", "min", "argmax", "argmin")


# ----- inputs -----------------------------------------------------------------------------


def data(shape: tuple[int, ...], dtype: str, salt: str, low: float = -2.0,
         high: float = 2.0) -> np.ndarray:
    """A random array that depends only on its arguments (crc32, not the salted str hash)."""
    g = rng(zlib.crc32(f"{shape}/{dtype}/{salt}".encode()) % 100_000)
    if dtype == "bool":
        return np.asarray(g.random(shape) < 0.5)  # a 0-d array, not a NumPy bool
    if dtype in ("int32", "int64"):
        return g.integers(int(low), int(high) + 1, shape).astype(NP_DTYPES[dtype])
    return g.uniform(low, high, shape).astype(NP_DTYPES[dtype])


def op_input(op: str, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """``data``, with zeros mixed in for any / all (random floats are never 0)."""
    a = data(shape, dtype, op)
    if op in ("any", "all") and dtype != "bool":
        a[rng(len(shape)).random(shape) < 0.3] = 0
    return a


def with_nans(a: np.ndarray, salt: str) -> np.ndarray:
    """``a`` with about a quarter of its elements NaN (at least one, if it has any)."""
    a = a.copy()
    mask = rng(zlib.crc32(salt.encode()) % 100_000).random(a.shape) < 0.25
    if a.size:
        mask.reshape(-1)[0] = True
    a[mask] = np.nan
    return a


# ----- references: NumPy, with PyTorch's semantics ----------------------------------------


def out_dtype(op: str, dtype: str) -> str:
    if op in ("any", "all"):
        return "bool"
    if op in ("argmax", "argmin"):
        return "int64"
    if dtype in FLOAT_DTYPES:
        return dtype
    if op in ("sum", "prod", "cumsum"):
        return "int64"
    if op == "logsumexp":
        return "float32"
    return dtype  # max / min keep bools and integers


def numpy_axis(op: str, dim, ndim: int):
    """``dim`` as a NumPy ``axis``: PyTorch's empty-tuple rule, and 0-d tensors' dim 0."""
    if ndim == 0:
        return None if op in ARG_REDUCTIONS else ()
    if isinstance(dim, list):
        dim = tuple(dim)
    if dim == () and op not in ("any", "all"):
        return None
    return dim


def _quiet(fn):
    """Run ``fn`` without NumPy's warnings about nan, inf and empty slices: they are the point."""
    def run(*args):
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            return fn(*args)

    return run


def reduction_ref(op: str, dim, keepdim: bool, correction: float = 1):
    @_quiet
    def ref(a: np.ndarray) -> np.ndarray:
        axis = numpy_axis(op, dim, a.ndim)
        result_dtype = NP_DTYPES[out_dtype(op, _name(a))]
        exact = a.dtype.kind in "bi"
        keeps_integers = exact and op not in ("mean", "logsumexp", "var", "std")
        wide = a if keeps_integers else a.astype(np.float64)
        if op == "sum":
            r = np.sum(wide, axis=axis, keepdims=keepdim, dtype=np.int64 if exact else None)
        elif op == "prod":
            r = np.prod(wide, axis=axis, keepdims=keepdim, dtype=np.int64 if exact else None)
        elif op == "mean":
            r = np.mean(wide, axis=axis, keepdims=keepdim)
        elif op in ("max", "min"):
            r = (np.max if op == "max" else np.min)(wide, axis=axis, keepdims=keepdim)
        elif op in ("any", "all"):
            r = (np.any if op == "any" else np.all)(wide, axis=axis, keepdims=keepdim)
        elif op == "logsumexp":
            # Pairwise log(e^a + e^b): stable at every step, and -inf for no elements.
            r = np.logaddexp.reduce(wide, axis=axis, keepdims=keepdim)
        elif op in ("var", "std"):
            r = (np.var if op == "var" else np.std)(wide, axis=axis, ddof=correction,
                                                     keepdims=keepdim)
        else:
            r = (np.argmax if op == "argmax" else np.argmin)(wide, axis=axis, keepdims=keepdim)
        return np.asarray(r).astype(result_dtype)

    return ref


def reduction_fn(op: str, dim, keepdim: bool, correction: float = 1):
    if op in ("var", "std"):
        return lambda x: getattr(x, op)(dim=dim, keepdim=keepdim, correction=correction)
    return lambda x: getattr(x, op)(dim=dim, keepdim=keepdim)


@_quiet
def cumsum_ref(a: np.ndarray, dim: int) -> np.ndarray:
    result_dtype = NP_DTYPES[out_dtype("cumsum", _name(a))]
    flat = a.reshape(1) if a.ndim == 0 else a
    if a.dtype.kind in "bi":
        r = np.cumsum(flat, axis=dim, dtype=np.int64)
    else:
        r = np.cumsum(flat.astype(np.float64), axis=dim)
    return r.reshape(a.shape).astype(result_dtype)


def _name(a: np.ndarray) -> str:
    return next(name for name, npd in NP_DTYPES.items() if np.dtype(npd) == a.dtype)


def reduced_is_empty(shape: tuple[int, ...], dim) -> bool:
    if not shape:
        return False
    if dim is None or dim == ():
        return math.prod(shape) == 0
    dims = dim if isinstance(dim, tuple) else (dim,)
    return any(shape[d] == 0 for d in dims)


# ----- cases ------------------------------------------------------------------------------

CASES: list[Case] = []


def add(op: str, a: np.ndarray, dim, keepdim: bool, label: str, correction: float = 1,
        atol: float | None = None) -> None:
    dtype = _name(a)
    accumulates = op in ("sum", "mean", "var", "std", "logsumexp", "cumsum")
    if atol is None and accumulates:
        atol = ACCUMULATED_ATOL.get(out_dtype(op, dtype))
    extra = f"/correction={correction}" if op in ("var", "std") and correction != 1 else ""
    CASES.append(Case(
        f"{op}/{label}/{a.shape}/dim={dim}/keepdim={keepdim}{extra}/{dtype}",
        reduction_fn(op, dim, keepdim, correction), reduction_ref(op, dim, keepdim, correction),
        [a], dtype=out_dtype(op, dtype), atol=atol))


def _arg_dims(ndim: int) -> list:
    return [d for d in DIMS[ndim] if not isinstance(d, tuple)]


# Every op x shape x dim variant x keepdim, in float32.
for _shape in SHAPES:
    for _keepdim in (False, True):
        for _op in REDUCTIONS:
            for _dim in DIMS[len(_shape)]:
                if _op in NEED_ELEMENTS and reduced_is_empty(_shape, _dim):
                    continue
                add(_op, op_input(_op, _shape, "float32"), _dim, _keepdim, "dims")
        for _op in ARG_REDUCTIONS:
            for _dim in _arg_dims(len(_shape)):
                if not reduced_is_empty(_shape, _dim):
                    add(_op, op_input(_op, _shape, "float32"), _dim, _keepdim, "dims")

# Every op x dtype, on a handful of shapes and dims.
_DTYPE_SWEEP = [((), None, False), ((5,), 0, True), ((3, 4), -1, False), ((2, 3, 4), (0, 2), True),
                ((2, 0, 3), 1, False), ((2, 0, 3), 0, True), ((1, 3, 1), None, True)]
for _dtype in ALL_DTYPES:
    for _op in REDUCTIONS + ARG_REDUCTIONS:
        if _op in FLOAT_ONLY and _dtype not in FLOAT_DTYPES:
            continue
        for _shape, _dim, _keepdim in _DTYPE_SWEEP:
            if _op in ARG_REDUCTIONS and isinstance(_dim, tuple):
                _dim = _dim[0]
            if _op in NEED_ELEMENTS and reduced_is_empty(_shape, _dim):
                continue
            add(_op, op_input(_op, _shape, _dtype), _dim, _keepdim, "dtypes")

# NaN propagates (sum ... logsumexp, max/min), is the first arg-extreme, and is true.
for _dtype in FLOAT_DTYPES:
    _a = with_nans(data((4, 6), _dtype, "nan"), f"nan/{_dtype}")
    _a[1] = data((6,), _dtype, "clean")  # one row without NaN
    for _op in REDUCTIONS + ARG_REDUCTIONS:
        for _dim in (None, 1, 0):
            add(_op, _a, _dim, False, "nan")

# logsumexp: no overflow for large inputs; -inf rows stay -inf, +inf wins, ints promote.
_LSE = np.array([[1000.0, 1001.0, 999.0], [-np.inf, -np.inf, -np.inf], [np.inf, 1.0, -np.inf],
                 [-np.inf, 0.0, -np.inf], [-1000.0, -1000.5, -2000.0]])
for _dtype in ("float32", "float64", "bfloat16"):
    for _dim in (1, 0, None):
        add("logsumexp", _LSE.astype(NP_DTYPES[_dtype]), _dim, False, "extremes")
add("logsumexp", np.array([[60000.0, 60000.0], [-60000.0, 0.0]], np.float16), 1, True, "extremes")
add("logsumexp", np.array([[10**6, 10**6 + 1]], np.int64), -1, False, "extremes")

# var / std: corrections from population to past the count (inf, or nan for constant rows).
_VAR = data((3, 4), "float64", "var")
_VAR[2] = 1.5
for _op in ("var", "std"):
    for _correction in (0, 1, 2, 3, 4, 7, 1.5, -1):
        for _dtype in ("float32", "float64"):
            add(_op, _VAR.astype(NP_DTYPES[_dtype]), 1, False, "corrections", _correction)
    add(_op, _VAR, None, True, "corrections", 0)
    add(_op, _VAR.astype(np.float16), (0, 1), False, "corrections", 2)
    # A large offset: a one-pass E[x²] - E[x]² would lose every digit of this spread.
    add(_op, (data((6, 50), "float64", "offset") + 1e4).astype(np.float32), 1, False, "offset")

# Ties: the first occurrence wins for argmax / argmin, in every dtype.
_TIES = np.array([[1, 3, 3, 0, 3], [2, 2, 2, 2, 2], [0, -1, 5, -1, 5]])
for _dtype in ALL_DTYPES:
    _a = (_TIES > 0) if _dtype == "bool" else _TIES.astype(NP_DTYPES[_dtype])
    for _op in ARG_REDUCTIONS:
        for _dim in (None, 0, 1):
            add(_op, _a, _dim, False, "ties")

# sum of int32 widens to int64 before it can overflow; prod of bool counts in int64.
add("sum", np.full((4,), 2**31 - 1, np.int32), None, False, "widen")
add("prod", np.ones((3, 2), np.bool_), 0, False, "widen")
add("prod", np.full((3,), 2**20, np.int32), None, False, "widen")

# dim as a list.
add("sum", data((2, 3, 4), "float32", "list"), [0, -1], False, "list")
add("any", data((2, 3, 4), "bool", "list"), [1, 2], True, "list")


# ----- cumsum -----------------------------------------------------------------------------


def add_cumsum(a: np.ndarray, dim: int, label: str) -> None:
    dtype = _name(a)
    CASES.append(Case(f"cumsum/{label}/{a.shape}/dim={dim}/{dtype}", lambda x: x.cumsum(dim),
                      lambda x: cumsum_ref(x, dim), [a], dtype=out_dtype("cumsum", dtype),
                      atol=ACCUMULATED_ATOL.get(out_dtype("cumsum", dtype))))


for _shape in SHAPES:
    for _dim in sorted({*range(len(_shape)), -1} if _shape else {0, -1}):
        add_cumsum(data(_shape, "float32", "cumsum"), _dim, "dims")
for _dtype in ALL_DTYPES:
    for _shape, _dim in [((), 0), ((0,), 0), ((3, 4), 1), ((2, 3, 4), 0), ((2, 0, 3), -1)]:
        add_cumsum(data(_shape, _dtype, "cumsum"), _dim, "dtypes")
for _dtype in FLOAT_DTYPES:
    _a = with_nans(data((3, 5), _dtype, "cumsum"), f"cumsum/{_dtype}")
    _a[1, 2] = np.inf
    add_cumsum(_a, 1, "nan")
add_cumsum(np.full((5,), 2**31 - 1, np.int32), 0, "widen")


# ----- gradients --------------------------------------------------------------------------
# Small float64 problems for the gradient harness (test_gradients.py): every differentiable
# reduction x shape x dim variant x keepdim, checked against finite differences of the ember
# forward and against torch.autograd. Random inputs have no ties, so max / min are smooth
# there; ties (and other points where finite differences are ill-defined: constant slices
# for std, all -inf slices for logsumexp) are checked against torch only, in
# test_reduction_grad_ties.py.

GRAD_CASES: list[GradCase] = []

GRAD_REDUCTIONS = ("sum", "mean", "prod", "max", "min", "var", "std", "logsumexp")

# (shape, dims): a full sweep of dims on the 3-d and 2-d shapes, fewer on the edge shapes
# (0-d, one element, size-1 dims, an empty dim).
GRAD_SHAPES = [
    ((2, 3, 4), DIMS[3]),
    ((3, 4), DIMS[2]),
    ((), [None, -1]),
    ((1,), [None, 0]),
    ((5,), [0, (-1,)]),
    ((1, 3, 1), [None, 0, 1, (0, 2), -1]),
    ((2, 0, 3), [None, 1, 0, (0, 2)]),
]


def _torch_dims(dim, ndim: int):
    """``dim`` for torch's amax / logsumexp, which take no None: every dim."""
    return tuple(range(ndim)) if dim is None or dim == () else dim


def _torch_prod(x, dim, keepdim: bool):
    """torch.prod takes one int dim: reduce the named dims one at a time."""
    if dim is None or dim == () or x.ndim == 0:
        out = x.prod()
        return out.reshape((1,) * x.ndim) if keepdim else out
    dims = sorted({d % x.ndim for d in ((dim,) if isinstance(dim, int) else dim)}, reverse=True)
    for d in dims:
        x = x.prod(d, keepdim=True)
    return x if keepdim else x.squeeze(tuple(dims)) if dims else x


def torch_reduction(op: str, dim, keepdim: bool, correction: float = 1):
    def fn(x):
        import torch

        if op in ("sum", "mean"):
            return getattr(x, op)(dim=dim, keepdim=keepdim)
        if op == "prod":
            return _torch_prod(x, dim, keepdim)
        if op in ("max", "min"):
            # torch.amax's even split among ties, which ember's max(dim) follows (values only).
            return getattr(torch, "a" + op)(x, dim=_torch_dims(dim, x.ndim), keepdim=keepdim)
        if op in ("var", "std"):
            # dim=() means every dim in torch's forward, but its backward counts no
            # elements (N = 1) and returns inf: pass None, which both read alike.
            dim_ = None if dim == () else dim
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # "degrees of freedom is <= 0"
                return getattr(torch, op)(x, dim=dim_, keepdim=keepdim, correction=correction)
        return torch.logsumexp(x, dim=_torch_dims(dim, x.ndim), keepdim=keepdim)

    return fn


def add_grad(op: str, a: np.ndarray, dim, keepdim: bool, label: str, correction: float = 1,
             **tolerances) -> None:
    extra = f"/correction={correction}" if op in ("var", "std") and correction != 1 else ""
    GRAD_CASES.append(GradCase(
        f"{op}/{label}/{a.shape}/dim={dim}/keepdim={keepdim}{extra}",
        reduction_fn(op, dim, keepdim, correction), [a],
        torch_fn=torch_reduction(op, dim, keepdim, correction), **tolerances))


for _op in GRAD_REDUCTIONS:
    for _shape, _dims in GRAD_SHAPES:
        for _dim in _dims:
            if _op in NEED_ELEMENTS and reduced_is_empty(_shape, _dim):
                continue
            for _keepdim in (False, True):
                # Away from 0 for prod (its zeros have cases of their own), spread for var.
                _a = data(_shape, "float64", f"grad/{_op}", 0.5, 2.0) if _op == "prod" else \
                    data(_shape, "float64", f"grad/{_op}")
                add_grad(_op, _a, _dim, _keepdim, "dims")

# prod with zeros: a row without, a row with one, a row with two; columns likewise.
# The product is multilinear, so finite differences are exact at its zeros too.
_PROD = np.array([[1.5, -2.0, 0.5, 3.0], [2.0, 0.0, -1.5, 0.5], [0.0, 1.5, 0.0, -2.0]])
for _dim in (1, 0, -1, None, (0, 1)):
    for _keepdim in (False, True):
        add_grad("prod", _PROD, _dim, _keepdim, "zeros")
add_grad("prod", np.array([0.5, 0.0, 2.0, -1.5]), None, False, "one-zero")
add_grad("prod", np.array([0.0, 0.0, 2.0]), 0, True, "two-zeros")
add_grad("prod", np.zeros((2, 2)), 1, False, "all-zeros")
add_grad("prod", np.array(0.0), None, False, "zero-0d")
add_grad("prod", np.array([0.0]), 0, False, "zero-size1")

# var / std: corrections below, at and past the count of N - 1.
for _op in ("var", "std"):
    for _correction in (0, 2, 1.5, -1):
        add_grad(_op, data((3, 4), "float64", f"grad/{_op}/correction"), 1, False, "corrections",
                 _correction)
        add_grad(_op, data((3, 4), "float64", f"grad/{_op}/correction"), None, True,
                 "corrections", _correction)
    add_grad(_op, data((2, 3, 4), "float64", "grad/offset") + 1e3, (0, 2), False, "offset",
             0, rtol=1e-4, atol=1e-6)

# logsumexp: large inputs (no overflow) and -inf entries (no gradient) in finite slices.
_LSE_GRAD = np.array([[1000.0, 1001.0, 999.5], [-np.inf, 0.5, -1.0], [-1000.0, -1000.5, -999.0]])
for _dim in (1, -1, None):
    add_grad("logsumexp", _LSE_GRAD, _dim, False, "extremes", atol=1e-6)

# max / min next to a near tie (2e-3 apart, far beyond the step): the larger one alone.
_NEAR = np.array([[1.0, 1.002, -0.5], [0.3, 0.2, 0.301]])
for _op in ("max", "min"):
    for _dim in (1, 0, None):
        add_grad(_op, _NEAR, _dim, False, "near-tie")


# Compositions: a reduction's input computed by a memory-bound op (recomputed under
# "balanced" checkpointing), and one tensor reduced twice (gradients accumulate).
def _grad_case(id: str, fn, torch_fn, *inputs) -> None:
    GRAD_CASES.append(GradCase(id, fn, list(inputs), torch_fn=torch_fn))


_X = data((3, 4), "float64", "grad/compose")
_grad_case("sum/compose/squared", lambda x: (x * x).sum(1), lambda x: (x * x).sum(1), _X)
_grad_case("max/compose/scaled", lambda x: (x * 3.0).max(0, keepdim=True),
           lambda x: (x * 3.0).amax(0, keepdim=True), _X)
_grad_case("logsumexp/compose/twice", lambda x: x.logsumexp(1) * x.max(1) + x.var(1),
           lambda x: x.logsumexp(1) * x.amax(1) + x.var(1), _X)
_grad_case("prod/compose/mean", lambda x: x.prod(0) * x.mean(0), lambda x: x.prod(0) * x.mean(0),
           _X)
_grad_case("std/compose/two-inputs", lambda x, y: (x * y).std(1) + y.sum(1),
           lambda x, y: (x * y).std(1) + y.sum(1), _X, data((3, 4), "float64", "grad/y"))


# cumsum: every dim of a few shapes, and the edge shapes.
def add_cumsum_grad(a: np.ndarray, dim: int, label: str) -> None:
    GRAD_CASES.append(GradCase(f"cumsum/{label}/{a.shape}/dim={dim}", lambda x: x.cumsum(dim),
                               [a], torch_fn=lambda x: x.cumsum(dim)))


for _shape, _cumsum_dims in [((2, 3, 4), (0, 1, 2, -1)), ((3, 4), (0, 1, -2)), ((5,), (0, -1)),
                             ((), (0, -1)), ((1,), (0,)), ((1, 3, 1), (0, 1, 2)),
                             ((2, 0, 3), (1, 0))]:
    for _dim in _cumsum_dims:
        add_cumsum_grad(data(_shape, "float64", "grad/cumsum"), _dim, "dims")
_grad_case("cumsum/compose/squared", lambda x: (x * x).cumsum(1) * x,
           lambda x: (x * x).cumsum(1) * x, _X)
