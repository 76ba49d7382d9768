"""The at-call memory check: an output that can never fit its device fails on the user's line.

Only outputs from ``CHECKED_FROM`` bytes up are checked, so the ops of every step pay one
comparison; smaller outputs fit any device ember runs on.
"""

from __future__ import annotations

import math

from ember.device import Device
from ember.dtype import DType
from ember.errors import OutOfMemoryError

CHECKED_FROM = 1 << 28


def check_fits(op: str, shape: tuple[int, ...], dtype: DType, device: Device) -> None:
    """Raise ``OutOfMemoryError`` when ``op``'s output of ``shape`` and ``dtype`` is larger than
    ``device``'s whole memory (physical RAM on the CPU); backends that cannot tell
    (no ``total_memory``) are not checked.

    Raises:
        OutOfMemoryError: the output could never be allocated on ``device``.
    """
    nbytes = math.prod(shape) * dtype.itemsize
    total = getattr(device.actor.backend, "total_memory", None)
    if total is not None and nbytes > total:
        raise OutOfMemoryError(
            f"{op}: an output of shape {shape} and dtype {dtype.name} needs "
            f"{_size(nbytes)}, more than {device.inner}'s total memory ({_size(total)}); "
            f"help: use a smaller shape or split the work", op)


def _size(nbytes: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"
