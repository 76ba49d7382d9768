"""Dtypes and PyTorch's type-promotion rules.

bfloat16 is ``ml_dtypes.bfloat16`` on the CPU: a real NumPy dtype whose
arithmetic rounds like PyTorch's. Low-precision floats are computed in
float32 and rounded once per op, as PyTorch's CPU kernels do. ``ml_dtypes``
is imported when ``bfloat16.np`` is first read, not with ember: loading its
extension costs more than the rest of ``import ember``, and most programs never
touch a bfloat16.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np

from ember.errors import DTypeError


class DType:
    """A tensor element type: ``em.float32``, ``em.int64``, ``em.bool`` ..."""

    __slots__ = ("name", "np", "itemsize", "kind", "rank")

    def __init__(self, name: str, np_dtype: np.dtype, kind: str, rank: int) -> None:
        self.name = name
        self.np = np.dtype(np_dtype)
        self.itemsize = self.np.itemsize
        self.kind = kind  # "b" bool, "i" integer (uint8 too), "f" floating
        self.rank = rank  # order inside its kind, for promotion

    @property
    def is_floating_point(self) -> bool:
        """Whether this is a floating dtype (float16, bfloat16, float32, float64)."""
        return self.kind == "f"

    @property
    def is_integer(self) -> bool:
        """Whether this is a signed integer dtype (int32, int64)."""
        return self.kind == "i"

    @property
    def is_bool(self) -> bool:
        """Whether this is ``bool``."""
        return self.kind == "b"

    @property
    def is_signed(self) -> bool:
        """Whether the dtype holds negative values (PyTorch's ``dtype.is_signed``)."""
        return self.kind == "f" or (self.kind == "i" and self.np.kind == "i")

    def __repr__(self) -> str:
        return f"ember.{self.name}"

    def __reduce__(self) -> tuple:
        # By name, so pickling and copying give back the one instance (``em.bool``'s
        # module-level name is ``bool_``, so the plain global-name form would fail).
        return (as_dtype, (self.name,))


class _LazyDType(DType):
    """A DType whose NumPy dtype comes from a module imported when ``np`` is first read."""

    __slots__ = ("_load",)

    def __init__(self, name: str, itemsize: int, kind: str, rank: int,
                 load: Callable[[], object]) -> None:
        self.name = name
        self.itemsize = itemsize
        self.kind = kind
        self.rank = rank
        self._load = load

    @property
    def np(self) -> np.dtype:
        try:
            return _NP_SLOT.__get__(self, DType)
        except AttributeError:
            resolved = np.dtype(self._load())
            _NP_SLOT.__set__(self, resolved)
            _BY_NUMPY[resolved] = self
            LOW_PRECISION.add(resolved)
            return resolved


_NP_SLOT = DType.__dict__["np"]  # the base class's slot, which the property above fills once


def _ml_dtypes_bfloat16() -> object:
    import ml_dtypes

    return ml_dtypes.bfloat16


def bfloat16_loaded() -> bool:
    """Whether a bfloat16 NumPy array can exist yet (ml_dtypes is imported): until then a
    NumPy dtype is never bfloat16, and checks can say so without importing it."""
    return "ml_dtypes" in sys.modules


def is_bfloat16(npd: np.dtype) -> bool:
    """Whether NumPy dtype ``npd`` is ml_dtypes' bfloat16 (without importing ml_dtypes
    when no bfloat16 array can exist)."""
    return npd.kind == "V" and bfloat16_loaded() and npd == bfloat16.np


bool_ = DType("bool", np.bool_, "b", 0)
# uint8 ranks with int8: promotion special-cases the pair (_promote_pair).
uint8 = DType("uint8", np.uint8, "i", 0)
int8 = DType("int8", np.int8, "i", 0)
int16 = DType("int16", np.int16, "i", 1)
int32 = DType("int32", np.int32, "i", 2)
int64 = DType("int64", np.int64, "i", 3)
float16 = DType("float16", np.float16, "f", 0)
bfloat16: DType = _LazyDType("bfloat16", 2, "f", 0, _ml_dtypes_bfloat16)
float32 = DType("float32", np.float32, "f", 1)
float64 = DType("float64", np.float64, "f", 2)

ALL: tuple[DType, ...] = (bool_, uint8, int8, int16, int32, int64, float16, bfloat16, float32,
                          float64)
BY_NAME: dict[str, DType] = {d.name: d for d in ALL}
# bfloat16 joins when its NumPy dtype is first read (_LazyDType.np).
_BY_NUMPY: dict[np.dtype, DType] = {d.np: d for d in ALL if d is not bfloat16}
# NumPy dtypes that have no ember twin but convert without loss of meaning.
_NUMPY_WIDENED = {np.dtype(np.uint16): int32, np.dtype(np.uint32): int64}

# PyTorch's other names (``torch.float``, ``torch.long`` ...), as strings.
_ALIASES = {"bool_": bool_, "float": float32, "double": float64, "half": float16,
            "int": int32, "long": int64, "short": int16}



class _NumpyByName(dict):
    """IR dtype name → NumPy dtype; bfloat16's entry is added on its first lookup."""

    def __missing__(self, name: str) -> np.dtype:
        resolved = self[name] = BY_NAME[name].np
        return resolved


NUMPY_BY_NAME: dict[str, np.dtype] = _NumpyByName(
    {d.name: d.np for d in ALL if d is not bfloat16})


# NumPy dtypes that compute in float32 and round once per op (``npd in LOW_PRECISION``).
# bfloat16's joins when it is first read (_LazyDType.np), which every path that makes a
# bfloat16 array does first.
LOW_PRECISION: set[np.dtype] = {np.dtype(np.float16)}
# Their IR names: a kernel's per-call test (hashing a NumPy dtype costs five times more).
LOW_PRECISION_NAMES = frozenset({"float16", "bfloat16"})

DEFAULT_FLOAT = float32
DEFAULT_INT = int64

_KIND_ORDER = {"b": 0, "i": 1, "f": 2}


def as_dtype(value: object) -> DType:
    """Turn a DType, its name, a NumPy dtype or a Python type into a DType."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        found = BY_NAME.get(value) or _ALIASES.get(value)
        if found is not None:
            return found
    if value is float:
        return DEFAULT_FLOAT
    if value is int:
        return DEFAULT_INT
    if value is bool:
        return bool_
    if type(value).__module__ == "torch" and str(value).startswith("torch."):
        found = BY_NAME.get(str(value)[6:])  # torch.float32 → float32, without importing torch
        if found is not None:
            return found
    if value is None:
        raise DTypeError(f"dtype: None is not an ember dtype; expected one of "
                         f"{', '.join(d.name for d in ALL)}")
    try:
        npd = _native(np.dtype(value))
    except (TypeError, ValueError):
        npd = None
    if npd is not None:
        if npd in _BY_NUMPY:
            return _BY_NUMPY[npd]
        if is_bfloat16(npd):
            return bfloat16
        if npd in _NUMPY_WIDENED:
            return _NUMPY_WIDENED[npd]
    raise DTypeError(
        f"dtype: {value!r} is not an ember dtype; expected one of "
        f"{', '.join(d.name for d in ALL)}"
    )


_STORAGE_NAMES: dict = {}


def storage_name(stored: object) -> str:
    """The dtype name of a stored array's ``dtype`` (a NumPy dtype: NumPy's names are
    ember's; or a backend's name already). Cached: ``str`` of a NumPy dtype runs Python
    code in NumPy, and a device worker asks for it per input it plans or replays."""
    name = _STORAGE_NAMES.get(stored)
    if name is None:
        name = _STORAGE_NAMES[stored] = str(stored)
    return name


def _native(npd: np.dtype) -> np.dtype:
    """``npd`` in the machine's byte order (``>f4`` → ``<f4`` on x86)."""
    return npd if npd.isnative else npd.newbyteorder("=")


