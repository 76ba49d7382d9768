"""How float32 matmuls multiply on GPUs: ``em.set_float32_matmul_precision`` (torch's name).

The setting is read when a matmul is issued, on the caller's line, and travels in the
op's message; a backward pass's matmuls read it when they are issued too.
"""

from __future__ import annotations

import os

PRECISIONS = ("highest", "high", "medium")
# EMBER_TF32=1 starts the process at "medium" (TF32 products), as before the setting existed.
TF32_FROM_ENV = os.environ.get("EMBER_TF32", "0") not in ("", "0")
_precision = "medium" if TF32_FROM_ENV else "highest"


def set_float32_matmul_precision(precision: str) -> None:
    """Choose how float32 matmuls multiply on CUDA devices, from the next matmul on.

    - ``"highest"`` (the default): float32 products (cuBLAS SGEMM).
    - ``"high"``: each operand is split into two TF32 parts, ``x = hi + lo``, and the
      product is ``hi·hi + hi·lo + lo·hi``: three tensor-core products accumulated in
      float32. About 2.6× SGEMM's speed at 4096³ on an H200, with errors 2–5× SGEMM's
      and 15–100× below TF32's (BENCHMARKS.md). An infinite operand gives NaN
      where SGEMM gives ±inf (its ``lo`` part multiplies as 0·inf). Products under
      2^30 multiply-adds (1024³), and matrix-vector products, run in float32: there
      the split costs about what the tensor cores save.
    - ``"medium"``: TF32 products (a 10-bit mantissa, float32 accumulation), 8× SGEMM's
      speed at ~3e-4 relative error.

    The CPU and WebGPU backends multiply float32 in float32 at every setting; float16,
    bfloat16 and float64 matmuls are unaffected.

    Raises:
        ValueError: ``precision`` is not one of "highest", "high", "medium".

    Example:
        >>> em.set_float32_matmul_precision("high")
    """
    global _precision
    if precision not in PRECISIONS:
        raise ValueError(f"set_float32_matmul_precision: expected one of "
                         f"{', '.join(map(repr, PRECISIONS))}, got {precision!r}")
    _precision = precision


def get_float32_matmul_precision() -> str:
    """The float32 matmul precision new matmuls use: "highest", "high" or "medium"."""
    return _precision


def matmul_attrs(float32: bool = True, transpose_a: bool = False,
                 transpose_b: bool = False) -> tuple:
    """A matmul message's attrs: empty at "highest" (and for other dtypes than float32,
    which the setting leaves alone), else the precision's name; with an operand to be
    read transposed, the precision and both flags."""
    precision = _precision if float32 else "highest"
    if transpose_a or transpose_b:
        return (precision, transpose_a, transpose_b)
    return () if precision == "highest" else (precision,)


def read_matmul_attrs(attrs: tuple) -> tuple[str, bool, bool]:
    """(precision, transpose_a, transpose_b) of a matmul message's attrs (other dtypes
    than float32 carry "highest")."""
    if len(attrs) == 3:
        return attrs
    return (attrs[0] if attrs else "highest"), False, False
