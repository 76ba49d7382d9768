"""Kernel tables: each backend maps IR op names to kernels with a decorator from here, and
lists the declared ops (``ember/op_kinds.py``) it refuses, with why."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ember.errors import DeviceError


def registrar(table: dict[str, Callable], backend: str) -> Callable[..., Callable]:
    """The ``@kernel("op", ...)`` decorator of one backend's ``table``."""

    def kernel(*names: str) -> Callable:
        """Register a function as the kernel of one or more IR ops."""

        def register(fn: Callable) -> Callable:
            for name in names:
                if name in table:
                    raise RuntimeError(f"{backend} kernel {name!r} registered twice")
                table[name] = fn
            return fn

        return register

    return kernel


def refuse(table: dict[str, Callable], backend: str, refused: Mapping[str, str]) -> None:
    """Register, for each declared op of ``refused`` (op -> why, with a ``help:``) that this
    backend does not run, a kernel raising ``DeviceError`` that names the op and the backend.

    A refusal replaces only another refusal (a table copied from another backend's).
    """
    for name, why in refused.items():
        if name in table and not getattr(table[name], "refuses", False):
            raise RuntimeError(f"{backend} refuses op {name!r}, which it has a kernel for")
        table[name] = _refusal(name, backend, why)


def _refusal(name: str, backend: str, why: str) -> Callable:
    def refused(msg: Any, *_: Any) -> Any:
        raise DeviceError(f"{name}: not supported on {backend} devices: {why}")

    refused.refuses = True  # type: ignore[attr-defined]
    return refused