def from_numpy_dtype(npd: np.dtype, op: str) -> DType:
    """The ember dtype that stores a NumPy array of dtype ``npd``.

    uint16 widens to int32 and uint32 to int64 (the values are kept);
    byte-swapped arrays map to their native twin.
    """
    npd = _native(npd)
    if npd in _BY_NUMPY:
        return _BY_NUMPY[npd]
    if is_bfloat16(npd):
        return bfloat16
    if npd in _NUMPY_WIDENED:
        return _NUMPY_WIDENED[npd]
    raise DTypeError(f"{op}: NumPy dtype {npd} has no ember equivalent (uint64, complex and "
                     f"object arrays are not supported)")


def _promote_pair(a: DType, b: DType) -> DType:
    if a is b:
        return a
    ka, kb = _KIND_ORDER[a.kind], _KIND_ORDER[b.kind]
    if ka != kb:
        return a if ka > kb else b
    # uint8 with int8: neither holds the other, PyTorch widens to int16.
    if {a, b} == {uint8, int8}:
        return int16
    if a.rank != b.rank:
        return a if a.rank > b.rank else b
    # float16 with bfloat16: neither holds the other, PyTorch widens to float32.
    return float32


_PROMOTE = {(a, b): _promote_pair(a, b) for a in ALL for b in ALL}


