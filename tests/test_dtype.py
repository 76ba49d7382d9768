"""Dtypes: names, conversion from NumPy / Python / strings, and PyTorch's promotion rules."""

from __future__ import annotations

import copy
import itertools
import pickle

import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember import dtype as dt

ALL = [em.bool, em.uint8, em.int8, em.int16, em.int32, em.int64, em.float16, em.bfloat16,
       em.float32, em.float64]


def test_names_flags_and_numpy_twins() -> None:
    assert [d.name for d in ALL] == ["bool", "uint8", "int8", "int16", "int32", "int64",
                                     "float16", "bfloat16", "float32", "float64"]
    assert em.bfloat16.np == np.dtype(ml_dtypes.bfloat16)
    assert em.float16.itemsize == 2 and em.int64.itemsize == 8 and em.bool.itemsize == 1
    assert [d.itemsize for d in (em.uint8, em.int8, em.int16)] == [1, 1, 2]
    assert [d.is_floating_point for d in ALL] == [False] * 6 + [True] * 4
    assert em.int32.is_integer and not em.bool.is_integer and em.bool.is_bool
    assert em.uint8.is_integer and em.int8.is_integer and em.int16.is_integer
    assert [d.is_signed for d in ALL] == [False, False] + [True] * 8
    assert em.short is em.int16 and not hasattr(em, "char") and not hasattr(em, "byte")
    assert repr(em.float32) == "ember.float32" and repr(em.bool) == "ember.bool"


def test_dtypes_are_singletons_under_copy_and_pickle() -> None:
    for d in ALL:
        assert copy.copy(d) is d and copy.deepcopy(d) is d
        assert pickle.loads(pickle.dumps(d)) is d


@pytest.mark.parametrize("value, expected", [
    (em.float16, em.float16), ("float32", em.float32), ("bool", em.bool), ("bool_", em.bool),
    ("float", em.float32), ("double", em.float64), ("half", em.float16), ("long", em.int64),
    ("int", em.int32), (float, em.float32), (int, em.int64), (bool, em.bool),
    (np.float64, em.float64), (np.dtype("float16"), em.float16), (np.bool_, em.bool),
    (ml_dtypes.bfloat16, em.bfloat16), ("bfloat16", em.bfloat16), (np.dtype(">f8"), em.float64),
    (np.int8, em.int8), (np.uint8, em.uint8), (np.int16, em.int16), (np.uint16, em.int32),
    (np.uint32, em.int64), ("short", em.int16), ("uint8", em.uint8), ("int8", em.int8),
])
def test_as_dtype(value, expected) -> None:
    assert dt.as_dtype(value) is expected


@pytest.mark.parametrize("value", [None, "float128", "complex64", np.complex64, np.uint64, object,
                                   "cpu", 3])
def test_as_dtype_refuses_other_things(value) -> None:
    with pytest.raises(em.DTypeError, match="not an ember dtype"):
        dt.as_dtype(value)


def test_as_dtype_reads_torch_dtypes() -> None:
    torch = pytest.importorskip("torch")
    for d in ALL:
        assert dt.as_dtype(getattr(torch, d.name)) is d
    assert em.zeros(2, dtype=torch.float16).dtype is em.float16


def test_from_numpy_dtype_errors_name_the_op() -> None:
    with pytest.raises(em.DTypeError, match="myop: NumPy dtype uint64"):
        dt.from_numpy_dtype(np.dtype(np.uint64), "myop")
    assert dt.from_numpy_dtype(np.dtype("<i4"), "x") is em.int32


def test_wrap_int_is_twos_complement() -> None:
    assert dt.wrap_int(2**31, em.int32) == -2**31
    assert dt.wrap_int(2**32 + 5, em.int32) == 5
    assert dt.wrap_int(-1, em.int32) == -1
    assert dt.wrap_int(2**63, em.int64) == -2**63
    assert dt.wrap_int(True, em.int64) == 1
    assert dt.wrap_int(-6, em.uint8) == 250 and dt.wrap_int(256, em.uint8) == 0
    assert dt.wrap_int(200, em.int8) == -56 and dt.wrap_int(-129, em.int8) == 127
    assert dt.wrap_int(70000, em.int16) == 4464


def test_promote_matches_torch_promote_types() -> None:
    torch = pytest.importorskip("torch")
    for a, b in itertools.product(ALL, ALL):
        want = torch.promote_types(getattr(torch, a.name), getattr(torch, b.name))
        assert dt.promote(a, b).name == str(want).removeprefix("torch."), (a, b)


SCALAR_SAMPLES = {"b": True, "i": 3, "f": 2.5}


def _torch_operand(torch, d: em.DType, has_dims: bool):
    return torch.zeros((2,) if has_dims else (), dtype=getattr(torch, d.name))


def test_result_type_of_pairs_matches_torch() -> None:
    """A tensor (dimensioned or 0-d) with a tensor (either) or a Python scalar."""
    torch = pytest.importorskip("torch")
    problems = []
    for a, a_dims in itertools.product(ALL, (True, False)):
        for b, b_dims in itertools.product(ALL, (True, False)):
            want = torch.result_type(_torch_operand(torch, a, a_dims), _torch_operand(torch, b, b_dims))
            got = dt.result_type([(a, a_dims), (b, b_dims)], [])
            if got.name != str(want).removeprefix("torch."):
                problems.append(f"{a.name}{'[n]' if a_dims else '[]'} {b.name}"
                                f"{'[n]' if b_dims else '[]'}: {got.name} vs torch {want}")
        for kind, value in SCALAR_SAMPLES.items():
            want = torch.result_type(_torch_operand(torch, a, a_dims), value)
            for got in (dt.result_type([(a, a_dims)], [kind]), dt.promote_with_scalar(a, kind)):
                if got.name != str(want).removeprefix("torch."):
                    problems.append(f"{a.name} with a {kind} scalar: {got.name} vs torch {want}")
    assert not problems, "\n".join(problems)


def test_result_type_of_three_tensors_matches_torch_clamp() -> None:
    """clamp(x, min, max) promotes all three, dimensioned or 0-d, as ember's result_type."""
    torch = pytest.importorskip("torch")
    problems = []
    numeric = [d for d in ALL if d is not em.bool]
    for x, low, high in itertools.product(numeric, numeric, numeric):
        for low_dims, high_dims in itertools.product((True, False), repeat=2):
            want = torch.clamp(_torch_operand(torch, x, True), _torch_operand(torch, low, low_dims),
                               _torch_operand(torch, high, high_dims)).dtype
            got = dt.result_type([(x, True), (low, low_dims), (high, high_dims)], [])
            if got.name != str(want).removeprefix("torch."):
                problems.append(f"clamp({x.name}, {low.name}, {high.name}): {got.name} vs {want}")
    assert not problems, "\n".join(problems)


def test_result_type_without_tensors_uses_the_defaults() -> None:
    assert dt.result_type([], ["i", "f"]) is em.float32
    assert dt.result_type([], ["b"]) is em.bool
    assert dt.result_type([], ["b", "i"]) is em.int64
