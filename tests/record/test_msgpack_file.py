"""em.save / em.load: round trips, the file layout, and what a bad file raises."""

from __future__ import annotations

import ast
import os
import pickle
import time
import tracemalloc
from pathlib import Path

import ml_dtypes
import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember as em
from ember import nn
from ember.record import arrays, msgpack_file

from .helpers import same, seal

EMBER_DTYPES = [em.bool, em.int32, em.int64, em.float16, em.bfloat16, em.float32, em.float64]


def _random_array(rng: np.random.Generator, npd: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    if npd == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    raw = rng.integers(0, 256, int(np.prod(shape)) * npd.itemsize, dtype=np.uint8)
    return raw.view(npd).reshape(shape)  # every bit pattern: NaN payloads, -0.0, subnormals


def roundtrip(tmp_path: Path, obj, **kwargs):
    path = tmp_path / "obj.ember"
    em.save(obj, path)
    return em.load(path, **kwargs)


# ----- round trips ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", EMBER_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 0, 3), (2, 3, 4)])
def test_tensors_of_every_dtype_and_shape_round_trip(tmp_path, dtype, shape):
    array = _random_array(np.random.default_rng(0), dtype.np, shape)
    t = em.from_numpy(array)
    back = roundtrip(tmp_path, t)
    assert isinstance(back, em.Tensor)
    assert back.dtype is dtype and back.shape == shape and back.device == em.default_device()
    assert back.numpy().tobytes() == array.tobytes()


@pytest.mark.parametrize("name", list(arrays.NUMPY_DTYPES))
def test_numpy_arrays_and_scalars_of_every_dtype_round_trip(tmp_path, name):
    npd = arrays.NUMPY_DTYPES[name]
    array = _random_array(np.random.default_rng(1), npd, (2, 3))
    obj = [array, array[:0], array[0, 0].copy().reshape(()), array[1, 2]]  # last: a NumPy scalar
    back = roundtrip(tmp_path, obj)
    assert same(back, obj)
    assert back[0].flags.writeable and back[0].flags.owndata


def test_non_contiguous_and_big_endian_arrays_save_their_values(tmp_path):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    big = np.arange(5, dtype=">i4")
    back = roundtrip(tmp_path, {"t": a.T, "s": a[:, ::2], "big": big})
    assert np.array_equal(back["t"], a.T) and np.array_equal(back["s"], a[:, ::2])
    assert back["big"].dtype == np.int32 and back["big"].dtype.isnative
    assert np.array_equal(back["big"], np.arange(5))


def test_bfloat16_is_stored_as_its_two_little_endian_bytes(tmp_path):
    path = tmp_path / "bf.ember"
    em.save(em.tensor([1.0, -2.0], dtype=em.bfloat16), path)
    body = path.read_bytes()[msgpack_file.HEADER_SIZE:]
    raw = msgspec.msgpack.decode(body)
    assert raw[:3] == ["tensor", "bfloat16", [2]]
    assert raw[3] == np.array([1.0, -2.0], dtype=ml_dtypes.bfloat16).view("<u2").tobytes()


def test_load_puts_tensors_on_the_device_asked(tmp_path, device):
    back = roundtrip(tmp_path, {"w": em.ones((2, 2))}, device=device)
    assert back["w"].device == device and np.array_equal(back["w"].numpy(), np.ones((2, 2)))
    back = roundtrip(tmp_path, [em.zeros(3)], device=str(device))
    assert back[0].device == device


def test_scalars_strings_bytes_none_and_containers_keep_their_types(tmp_path):
    obj = {"none": None, "t": True, "f": False, "i": -(2**63), "u": 2**64 - 1, "x": -0.0,
           "inf": float("inf"), "nan": float("nan"), "s": "ünï", "b": b"\x00\xff",
           "list": [1, [2, (3,)]], "tuple": (), "empty": {}, 7: "int key", -1: [None]}
    back = roundtrip(tmp_path, obj)
    assert same(back, obj)
    assert list(back) == list(obj)  # order kept


def test_optimizer_state_round_trips(tmp_path):
    """Adam-like state: per-parameter moments keyed by id (or index), groups with tuples."""
    ids = [os.urandom(16).hex() for _ in range(2)]
    state = {
        "state": {pid: {"step": 3, "exp_avg": em.randn((4, 3)), "exp_avg_sq": em.rand((4, 3)),
                        "max_exp_avg_sq": None} for pid in ids},
        "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0,
                          "amsgrad": False, "params": ids}],
    }
    torch_like = {"state": {0: {"step": em.tensor(3.0), "momentum_buffer": em.randn((5,))}},
                  "param_groups": [{"lr": 0.1, "params": [0]}]}
    for obj in (state, torch_like):
        assert same(roundtrip(tmp_path, obj), obj)


