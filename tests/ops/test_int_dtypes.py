"""uint8, int8, int16 and the shifts against PyTorch: promotion of every pair, wraparound,
shift amounts past the bit width, records, the wgpu refusal and bad input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import ember as em

torch = pytest.importorskip("torch")

INTS = ["uint8", "int8", "int16", "int32", "int64"]
ALL = ["bool"] + INTS + ["float16", "bfloat16", "float32", "float64"]


def _pair(name: str, dims: bool, values=(1, 2)):
    shape = (2,) if dims else ()
    data = list(values) if dims else values[0]
    return (em.tensor(data, dtype=getattr(em, name)).reshape(shape),
            torch.tensor(data, dtype=getattr(torch, name)).reshape(shape))


def test_binary_ops_promote_every_pair_as_torch():
    problems = []
    for a, b in itertools.product(ALL, ALL):
        if a not in INTS + ["bool"] and b not in INTS:
            continue  # pairs without a new dtype: tests/test_dtype.py
        for a_dims, b_dims in ((True, True), (True, False), (False, True)):
            (ea, ta), (eb, tb) = _pair(a, a_dims), _pair(b, b_dims)
            got, want = (ea * eb).dtype.name, str((ta * tb).dtype)[6:]
            if got != want:
                problems.append(f"{a}{'[n]' if a_dims else '[]'} * {b}"
                                f"{'[n]' if b_dims else '[]'}: {got} vs torch {want}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", ["uint8", "int8", "int16"])
@pytest.mark.parametrize("scalar", [True, 3, 300, -1, 2.5])
def test_python_scalars_promote_and_wrap_as_torch(name, scalar):
    ex, tx = _pair(name, True, (250 if name == "uint8" else -100, 7))
    for op in (lambda x, s: x + s, lambda x, s: s * x, lambda x, s: x == s, lambda x, s: x / s,
               lambda x, s: x > s):
        want = op(tx, scalar)
        got = op(ex, scalar)
        assert got.dtype.name == str(want.dtype)[6:], (name, scalar)
        np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("name", ["uint8", "int8", "int16"])
def test_wraparound_and_integer_rules_match_torch(name):
    info = np.iinfo(np.dtype(name))
    values = [int(info.min), int(info.max), 0, 1, 5, int(info.max) - 3]
    amounts = [3, 2, 1, 7, 1, 5]
    ex, ey = em.tensor(values, dtype=getattr(em, name)), em.tensor(amounts, dtype=getattr(em, name))
    tx, ty = (torch.tensor(v, dtype=getattr(torch, name)) for v in (values, amounts))
    checks = {
        "add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
        "floordiv": lambda x, y: x // y, "remainder": lambda x, y: x % y,
        "neg": lambda x, y: -x, "invert": lambda x, y: ~x, "and": lambda x, y: x & y,
        "sum": lambda x, y: x.sum(), "prod": lambda x, y: y.prod(), "max": lambda x, y: x.max(),
        "min": lambda x, y: x.min(), "argmax": lambda x, y: x.argmax(),
        "cumsum": lambda x, y: x.cumsum(0), "div": lambda x, y: x / y,
        "sort": lambda x, y: x.sort()[0], "float": lambda x, y: x.float(),
        "byte": lambda x, y: x.byte(), "char": lambda x, y: x.char(), "short": lambda x, y: x.short(),
        "long": lambda x, y: x.long(), "pow": lambda x, y: x ** 2,
    }
    for label, fn in checks.items():
        got, want = fn(ex, ey), fn(tx, ty)
        assert got.dtype.name == str(want.dtype)[6:], label
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=label)


def test_uint8_wraps_like_torch():
    x = em.tensor([255, 0], dtype=em.uint8)
    assert (x + 1).numpy().tolist() == [0, 1]
    assert (x - 1).numpy().tolist() == [254, 255]
    assert (x == -1).numpy().tolist() == [True, False]  # -1 converts to 255
    assert em.tensor([300.0, -1.0]).byte().numpy().tolist() == \
        torch.tensor([300.0, -1.0]).long().byte().tolist()


@pytest.mark.parametrize("name", INTS)
def test_shifts_match_torch_for_every_amount(name):
    bits = 8 * np.dtype(name).itemsize
    info = np.iinfo(np.dtype(name))
    values = [1, 3, int(info.max), int(info.min), 0] + ([-5, -1] if name != "uint8" else [250, 128])
    amounts = [0, 1, bits - 1, bits, bits + 1, 100] + ([-1, -bits] if name != "uint8" else [])
    ex, tx = em.tensor(values, dtype=getattr(em, name)), torch.tensor(values,
                                                                        dtype=getattr(torch, name))
    es = em.tensor([[a] for a in amounts], dtype=getattr(em, name))
    ts = torch.tensor([[a] for a in amounts], dtype=getattr(torch, name))
    for got, want in (((ex << es), (tx << ts)), ((ex >> es), (tx >> ts)),
                      (em.bitwise_left_shift(ex, es), torch.bitwise_left_shift(tx, ts)),
                      (ex.bitwise_right_shift(es), tx.bitwise_right_shift(ts)),
                      ((3 << es), (3 << ts)), ((-70 >> es), (-70 >> ts))):
        assert got.dtype.name == str(want.dtype)[6:] and got.shape == tuple(want.shape)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    for amount in amounts:
        np.testing.assert_array_equal((ex << amount).numpy(), (tx << amount).numpy())
        np.testing.assert_array_equal((ex >> amount).numpy(), (tx >> amount).numpy())


def test_shift_dtypes_promote_as_torch():
    for a, b in itertools.product(["bool"] + INTS, INTS):
        (ea, ta), (eb, tb) = _pair(a, True), _pair(b, True)
        assert (ea << eb).dtype.name == str((ta << tb).dtype)[6:], (a, b)
    assert (em.tensor([True]) << 1).dtype is em.int64 and (em.tensor([True]) << 1).item() == 2


@pytest.mark.parametrize("name", ["float32", "float16", "float64", "bool"])
def test_shifts_of_non_integers_raise_naming_op_and_dtype(name):
    x = em.ones(3, dtype=getattr(em, name))
    with pytest.raises(em.DTypeError, match=f"bitwise_left_shift: needs integer tensors.*{name}"):
        x << x
    with pytest.raises(em.DTypeError, match="bitwise_right_shift: needs integer"):
        x >> (1.5 if name == "bool" else 1)
    with pytest.raises(em.DTypeError, match="bitwise_left_shift"):
        em.tensor([1, 2]) << 1.5
    with pytest.raises(em.ShapeError, match="bitwise_left_shift"):
        em.tensor([1, 2]) << em.tensor([1, 2, 3])


def test_creation_with_the_new_dtypes_matches_torch():
    for name in ("uint8", "int8", "int16"):
        e, t = getattr(em, name), getattr(torch, name)
        for got, want in ((em.zeros(2, 3, dtype=e), torch.zeros(2, 3, dtype=t)),
                          (em.ones(4, dtype=e), torch.ones(4, dtype=t)),
                          (em.full((2,), 7, dtype=e), torch.full((2,), 7, dtype=t)),
                          (em.arange(0, 20, 3, dtype=e), torch.arange(0, 20, 3, dtype=t)),
                          (em.tensor([[1, 2]], dtype=e), torch.tensor([[1, 2]], dtype=t))):
            assert got.dtype is e and got.numpy().dtype == np.dtype(name)
            np.testing.assert_array_equal(got.numpy(), want.numpy())
        assert em.tensor(np.arange(3, dtype=name)).dtype is e  # NumPy's dtype is kept


def test_small_int_index_tensors_are_refused_clearly():
    x = em.arange(4.0)
    for name in ("uint8", "int8", "int16"):
        with pytest.raises(em.DTypeError, match=f"getitem: an index tensor must be int32, int64 "
                                                f"or bool, got {name}"):
            x[em.tensor([0, 1], dtype=getattr(em, name))]
        with pytest.raises(em.DTypeError, match="gather: the index must be an int32 or int64"):
            x.gather(0, em.tensor([0, 1], dtype=getattr(em, name)))
    assert x[np.array([3, 1], np.uint8)].numpy().tolist() == [3.0, 1.0]  # NumPy ints index


def test_records_round_trip_the_new_dtypes(tmp_path):
    state = {"u": em.tensor([0, 255, 7], dtype=em.uint8),
             "i": em.tensor([-128, 127], dtype=em.int8),
             "s": em.tensor([[-32768, 5]], dtype=em.int16)}
    em.save(state, tmp_path / "m.ember")
    em.save_safetensors(state, tmp_path / "m.safetensors")
    for back in (em.load(tmp_path / "m.ember"), em.load_safetensors(tmp_path / "m.safetensors")):
        for k, v in state.items():
            assert back[k].dtype is v.dtype
            np.testing.assert_array_equal(back[k].numpy(), v.numpy())
    safetensors = pytest.importorskip("safetensors.numpy")
    reference = safetensors.load_file(str(tmp_path / "m.safetensors"))
    assert {k: v.dtype.name for k, v in reference.items()} == {"u": "uint8", "i": "int8",
                                                                 "s": "int16"}


def test_integer_chains_stay_exact_through_fusion():
    # Fused code computes in float registers; integer groups must run their own kernels.
    x = em.tensor(np.arange(256, dtype=np.uint8))
    y = ((x + 200) * 3 - 7) ^ 0x55
    want = ((np.arange(256).astype(np.int64) + 200) * 3 - 7).astype(np.uint8) ^ 0x55
    np.testing.assert_array_equal(y.numpy(), want)


def test_wgpu_refuses_the_small_ints_at_the_call():
    found = em.available("wgpu")
    if not found:
        pytest.skip("no wgpu adapter")
    for name in ("uint8", "int8", "int16"):
        with pytest.raises(em.DTypeError, match=f"{name} is not supported on wgpu.*8- or 16-bit"):
            em.zeros(3, dtype=getattr(em, name), device=found[0])
        with pytest.raises(em.DTypeError, match=f"{name} is not supported on wgpu"):
            em.tensor([1, 2], device=found[0]).to(getattr(em, name))


@pytest.mark.parametrize("name", ["uint8", "int8", "int16", "int32"])
def test_sum_with_an_integer_dtype_wraps_in_it_as_torch(name):
    values = [[100, 100, 90], [-3, 250, 7]]
    got = em.tensor(values).sum(1, dtype=getattr(em, name))
    want = torch.tensor(values).sum(1, dtype=getattr(torch, name))
    assert got.dtype.name == name
    np.testing.assert_array_equal(got.numpy(), want.numpy())
