"""Kernel tables: each backend maps IR op names to kernels with a decorator from here."""

from __future__ import annotations

from collections.abc import Callable


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
