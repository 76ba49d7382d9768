"""``scipy.special``, imported when a kernel first needs it (sigmoid, silu, erf other than
float32): loading SciPy costs more than the rest of the CPU backend, and most programs
never call these."""

from __future__ import annotations

import functools
from types import ModuleType


@functools.cache
def special() -> ModuleType:
    """The ``scipy.special`` module."""
    from scipy import special as module

    return module
