"""Elementwise op cases (a seed list; the elementwise family fills it out)."""

from __future__ import annotations

import numpy as np

from tests.ops.harness import Case, array

CASES = [
    Case("add/broadcast/float32", lambda a, b: a + b, np.add,
         [array((3, 4)), array((4,), salt=1)]),
    Case("add/scalar/float32", lambda a: a + 2.5, lambda a: a + np.float32(2.5), [array((3,))]),
    Case("exp/float32", lambda a: a.exp(), np.exp, [array((2, 3))]),
]
