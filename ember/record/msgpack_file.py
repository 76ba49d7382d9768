"""``em.save`` / ``em.load``: nested containers of tensors, arrays and scalars as MessagePack.

The file::

    offset  size  field
    0       8     magic  b"\\x89EMB\\r\\n\\x1a\\n"  (as PNG's: text-mode and 7-bit mangling show)
    8       4     format version, uint32 little-endian (this is version 1)
    12      8     body length in bytes, uint64 little-endian
    20      4     CRC-32 of the body, uint32 little-endian
    24      ...   body: one MessagePack value, the root node

A node is a MessagePack nil, bool, int (64-bit), float (64-bit) or str, which
stand for themselves, or a *record*: an array whose first item names its kind
(msgspec tagged ``array_like`` Structs)::

    ["tensor",       dtype, shape, data]   an ember tensor   (dtype: an ember dtype name)
    ["ndarray",      dtype, shape, data]   a NumPy array     (dtype: NumPy's name, see
    ["numpy_scalar", dtype, shape, data]   a NumPy scalar     arrays.NUMPY_DTYPES)
    ["bytes",        data]
    ["list",         [node, ...]]
    ["tuple",        [node, ...]]
    ["dict",         {key: node, ...}]     keys are str or int; order is kept

``shape`` is an array of ints, ``data`` a bin of the elements' raw little-endian
bytes in C order (bfloat16 as its 2 bytes). Containers nest at most
``MAX_DEPTH`` deep. Loading decodes into these Structs only — no code, no
pickle, no class named by the file — and checks every length against what the
file holds before building an array.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import Any, Union

import msgspec
import numpy as np

from ember import dtype as _dtype
from ember.errors import RecordError
from ember.record import arrays
from ember.record_io import atomic_write_bytes
from ember.tensor import Tensor

MAGIC = b"\x89EMB\r\n\x1a\n"
VERSION = 1
_HEADER = struct.Struct("<8sIQI")  # magic, version, body length, crc32
HEADER_SIZE = _HEADER.size
# Containers inside containers: a checkpoint is ~6 deep. The bound keeps hostile files
# (and cycles, when saving) from exhausting the stack; msgspec's own recursion guard is
# a second line behind it.
MAX_DEPTH = 64
_INT_RANGE = (-(2**63), 2**64 - 1)  # what a MessagePack int holds


class TensorRecord(msgspec.Struct, tag="tensor", array_like=True):
    dtype: str
    shape: list[int]
    data: memoryview


class ArrayRecord(msgspec.Struct, tag="ndarray", array_like=True):
    dtype: str
    shape: list[int]
    data: memoryview


class NumpyScalarRecord(msgspec.Struct, tag="numpy_scalar", array_like=True):
    dtype: str
    shape: list[int]
    data: memoryview


class BytesRecord(msgspec.Struct, tag="bytes", array_like=True):
    data: bytes


class ListRecord(msgspec.Struct, tag="list", array_like=True):
    items: list[Node]


class TupleRecord(msgspec.Struct, tag="tuple", array_like=True):
    items: list[Node]


class DictRecord(msgspec.Struct, tag="dict", array_like=True):
    items: dict[Union[str, int], Node]  # noqa: UP007  (msgspec resolves it at decoder build)


Node = Union[None, bool, int, float, str, TensorRecord, ArrayRecord,  # noqa: UP007
             NumpyScalarRecord, BytesRecord, ListRecord, TupleRecord, DictRecord]

_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(Node)


# ----- saving ---------------------------------------------------------------------------


def save(obj: Any, path: str | os.PathLike) -> None:
    """Write ``obj`` to ``path`` as an ember file (MessagePack; atomic).

    ``obj`` is a tensor, a NumPy array or scalar, ``None``, a bool, int, float,
    str or bytes, or a dict / list / tuple nesting them (dict keys: str or
    int). Tensors are read first, so this waits for them (in async code, run it
    in a thread: ``await trio.to_thread.run_sync(em.save, obj, path)``). The file appears
    whole or not at all: a failure leaves any old file at ``path`` untouched.

    Raises:
        TypeError: a value or dict key of a type files cannot hold (its place is named).
        ValueError: containers nested deeper than ``MAX_DEPTH`` (or a cycle).
        OverflowError: an int outside the 64-bit range.

    Example::

        em.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": 3}, "ckpt.ember")
    """
    atomic_write_bytes(Path(path), encode(obj))


def encode(obj: Any) -> bytearray:
    """The bytes of the ember file holding ``obj`` (header and body)."""
    root = _to_node(obj, "obj", 0)
    buffer = bytearray(HEADER_SIZE)
    _ENCODER.encode_into(root, buffer, HEADER_SIZE)
    body = memoryview(buffer)[HEADER_SIZE:]
    _HEADER.pack_into(buffer, 0, MAGIC, VERSION, len(body), zlib.crc32(body))
    body.release()
    return buffer


def _to_node(value: Any, where: str, depth: int) -> Any:
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, np.generic):  # before int / float: np.float64 is a float
        name = _numpy_name(value.dtype, where)
        return NumpyScalarRecord(name, [], arrays.le_bytes(np.asarray(value)))
    if isinstance(value, int):
        if not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
            raise OverflowError(f"save: {where}: int {value} is outside the 64-bit range "
                                f"MessagePack holds")
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Tensor):
        array = value.numpy()
        return TensorRecord(value.dtype.name, list(array.shape), arrays.le_bytes(array))
    if isinstance(value, np.ndarray):
        name = _numpy_name(value.dtype, where)
        return ArrayRecord(name, list(value.shape), arrays.le_bytes(value))
    if isinstance(value, bytes | bytearray):
        return BytesRecord(bytes(value))
    if isinstance(value, dict | list | tuple):
        if depth >= MAX_DEPTH:
            raise ValueError(f"save: {where}: containers nested deeper than {MAX_DEPTH} "
                             f"(a container holding itself?)")
        if isinstance(value, dict):
            items = {}
            for key, item in value.items():
                items[_key(key, where)] = _to_node(item, f"{where}[{key!r}]", depth + 1)
            return DictRecord(items)
        nodes = [_to_node(item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value)]
        return ListRecord(nodes) if isinstance(value, list) else TupleRecord(nodes)
    raise TypeError(f"save: {where}: cannot save a {type(value).__name__}; files hold tensors, "
                    f"NumPy arrays and scalars, None, bool, int, float, str, bytes and "
                    f"dicts / lists / tuples of them")


def _key(key: Any, where: str) -> str | int:
    if isinstance(key, str):
        return str.__str__(key)  # a str subclass (StrEnum) as the plain str
    if isinstance(key, int | np.integer) and not isinstance(key, bool | np.bool_):
        key = int(key)
        if not _INT_RANGE[0] <= key <= _INT_RANGE[1]:
            raise OverflowError(f"save: {where}: dict key {key} is outside the 64-bit range")
        return key
    raise TypeError(f"save: {where}: dict key {key!r} is a {type(key).__name__}; keys must be "
                    f"str or int")


def _numpy_name(npd: np.dtype, where: str) -> str:
    name = arrays.numpy_dtype_name(npd)
    if name is None:
        raise TypeError(f"save: {where}: NumPy dtype {npd} cannot be saved; supported: "
                        f"{', '.join(arrays.NUMPY_DTYPES)}")
    return name


# ----- loading --------------------------------------------------------------------------


def load(path: str | os.PathLike, *, device: Any = None) -> Any:
    """Read what ``save`` wrote. Never runs code from the file.

    Tensors come back as ember tensors on ``device`` (default
    ``em.default_device()``), NumPy arrays and scalars as themselves, tuples
    as tuples.

    Raises:
        RecordError: the file is not an ember file, or is truncated, corrupt or
            hostile (the message says what is wrong).
        OSError: the file cannot be read.

    Example::

        ckpt = em.load("ckpt.ember", device="cpu:1")
        model.load_state_dict(ckpt["model"])
    """
    from ember.ops._core import resolve_device

    return decode_root(read_root(path), tensors_as_numpy=False, device=resolve_device(device))


def read_root(path: str | os.PathLike) -> Any:
    """The root node of the ember file at ``path``, checked but not yet turned into values."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(HEADER_SIZE)
        body_size = _check_header(head, size)
        body = f.read(body_size)
    return decode_body(body, body_size, _HEADER.unpack(head)[3])


