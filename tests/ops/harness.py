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
import pytest

import ember as em
from ember.errors import DTypeError, KernelError

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
    inputs = list(case.inputs)
    held = {v.dtype.name if v.dtype != NP_DTYPES["bfloat16"] else "bfloat16"
            for v in inputs if isinstance(v, np.ndarray)}
    missing = sorted(d for d in held if d in ("bfloat16", "float64") and not holds(device, d))
    if "bfloat16" in missing:
        pytest.skip(f"{device} holds no bfloat16")
    if missing:
        # A device without float64 runs the case in float32, against the CPU's float32 run.
        return _run_demoted(case, device)
    got = _as_list(_on_device(case, inputs, device))
    want = [np.asarray(w) for w in _as_list(case.ref(*case.inputs))]
    assert len(got) == len(want), f"{case.id}: {len(got)} outputs, reference has {len(want)}"
    dtypes = _as_list(case.dtype) if case.dtype is not None else [None] * len(want)
    for i, (g, w, dtype) in enumerate(zip(got, want, dtypes)):
        expected_dtype = dtype or _ember_dtype_name(w.dtype)
        if expected_dtype == "int64" and not _fits_int32(w) and not holds(device, "wide int64"):
            pytest.skip(f"{device} holds int64 in 32 bits; {case.id} gives values up to "
                        f"{np.abs(w).max()}")
        data = _checked_read(case, i, g, device, expected_dtype, w.shape)
        assert_close(data, w, g.dtype.name, case)


def _on_device(case: Case, inputs: list, device: em.Device) -> Any:
    return case.fn(*[to_ember(v, device) for v in inputs])


def _checked_read(case: Case, i: int, g: Any, device: em.Device, expected_dtype: str,
                  shape: tuple[int, ...]) -> np.ndarray:
    assert isinstance(g, em.Tensor), f"{case.id}: output {i} is {type(g).__name__}"
    assert g.device == device, f"{case.id}: output on {g.device}, expected {device}"
    assert g.dtype.name == expected_dtype, (
        f"{case.id}: output {i} dtype {g.dtype.name}, expected {expected_dtype}")
    assert g.shape == shape, f"{case.id}: output {i} shape {g.shape}, expected {shape}"
    try:
        data = g.numpy()
    except KernelError as exc:
        # Values moved from another device that this one cannot hold (int64 past int32)
        # are known only on the worker; dtypes are refused at the call instead.
        if isinstance(exc.__cause__, DTypeError):
            pytest.skip(f"{device}: {exc.__cause__}")
        raise
    assert data.shape == shape and data.dtype == em.dtype.as_dtype(g.dtype).np
    return data


def _run_demoted(case: Case, device: em.Device) -> None:
    """``case`` with float64 inputs as float32, on ``device`` and on the CPU; the CPU's
    result is the reference, at float32 tolerances."""
    inputs = [v.astype(np.float32) if isinstance(v, np.ndarray) and v.dtype == np.float64
              else v for v in case.inputs]
    want = [w.numpy() for w in _as_list(_on_device(case, inputs, em.cpu(0)))]
    got = _as_list(_on_device(case, inputs, device))
    assert len(got) == len(want), f"{case.id}: {len(got)} outputs, CPU has {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        data = _checked_read(case, i, g, device, _ember_dtype_name(w.dtype), w.shape)
        loose = Case(case.id, case.fn, case.ref, inputs, exact=case.exact)
        assert_close(data, w, g.dtype.name, loose)


def _fits_int32(values: np.ndarray) -> bool:
    info = np.iinfo(np.int32)
    return values.size == 0 or (info.min <= values.min() and values.max() <= info.max)


# Whether a device holds a dtype (WGSL has no float64 or bfloat16; "wide int64": int64
# values past the int32 range), probed once per device.
_HOLDS: dict[tuple[str, str], bool] = {}
_PROBES = {"wide int64": np.array([1 << 40], np.int64)}


def holds(device: em.Device, dtype: str) -> bool:
    key = (device.name, dtype)
    found = _HOLDS.get(key)
    if found is None:
        probe = _PROBES.get(dtype)
        if probe is None:
            probe = np.ones(1, NP_DTYPES[dtype])
        try:
            found = bool((em.tensor(probe, device=device.inner).numpy() == probe).all())
        except DTypeError:  # refused at the upload, on this thread
            found = False
        _HOLDS[key] = found
    return found


def _ember_dtype_name(npd: np.dtype) -> str:
    return em.dtype.from_numpy_dtype(np.dtype(npd), "reference").name


def assert_close(got: np.ndarray, want: np.ndarray, dtype: str, case: Case) -> None:
    if dtype == "bool" or dtype in INTEGER_DTYPES:
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
             "bool": np.bool_, "uint8": np.uint8, "int8": np.int8, "int16": np.int16}
INTEGER_DTYPES = ("uint8", "int8", "int16", "int32", "int64")

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
    if dtype in INTEGER_DTYPES:
        return g.integers(int(low), int(high) + 1, shape).astype(NP_DTYPES[dtype])
    return g.uniform(low, high, shape).astype(NP_DTYPES[dtype])
