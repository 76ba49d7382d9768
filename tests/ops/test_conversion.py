"""Conversions: astype / to(dtype) for every dtype pair, moves between devices, detach,
DLPack with NumPy and PyTorch."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

import ember as em
from tests.runtime_mode import lazy_only

ALL_DTYPES = [em.float32, em.float64, em.float16, em.bfloat16, em.int32, em.int64, em.bool]
VALUES = [0.0, 1.0, -1.0, 2.75, -2.75, 0.5, -0.5, 100.0, -0.0]


def _source(dtype: em.DType) -> np.ndarray:
    return np.array(VALUES).astype(dtype.np)


def _expected(source: np.ndarray, target: em.DType) -> np.ndarray:
    if target is em.bool:
        return source.astype(np.float64) != 0
    if target.is_integer:
        return np.trunc(source.astype(np.float64)).astype(target.np)  # toward zero
    return source.astype(np.float64).astype(target.np)


@pytest.mark.parametrize("src, dst", list(itertools.product(ALL_DTYPES, ALL_DTYPES)),
                         ids=lambda d: d.name)
def test_astype_every_pair(src, dst, device) -> None:
    source = _source(src)
    x = em.tensor(source, device=device)
    for convert in (lambda t: t.astype(dst), lambda t: t.to(dst), lambda t: t.to(dst.name),
                    lambda t: t.to(dtype=dst)):
        y = convert(x)
        assert y.dtype is dst and y.shape == x.shape and y.device == device
        np.testing.assert_array_equal(y.numpy(), _expected(source, dst))
    if src is dst:
        assert x.astype(dst) is x and x.to(dst) is x


def test_casts_match_torch() -> None:
    torch = pytest.importorskip("torch")
    values = np.array([0.0, -0.0, 1.5, -1.5, 2.5, -2.99, 0.3, 1e4, np.nan, np.inf, -np.inf])
    finite = np.isfinite(values)
    for src, dst in itertools.product(ALL_DTYPES, ALL_DTYPES):
        source = values.astype(src.np) if src.is_floating_point else \
            values[finite].astype(src.np if src is not em.bool else np.float64).astype(src.np)
        if dst.is_integer and src.is_floating_point:
            source = source[np.isfinite(source.astype(np.float64))]  # out of range: undefined
        want = torch.from_numpy(source.astype(np.float32) if src is em.bfloat16 else source.copy())
        if src is em.bfloat16:
            want = want.to(torch.bfloat16)
        want = want.to(getattr(torch, dst.name))
        got = em.tensor(source).to(dst).numpy()
        want = want.float().numpy() if dst is em.bfloat16 else want.numpy()
        np.testing.assert_array_equal(got.astype(np.float64) if dst is em.bfloat16 else got,
                                      want, err_msg=f"{src.name} -> {dst.name}")


def test_tensor_conversion_shortcuts() -> None:
    x = em.tensor([1.7, -1.7])
    assert x.float().dtype is em.float32 and x.double().dtype is em.float64
    assert x.half().dtype is em.float16
    assert x.int().tolist() == [1, -1] and x.int().dtype is em.int32
    assert x.long().dtype is em.int64 and x.bool().tolist() == [True, True]
    assert em.tensor([0.0, float("nan")]).bool().tolist() == [False, True]
    assert x.astype(np.float64).dtype is em.float64 and x.astype("double").dtype is em.float64
    assert x.astype(float).dtype is em.float32 and x.astype(int).dtype is em.int64


def test_to_device_round_trip_keeps_values_and_device() -> None:
    for dtype in ALL_DTYPES:
        x = em.tensor(_source(dtype), device="cpu:0")
        y = x.to("cpu:1")
        assert y.device == em.cpu(1) and y.dtype is dtype and y.shape == x.shape
        z = y.to(em.cpu(0))
        assert z.device == em.cpu(0)
        np.testing.assert_array_equal(z.numpy(), x.numpy())
        np.testing.assert_array_equal((y + y if dtype is not em.bool else y | y).numpy(),
                                      (x + x if dtype is not em.bool else x | x).numpy())


def test_to_same_device_returns_the_same_tensor() -> None:
    x = em.ones(3, device="cpu:1")
    assert x.to("cpu:1") is x and x.to(em.cpu(1)) is x and x.to(device="cpu:1") is x
    y = em.ones(3)
    assert y.to("cpu") is y  # "cpu" is cpu:0


def test_to_device_and_dtype_together() -> None:
    x = em.tensor([1.5, 2.5], device="cpu:0")
    for y in (x.to("cpu:1", em.int64), x.to(em.int64, "cpu:1"),
              x.to(device="cpu:1", dtype="int64"), x.to(em.zeros(1, dtype=em.int64, device="cpu:1"))):
        assert y.device == em.cpu(1) and y.dtype is em.int64 and y.tolist() == [1, 2]
    with pytest.raises(em.DTypeError, match="to: expected a device or a dtype"):
        x.to("float128")
    with pytest.raises(em.DeviceError):
        x.to("cpu:x")
    with pytest.raises(TypeError):
        x.to("cpu:1", em.int64, em.float32)


@lazy_only
def test_transfer_of_a_failed_tensor_fails_at_the_read() -> None:
    bad = em.tensor([1, 2], device="cpu:0") // 0
    moved = bad.to("cpu:1")
    with pytest.raises(em.KernelError, match="floordiv"):
        moved.numpy()


def test_detach_keeps_values() -> None:
    x = em.tensor([[1.0, 2.0]])
    y = x.detach()
    assert y is not x and y.shape == x.shape and y.dtype is x.dtype and y.device == x.device
    np.testing.assert_array_equal(y.numpy(), x.numpy())


# ----- DLPack --------------------------------------------------------------------------------

NUMPY_DLPACK_DTYPES = [d for d in ALL_DTYPES if d is not em.bfloat16]  # NumPy has no bfloat16


@pytest.mark.parametrize("dtype", NUMPY_DLPACK_DTYPES, ids=lambda d: d.name)
def test_dlpack_round_trip_with_numpy(dtype, device) -> None:
    source = _source(dtype).reshape(3, 3)
    x = em.tensor(source, device=device)
    on_host = x.__dlpack_device__() == (1, 0)
    # A CUDA tensor exports its device memory (kDLCUDA = 2); NumPy asks for a host copy.
    shared = np.from_dlpack(x) if on_host else np.from_dlpack(x, device="cpu")
    assert shared.dtype == dtype.np and shared.shape == (3, 3)
    np.testing.assert_array_equal(shared, source)
    assert not shared.flags.writeable  # ember tensors are immutable: exported read-only
    back = em.from_dlpack(source, device=device)
    assert back.dtype is dtype and back.device == device
    np.testing.assert_array_equal(back.numpy(), source)
    assert on_host or x.__dlpack_device__() == (2, device.index)


def test_dlpack_legacy_consumers_get_a_private_copy() -> None:
    x = em.tensor([1.0, 2.0])
    capsule = x.__dlpack__()  # no max_version: cannot signal read-only
    assert "dltensor" in repr(capsule)
    with pytest.raises(BufferError):
        x.__dlpack__(copy=False)
    x.__dlpack__(max_version=(1, 0), copy=False)  # shared, flagged read-only


def test_from_dlpack_reads_read_only_views_and_widens() -> None:
    source = np.arange(6, dtype=np.float64).reshape(2, 3)
    source.flags.writeable = False
    np.testing.assert_array_equal(em.from_dlpack(source).numpy(), source)
    np.testing.assert_array_equal(em.from_dlpack(source.T).numpy(), source.T)
    small = np.array([1, 200, 3], np.uint8)  # an ember dtype now: kept, and wraps as torch
    kept = em.from_dlpack(small)
    assert kept.dtype is em.uint8 and kept.numpy().dtype == np.uint8
    assert (kept * 2).tolist() == [2, 144, 6]
    widened = em.from_dlpack(np.array([1, 60000, 3], np.uint16))
    assert widened.dtype is em.int32 and widened.numpy().dtype == np.int32
    assert (widened * 2).tolist() == [2, 120000, 6]
    x = em.ones(2)
    assert em.from_dlpack(x) is x and em.from_dlpack(x, device="cpu:1").device == em.cpu(1)
    with pytest.raises(TypeError, match="__dlpack__"):
        em.from_dlpack([1, 2])
    with pytest.raises(em.DTypeError):
        em.from_dlpack(np.array([1 + 1j]))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_dlpack_round_trip_with_torch(dtype) -> None:
    torch = pytest.importorskip("torch")
    source = _source(dtype).reshape(3, 3)
    x = em.tensor(source)
    t = torch.from_dlpack(x)
    assert t.dtype == getattr(torch, dtype.name) and tuple(t.shape) == (3, 3)
    np.testing.assert_array_equal(t.float().numpy() if dtype is em.bfloat16 else t.numpy(),
                                  source.astype(np.float32) if dtype is em.bfloat16 else source)
    back = em.from_dlpack(t)
    assert back.dtype is dtype and back.shape == (3, 3)
    np.testing.assert_array_equal(back.numpy(), source)
    # A torch tensor made by torch (strided, 0-d) comes in too.
    made = torch.arange(6).reshape(2, 3).T.to(getattr(torch, dtype.name))
    imported = em.from_dlpack(made)
    assert imported.dtype is dtype
    np.testing.assert_array_equal(
        imported.numpy().astype(np.float64),
        made.double().numpy() if dtype is not em.bool else made.numpy().astype(np.float64))
    assert em.from_dlpack(torch.tensor(2.5)).item() == 2.5


def test_from_dlpack_torch_shares_memory_and_keeps_bfloat16_bits() -> None:
    torch = pytest.importorskip("torch")
    t = torch.tensor([1.0, 1.0078125, -3.5], dtype=torch.bfloat16)
    x = em.from_dlpack(t)
    assert x.numpy().dtype == ml_dtypes.bfloat16
    assert x.tolist() == [1.0, 1.0078125, -3.5]
    assert (x * 2).dtype is em.bfloat16
    with pytest.raises(em.DTypeError):
        em.from_dlpack(torch.tensor([1], dtype=torch.uint64))
