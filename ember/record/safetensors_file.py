"""``em.save_safetensors`` / ``em.load_safetensors``: the safetensors format, read and written here.

The format (https://github.com/huggingface/safetensors)::

    8 bytes   N, the header length, uint64 little-endian
    N bytes   a UTF-8 JSON object: {"__metadata__": {str: str}, optional,
              name: {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
              (padded with spaces; written so the data starts 8-byte aligned)
    rest      the data: each tensor's little-endian bytes in C order at
              [begin, end) counted from the data's start

A file is accepted only as the reference implementation accepts it: the
header fits in the file (and in 100 MB), the offsets of the tensors, sorted,
tile the data exactly — no gaps, no overlaps, no reversed ranges, nothing
past the end — and each range is exactly dtype size × the shape's element
count. All of it is checked before any tensor memory is allocated. Offsets
need not be multiples of the item size (the format allows that; this writer
aligns them anyway by laying out the widest dtypes first).

dtypes: BOOL U8 I8 U16 I16 U32 I32 U64 I64 F16 BF16 F32 F64, and as NumPy
arrays only F8_E4M3 F8_E5M2 C64. U8 / I8 / I16 load as ember's uint8 / int8 /
int16; U16 widens to int32 and U32 to int64, as ``em.tensor`` widens them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ember.errors import RecordError
from ember.record import arrays
from ember.record_io import atomic_write_bytes
from ember.tensor import Tensor

# The reference loader's limit on the header: more is hostile, not a model.
MAX_HEADER_SIZE = 100_000_000
_METADATA = "__metadata__"

DTYPES = arrays.DtypeTable(
    {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "U16": np.uint16, "I16": np.int16,
     "U32": np.uint32, "I32": np.int32, "U64": np.uint64, "I64": np.int64, "F16": np.float16,
     "F32": np.float32, "F64": np.float64, "C64": np.complex64},
    {"BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"})


# ----- saving ---------------------------------------------------------------------------


def save_safetensors(state_dict: Mapping[str, Any], path: str | os.PathLike,
                     metadata: Mapping[str, str] | None = None) -> None:
    """Write ``{name: tensor or NumPy array}`` to ``path`` as a safetensors file (atomic).

    Args:
        state_dict: names to ember tensors or NumPy arrays (``model.state_dict()``).
        path: the file to write; an old file there stays whole if writing fails.
        metadata: optional ``{str: str}`` stored as the header's ``__metadata__``.

    Raises:
        TypeError: a name, value, dtype or metadata entry the format cannot hold.

    Example::

        em.save_safetensors(model.state_dict(), "model.safetensors", {"epoch": "3"})
    """
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"save_safetensors: expected a dict of name → tensor, got "
                        f"{type(state_dict).__name__}")
    header: dict[str, Any] = {}
    if metadata is not None:
        if not isinstance(metadata, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise TypeError("save_safetensors: metadata must be a dict of str → str")
        header[_METADATA] = dict(metadata)
    entries = []
    for name, value in state_dict.items():
        if not isinstance(name, str) or not name or name == _METADATA:
            raise TypeError(f"save_safetensors: tensor name {name!r} is not allowed (a "
                            f"non-empty str other than {_METADATA!r})")
        if isinstance(value, Tensor):
            array = value.numpy()
        elif isinstance(value, np.ndarray):
            array = value
        else:
            raise TypeError(f"save_safetensors: {name!r} is a {type(value).__name__}, not a "
                            f"tensor or NumPy array")
        code = DTYPES.name_of(array.dtype)
        if code is None:
            raise TypeError(f"save_safetensors: {name!r} has dtype {array.dtype}, which "
                            f"safetensors cannot hold")
        entries.append((name, code, array))
    # The data: widest items first, then by name (as the reference writer lays it out), so
    # every offset is a multiple of its item size, given the 8-aligned data start. The
    # header keeps the caller's order, which loading gives back.
    offsets, offset = {}, 0
    for name, _, array in sorted(entries, key=lambda e: (-DTYPES[e[1]].itemsize, e[0])):
        offsets[name] = [offset, offset + array.nbytes]
        offset += array.nbytes
    for name, code, array in entries:
        header[name] = {"dtype": code, "shape": list(array.shape), "data_offsets": offsets[name]}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    buffer = bytearray(8 + len(text) + offset)
    buffer[:8] = len(text).to_bytes(8, "little")
    buffer[8:8 + len(text)] = text
    start = 8 + len(text)
    for name, _, array in entries:
        begin, end = offsets[name]
        buffer[start + begin:start + end] = arrays.le_bytes(array)
    atomic_write_bytes(Path(path), buffer)


# ----- loading --------------------------------------------------------------------------


def load_safetensors(path: str | os.PathLike, device: Any = None, *,
                     as_numpy: bool = False) -> dict[str, Any]:
    """Read a safetensors file into ``{name: tensor}`` (on ``device``), or NumPy arrays.

    Reads files written by any safetensors writer (PyTorch, NumPy, JAX ...),
    in the header's order. Never runs code.

    Args:
        path: the file.
        device: where tensors go; default ``em.default_device()``.
        as_numpy: return NumPy arrays (exact dtypes, bfloat16 as ``ml_dtypes.bfloat16``),
            e.g. for ``model.load_state_dict``.

    Raises:
        RecordError: a truncated, corrupt or hostile file, or (for tensors) a dtype
            ember has no tensor for (help: ``as_numpy=True``).

    Example::

        model.load_state_dict(em.load_safetensors("model.safetensors", as_numpy=True))
    """
    from ember.ops._core import resolve_device

    device = None if as_numpy else resolve_device(device)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        header, data_start = _read_header(f, size)
        entries = _check_entries(header, size - data_start)
        if not as_numpy:
            for name, npd, _, _ in entries:
                if arrays.tensor_dtype(npd) is None:
                    raise RecordError(f"safetensors: {name!r}: dtype {DTYPES.name_of(npd)} has no "
                                      f"ember tensor dtype; help: load_safetensors(path, "
                                      f"as_numpy=True)")
        out = {}
        for name, npd, shape, begin in entries:
            array = np.empty(shape, dtype=npd)  # size checked against the file above
            f.seek(data_start + begin)
            if f.readinto(array.reshape(-1).view(np.uint8)) != array.nbytes:
                raise RecordError(f"truncated safetensors file: {name!r} ends past the end "
                                  f"of the file (did it change while loading?)")
            array = arrays.finish_read(f"safetensors: {name!r}", array)
            out[name] = array if as_numpy else arrays.to_tensor(array, device)
    return out


def load_safetensors_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file (``{}`` if it has none); the file is checked
    as ``load_safetensors`` checks it."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        header, data_start = _read_header(f, size)
    _check_entries(header, size - data_start)
    return dict(header.get(_METADATA) or {})


def _read_header(f: Any, size: int) -> tuple[dict[str, Any], int]:
    if size < 8:
        raise RecordError(f"truncated safetensors file: {size} bytes, shorter than the 8-byte "
                          f"header length")
    length = int.from_bytes(f.read(8), "little")
    if length > size - 8:
        raise RecordError(f"truncated or corrupt safetensors file: the header length {length} "
                          f"exceeds the {size - 8} bytes after it")
    if length > MAX_HEADER_SIZE:
        raise RecordError(f"hostile safetensors file: a {length}-byte header (more than "
                          f"{MAX_HEADER_SIZE})")
    raw = f.read(length)
    if len(raw) != length:
        raise RecordError(f"truncated safetensors file: read {len(raw)} of {length} header bytes")
    if not raw.startswith(b"{"):
        raise RecordError("not a safetensors file: the header is not a JSON object")
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys)
    except RecursionError:
        raise RecordError("hostile safetensors file: the header nests too deeply") from None
    except RecordError:
        raise
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, giant int literals
        raise RecordError(f"corrupt safetensors file: the header is not valid JSON: {exc}") \
            from None
    if not isinstance(header, dict):
        raise RecordError("not a safetensors file: the header is not a JSON object")
    return header, 8 + length


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise RecordError(f"corrupt safetensors file: the header names {dup!r} twice")
    return out


def _check_entries(header: dict[str, Any], data_size: int
                   ) -> list[tuple[str, np.dtype, tuple[int, ...], int]]:
    """``(name, dtype, shape, begin)`` per tensor, in header order, all checked."""
    meta = header.get(_METADATA)
    if meta is not None and not (isinstance(meta, dict) and all(
            isinstance(v, str) for v in meta.values())):
        raise RecordError("corrupt safetensors file: __metadata__ must map str to str")
    entries, ranges = [], []
    for name, info in header.items():
        if name == _METADATA:
            continue
        where = f"safetensors: {name!r}"
        if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
            raise RecordError(f"{where}: expected {{dtype, shape, data_offsets}}, got {info!r:.80}")
        code = info["dtype"]
        npd = DTYPES.get(code) if isinstance(code, str) else None
        if npd is None:
            raise RecordError(f"{where}: unknown dtype {code!r:.40} (known: {', '.join(DTYPES)})")
        shape = arrays.check_shape(where, info["shape"], npd.itemsize)
        offsets = info["data_offsets"]
        if (not isinstance(offsets, list) or len(offsets) != 2
                or any(type(o) is not int or o < 0 for o in offsets)):
            raise RecordError(f"{where}: data_offsets must be [begin, end], got {offsets!r:.80}")
        begin, end = offsets
        if end < begin:
            raise RecordError(f"{where}: data_offsets [{begin}, {end}] end before they begin")
        if end > data_size:
            raise RecordError(f"truncated safetensors file: {where} needs data bytes up to "
                              f"{end}, the file holds {data_size}")
        if end - begin != arrays.nbytes_of(shape, npd.itemsize):
            raise RecordError(f"{where}: data_offsets span {end - begin} bytes, but {code} "
                              f"{list(shape)} needs {arrays.nbytes_of(shape, npd.itemsize)}")
        entries.append((name, npd, shape, begin))
        ranges.append((begin, end, name))
    position = 0
    for begin, end, name in sorted(ranges):
        if begin != position:
            what = "overlaps the tensor before it" if begin < position else "leaves a gap before it"
            raise RecordError(f"corrupt safetensors file: {name!r} at data_offsets [{begin}, "
                              f"{end}] {what} (expected to start at {position})")
        position = end
    if position != data_size:
        raise RecordError(f"corrupt safetensors file: the tensors cover {position} data bytes, "
                          f"the file holds {data_size}")
    return entries