def test_checkpoint_of_model_and_optimizer_state_round_trips(tmp_path):
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    ckpt = {"model": model.state_dict(), "epoch": 5, "history": {"loss": [0.5, 0.25]}}
    assert same(roundtrip(tmp_path, ckpt), ckpt)


_ARRAY_DTYPES = sorted(arrays.NUMPY_DTYPES)


@st.composite
def _arrays(draw):
    npd = arrays.NUMPY_DTYPES[draw(st.sampled_from(_ARRAY_DTYPES))]
    shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
    n = int(np.prod(shape))
    if npd == np.bool_:
        return np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool).reshape(shape)
    raw = draw(st.binary(min_size=n * npd.itemsize, max_size=n * npd.itemsize))
    return np.frombuffer(raw, dtype=npd).reshape(shape).copy()


@st.composite
def _tensors(draw):
    dtype = draw(st.sampled_from(EMBER_DTYPES))
    shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
    n = int(np.prod(shape))
    if dtype is em.bool:
        array = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool)
    else:
        raw = draw(st.binary(min_size=n * dtype.itemsize, max_size=n * dtype.itemsize))
        array = np.frombuffer(raw, dtype=dtype.np).copy()
    return em.from_numpy(array.reshape(shape))


_leaves = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(), st.text(max_size=6),
    st.binary(max_size=6), _arrays(), _arrays().map(lambda a: a.reshape(-1)[:1].reshape(())[()]
                                                     if a.size else np.float64(0.5)),
    _tensors(),
)
_keys = st.one_of(st.text(max_size=4), st.integers(-(2**63), 2**63 - 1))
_values = st.recursive(
    _leaves,
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.lists(children, max_size=4).map(tuple),
                               st.dictionaries(_keys, children, max_size=4)),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=_values)
def test_nested_structures_round_trip(tmp_path_factory, obj):
    path = tmp_path_factory.mktemp("nested") / "obj.ember"
    em.save(obj, path)
    assert same(em.load(path), obj)


# ----- what save refuses ----------------------------------------------------------------


@pytest.mark.parametrize("obj, error, words", [
    ({"a": {1, 2}}, TypeError, "obj['a']: cannot save a set"),
    ([np.array(["x"])], TypeError, "obj[0]: NumPy dtype <U1 cannot be saved"),
    ({(1, 2): 3}, TypeError, "keys must be str or int"),
    ({True: 3}, TypeError, "keys must be str or int"),
    ({1.5: 3}, TypeError, "keys must be str or int"),
    ([2**64], OverflowError, "64-bit"),
    ({"k": [object()]}, TypeError, "obj['k'][0]: cannot save a object"),
])
def test_save_names_what_it_cannot_hold(tmp_path, obj, error, words):
    with pytest.raises(error, match=words.replace("[", r"\[").replace("(", r"\(")):
        em.save(obj, tmp_path / "x.ember")
    assert not (tmp_path / "x.ember").exists()


def test_save_refuses_cycles_and_too_deep_nesting(tmp_path):
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="nested deeper"):
        em.save(cycle, tmp_path / "x.ember")
    deep: list = []
    for _ in range(msgpack_file.MAX_DEPTH - 1):
        deep = [deep]
    em.save(deep, tmp_path / "ok.ember")  # exactly at the bound: fine
    assert em.load(tmp_path / "ok.ember") == deep


# ----- atomic writes --------------------------------------------------------------------


