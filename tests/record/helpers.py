"""Shared by the record tests: deep equality that sees dtypes and bytes, and file crafting."""

from __future__ import annotations

import json
import math
import struct
import zlib
from typing import Any

import numpy as np

import ember as em
from ember.record import msgpack_file


def same(a: Any, b: Any) -> bool:
    """Equal values of the same types; arrays and tensors bit for bit, with dtype and shape."""
    if type(a) is not type(b):
        return False
    if isinstance(a, em.Tensor):
        return a.dtype is b.dtype and a.shape == b.shape and same(a.numpy(), b.numpy())
    if isinstance(a, np.ndarray | np.generic):
        return (a.dtype == b.dtype and np.shape(a) == np.shape(b)
                and np.asarray(a).tobytes() == np.asarray(b).tobytes())
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(
            type(k) is type(j) and same(a[k], b[j]) for k, j in zip(a, b, strict=True))
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def seal(body: bytes, *, version: int = msgpack_file.VERSION) -> bytes:
    """An ember file around ``body`` with a correct length and CRC (to reach the decoder)."""
    return struct.pack("<8sIQI", msgpack_file.MAGIC, version, len(body), zlib.crc32(body)) + body


def safetensors_bytes(header: dict | bytes, data: bytes = b"", length: int | None = None) -> bytes:
    """A safetensors file with ``header`` (a dict, or raw JSON bytes) and ``data``."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return (len(text) if length is None else length).to_bytes(8, "little") + text + data