def _check_header(head: bytes, file_size: int) -> int:
    if len(head) < len(MAGIC) or head[:len(MAGIC)] != MAGIC:
        raise RecordError(f"not an ember file: it does not start with the magic bytes "
                          f"{MAGIC!r} (got {head[:len(MAGIC)]!r}); help: safetensors files "
                          f"load with em.load_safetensors")
    if len(head) < HEADER_SIZE:
        raise RecordError(f"truncated ember file: {file_size} bytes, shorter than the "
                          f"{HEADER_SIZE}-byte header")
    _, version, body_size, _ = _HEADER.unpack(head)
    if version != VERSION:
        raise RecordError(f"ember file format version {version} is not supported (this ember "
                          f"reads version {VERSION})")
    if body_size != file_size - HEADER_SIZE:
        what = "truncated" if body_size > file_size - HEADER_SIZE else "corrupt"
        raise RecordError(f"{what} ember file: the header says {body_size} body bytes, the file "
                          f"holds {file_size - HEADER_SIZE}")
    return body_size


def decode_body(body: Any, body_size: int, crc: int) -> Any:
    if len(body) != body_size:
        raise RecordError(f"truncated ember file: read {len(body)} of {body_size} body bytes")
    if zlib.crc32(body) != crc:
        raise RecordError("corrupt ember file: the body's CRC-32 does not match the header")
    try:
        return _DECODER.decode(body)
    except RecursionError:
        raise RecordError("hostile ember file: containers nested too deeply") from None
    except msgspec.DecodeError as exc:
        raise RecordError(f"malformed ember file: {exc}") from None


