"""Creating tensors (em.tensor, fills, ranges, eye, random) and reading them back."""

from __future__ import annotations

import pickle

import ml_dtypes
import numpy as np
import pytest

import ember as em

ALL_DTYPES = [em.float32, em.float64, em.float16, em.bfloat16, em.int32, em.int64, em.bool]

# ----- em.tensor ------------------------------------------------------------------------------


@pytest.mark.parametrize("data, dtype, shape", [
    ([1.0, 2.5], em.float32, (2,)),
    ([[1, 2], [3, 4]], em.int64, (2, 2)),
    ([True, False], em.bool, (2,)),
    ([1, 2.5], em.float32, (2,)),           # mixed int / float → the default float
    ([True, 2], em.int64, (2,)),            # mixed bool / int → int
    ([[True], [0.5]], em.float32, (2, 1)),
    (3.5, em.float32, ()),
    (7, em.int64, ()),
    (False, em.bool, ()),
    ([], em.float32, (0,)),
    ([[], []], em.float32, (2, 0)),
    ((1, 2, 3), em.int64, (3,)),
    (range(4), em.int64, (4,)),
    ([2**62, -2**63], em.int64, (2,)),
])
def test_tensor_infers_pytorch_dtypes(data, dtype, shape, device) -> None:
    t = em.tensor(data, device=device)
    assert t.dtype is dtype and t.shape == shape and t.device == device
    np.testing.assert_array_equal(t.numpy(), np.asarray(data, dtype=dtype.np).reshape(shape))


@pytest.mark.parametrize("np_dtype, expected", [
    (np.float32, em.float32), (np.float64, em.float64), (np.float16, em.float16),
    (ml_dtypes.bfloat16, em.bfloat16), (np.int32, em.int32), (np.int64, em.int64),
    (np.bool_, em.bool), (np.int8, em.int8), (np.int16, em.int16), (np.uint8, em.uint8),
    (np.uint16, em.int32), (np.uint32, em.int64), (np.dtype(">f4"), em.float32),
    (np.dtype(">i8"), em.int64),
])
def test_tensor_from_numpy_keeps_the_dtype_and_copies(np_dtype, expected, device) -> None:
    source = (np.arange(12).reshape(3, 4) % 7).astype(np_dtype)
    for make in (em.tensor, em.from_numpy):
        t = make(source, device=device)
        assert t.dtype is expected and t.shape == (3, 4)
        before = source.copy()
        source[...] = 1  # mutating the source afterwards must not change the tensor
        np.testing.assert_array_equal(t.numpy(), before.astype(expected.np))
        source[...] = before


def test_tensor_from_numpy_views_and_scalars() -> None:
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    view = base[::2, 1::2].T  # non-contiguous
    t = em.tensor(view)
    base[...] = -1
    np.testing.assert_array_equal(t.numpy(), np.arange(24, dtype=np.float32).reshape(4, 6)[::2, 1::2].T)
    assert em.tensor(np.float64(2.5)).dtype is em.float64
    assert em.tensor(np.int32(3)).dtype is em.int32
    assert em.tensor(np.array(4, np.int16)).dtype is em.int16
    assert em.tensor(ml_dtypes.bfloat16(1.5)).dtype is em.bfloat16
    assert em.tensor(np.float16(1.5)).item() == 1.5


def test_tensor_dtype_argument_converts() -> None:
    assert em.tensor([1.7, -1.7], dtype=em.int64).tolist() == [1, -1]  # toward zero
    assert em.tensor([0, 2, 0], dtype="bool").tolist() == [False, True, False]
    assert em.tensor([1, 2], dtype=np.float64).dtype is em.float64
    assert em.tensor([1, 2], dtype=float).dtype is em.float32
    assert em.tensor([1, 2], dtype=int).dtype is em.int64
    assert em.tensor(np.ones(2, np.float64), dtype=em.bfloat16).dtype is em.bfloat16


def test_tensor_of_a_tensor_is_that_tensor_or_a_converted_one() -> None:
    t = em.tensor([1, 2])
    assert em.tensor(t) is t
    moved = em.tensor(t, device="cpu:1", dtype=em.float32)
    assert moved.device == em.cpu(1) and moved.dtype is em.float32 and moved.tolist() == [1.0, 2.0]


