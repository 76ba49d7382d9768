"""Index range checks of the strided gather, read back only when needed.

An indexed gather or scatter skips an out-of-range element and records it in a
two-word fault buffer (strided.py). Reading that buffer at once waits for the device:
one round trip per gather. Instead the buffer joins ``created``, and the device actor
(``ember/actors/deferred.py``) taints what is computed from the op until a read of a
tainted value resolves every pending check, reading each buffer then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.kernels.numpy.indexing import range_error

if TYPE_CHECKING:
    from ember.kernels.wgpu.runtime import Runtime
    from ember.kernels.wgpu.table import WgpuArray


class FaultCheck:
    """One gather's fault buffer (hit flag, bad value) and what its error names."""

    __slots__ = ("dim", "fault", "op", "size")

    def __init__(self, fault: WgpuArray, op: str, dim: int, size: int) -> None:
        self.fault, self.op, self.dim, self.size = fault, op, dim, size


class FaultChecks:
    """The pending fault buffers of one device (used on its worker)."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self.created: list[FaultCheck] = []  # since the actor last took them

    def defer(self, fault: WgpuArray, op: str, dim: int, size: int) -> None:
        self.created.append(FaultCheck(fault, op, dim, size))

    def keep(self, checks: Any) -> None:
        """Only CUDA captures graphs; nothing to keep here."""

    def resolve(self, checks: list[FaultCheck]) -> dict[FaultCheck, Exception]:
        """The error of every check whose gather met a bad index (waits for the device)."""
        failed: dict[FaultCheck, Exception] = {}
        for check in checks:
            hit, bad = self._rt.read(check.fault).tolist()
            if hit:
                failed[check] = range_error(check.op, bad, check.dim, check.size)
        return failed
