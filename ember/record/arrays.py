"""What both file formats share: dtype names, shape checks, little-endian bytes, tensors.

Files store raw little-endian bytes; arrays in memory are native. Every check
here runs on numbers read from a file *before* anything of that size is
allocated, so a hostile header cannot make the loader ask for a terabyte.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ember import dtype as _dtype
from ember.errors import RecordError

# NumPy's own limit on dimensions.
MAX_NDIM = 64
# NumPy refuses an array whose nonzero dims times the item size pass its intp range; staying
# well below it keeps `np.empty(shape)` of an empty-but-wide shape from raising.
_MAX_NBYTES = 2**62

class DtypeTable(Mapping[str, np.dtype]):
    """A file format's dtype names → NumPy dtypes, and back (``name_of``).

    The types ml_dtypes defines join, importing it, on the first lookup of one of their
    names, on iteration, or when ``name_of`` meets a dtype of kind "V" (theirs): only then
    can they be needed, and most programs never load ml_dtypes at all.
    """

    def __init__(self, numpy_types: Mapping[str, type],
                 ml_dtypes_names: Mapping[str, str]) -> None:
        self._table = {name: np.dtype(t) for name, t in numpy_types.items()}
        self._names = {npd: name for name, npd in self._table.items()}
        self._pending = dict(ml_dtypes_names)  # file name → ml_dtypes attribute

    def _load(self) -> None:
        if self._pending:
            import ml_dtypes

            for name, attribute in self._pending.items():
                npd = np.dtype(getattr(ml_dtypes, attribute))
                self._table[name], self._names[npd] = npd, name
            self._pending = {}

    def __getitem__(self, name: str) -> np.dtype:
        if name in self._pending:
            self._load()
        return self._table[name]

    def __iter__(self) -> Iterator[str]:
        self._load()
        return iter(self._table)

    def __len__(self) -> int:
        self._load()
        return len(self._table)

    def name_of(self, npd: np.dtype) -> str | None:
        """The file's name of ``npd`` (byte order ignored), or None if it has none."""
        if npd.kind == "V":
            self._load()
        return self._names.get(npd if npd.isnative else npd.newbyteorder("="))


_ML_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e5m2")
# Every dtype a NumPy array may have in a file, by NumPy's name for it.
NUMPY_DTYPES = DtypeTable(
    {np.dtype(t).name: t
     for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
               np.uint64, np.float16, np.float32, np.float64, np.complex64, np.complex128)},
    {name: name for name in _ML_DTYPES})


def numpy_dtype_name(npd: np.dtype) -> str | None:
    """The file name of a NumPy dtype (byte order ignored), or None if files cannot hold it."""
    return NUMPY_DTYPES.name_of(npd)


def check_shape(where: str, shape: Any, itemsize: int) -> tuple[int, ...]:
    """``shape`` as a tuple of non-negative ints, or RecordError naming ``where``.

    Also refuses a shape NumPy could not allocate even when empty (``(0, 2**62)``).
    """
    if not isinstance(shape, list | tuple):
        raise RecordError(f"{where}: shape must be a list of ints, got {type(shape).__name__}")
    if len(shape) > MAX_NDIM:
        raise RecordError(f"{where}: shape has {len(shape)} dims, more than {MAX_NDIM}")
    for d in shape:
        if type(d) is not int or d < 0:  # (bool is an int: refused too)
            raise RecordError(f"{where}: shape {list(shape)} must hold non-negative ints")
    if math.prod(d for d in shape if d) * itemsize > _MAX_NBYTES:
        raise RecordError(f"{where}: shape {list(shape)} is absurdly large")
    return tuple(shape)


def nbytes_of(shape: tuple[int, ...], itemsize: int) -> int:
    return math.prod(shape) * itemsize


def le_bytes(array: np.ndarray) -> memoryview:
    """The array's elements as little-endian bytes, C order (no copy where possible)."""
    array = np.ascontiguousarray(array)
    if _big_endian(array.dtype):
        array = array.byteswap()  # swapped in memory, dtype kept: the bytes are now LE
    return memoryview(array.reshape(-1).view(np.uint8))


def from_le_bytes(where: str, data: Any, npd: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """A new native, writable array of ``shape`` from little-endian ``data`` (checked length)."""
    expected = nbytes_of(shape, npd.itemsize)
    if len(data) != expected:
        raise RecordError(f"{where}: {len(data)} data bytes, but {npd.name} {list(shape)} needs "
                          f"{expected}")
    array = np.frombuffer(data, dtype=npd).reshape(shape).copy()
    return finish_read(where, array)


def finish_read(where: str, array: np.ndarray) -> np.ndarray:
    """Fix up an array whose memory was filled with a file's little-endian bytes (in place)."""
    if sys.byteorder == "big" and array.dtype.itemsize > 1:
        array.byteswap(inplace=True)
    if array.dtype == np.bool_ and array.size and array.view(np.uint8).max() > 1:
        raise RecordError(f"{where}: bool data holds bytes other than 0 and 1")
    return array


def _big_endian(npd: np.dtype) -> bool:
    if npd.itemsize == 1:
        return False
    return npd.byteorder == ">" or (npd.byteorder == "=" and sys.byteorder == "big")


def tensor_dtype(npd: np.dtype) -> _dtype.DType | None:
    """The ember dtype a loaded array of ``npd`` becomes as a tensor (widening as
    ``em.tensor`` does), or None where ember has none (uint64, complex, float8)."""
    try:
        return _dtype.from_numpy_dtype(npd, "load")
    except _dtype.DTypeError:
        return None


def to_tensor(array: np.ndarray, device: Any) -> Any:
    """A tensor on ``device`` from a freshly read array that nothing else holds."""
    from ember.ops.creation import tensor, upload

    target = tensor_dtype(array.dtype)
    if target is not None and array.dtype == target.np and array.flags.c_contiguous:
        return upload(array, target, device)  # the array is ours: hand it over, no copy
    return tensor(array, device=device)