@pytest.mark.parametrize("ragged", [[[1, 2], [3]], [1, [2, 3]], [[[1]], [[1, 2]]]])
def test_ragged_lists_raise_shape_error(ragged) -> None:
    with pytest.raises(em.ShapeError, match="tensor: .*ragged"):
        em.tensor(ragged)


@pytest.mark.parametrize("bad", ["abc", ["a", "b"], [1, "x"], None, [None, 1], [1j], b"xy",
                                 np.array(["a"]), np.array([1 + 2j]), np.array([1], np.uint64)])
def test_non_numeric_data_raises_dtype_error(bad) -> None:
    with pytest.raises(em.DTypeError):
        em.tensor(bad)


def test_ints_past_int64_overflow() -> None:
    with pytest.raises(OverflowError, match="int64"):
        em.tensor([2**63])
    with pytest.raises(OverflowError):
        em.tensor([-2**63 - 1, 1])


# ----- reads ----------------------------------------------------------------------------------


def test_item_tolist_and_asarray(device) -> None:
    t = em.tensor([[1.5, 2.0]], device=device)
    assert em.tensor([[7]], device=device).item() == 7
    assert isinstance(em.tensor([[7]]).item(), int)
    assert isinstance(em.tensor(2.5).item(), float)
    assert em.tensor(True).item() is True
    assert t.tolist() == [[1.5, 2.0]]
    assert em.tensor(3).tolist() == 3
    assert em.tensor([1.5], dtype=em.bfloat16).tolist() == [1.5]
    array = np.asarray(t)
    assert array.shape == (1, 2) and array.dtype == np.float32
    assert not array.flags.writeable and not t.numpy().flags.writeable
    with pytest.raises(ValueError):
        array[0, 0] = 5
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    assert float(em.tensor([2.5])) == 2.5 and int(em.tensor(3)) == 3


def test_item_of_more_than_one_element_raises_shape_error() -> None:
    with pytest.raises(em.ShapeError, match=r"item: .*one element.*\(2,\)"):
        em.tensor([1, 2]).item()
    with pytest.raises(em.ShapeError):
        em.zeros(0).item()


def test_bool_of_a_tensor_raises_and_points_to_item() -> None:
    with pytest.raises(TypeError, match=r"item\(\)"):
        bool(em.tensor([True]))
    with pytest.raises(TypeError, match=r"item\(\)"):
        if em.tensor(1.0) > 0:
            pass


# ----- fills -----------------------------------------------------------------------------------


@pytest.mark.parametrize("make, value", [(em.zeros, 0), (em.ones, 1)])
def test_zeros_and_ones(make, value, device) -> None:
    for args in ((2, 3), ((2, 3),), ([2, 3],)):
        t = make(*args, device=device)
        assert t.shape == (2, 3) and t.dtype is em.float32 and t.device == device
        np.testing.assert_array_equal(t.numpy(), np.full((2, 3), value, np.float32))
    assert make().shape == () and make(0).shape == (0,) and make((4, 0, 2)).shape == (4, 0, 2)
    for dtype in ALL_DTYPES:
        t = make(3, dtype=dtype)
        assert t.dtype is dtype
        np.testing.assert_array_equal(t.numpy(), np.full(3, value, dtype.np))


def test_full_infers_dtype_from_the_value(device) -> None:
    cases = [(2.5, em.float32), (7, em.int64), (True, em.bool), (np.float64(1.5), em.float32),
             (np.int32(4), em.int64)]
    for value, dtype in cases:
        for shape in ((2, 3), [2, 3], 4, ()):
            t = em.full(shape, value, device=device)
            assert t.dtype is dtype and t.device == device
            assert t.shape == ((shape,) if isinstance(shape, int) else tuple(shape))
            np.testing.assert_array_equal(t.numpy(), np.full(t.shape, value, dtype.np))
    assert em.full((2,), 2.7, dtype=em.int64).tolist() == [2, 2]  # toward zero, as torch
    assert em.full((2,), -2.7, dtype=em.int32).tolist() == [-2, -2]
    assert em.full((1,), float("inf")).tolist() == [float("inf")]
    assert np.isnan(em.full((1,), float("nan"), dtype=em.float16).item())
    assert em.full((2,), 3, dtype=em.bfloat16).tolist() == [3.0, 3.0]


