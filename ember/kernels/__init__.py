"""Backends, found by the kind of device: ``cpu`` → numpy/, ``cuda`` → cupy/, ``wgpu`` → wgpu/.

A backend is an object with ``run(msg, inputs)``, ``upload``, ``to_host``,
``release``, ``export`` / ``import_`` (for transfers), ``owned_nbytes`` and
``statistics``. Nothing outside this package names a backend.
"""

from __future__ import annotations

from typing import Any

from ember.errors import DeviceError

_KINDS = ("cpu", "cuda", "wgpu")


def create_backend(kind: str, index: int) -> Any:
    if kind == "cpu":
        from ember.kernels.numpy import NumpyBackend

        return NumpyBackend(index)
    if kind == "wgpu" and index in available_indices("wgpu"):
        from ember.kernels.wgpu import WgpuBackend

        return WgpuBackend(index)
    if kind == "cuda":
        from ember.kernels import cupy as cuda_backend

        return cuda_backend.create_backend(index)
    if kind in _KINDS:
        raise DeviceError(f"{kind}:{index}: no {kind} backend is available in this ember build "
                          f"(em.available({kind!r}) lists usable devices)")
    raise DeviceError(f"unknown device kind {kind!r}; expected one of {', '.join(_KINDS)}")


def available_indices(kind: str) -> list[int]:
    """Indices of usable devices of ``kind``; empty where the backend or hardware is missing."""
    if kind == "cpu":
        return [0]
    if kind == "wgpu":
        from ember.kernels.wgpu import available_indices as wgpu_indices

        return wgpu_indices()
    if kind == "cuda":
        from ember.kernels import cupy as cuda_backend

        return cuda_backend.available_indices()
    return []
