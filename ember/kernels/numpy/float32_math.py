"""ember's own float32 exp, log, tanh and sigmoid, as C both CPU paths compile.

NumPy's float32 ``exp`` / ``tanh`` / ``log`` and SciPy's ``expit`` are their own
implementations, which C's libm does not reproduce bit for bit; a fused group that
called libm would give other bits than the unfused kernels. These functions are
instead C that the unfused NumPy-table kernels (one compiled loop per function,
``ARRAY_FUNCTIONS``) and the compiled fused groups (``csource``'s preamble) both use:
the same IEEE operations, compiled without contraction or fast-math, give the same
bits in a vectorized loop and in a scalar one.

Each evaluates in double from the float32 argument and rounds once to float32. The
approximation errors are below 2^-31 relative (the polynomials' errors, measured on
dense grids when fitted), so every result is the correctly rounded one or its
neighbour: within 1 ulp (checked in tests/ops/test_float32_math.py against float64
NumPy over special values, thresholds and dense grids).

- ``exp2`` core: 2^t = 2^k · (1 + f·P(f)), k = rint(t), f = t - k in [-1/2, 1/2], P of
  degree 6 fitted here by weighted least squares with Lawson's iterations for the
  smallest relative error of P (2.4e-10), so f·P(f) is 2^f - 1 to that relative error
  even near f = 0 (expm1 without cancellation).
- exp(x) = 2^(x·log2 e) with P fitted for the smallest relative error of 2^f itself
  (4.7e-11: exp needs no expm1), 2^k added to the exponent's bits, and no
  clamp before the arithmetic: past the thresholds (e^-104 rounds to 0, e^89
  overflows) a select at the end gives 0 or inf. Written so that gcc vectorizes it
  into one pass of FMAs, as wide as the CPU's vectors (softmax spends its time here).
- sigmoid(x) = 1 / (1 + 2^(-x·log2 e)).
- tanh(x) = u / (u + 2) with u = expm1(2x), x clamped to ±10 (tanh(±10) rounds to
  ±1), the sign copied from x (tanh(-0) = -0).
- log(x) = e·ln 2 + log(m), x = 2^e·m with m in [√½, √2): log(m) = 2·atanh(s),
  s = (m - 1)/(m + 1), its series to s^11 (relative error < 1e-10).

Where no C compiler is found, the kernels keep NumPy's functions on both paths (no
group compiles then).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

# Functions with one float argument and a float result that this C defines as
# ember_<name>, and the NumPy-table ops computed with them.
OPS = ("exp", "log", "tanh", "sigmoid", "silu", "gelu_tanh")
# The ops whose unfused kernel runs this C in this process (``compiled.math_function``
# adds them): only those compile into fused groups, so both paths give the same bits.
READY: set[str] = set()

_EXP2_P = (0.6931471805846218, 0.2402265091957184, 0.05550410705444353,
           0.009618057111493158, 0.0013333693175031434, 0.00015461306860971297,
           1.5246380616127125e-05)
# exp's P: 2^f = 1 + f·P(f) to a relative error of 4.7e-11 (2^-34.3) on [-1/2, 1/2], so
# that all but about one result in a thousand is the correctly rounded one.
_EXP_P = (0.6931471807044983, 0.2402265106647134, 0.05550410366047169,
          0.009618038146595453, 0.001333393506101891, 0.00015466751310620652,
          1.5196143240094942e-05)


def _horner(coefficients: tuple, variable: str) -> str:
    """P(variable) by Horner's rule, each step one fused multiply-add (one rounding: the
    same bits in a vector loop and a scalar one)."""
    expression = repr(coefficients[-1])
    for c in coefficients[-2::-1]:
        expression = f"fma({expression}, {variable}, {c!r})"
    return expression


def _f32(value: float) -> str:
    """A float32 constant, exactly, as a C hexadecimal literal (NumPy's kernels meet a
    Python float scalar in float32)."""
    return f"{float(np.float32(value)).hex()}f"


# gelu_tanh: the NumPy kernel's operations in its order: x * x, * 0.044715, + 1, * x,
# * sqrt(2 / pi), tanh, + 1, * x, * 0.5.
C_CODE = r"""
#include <stdint.h>
#include <string.h>
static inline double ember_from_bits(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }
static inline uint64_t ember_to_bits(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }
/* 2^t = scale * (1 + q) for t in [-200, 200] (NaN passes through q). */
static inline double ember_exp2_parts(double t, double* scale) {
  const double shift = 0x1.8p52;
  double kd = t + shift;
  uint64_t k = ember_to_bits(kd);
  kd = kd - shift;
  double f = t - kd;
  *scale = ember_from_bits((k << 52) + 0x3ff0000000000000ULL);
  return f * POLY;
}
static inline double ember_clamp200(double t) {
  return t < -200.0 ? -200.0 : (t > 200.0 ? 200.0 : t);
}
/* Where |x| is past the thresholds t may be past the shift's range: the bits computed
   there are garbage the select replaces. A NaN passes through y. */