def test_full_refuses_values_the_dtype_cannot_hold() -> None:
    with pytest.raises(ValueError, match="does not fit in int32"):
        em.full((2,), 2**40, dtype=em.int32)
    with pytest.raises(ValueError, match="cannot fill"):
        em.full((2,), float("nan"), dtype=em.int64)
    with pytest.raises(ValueError, match="overflows float16"):
        em.full((2,), 1e5, dtype=em.float16)
    with pytest.raises(TypeError, match="help: use t.item()"):
        em.full((2,), em.tensor(1.0))
    with pytest.raises(TypeError):
        em.full((2,), "1")
    with pytest.raises(em.ShapeError, match="negative dimension"):
        em.full((2, -1), 1.0)
    with pytest.raises(TypeError):
        em.zeros(2.5)


def test_like_creators_follow_the_tensor(device) -> None:
    t = em.tensor([[1, 2, 3]], dtype=em.int32, device=device)
    for like, value in ((em.zeros_like(t), 0), (em.ones_like(t), 1), (em.full_like(t, 7), 7)):
        assert like.shape == (1, 3) and like.dtype is em.int32 and like.device == device
        np.testing.assert_array_equal(like.numpy(), np.full((1, 3), value, np.int32))
    assert em.full_like(t, 2.9).tolist() == [[2, 2, 2]]  # the tensor's dtype wins
    assert em.zeros_like(t, dtype=em.float16).dtype is em.float16
    other = "cpu:1" if device == em.cpu(0) else "cpu:0"
    assert em.ones_like(t, device=other).device == em.device(other)
    assert em.full_like(em.tensor([True, False]), 0).tolist() == [False, False]
    with pytest.raises(TypeError):
        em.zeros_like(np.zeros(3))


# ----- ranges ----------------------------------------------------------------------------------


@pytest.mark.parametrize("args, kwargs, expected, dtype", [
    ((5,), {}, [0, 1, 2, 3, 4], em.int64),
    ((2, 7, 2), {}, [2, 4, 6], em.int64),
    ((5, 0, -1), {}, [5, 4, 3, 2, 1], em.int64),
    ((5, -6, -3), {}, [5, 2, -1, -4], em.int64),
    ((0,), {}, [], em.int64),
    ((3, 3), {}, [], em.int64),
    ((0, 1, 0.25), {}, [0, 0.25, 0.5, 0.75], em.float32),
    ((2.5,), {}, [0, 1, 2], em.float32),
    ((1, -1, -0.5), {}, [1, 0.5, 0, -0.5], em.float32),
    ((0, 5, 2), {"dtype": em.float64}, [0, 2, 4], em.float64),
    ((0.5, 3.7), {"dtype": em.int64}, [0, 1, 2], em.int64),      # ints first, as torch
    ((-2.5, 2, 1.5), {"dtype": em.int32}, [-2, -1, 0, 1], em.int32),
    ((0, 3), {"dtype": em.bfloat16}, [0, 1, 2], em.bfloat16),
])
def test_arange(args, kwargs, expected, dtype, device) -> None:
    t = em.arange(*args, **kwargs, device=device)
    assert t.dtype is dtype and t.device == device and t.shape == (len(expected),)
    np.testing.assert_array_equal(t.numpy(), np.array(expected, dtype.np))


def test_arange_length_matches_torch_and_numpy() -> None:
    for start, stop, step in ((0, 1, 0.1), (0, 10, 3), (1, 2.5, 0.5), (-3, 3, 0.7),
                              (10**15, 10**15 + 7, 2)):
        assert em.arange(start, stop, step).shape[0] == len(np.arange(start, stop, step))
    np.testing.assert_allclose(em.arange(0, 1, 0.1).numpy(), np.arange(0, 1, 0.1), rtol=1e-6)
    assert em.arange(10**15, 10**15 + 7, 2).tolist() == list(range(10**15, 10**15 + 7, 2))


