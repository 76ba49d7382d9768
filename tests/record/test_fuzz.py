"""Fuzzing both loaders: whatever the bytes, they return or raise RecordError — nothing else,
and quickly (the deadline catches a hang; every input is small)."""

from __future__ import annotations

import json
from datetime import timedelta

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember as em
from ember.record import msgpack_file

from .helpers import safetensors_bytes, seal

FUZZ = settings(max_examples=150, deadline=timedelta(seconds=5),
                suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz") / "input"


def _only_record_errors(path, data: bytes) -> None:
    path.write_bytes(data)
    for load in (em.load, em.load_safetensors,
                 lambda p: em.load_safetensors(p, as_numpy=True)):
        try:
            load(path)
        except em.RecordError:
            pass


def _valid_ember() -> bytes:
    return bytes(msgpack_file.encode({
        "w": em.tensor([[1.0, 2.0], [3.0, 4.0]]), "b": np.arange(3, dtype=np.int16),
        "meta": ("x", 1, 2.5, None, True, b"\x00"), 7: [np.float32(1.5), em.tensor(True)],
    }))


def _valid_safetensors(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("valid") / "v.safetensors"
    em.save_safetensors({"w": em.ones((2, 2)), "b": np.array([1, 0], bool),
                         "h": np.ones(3, np.float16), "e": np.zeros((0, 2), np.int64)}, path,
                        metadata={"k": "v"})
    return path.read_bytes()


@st.composite
def _mutated(draw, data: bytes) -> bytes:
    """``data`` after a few flips, overwrites, cuts, inserts and deletions."""
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and data:
            data[pos] = draw(st.sampled_from([0x00, 0xff, 0x7f, 0x80, 0xc0, 0xdd, 0xdf, 0xcf]))
        elif op == "truncate":
            del data[pos:]
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=9))
        elif op == "delete":
            del data[pos:pos + draw(st.integers(1, 9))]
    return bytes(data)


@FUZZ
@given(data=st.binary(max_size=300))
def test_random_bytes(scratch, data):
    _only_record_errors(scratch, data)


@FUZZ
@given(data=st.binary(max_size=200))
def test_random_bytes_behind_valid_headers(scratch, data):
    _only_record_errors(scratch, seal(data))
    _only_record_errors(scratch, len(data).to_bytes(8, "little") + data)


def test_mutations_of_valid_files(scratch, tmp_path_factory):
    valid = {"ember": _valid_ember(), "safetensors": _valid_safetensors(tmp_path_factory)}
    scratch.write_bytes(valid["ember"])  # both load as they are
    assert set(em.load(scratch)) == {"w", "b", "meta", 7}
    scratch.write_bytes(valid["safetensors"])
    assert set(em.load_safetensors(scratch)) == {"w", "b", "h", "e"}

    @FUZZ
    @given(st.sampled_from(["ember", "safetensors", "resealed"]).flatmap(
        lambda kind: st.tuples(st.just(kind), _mutated(
            valid["ember"][msgpack_file.HEADER_SIZE:] if kind == "resealed" else valid[kind]))))
    def check(case):
        kind, data = case
        # "resealed": a mutated body under a correct header, so the CRC lets it reach msgspec.
        _only_record_errors(scratch, seal(data) if kind == "resealed" else data)

    check()


_names = st.sampled_from(["tensor", "ndarray", "numpy_scalar", "bytes", "list", "tuple", "dict",
                          "float32", "bfloat16", "bool", "int64", "uint8", "object"])
_records = st.tuples(  # records of nearly the right form: the decoder's own checks run
    st.sampled_from(["tensor", "ndarray", "numpy_scalar"]), _names,
    st.lists(st.one_of(st.integers(-1, 4), st.integers(2**31, 2**63)), max_size=3),
    st.binary(max_size=24),
).map(list)
_msgpack_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(), _names,
              st.binary(max_size=16), _records),
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.tuples(st.sampled_from(["list", "tuple"]), st.lists(children, max_size=3)).map(list),
        st.tuples(st.just("dict"), st.dictionaries(
            st.one_of(st.text(max_size=3), st.integers(-(2**63), 2**63)), children, max_size=3),
        ).map(list),
        st.dictionaries(st.text(max_size=3), children, max_size=3)),
    max_leaves=20,
)


@FUZZ
@given(value=_msgpack_values)
def test_structured_ember_bodies(scratch, value):
    """Well-formed MessagePack that is mostly the wrong shape: records with bad fields."""
    _only_record_errors(scratch, seal(msgspec.msgpack.encode(value)))


_codes = st.sampled_from(["F32", "F16", "BF16", "BOOL", "I64", "U8", "U64", "F8_E4M3", "X", ""])
_ints = st.one_of(st.integers(-2, 40), st.integers(2**30, 2**64), st.booleans(), st.floats())
_entry = st.one_of(
    st.fixed_dictionaries({"dtype": _codes, "shape": st.lists(_ints, max_size=3),
                           "data_offsets": st.lists(_ints, max_size=3)}),
    st.lists(_ints, max_size=2), st.none(), st.text(max_size=3),
    st.dictionaries(st.text(max_size=2), st.text(max_size=2), max_size=2),
)


@FUZZ
@given(header=st.dictionaries(st.sampled_from(["a", "b", "c", "__metadata__"]), _entry,
                              max_size=3),
       data=st.binary(max_size=64), pad=st.integers(0, 3))
def test_structured_safetensors_headers(scratch, header, data, pad):
    """Valid JSON headers with plausible and implausible dtypes, shapes and offsets."""
    text = json.dumps(header).encode() + b" " * pad
    _only_record_errors(scratch, safetensors_bytes(text, data))