static inline float ember_exp(float x) {
  const double shift = 0x1.8p52;
  double t = (double)x * 0x1.71547652b82fep0;
  double kd = t + shift;
  uint64_t k = ember_to_bits(kd);
  kd = kd - shift;
  double f = t - kd;
  double y = fma(f, EXP_POLY, 1.0);
  float r = (float)ember_from_bits(ember_to_bits(y) + (k << 52));
  return x < -104.0f ? 0.0f : (x > 89.0f ? INFINITY : r);
}
static inline float ember_sigmoid(float x) {
  double scale;
  double q = ember_exp2_parts(ember_clamp200((double)x * -0x1.71547652b82fep0), &scale);
  return (float)(1.0 / (1.0 + (scale + scale * q)));
}
static inline float ember_silu(float x) { return x * ember_sigmoid(x); }
static inline float ember_tanh(float x) {
  float c = x < -10.0f ? -10.0f : (x > 10.0f ? 10.0f : x);
  double scale;
  double q = ember_exp2_parts((double)c * 0x1.71547652b82fep1, &scale);
  double u = (scale - 1.0) + scale * q;
  return copysignf((float)(u / (u + 2.0)), x);
}
static inline float ember_log(float x) {
  double d = (double)x;
  uint64_t bits = ember_to_bits(d);
  double e = ember_from_bits((bits >> 52) | 0x4330000000000000ULL) - 0x1.00000000003ffp52;
  double m = ember_from_bits((bits & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL);
  int big = m > 0x1.6a09e667f3bcdp0;
  m = big ? m * 0.5 : m;
  e = big ? e + 1.0 : e;
  double s = (m - 1.0) / (m + 1.0);
  double z = s * s;
  double r = e * 0x1.62e42fefa39efp-1 + (2.0 * s + s * z * LOG_SERIES);
  float y = (float)r;
  return x > 0.0f && x < INFINITY ? y
       : (x == 0.0f ? -INFINITY : (x == INFINITY ? x : (x - x) / 0.0f));
}
static inline float ember_gelu_tanh(float x) {
  float t = x * x;
  t = t * GELU_A;
  t = t + 1.0f;
  t = t * x;
  t = t * GELU_B;
  t = ember_tanh(t);
  t = t + 1.0f;
  t = t * x;
  return t * 0.5f;
}
""".replace("EXP_POLY", _horner(_EXP_P, "f")).replace("POLY", _horner(_EXP2_P, "f")).replace(
    "LOG_SERIES", _horner((2 / 3, 2 / 5, 2 / 7, 2 / 9, 2 / 11), "z")).replace(
    "GELU_A", _f32(0.044715)).replace("GELU_B", _f32(math.sqrt(2.0 / math.pi)))


# Ops whose C divides in double. In 512-bit vectors their loops run about twice as slow
# as in gcc's default 256-bit ones over arrays past the caches (the divider holds the
# loads back, it seems), where exp's loops run faster in 512 bits at every size.
_DIVIDING = frozenset({"log", "tanh", "sigmoid", "silu", "gelu_tanh"})
_WIDE = """#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("prefer-vector-width=512")
#endif"""


def vector_width(ops: Iterable[str]) -> str:
    """The first lines of C computing ``ops``: 512-bit vectors where the CPU has them (gcc
    on x86) if exp is among the ops and none that divides in double is; else none. (The
    width changes no bit of any result, only how many lanes compute at once.)"""
    ops = set(ops)
    return _WIDE if "exp" in ops and not ops & _DIVIDING else ""


class ArraySource:
    """The C function ``name`` in ``code``: one op over a contiguous range::

        void ember_array_<op>(long long begin, long long end, const float* x, float* out)
    """

    __slots__ = ("code", "name")

    def __init__(self, name: str, code: str) -> None:
        self.name = name
        self.code = code


def array_source(op: str) -> ArraySource:
    """The array function of ``op`` (one of ``OPS``)."""
    name = f"ember_array_{op}"
    code = "\n".join([
        vector_width([op]), "#include <math.h>", C_CODE,
        f"void {name}(long long begin, long long end, const float* x, float* out) {{",
        "  #pragma GCC ivdep",
        f"  for (long long i = begin; i < end; ++i) out[i] = ember_{op}(x[i]);",
        "}", ""])
    return ArraySource(name, code)