def promote(a: DType, b: DType) -> DType:
    """The result dtype of a binary op between two dimensioned tensors."""
    return _PROMOTE[a, b]


def scalar_kind(value: object) -> str:
    """The kind of a Python scalar: "b", "i" or "f"; raises DTypeError otherwise."""
    if isinstance(value, bool | np.bool_):
        return "b"
    if isinstance(value, int | np.integer):
        return "i"
    if isinstance(value, float | np.floating):
        return "f"
    raise DTypeError(f"expected a tensor or a Python scalar, got {type(value).__name__}")


def wrap_int(value: int, dtype: DType) -> int:
    """A Python int as ``dtype`` stores it: modulo 2**bits into its range (signed, or
    unsigned for uint8), as PyTorch converts an out-of-range Python int operand
    (``uint8_tensor == -6`` compares with 250)."""
    bits = 8 * dtype.itemsize
    value = int(value) & ((1 << bits) - 1)
    if dtype.np.kind == "u":
        return value
    return value - (1 << bits) if value >> (bits - 1) else value


def default_for_kind(kind: str) -> DType:
    return {"b": bool_, "i": DEFAULT_INT, "f": DEFAULT_FLOAT}[kind]


def promote_with_scalar(tensor_dtype: DType, kind: str) -> DType:
    """A tensor op a Python scalar: the scalar only matters if its kind is higher.

    ``float32_tensor + 2.5`` stays float32; ``int32_tensor + 2.5`` is float32
    (the default float); ``bool_tensor + 1`` is int64 (the default int).
    """
    if _KIND_ORDER[kind] > _KIND_ORDER[tensor_dtype.kind]:
        return default_for_kind(kind)
    return tensor_dtype


def result_type(dtypes_with_dims: list[tuple[DType, bool]], scalar_kinds: list[str]) -> DType:
    """PyTorch's ``result_type``: dimensioned tensors first, then 0-d tensors, then scalars.

    A 0-d tensor or a scalar raises the result only into a higher kind.
    """
    dimensioned = [d for d, has_dims in dtypes_with_dims if has_dims]
    zero_dim = [d for d, has_dims in dtypes_with_dims if not has_dims]
    result = None
    for d in dimensioned:
        result = d if result is None else _PROMOTE[result, d]
    zero_result = None
    for d in zero_dim:
        zero_result = d if zero_result is None else _PROMOTE[zero_result, d]
    if result is None:
        result = zero_result
    elif zero_result is not None and _KIND_ORDER[zero_result.kind] > _KIND_ORDER[result.kind]:
        result = zero_result
    for kind in scalar_kinds:
        result = default_for_kind(kind) if result is None else promote_with_scalar(result, kind)
    return result