def test_arange_errors() -> None:
    with pytest.raises(ValueError, match="step must be nonzero"):
        em.arange(0, 5, 0)
    with pytest.raises(ValueError, match="step must be nonzero"):
        em.arange(0, 5, 0.5, dtype=em.int64)  # the step truncates to 0, as in torch
    with pytest.raises(ValueError, match="points away from stop"):
        em.arange(5, 0)
    with pytest.raises(ValueError, match="points away from stop"):
        em.arange(0, 5, -1)
    with pytest.raises(ValueError, match="finite"):
        em.arange(0, float("inf"))
    with pytest.raises(em.DTypeError):
        em.arange(3, dtype=em.bool)
    with pytest.raises(TypeError):
        em.arange("3")


def test_linspace(device) -> None:
    t = em.linspace(0, 1, 5, device=device)
    assert t.dtype is em.float32 and t.device == device
    np.testing.assert_array_equal(t.numpy(), np.array([0, 0.25, 0.5, 0.75, 1], np.float32))
    assert em.linspace(2, 3, 1).tolist() == [2.0]
    assert em.linspace(2, 3, 0).shape == (0,)
    assert em.linspace(3, -3, 4).tolist() == [3, 1, -1, -3]
    assert em.linspace(-1, 1, 5, dtype=em.int32).tolist() == [-1, 0, 0, 0, 1]  # as torch
    values = em.linspace(-1.3, 7.7, 1001, dtype=em.float64).numpy()
    np.testing.assert_allclose(values, np.linspace(-1.3, 7.7, 1001), rtol=1e-15, atol=1e-15)
    assert values[0] == -1.3 and values[-1] == 7.7
    assert em.linspace(0, 1, np.int64(3)).shape == (3,)
    with pytest.raises(ValueError, match="num"):
        em.linspace(0, 1, -1)
    with pytest.raises(ValueError, match="num"):
        em.linspace(0, 1, 2.0)


def test_linspace_and_arange_match_torch() -> None:
    torch = pytest.importorskip("torch")
    for start, stop, num in ((0, 1, 11), (-1.3, 7.7, 1001), (5, -5, 4), (0, 10, 7)):
        for dtype in ("float32", "float64", "int64"):
            want = torch.linspace(start, stop, num, dtype=getattr(torch, dtype)).numpy()
            got = em.linspace(start, stop, num, dtype=dtype).numpy()
            np.testing.assert_allclose(got, want, rtol=2e-7, atol=1e-6)
    for args in ((0, 1, 0.1), (5, 0, -1), (-2.5, 2, 1.5), (7,), (1, 2.5, 0.5)):
        want = torch.arange(*args)
        got = em.arange(*args)
        assert got.dtype.name == str(want.dtype).removeprefix("torch.")
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-7)


def test_eye(device) -> None:
    t = em.eye(3, device=device)
    assert t.dtype is em.float32 and t.device == device
    np.testing.assert_array_equal(t.numpy(), np.eye(3, dtype=np.float32))
    np.testing.assert_array_equal(em.eye(2, 4).numpy(), np.eye(2, 4, dtype=np.float32))
    np.testing.assert_array_equal(em.eye(4, 2, dtype=em.int32).numpy(), np.eye(4, 2, dtype=np.int32))
    assert em.eye(0).shape == (0, 0) and em.eye(2, 0).shape == (2, 0)
    for dtype in ALL_DTYPES:
        np.testing.assert_array_equal(em.eye(3, dtype=dtype).numpy(), np.eye(3, dtype=dtype.np))
    with pytest.raises(em.ShapeError):
        em.eye(-1)


# ----- random ---------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [lambda d: em.rand(2, 3, device=d), lambda d: em.randn((2, 3), device=d),
                                  lambda d: em.randint(0, 100, (2, 3), device=d)])
def test_same_seed_same_numbers_on_every_device(make) -> None:
    em.manual_seed(1234)
    first = make("cpu:0").numpy()
    em.manual_seed(1234)
    again = make("cpu:1").numpy()
    em.manual_seed(1235)
    other = make("cpu:0").numpy()
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    em.manual_seed(1234)
    make("cpu:0")
    assert not np.array_equal(make("cpu:0").numpy(), first)  # later calls move on


def test_seeds_wrap_modulo_2_64_like_torch() -> None:
    em.manual_seed(-1)
    a = em.rand(4).numpy()
    em.manual_seed(2**64 - 1)
    np.testing.assert_array_equal(em.rand(4).numpy(), a)
    with pytest.raises(TypeError):
        em.manual_seed(1.5)


