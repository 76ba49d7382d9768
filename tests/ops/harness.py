"""The table-driven op harness.

Each op family declares its cases once, in ``cases_<family>.py``, as a list
of ``Case``s: the ember call, its NumPy reference and the inputs. The
harness (``test_ops.py``) runs every case on every available device and
compares values, shapes and dtypes. The autodiff issue adds a backward
check to the same cases.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

import ember as em

# Tolerances by result dtype: low-precision floats round once per op.
TOLERANCE = {
    "float64": (1e-12, 1e-12),
    "float32": (1e-5, 1e-6),
    "float16": (2e-3, 1e-3),
    "bfloat16": (1.6e-2, 1e-2),
}


@dataclass
class Case:
    """One op call: ``fn(*tensors)`` on ember must equal ``ref(*arrays)`` on NumPy.

    Args:
        id: a readable test id ("add/broadcast/float32").
        fn: the ember call; receives the inputs as ember tensors (arrays) or as-is (scalars).
        ref: the NumPy reference; receives the inputs as NumPy arrays / scalars.
        inputs: NumPy arrays (become tensors) and Python scalars (passed through).
        dtype: the expected ember dtype name of the result(s); default: the reference's dtype.
        rtol, atol: override the dtype's tolerance.
        exact: compare bit for bit (integers, bools, data movement).
    """

    id: str
    fn: Callable[..., Any]
    ref: Callable[..., Any]
    inputs: Sequence[Any]
    dtype: str | Sequence[str] | None = None
    rtol: float | None = None
    atol: float | None = None
    exact: bool = False
    marks: tuple = field(default_factory=tuple)


def to_ember(value: Any, device: em.Device) -> Any:
    if isinstance(value, np.ndarray):
        return em.tensor(value, device=device)
    return value


def _as_list(x: Any) -> list:
    return list(x) if isinstance(x, tuple | list) else [x]


def run_case(case: Case, device: em.Device) -> None:
    args = [to_ember(v, device) for v in case.inputs]
    got = _as_list(case.fn(*args))
    want = [np.asarray(w) for w in _as_list(case.ref(*case.inputs))]
    assert len(got) == len(want), f"{case.id}: {len(got)} outputs, reference has {len(want)}"
    dtypes = _as_list(case.dtype) if case.dtype is not None else [None] * len(want)
    for i, (g, w, dtype) in enumerate(zip(got, want, dtypes)):
        assert isinstance(g, em.Tensor), f"{case.id}: output {i} is {type(g).__name__}"
        assert g.device == device, f"{case.id}: output on {g.device}, expected {device}"
        expected_dtype = dtype or _ember_dtype_name(w.dtype)
        assert g.dtype.name == expected_dtype, (
            f"{case.id}: output {i} dtype {g.dtype.name}, expected {expected_dtype}")
        assert g.shape == w.shape, f"{case.id}: output {i} shape {g.shape}, expected {w.shape}"
        data = g.numpy()
        assert data.shape == w.shape and data.dtype == em.dtype.as_dtype(g.dtype).np
        assert_close(data, w, g.dtype.name, case)


def _ember_dtype_name(npd: np.dtype) -> str:
    return em.dtype.from_numpy_dtype(np.dtype(npd), "reference").name


def assert_close(got: np.ndarray, want: np.ndarray, dtype: str, case: Case) -> None:
    if dtype in ("bool", "int32", "int64"):
        np.testing.assert_array_equal(got, want.astype(got.dtype), err_msg=case.id)
        return
    if case.exact:  # through float64, where NaN equals NaN (bfloat16 has no isnan of its own)
        np.testing.assert_array_equal(got.astype(np.float64),
                                      want.astype(got.dtype).astype(np.float64), err_msg=case.id)
        return
    rtol, atol = TOLERANCE[dtype]
    rtol = case.rtol if case.rtol is not None else rtol
    atol = case.atol if case.atol is not None else atol
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                               atol=atol, equal_nan=True, err_msg=case.id)


# ----- input generators -------------------------------------------------------------------

RNG_SEED = 20261130

FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")
NP_DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16,
             "bfloat16": ml_dtypes.bfloat16, "int32": np.int32, "int64": np.int64,
             "bool": np.bool_}

# Shapes every family should cover: scalar, size-0 and size-1 dims, odd sizes.
SHAPES = [(), (0,), (1,), (5,), (3, 4), (2, 0, 3), (1, 3, 1), (2, 3, 4)]


def rng(salt: int = 0) -> np.random.Generator:
    return np.random.default_rng(RNG_SEED + salt)


def array(shape: tuple[int, ...], dtype: str = "float32", low: float = -2.0, high: float = 2.0,
          salt: int = 0) -> np.ndarray:
    """A deterministic random array of ``shape`` and ember dtype name ``dtype``."""
    g = rng(zlib.crc32(repr((shape, dtype, low, high, salt)).encode()) % 10_000)
    if dtype == "bool":
        return np.asarray(g.random(shape) < 0.5)
    if dtype in ("int32", "int64"):
        return g.integers(int(low), int(high) + 1, shape).astype(NP_DTYPES[dtype])
    return g.uniform(low, high, shape).astype(NP_DTYPES[dtype])
