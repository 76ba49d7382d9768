"""Devices: ``em.cpu(i)``, ``em.cuda(i)``, ``em.wgpu(i)``, and their autodiff twins.

A ``Device`` is a place, not a type: it names an actor (one per kind and
index), and the backend behind that actor is chosen at run time.
"""

from __future__ import annotations

import os
from typing import Any

from ember.errors import DeviceError

_KINDS = ("cpu", "cuda", "wgpu")
_CHECKPOINTING = (None, "balanced")


class Device:
    """A device: kind and index, with gradient tracking on or off.

    Devices compare equal by name and autodiff flag. ``Device.inner`` is the
    same device without tracking.
    """

    __slots__ = ("kind", "index", "name", "is_autodiff", "checkpointing", "_actor")

    def __init__(self, kind: str, index: int, autodiff: bool = False,
                 checkpointing: str | None = None) -> None:
        self.kind = kind
        self.index = index
        self.name = f"{kind}:{index}"
        self.is_autodiff = autodiff
        self.checkpointing = checkpointing
        self._actor: Any = None

    @property
    def inner(self) -> Device:
        """This device without gradient tracking (itself when it has none)."""
        return _get(self.kind, self.index)

    def autodiff(self, checkpointing: str | None = None) -> Device:
        """This device with gradient tracking on (``checkpointing``: None or "balanced")."""
        if checkpointing not in _CHECKPOINTING:
            raise ValueError(f"autodiff: checkpointing must be None or 'balanced', got {checkpointing!r}")
        key = (self.kind, self.index, True, checkpointing)
        device = _cache.get(key)
        if device is None:
            device = _cache.setdefault(key, Device(self.kind, self.index, True, checkpointing))
        return device

    @property
    def actor(self) -> Any:
        """The device actor (started on first use); autodiff devices share their inner one's."""
        actor = self._actor
        if actor is None:
            from ember.actors.registry import actor_for

            actor = self._actor = actor_for(self.name, self.kind, self.index)
        return actor

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        if self.is_autodiff:
            extra = f", checkpointing={self.checkpointing!r}" if self.checkpointing else ""
            return f"Device({self.name!r}, autodiff=True{extra})"
        return f"Device({self.name!r})"

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Device):
            return NotImplemented
        return self.name == other.name and self.is_autodiff == other.is_autodiff

    def __hash__(self) -> int:
        return hash((self.name, self.is_autodiff))


_cache: dict[tuple, Device] = {}


def _get(kind: str, index: int) -> Device:
    key = (kind, index, False, None)
    device = _cache.get(key)
    if device is None:
        if kind not in _KINDS:
            raise DeviceError(f"unknown device kind {kind!r}; expected one of {', '.join(_KINDS)}")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise DeviceError(f"{kind}: device index must be an int >= 0, got {index!r}")
        device = _cache.setdefault(key, Device(kind, index))
    return device


def cpu(index: int = 0) -> Device:
    """The CPU device ``cpu:index``; each index is an independent actor.

    Example:
        >>> x = em.zeros(3, device=em.cpu(1))
        >>> str(x.device)
        'cpu:1'
    """
    return _get("cpu", index)


def cuda(index: int = 0) -> Device:
    """The CUDA GPU ``cuda:index``.

    Example:
        >>> if em.available("cuda"):      # em.cuda(i) raises DeviceError where there is none
        ...     model = nn.Linear(4, 2).to(em.cuda(0))
    """
    return _get("cuda", index)


def wgpu(index: int = 0) -> Device:
    """The WebGPU adapter ``wgpu:index``.

    Example:
        >>> if em.available("wgpu"):      # em.wgpu(i) raises DeviceError where there is none
        ...     x = em.randn(1024, device=em.wgpu())
    """
    return _get("wgpu", index)


def device(spec: str | Device) -> Device:
    """Parse ``"cpu"``, ``"cpu:1"``, ``"cuda:0"``, ``"wgpu:0"``; a Device passes through.

    Example:
        >>> em.device("cpu:1") == em.cpu(1), str(em.device("cpu"))
        (True, 'cpu:0')
    """
    if isinstance(spec, Device):
        return spec
    if not isinstance(spec, str):
        raise DeviceError(f"device: expected a name like 'cpu:0', got {spec!r}")
    kind, _, index = spec.strip().partition(":")
    if index == "":
        index = "0"
    if not index.isdigit():
        raise DeviceError(f"device: bad device name {spec!r}; expected 'kind' or 'kind:index'")
    return _get(kind, int(index))


def available(kind: str) -> list[Device]:
    """Usable devices of ``kind``: an empty list, never an exception, where none exists.

    Example:
        >>> gpus = em.available("cuda")
        >>> device = gpus[0] if gpus else em.cpu()
    """
    from ember.kernels import available_indices

    if kind not in _KINDS:
        return []
    try:
        return [_get(kind, i) for i in available_indices(kind)]
    except Exception:
        return []


def default_device() -> Device:
    """``cpu:0``, unless the environment variable ``EMBER_DEVICE`` names another.

    Example:
        >>> str(em.default_device())  # EMBER_DEVICE unset
        'cpu:0'
    """
    name = os.environ.get("EMBER_DEVICE")
    return device(name) if name else cpu(0)
