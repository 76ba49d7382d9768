"""``x ** n`` for a few constant exponents, lowered to products, square roots and quotients.

A ``pow`` whose exponent is a scalar in ``LOWERED`` and whose output is a float is
computed as PyTorch's CPU kernels compute it (``x * x * x`` for 3, ``sqrt`` for 0.5,
``1 / sqrt`` for -0.5, ``1 / x`` for -1 ...), never through ``pow``: cheaper, and
every backend (the NumPy kernel, compiled C, CUDA C++, WGSL) does the same IEEE
operations in the same order, so fused and unfused results keep equal bits. The
IR still records ``pow`` (its gradient rule is pow's); only kernels lower it.

The sign of zero and infinite bases follows the lowering, as in PyTorch:
``(-0.0) ** 0.5`` is -0.0 and ``(-inf) ** 0.5`` is NaN (C's ``pow`` gives +0.0, +inf).

Pure Python: the forms are data each renderer turns into its own syntax.
"""

from __future__ import annotations

from typing import Any

# Exponent → its form: ("one",), ("x",), ("square",), ("cube",), ("fourth",) and
# ("inverse", form): 1 / that form; ("sqrt",).
_FORMS: dict[float, tuple] = {
    0.0: ("one",), 1.0: ("x",), 2.0: ("square",), 3.0: ("cube",), 4.0: ("fourth",),
    -1.0: ("inverse", "x"), -2.0: ("inverse", "square"), -3.0: ("inverse", "cube"),
    -4.0: ("inverse", "fourth"), 0.5: ("sqrt",), -0.5: ("inverse", "sqrt"),
}
LOWERED = frozenset(_FORMS)
_FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})


def lowered_exponent(member: Any) -> float | None:
    """The exponent of ``member`` if it is ``x ** n`` with ``n`` in ``LOWERED`` (a scalar
    exponent, a float output), else None."""
    if member.op != "pow" or len(member.attrs) != 3 or member.dtype not in _FLOATS:
        return None
    _, value, scalar_is_lhs = member.attrs
    if scalar_is_lhs or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if value in _FORMS else None


def expression(exponent: float, x: str, one: str, sqrt: str) -> str:
    """``x ** exponent`` as an expression of a C-like language: ``one`` is its literal 1,
    ``sqrt`` its square root function's name."""
    form = _FORMS[exponent]
    if form[0] == "inverse":
        return f"({one} / {_positive(form[1], x, one, sqrt)})"
    return _positive(form[0], x, one, sqrt)


def _positive(form: str, x: str, one: str, sqrt: str) -> str:
    if form == "one":
        return one
    if form == "x":
        return x
    if form == "square":
        return f"({x} * {x})"
    if form == "cube":
        return f"(({x} * {x}) * {x})"
    if form == "fourth":
        return f"(({x} * {x}) * ({x} * {x}))"
    return f"{sqrt}({x})"


def compute(xp: Any, exponent: float, x: Any, out: Any) -> Any:
    """``out[...] = x ** exponent`` with array module ``xp``, operation for operation as
    ``expression`` renders it (``x`` already in ``out``'s dtype; ``out`` is not ``x``'s memory)."""
    form = _FORMS[exponent]
    inverse = form[0] == "inverse"
    kind = form[1] if inverse else form[0]
    if kind == "one":
        out.fill(1)
        return out
    if kind == "x":
        xp.copyto(out, x)
    elif kind == "square":
        xp.multiply(x, x, out=out)
    elif kind == "cube":
        xp.multiply(x, x, out=out)
        xp.multiply(out, x, out=out)
    elif kind == "fourth":
        xp.multiply(x, x, out=out)
        xp.multiply(out, out, out=out)
    else:
        xp.sqrt(x, out=out)
    if inverse:
        xp.divide(1.0, out, out=out)
    return out
