"""em.save_safetensors / em.load_safetensors: round trips, interop with the reference, bad files."""

from __future__ import annotations

import json
import os
import time
import tracemalloc

import ml_dtypes
import numpy as np
import pytest
import safetensors
import safetensors.numpy

import ember as em
from ember.record import load_safetensors_metadata, safetensors_file

from .helpers import safetensors_bytes

EMBER_DTYPES = [em.bool, em.int32, em.int64, em.float16, em.bfloat16, em.float32, em.float64]
# The reference's numpy side, minus bfloat16 (NumPy has none; torch covers it below).
NUMPY_CODES = ["BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64", "F16", "F32", "F64"]


def _array(npd: np.dtype, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if npd == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    raw = rng.integers(0, 256, int(np.prod(shape)) * npd.itemsize, dtype=np.uint8)
    return raw.view(npd).reshape(shape)


def _state(npds) -> dict[str, np.ndarray]:
    shapes = [(2, 3), (), (0,), (5,), (1, 0, 2)]
    return {f"t{i}.{np.dtype(d).name}": _array(np.dtype(d), shapes[i % len(shapes)], i)
            for i, d in enumerate(npds)}


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# ----- round trips ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", EMBER_DTYPES, ids=lambda d: d.name)
def test_tensors_round_trip_as_tensors(tmp_path, dtype, device):
    state = {"w": em.from_numpy(_array(dtype.np, (3, 4))), "s": em.from_numpy(_array(dtype.np, ())),
             "e": em.from_numpy(_array(dtype.np, (0, 2)))}
    path = tmp_path / "m.safetensors"
    em.save_safetensors(state, path)
    back = em.load_safetensors(path, device=device)
    assert list(back) == list(state)
    for name, t in state.items():
        assert back[name].dtype is dtype and back[name].device == device
        assert _bits_equal(back[name].numpy(), t.numpy())


def test_every_format_dtype_round_trips_as_numpy(tmp_path):
    state = _state(safetensors_file.DTYPES.values())
    path = tmp_path / "m.safetensors"
    em.save_safetensors(state, path)
    back = em.load_safetensors(path, as_numpy=True)
    assert all(_bits_equal(back[k], v) for k, v in state.items())
    assert all(a.flags.writeable and a.flags.owndata for a in back.values())
    em.save_safetensors({"big": np.arange(4, dtype=">f8")}, path)  # stored little-endian
    assert safetensors.numpy.load_file(str(path))["big"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_unsigned_ints_widen_as_tensors_and_wider_ones_need_as_numpy(tmp_path):
    path = tmp_path / "m.safetensors"
    em.save_safetensors({"u8": np.array([255], np.uint8), "i16": np.array([-3], np.int16),
                         "u16": np.array([65535], np.uint16),
                         "u32": np.array([2**32 - 1], np.uint32)}, path)
    back = em.load_safetensors(path)
    assert back["u8"].dtype is em.uint8 and back["u8"].item() == 255
    assert back["i16"].dtype is em.int16 and back["i16"].item() == -3
    assert back["u16"].dtype is em.int32 and back["u16"].item() == 65535
    assert back["u32"].dtype is em.int64
    em.save_safetensors({"u64": np.array([1], np.uint64)}, path)
    with pytest.raises(em.RecordError, match="U64 has no ember tensor dtype; help: .*as_numpy"):
        em.load_safetensors(path)
    assert em.load_safetensors(path, as_numpy=True)["u64"].dtype == np.uint64


def test_the_writer_aligns_the_data_and_every_tensor(tmp_path):
    path = tmp_path / "m.safetensors"
    state = {"b": np.ones(3, bool), "h": np.ones(3, np.float16), "d": np.ones(3, np.float64),
             "f": np.ones(1, np.float32)}
    em.save_safetensors(state, path, metadata={"format": "np"})
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    assert n % 8 == 0
    header = json.loads(data[8:8 + n])
    assert header["__metadata__"] == {"format": "np"}
    for name, array in state.items():
        begin, end = header[name]["data_offsets"]
        assert begin % array.dtype.itemsize == 0 and end - begin == array.nbytes


def test_metadata_round_trips(tmp_path):
    path = tmp_path / "m.safetensors"
    em.save_safetensors({"w": em.ones(2)}, path, metadata={"epoch": "3", "ünï": "cödé"})
    assert load_safetensors_metadata(path) == {"epoch": "3", "ünï": "cödé"}
    with safetensors.safe_open(str(path), "np") as f:
        assert f.metadata() == {"epoch": "3", "ünï": "cödé"}
    em.save_safetensors({"w": em.ones(2)}, path)
    assert load_safetensors_metadata(path) == {}


@pytest.mark.parametrize("state, metadata, words", [
    ([("w", np.ones(1))], None, "expected a dict"),
    ({"w": [1.0]}, None, "'w' is a list, not a tensor"),
    ({3: np.ones(1)}, None, "tensor name 3"),
    ({"": np.ones(1)}, None, "tensor name ''"),
    ({"__metadata__": np.ones(1)}, None, "tensor name '__metadata__'"),
    ({"w": np.array(["s"])}, None, "dtype <U1"),
    ({"w": np.ones(1, np.complex128)}, None, "dtype complex128"),
    ({"w": np.ones(1)}, {"epoch": 3}, "metadata must be a dict of str"),
])
def test_save_refuses_what_the_format_cannot_hold(tmp_path, state, metadata, words):
    with pytest.raises(TypeError, match=words):
        em.save_safetensors(state, tmp_path / "m.safetensors", metadata)
    assert not (tmp_path / "m.safetensors").exists()


def test_a_failing_write_leaves_the_old_file_intact(tmp_path, monkeypatch):
    path = tmp_path / "m.safetensors"
    em.save_safetensors({"w": em.ones(2)}, path)
    before = path.read_bytes()
    with pytest.raises(TypeError):
        em.save_safetensors({"a": em.zeros(3), "b": object()}, path)

    def broken_fsync(fd):
        raise OSError(5, "I/O error")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="I/O error"):
        em.save_safetensors({"w": em.zeros(5)}, path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["m.safetensors"]


# ----- the reference implementation, both ways ------------------------------------------


def test_files_from_safetensors_numpy_load(tmp_path):
    state = _state([safetensors_file.DTYPES[c] for c in NUMPY_CODES])
    path = tmp_path / "ref.safetensors"
    safetensors.numpy.save_file(state, str(path), metadata={"by": "reference"})
    back = em.load_safetensors(path, as_numpy=True)
    assert set(back) == set(state) and all(_bits_equal(back[k], v) for k, v in state.items())
    assert load_safetensors_metadata(path) == {"by": "reference"}
    small = {k: v for k, v in state.items() if v.dtype in (np.bool_, np.uint8, np.float16)}
    safetensors.numpy.save_file(small, str(path))
    tensors = em.load_safetensors(path)
    assert all(np.array_equal(tensors[k].numpy(), v) for k, v in small.items())
    assert tensors["t1.uint8"].dtype is em.uint8


def test_files_from_ember_load_in_safetensors_numpy(tmp_path):
    state = _state([safetensors_file.DTYPES[c] for c in NUMPY_CODES])
    path = tmp_path / "ember.safetensors"
    em.save_safetensors({k: em.from_numpy(v) if v.dtype in (np.float32, np.int64) else v
                         for k, v in state.items()}, path)
    back = safetensors.numpy.load_file(str(path))
    assert set(back) == set(state) and all(_bits_equal(back[k], v) for k, v in state.items())


def test_torch_files_load_in_ember_and_ember_files_in_torch(tmp_path):
    torch = pytest.importorskip("torch")
    import safetensors.torch

    g = torch.Generator().manual_seed(0)
    ref = {"bf16": torch.randn(3, 4, generator=g).to(torch.bfloat16),
           "f16": torch.randn(5, generator=g).half(), "f32": torch.randn(2, 2, generator=g),
           "f64": torch.randn(1, generator=g).double(), "i64": torch.arange(-3, 3),
           "i32": torch.arange(4, dtype=torch.int32), "b": torch.tensor([True, False]),
           "scalar": torch.tensor(2.5), "empty": torch.zeros(0, 3)}
    path = tmp_path / "torch.safetensors"
    safetensors.torch.save_file(ref, str(path))
    back = em.load_safetensors(path)
    for name, t in ref.items():
        assert back[name].dtype is em.dtype.as_dtype(t.dtype), name
        assert back[name].shape == tuple(t.shape)
        bits = t.view(torch.int16) if t.dtype == torch.bfloat16 else t
        mine = back[name].numpy()
        mine = mine.view(np.int16) if mine.dtype == ml_dtypes.bfloat16 else mine
        assert mine.tobytes() == bits.numpy().tobytes(), name

    path = tmp_path / "ember.safetensors"
    em.save_safetensors(back, path)
    again = safetensors.torch.load_file(str(path))
    assert set(again) == set(ref)
    for name, t in ref.items():
        assert again[name].dtype == t.dtype and torch.equal(again[name], t), name


# ----- bad files ------------------------------------------------------------------------


def _f32(name="w", shape=(2,), offsets=(0, 8)) -> dict:
    return {name: {"dtype": "F32", "shape": list(shape), "data_offsets": list(offsets)}}


_BAD_FILES = [
    (b"", "shorter than the 8-byte header length"),
    (b"\x01\x00", "shorter than the 8-byte"),
    (safetensors_bytes(b"{}", length=2**40), "the header length 1099511627776 exceeds"),
    (safetensors_bytes(b"[1, 2]"), "the header is not a JSON object"),
    (safetensors_bytes(b'{"a": '), "not valid JSON"),
    (safetensors_bytes(b'{"a": "\xff"}'), "not valid JSON"),
    (safetensors_bytes(b'{"w": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}, '
                       b'"w": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}'),
     "names 'w' twice"),
    (safetensors_bytes(b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"), "nests too deeply"),
    (safetensors_bytes({"w": [1, 2]}), "expected {dtype, shape, data_offsets}"),
    (safetensors_bytes({"w": {"dtype": "F32", "shape": [1]}}), "expected {dtype, shape"),
    (safetensors_bytes({"w": {"dtype": "F128", "shape": [1], "data_offsets": [0, 16]}}, b"1" * 16),
     "unknown dtype 'F128'"),
    (safetensors_bytes({"w": {"dtype": 3, "shape": [1], "data_offsets": [0, 4]}}, b"1234"),
     "unknown dtype 3"),
    (safetensors_bytes(_f32(shape=[-2]), b"1" * 8), "non-negative ints"),
    (safetensors_bytes(_f32(shape=[True, 2]), b"1" * 8), "non-negative ints"),
    (safetensors_bytes(_f32(shape=[2.0]), b"1" * 8), "non-negative ints"),
    (safetensors_bytes(_f32(shape=[1] * 65), b"1" * 4), "65 dims"),
    (safetensors_bytes(_f32(shape=[0, 2**40, 2**40], offsets=(0, 0))), "absurdly large"),
    (safetensors_bytes(_f32(offsets=(0, 8.0)), b"1" * 8), "must be \\[begin, end\\]"),
    (safetensors_bytes(_f32(offsets=(0, 4, 8)), b"1" * 8), "must be \\[begin, end\\]"),
    (safetensors_bytes(_f32(offsets=(-8, 0)), b"1" * 8), "must be \\[begin, end\\]"),
    (safetensors_bytes(_f32(offsets=(8, 0)), b"1" * 8), "end before they begin"),
    (safetensors_bytes(_f32(), b"1" * 4), "truncated safetensors file: .* up to 8, .* holds 4"),
    (safetensors_bytes(_f32(offsets=(0, 12)), b"1" * 12), "span 12 bytes, but F32 \\[2\\] needs 8"),
    (safetensors_bytes({**_f32("a"), **_f32("b", offsets=(4, 12))}, b"1" * 12),
     "'b' at data_offsets \\[4, 12\\] overlaps"),
    (safetensors_bytes({**_f32("a"), **_f32("b", offsets=(12, 20))}, b"1" * 20), "leaves a gap"),
    (safetensors_bytes(_f32(offsets=(4, 12)), b"1" * 12), "leaves a gap"),
    (safetensors_bytes(_f32(), b"1" * 9), "cover 8 data bytes, the file holds 9"),
    (safetensors_bytes({"__metadata__": {"k": 1}}), "__metadata__ must map str to str"),
    (safetensors_bytes({"__metadata__": ["k"]}), "__metadata__ must map str to str"),
    (safetensors_bytes({"w": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]}}, b"\x01\x07"),
     "bool data holds bytes other than 0 and 1"),
]


@pytest.mark.parametrize("data, words", _BAD_FILES, ids=[w for _, w in _BAD_FILES])
def test_bad_files_raise_record_error_saying_what_is_wrong(tmp_path, data, words):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(data)
    for as_numpy in (False, True):
        with pytest.raises(em.RecordError, match=words):
            em.load_safetensors(path, as_numpy=as_numpy)


def test_a_terabyte_tensor_claimed_by_a_tiny_file_fails_fast_without_allocating(tmp_path):
    path = tmp_path / "huge.safetensors"
    path.write_bytes(safetensors_bytes(_f32(shape=[2**38], offsets=(0, 2**40)), b"\x00" * 16))
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(em.RecordError, match="needs data bytes up to 1099511627776"):
            em.load_safetensors(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - start < 1.0
    assert peak < 1 << 20


def test_an_ember_file_is_not_a_safetensors_file(tmp_path):
    path = tmp_path / "x.ember"
    em.save({"w": em.ones(2)}, path)
    with pytest.raises(em.RecordError):
        em.load_safetensors(path)
    em.save_safetensors({"w": em.ones(2)}, path)
    with pytest.raises(em.RecordError, match="help: safetensors files load with"):
        em.load(path)