def decode_root(root: Any, *, tensors_as_numpy: bool, device: Any) -> Any:
    """Values from a decoded root node: tensor records as tensors on ``device``, or as
    NumPy arrays with ``tensors_as_numpy``."""
    return _from_node(root, "root", 0, tensors_as_numpy, device)


def _from_node(node: Any, where: str, depth: int, as_numpy: bool, device: Any) -> Any:
    if node is None or isinstance(node, bool | int | float | str):
        return node
    if isinstance(node, ListRecord | TupleRecord | DictRecord):
        if depth >= MAX_DEPTH:
            raise RecordError(f"hostile ember file: {where}: containers nested deeper than "
                              f"{MAX_DEPTH}")
        if isinstance(node, DictRecord):
            return {k: _from_node(v, f"{where}[{k!r}]", depth + 1, as_numpy, device)
                    for k, v in node.items.items()}
        items = [_from_node(v, f"{where}[{i}]", depth + 1, as_numpy, device)
                 for i, v in enumerate(node.items)]
        return items if isinstance(node, ListRecord) else tuple(items)
    if isinstance(node, BytesRecord):
        return node.data
    if isinstance(node, TensorRecord):
        dtype = _dtype.BY_NAME.get(node.dtype)
        if dtype is None:
            raise RecordError(f"ember file: {where}: unknown tensor dtype {node.dtype!r}")
        array = _array(where, dtype.np, node)
        return array if as_numpy else arrays.to_tensor(array, device)
    # ArrayRecord or NumpyScalarRecord: the decoder admits nothing else.
    npd = arrays.NUMPY_DTYPES.get(node.dtype)
    if npd is None:
        raise RecordError(f"ember file: {where}: unknown NumPy dtype {node.dtype!r}")
    array = _array(where, npd, node)
    if isinstance(node, NumpyScalarRecord):
        if array.ndim:
            raise RecordError(f"ember file: {where}: a NumPy scalar with shape {array.shape}")
        return array[()]
    return array


def _array(where: str, npd: np.dtype, node: Any) -> np.ndarray:
    shape = arrays.check_shape(f"ember file: {where}", node.shape, npd.itemsize)
    return arrays.from_le_bytes(f"ember file: {where}", node.data, npd, shape)