def test_a_value_failing_midway_leaves_the_old_file_intact(tmp_path):
    path = tmp_path / "ckpt.ember"
    em.save({"epoch": 1}, path)
    before = path.read_bytes()
    with pytest.raises(TypeError):
        em.save({"w": em.ones(1000), "epoch": 2, "bad": np.array([object()])}, path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["ckpt.ember"]  # no temporary file left behind


def test_a_write_failing_before_the_rename_leaves_the_old_file_intact(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.ember"
    em.save({"epoch": 1}, path)
    before = path.read_bytes()

    def broken_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space"):
        em.save({"epoch": 2, "w": em.ones(10)}, path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["ckpt.ember"]


# ----- bad files ------------------------------------------------------------------------


def _write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "bad.ember"
    path.write_bytes(data)
    return path


def _valid(obj=None) -> bytes:
    return bytes(msgpack_file.encode({"w": np.arange(6, dtype=np.float32)} if obj is None else obj))


_BAD_FILES = [
    (b"", "not an ember file"),
    (b"PK\x03\x04 a zip, as torch.save writes", "not an ember file"),
    (msgpack_file.MAGIC, "shorter than the 24-byte header"),
    (seal(b"\xc0", version=2), "version 2 is not supported"),
    (_valid()[:-1], "truncated ember file"),
    (_valid() + b"\x00", "corrupt ember file"),
    (_valid()[:-4] + b"\x00\x00\x00\x00", "CRC-32"),
    (seal(b"\xc1"), "malformed ember file"),
    (seal(b"\xc0\xc0"), "malformed ember file"),  # trailing data after the root
    (seal(msgspec.msgpack.encode(["pickle", "os.system"])), "malformed ember file"),
    (seal(msgspec.msgpack.encode(["tensor", "float33", [1], b"1234"])), "unknown tensor dtype"),
    (seal(msgspec.msgpack.encode(["tensor", "uint16", [1], b"12"])), "unknown tensor dtype"),
    (seal(msgspec.msgpack.encode(["ndarray", "object", [1], b"1"])), "unknown NumPy dtype"),
    (seal(msgspec.msgpack.encode(["ndarray", "float32", [3], b"1234"])), "4 data bytes, but"),
    (seal(msgspec.msgpack.encode(["ndarray", "float32", [-1], b""])), "non-negative"),
    (seal(msgspec.msgpack.encode(["ndarray", "float32", [1] * 65, b"1234"])), "65 dims"),
    (seal(msgspec.msgpack.encode(["ndarray", "float32", [0, 2**61], b""])), "absurdly large"),
    (seal(msgspec.msgpack.encode(["ndarray", "bool", [2], b"\x01\x02"])), "bool data"),
    (seal(msgspec.msgpack.encode(["numpy_scalar", "int8", [1], b"\x01"])), "a NumPy scalar"),
    (seal(msgspec.msgpack.encode(["dict", {"a": ["set", [1]]}])), "malformed ember file"),
    (seal(msgspec.msgpack.encode(["dict", {b"k": 1}])), "malformed ember file"),
    (seal(msgspec.msgpack.encode({"plain": "map"})), "malformed ember file"),
    (seal(msgspec.msgpack.encode(msgspec.msgpack.Ext(1, b"x"))), "malformed ember file"),
]


@pytest.mark.parametrize("data, words", _BAD_FILES, ids=[w for _, w in _BAD_FILES])
def test_bad_files_raise_record_error_saying_what_is_wrong(tmp_path, data, words):
    with pytest.raises(em.RecordError, match=words):
        em.load(_write(tmp_path, data))


def test_deep_nesting_is_refused_at_the_bound_and_far_past_it(tmp_path):
    for depth in (msgpack_file.MAX_DEPTH + 1, 200, 100_000):
        body = b"\x92\xa4list\x91" * depth + b"\xc0"
        with pytest.raises(em.RecordError, match="nested"):
            em.load(_write(tmp_path, seal(body)))


def test_a_terabyte_tensor_claimed_by_a_tiny_file_fails_fast_without_allocating(tmp_path):
    body = msgspec.msgpack.encode(["tensor", "float32", [2**18, 2**20], b"\x00" * 16])
    path = _write(tmp_path, seal(body))
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(em.RecordError, match="16 data bytes, but float32"):
            em.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - start < 1.0
    assert peak < 1 << 20


def test_a_body_length_claiming_a_terabyte_fails_before_reading(tmp_path):
    head = seal(b"\xc0")[:12] + (2**40).to_bytes(8, "little") + b"\x00" * 4
    with pytest.raises(em.RecordError, match="truncated ember file: the header says 1099511627776"):
        em.load(_write(tmp_path, head + b"\xc0"))


class _Payload:
    """Unpickling this creates the marker file: proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_a_pickle_payload_is_refused_without_running(tmp_path):
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Payload(marker))
    pickle.loads(payload).close()  # the payload is live: plain unpickling runs it
    assert marker.exists()
    marker.unlink()
    for data in (payload, seal(payload), msgpack_file.MAGIC + payload):
        path = _write(tmp_path, data)
        with pytest.raises(em.RecordError):
            em.load(path)
        with pytest.raises(em.RecordError):
            em.load_safetensors(path)
        with pytest.raises(em.RecordError):
            nn.Linear(2, 2).load(path)
    assert not marker.exists()


def test_the_record_package_never_imports_pickle_or_evaluates_code():
    folder = Path(msgpack_file.__file__).parent
    forbidden = {"pickle", "cPickle", "dill", "cloudpickle", "marshal", "shelve", "joblib"}
    for source in folder.glob("*.py"):
        tree = ast.parse(source.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                names = {(node.module or "").split(".")[0]}
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in {"eval", "exec", "__import__"}, source.name
                continue
            else:
                continue
            assert not names & forbidden, (source.name, names)