N = 100_000


@pytest.mark.parametrize("dtype", [em.float32, em.float64, em.float16, em.bfloat16])
def test_rand_is_uniform_in_0_1(dtype) -> None:
    em.manual_seed(7)
    x = em.rand(N, dtype=dtype)
    assert x.dtype is dtype and x.shape == (N,)
    values = x.numpy().astype(np.float64)
    assert values.min() >= 0 and values.max() < 1  # never 1, even after rounding to float16
    assert abs(values.mean() - 0.5) < 0.01
    assert abs(values.std() - np.sqrt(1 / 12)) < 0.01
    assert len(np.unique(values)) > (200 if dtype is em.bfloat16 else 1000)


@pytest.mark.parametrize("dtype", [em.float32, em.float64, em.float16, em.bfloat16])
def test_randn_is_standard_normal(dtype) -> None:
    em.manual_seed(8)
    values = em.randn(N, dtype=dtype).numpy().astype(np.float64)
    assert abs(values.mean()) < 0.02
    assert abs(values.std() - 1) < 0.02
    assert abs(np.mean(np.abs(values) < 1) - 0.6827) < 0.01


def test_randint_bounds_and_dtypes() -> None:
    em.manual_seed(9)
    x = em.randint(-3, 4, (N,))
    assert x.dtype is em.int64
    values = x.numpy()
    assert values.min() == -3 and values.max() == 3
    counts = np.bincount(values + 3)
    assert counts.min() > N / 7 * 0.9 and counts.max() < N / 7 * 1.1
    assert em.randint(10, (5,)).shape == (5,)  # torch's randint(high, shape)
    assert em.randint(0, 5, 3).shape == (3,)
    assert em.randint(0, 2, (4,), dtype=em.bool).dtype is em.bool
    assert em.randint(0, 2**31 - 1, (4,), dtype=em.int32).dtype is em.int32
    assert em.randint(0, 10, (4,), dtype=em.float32).numpy().dtype == np.float32
    big = em.randint(2**40, 2**40 + 3, (100,)).numpy()
    assert big.min() >= 2**40 and big.max() < 2**40 + 3


def test_random_dtype_and_argument_errors() -> None:
    for make in (em.rand, em.randn):
        for dtype in (em.int32, em.int64, em.bool):
            with pytest.raises(em.DTypeError, match="floating dtype"):
                make(3, dtype=dtype)
    with pytest.raises(ValueError, match="low < high"):
        em.randint(5, 5, (2,))
    with pytest.raises(ValueError, match="does not fit in int32"):
        em.randint(0, 2**40, (2,), dtype=em.int32)
    with pytest.raises(ValueError, match="does not fit in bool"):
        em.randint(0, 3, (2,), dtype=em.bool)
    with pytest.raises(TypeError):
        em.randint(0.5, 3, (2,))
    with pytest.raises(TypeError):
        em.randint(3)


def test_creators_take_dtype_and_device(device) -> None:
    creators = [lambda **k: em.tensor([1, 2], **k), lambda **k: em.zeros(2, **k),
                lambda **k: em.ones(2, **k), lambda **k: em.full(2, 1, **k),
                lambda **k: em.arange(2, **k), lambda **k: em.linspace(0, 1, 2, **k),
                lambda **k: em.eye(2, **k), lambda **k: em.rand(2, **k),
                lambda **k: em.randn(2, **k), lambda **k: em.randint(0, 3, (2,), **k),
                lambda **k: em.from_numpy(np.ones(2), **k),
                lambda **k: em.zeros_like(em.ones(2), **k)]
    for create in creators:
        t = create(dtype=em.float64, device=device)
        assert t.dtype is em.float64 and t.device == device
        assert t.numpy().dtype == np.float64
        assert create(dtype="float16", device=str(device)).dtype is em.float16


def test_default_device_is_used(monkeypatch) -> None:
    assert em.zeros(2).device == em.cpu(0)
    monkeypatch.setenv("EMBER_DEVICE", "cpu:1")
    assert em.ones(2).device == em.cpu(1) and em.tensor([1]).device == em.cpu(1)


def test_dtype_objects_pickle_to_themselves() -> None:
    for dtype in ALL_DTYPES:
        assert pickle.loads(pickle.dumps(dtype)) is dtype
