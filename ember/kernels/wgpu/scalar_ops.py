"""WGSL expressions of the elementwise ops, one value at a time.

``expression(op, attrs, dtype, operands)`` gives the register-value
expression of one op (``operands``: (expression, dtype) pairs, scalars
already turned into param reads by the renderer). The semantics are the CPU
backend's: binary arithmetic casts both operands to the output dtype,
comparisons to their compute dtype (``attrs[0]``), float functions compute in
the output dtype; NaN propagates through maximum / minimum / clamp as in
NumPy. Helpers (``erf_f`` ...) are WGSL functions the renderer includes when
an expression names them.
"""

from __future__ import annotations

import math

from ember.kernels.fusion import powers
from ember.kernels.wgpu.codegen import convert, kind, round_f16

_NAN = "bitcast<f32>(0x7fc00000u)"
_INF = "bitcast<f32>(0x7f800000u)"


def _erf_series() -> str:
    # erf(x) = 2/sqrt(pi) * sum_n (-1)^n x^(2n+1) / (n! (2n+1)); 13 terms reach f32
    # precision for |x| < 1 (the last term is below 1e-9 there).
    coefficients = [2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1))
                    for n in range(13)]
    horner = f"{coefficients[-1]:.10e}"
    for c in reversed(coefficients[:-1]):
        horner = f"({c:.10e} + z * {horner})"
    return horner


HELPERS: dict[str, str] = {
    # By bits: a shader compiler may fold x != x to false.
    "isnan_f": ("fn isnan_f(x: f32) -> bool { "
                "return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }"),
    "isinf_f": ("fn isinf_f(x: f32) -> bool { "
                "return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u; }"),
    "max_f": "fn max_f(a: f32, b: f32) -> f32 { if (isnan_f(a) || isnan_f(b)) { return a + b; } "
             "return max(a, b); }",
    "min_f": "fn min_f(a: f32, b: f32) -> f32 { if (isnan_f(a) || isnan_f(b)) { return a + b; } "
             "return min(a, b); }",
    # NumPy's float floor division and remainder (Python's divmod): fmod, its sign moved
    # to the divisor's, the quotient snapped to the nearest integer, signed zeros kept.
    "fmod_f": ("fn fmod_f(a: f32, b: f32) -> f32 {\n"
               "  if (isinf_f(b) && !isinf_f(a)) { return a; }\n"
               "  let r = a - b * trunc(a / b);\n"
               "  if (r == 0.0) { return sign_of(a); }\n"
               "  return r;\n}"),
    # C's atan2 at the origin (WGSL leaves it undefined): ±0 or ±π by the signs of the zeros.
    "atan2_f": ("fn atan2_f(y: f32, x: f32) -> f32 { if (isnan_f(x) || isnan_f(y)) { return x + y; }\n"
                "  if (x == 0.0 && y == 0.0) {\n"
                "  let pi = select(0.0, 3.1415927410125732, (bitcast<u32>(x) & 0x80000000u) != 0u);\n"
                "  return select(pi, -pi, (bitcast<u32>(y) & 0x80000000u) != 0u) + y; }\n"
                "  return atan2(y, x); }"),
    "atan_f": "fn atan_f(x: f32) -> f32 { if (isnan_f(x)) { return x; } return atan(x); }",
    # The inverse functions return NaN outside their domain, as C's do (WGSL leaves it
    # undefined); asinh / atanh / acosh go through log1p so they keep small arguments.
    "asin_f": ("fn asin_f(x: f32) -> f32 { if (isnan_f(x) || abs(x) > 1.0) { return " + _NAN + "; } "
               "return atan_f(x / sqrt((1.0 - x) * (1.0 + x))); }"),
    "acos_f": ("fn acos_f(x: f32) -> f32 { if (isnan_f(x) || abs(x) > 1.0) { return " + _NAN + "; } "
               "return 2.0 * atan_f(sqrt((1.0 - x) / (1.0 + x))); }"),
    "sinh_f": ("fn sinh_f(x: f32) -> f32 { if (abs(x) < 0.5) { let s = x * x; "
               "return x * (1.0 + s * (0.16666667 + s * (0.0083333333 + s * 0.00019841270))); }"
               " return 0.5 * (exp(x) - exp(-x)); }"),
    "asinh_f": ("fn asinh_f(x: f32) -> f32 { let a = abs(x); var r: f32;\n"
                "  if (a > 1e18) { r = log(a) + 0.6931471805599453; }\n"
                "  else { r = log1p_f(a + a * a / (1.0 + sqrt(1.0 + a * a))); }\n"
                "  return select(r, -r, x < 0.0); }"),
    "acosh_f": ("fn acosh_f(x: f32) -> f32 { if (x < 1.0) { return " + _NAN + "; }\n"
                "  if (x > 1e18) { return log(x) + 0.6931471805599453; }\n"
                "  let t = x - 1.0; return log1p_f(t + sqrt(t * (x + 1.0))); }"),
    "atanh_f": ("fn atanh_f(x: f32) -> f32 { let a = abs(x);\n"
                "  if (a > 1.0) { return " + _NAN + "; }\n"
                "  if (a == 1.0) { return x * " + _INF + "; }\n"
                "  let r = 0.5 * log1p_f(2.0 * a / (1.0 - a)); return select(r, -r, x < 0.0); }"),
    "sign_of": "fn sign_of(x: f32) -> f32 { return bitcast<f32>(bitcast<u32>(x) & 0x80000000u); }",
    "floordiv_f": ("fn floordiv_f(a: f32, b: f32) -> f32 {\n"
                   "  if (b == 0.0) { return a / b; }\n"
                   "  let m = fmod_f(a, b);\n"
                   "  var q = (a - m) / b;\n"
                   "  if (m != 0.0 && ((b < 0.0) != (m < 0.0))) { q = q - 1.0; }\n"
                   "  if (q == 0.0) { return sign_of(a / b); }\n"
                   "  var f = floor(q);\n"
                   "  if (q - f > 0.5) { f = f + 1.0; }\n"
                   "  return f;\n}"),
    "rem_f": ("fn rem_f(a: f32, b: f32) -> f32 {\n"
              "  var m = fmod_f(a, b);\n"
              "  if (b == 0.0 || isnan_f(m)) { return " + _NAN + "; }\n"
              "  if (m != 0.0) { if ((b < 0.0) != (m < 0.0)) { m = m + b; } return m; }\n"
              "  return sign_of(b);\n}"),
    # WGSL's i32 `%` becomes SPIR-V OpSRem, whose result Vulkan leaves undefined for a
    # negative operand (NVIDIA's driver gives the unsigned remainder: -1 % 5 = 0 on the
    # H200). OpSDiv is defined for every sign, so the remainder is a - b * (a / b).
    # Integer division by zero gives 0 here (the CPU raises; a shader cannot).
    "floordiv_i": ("fn floordiv_i(a: i32, b: i32) -> i32 { if (b == 0) { return 0; } "
                   "var q = a / b; if ((a - b * q != 0) && ((a < 0) != (b < 0))) { q = q - 1; } "
                   "return q; }"),
    "rem_i": ("fn rem_i(a: i32, b: i32) -> i32 { if (b == 0) { return 0; } "
              "var r = a - b * (a / b); "
              "if (r != 0 && ((r < 0) != (b < 0))) { r = r + b; } return r; }"),
    # C's pow: a finite negative base needs an integral exponent (sign by parity); the
    # signs of zero and infinite bases and (-1) ** inf = 1 as in C.
    "pow_f": ("fn pow_f(a: f32, b: f32) -> f32 {\n"
              "  if (b == 0.0 || a == 1.0) { return 1.0; }\n"
              "  if (isnan_f(a) || isnan_f(b)) { return a + b; }\n"
              "  let m = abs(a);\n"
              "  let negative = (bitcast<u32>(a) & 0x80000000u) != 0u;\n"
              "  let integral = floor(b) == b;\n"
              "  let odd = integral && abs(b) < 16777216.0 && (i32(b) & 1) == 1;\n"
              "  if (negative && m != 0.0 && !isinf_f(m) && !integral) { return " + _NAN + "; }\n"
              "  var r: f32;\n"
              "  if (m == 1.0) { r = 1.0; }\n"
              "  else if (m == 0.0) { r = select(0.0, " + _INF + ", b < 0.0); }\n"
              "  else if (isinf_f(m)) { r = select(" + _INF + ", 0.0, b < 0.0); }\n"
              "  else { r = pow(m, b); }\n"
              "  if (negative && odd) { r = -r; }\n"
              "  return r;\n}"),
    # PyTorch's answer for negative exponents: 1 for base 1, +-1 for base -1, else 0.
    "pow_i": ("fn pow_i(a: i32, b: i32) -> i32 {\n"
              "  if (b < 0) {\n"
              "    if (a == 1) { return 1; }\n"
              "    if (a == -1) { return select(1, -1, (b & 1) == 1); }\n"
              "    return 0;\n  }\n"
              "  var result = 1; var base = a; var e = b;\n"
              "  loop { if (e == 0) { break; } if ((e & 1) == 1) { result = result * base; } "
              "base = base * base; e = e >> 1u; }\n"
              "  return result;\n}"),
    # erf: a power series below |x| = 1 (relative accuracy near 0), above it
    # 1 - erfc with the Chebyshev-fitted erfc of Numerical Recipes (rel. error < 1.2e-7).
    "erf_f": ("fn erf_f(x: f32) -> f32 {\n"
              "  let a = abs(x);\n"
              "  if (a < 1.0) { let z = x * x; return x * " + _erf_series() + "; }\n"
              "  let t = 1.0 / (1.0 + 0.5 * a);\n"
              "  let erfc = t * exp(-a * a - 1.26551223 + t * (1.00002368 + t * (0.37409196 + "
              "t * (0.09678418 + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + "
              "t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))));\n"
              "  return sign(x) * (1.0 - erfc);\n}"),
    # log(1 + x) without losing small x: the correction factor x / (u - 1) undoes u's rounding.
    "log1p_f": ("fn log1p_f(x: f32) -> f32 { if (x < -1.0) { return " + _NAN + "; } "
                "let u = 1.0 + x; if (u == 1.0) { return x; } "
                "if (isinf_f(u)) { return u; } return log(u) * (x / (u - 1.0)); }"),
    # tanh saturates to +-1 in f32 beyond 9.1; clamping keeps exp-based lowerings finite.
    "tanh_f": ("fn tanh_f(x: f32) -> f32 { if (isnan_f(x)) { return x; } "
               "return tanh(clamp(x, -15.0, 15.0)); }"),
    "sigmoid_f": "fn sigmoid_f(x: f32) -> f32 { return 1.0 / (1.0 + exp(-x)); }",
    "sign_f": ("fn sign_f(x: f32) -> f32 { return select(0.0, 1.0, x > 0.0) - "
               "select(0.0, 1.0, x < 0.0); }"),
}

_SQRT_HALF = 1.0 / math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)

_FLOAT_FUNCTIONS = {
    "exp": "exp({x})", "log": "log({x})", "log1p": "log1p_f({x})", "sqrt": "sqrt({x})",
    "rsqrt": "(1.0 / sqrt({x}))", "sin": "sin({x})", "cos": "cos({x})", "tanh": "tanh_f({x})",
    "sigmoid": "sigmoid_f({x})", "erf": "erf_f({x})", "reciprocal": "(1.0 / {x})",
    "silu": "({x} * sigmoid_f({x}))",
    "asin": "asin_f({x})", "acos": "acos_f({x})", "atan": "atan_f({x})", "sinh": "sinh_f({x})",
    "cosh": "cosh({x})", "asinh": "asinh_f({x})", "acosh": "acosh_f({x})",
    "atanh": "atanh_f({x})",
    "gelu": f"(0.5 * {{x}} * (1.0 + erf_f({{x}} * {_SQRT_HALF!r})))",
    "gelu_tanh": (f"(0.5 * {{x}} * (1.0 + tanh_f({_SQRT_2_OVER_PI!r} * "
                  f"({{x}} + 0.044715 * {{x}} * {{x}} * {{x}}))))"),
}
_ARITHMETIC = {
    "f": {"add": "({a} + {b})", "sub": "({a} - {b})", "mul": "({a} * {b})", "div": "({a} / {b})",
          "floordiv": "floordiv_f({a}, {b})", "remainder": "rem_f({a}, {b})",
          "pow": "pow_f({a}, {b})", "maximum": "max_f({a}, {b})", "minimum": "min_f({a}, {b})",
          "atan2": "atan2_f({a}, {b})"},
    "i": {"add": "({a} + {b})", "sub": "({a} - {b})", "mul": "({a} * {b})",
          "floordiv": "floordiv_i({a}, {b})", "remainder": "rem_i({a}, {b})",
          "pow": "pow_i({a}, {b})", "maximum": "max({a}, {b})", "minimum": "min({a}, {b})",
          "bitwise_and": "({a} & {b})", "bitwise_or": "({a} | {b})",
          "bitwise_xor": "({a} ^ {b})",
          # A shift by a negative amount (a huge u32) or by 32 or more shifts every bit out,
          # as PyTorch's (int64 lives in i32 here); WGSL masks the amount instead.
          "bitwise_left_shift": "select(0, {a} << u32({b}), u32({b}) < 32u)",
          "bitwise_right_shift": "({a} >> min(u32({b}), 31u))"},
    "b": {"add": "({a} || {b})", "mul": "({a} && {b})", "maximum": "({a} || {b})",
          "minimum": "({a} && {b})", "bitwise_and": "({a} && {b})", "bitwise_or": "({a} || {b})",
          "bitwise_xor": "({a} != {b})"},
}
# ne as !(==): an ordered != would call NaN equal to itself.
_COMPARISON = {"eq": "({a} == {b})", "ne": "!({a} == {b})", "lt": "({a} < {b})",
               "le": "({a} <= {b})", "gt": "({a} > {b})", "ge": "({a} >= {b})"}


def _round_f16(expr: str, dtype: str) -> str:
    return round_f16(expr) if dtype == "float16" else expr


def expression(op: str, attrs: tuple, dtype: str, operands: list[tuple[str, str]]) -> str:
    """The WGSL expression of ``op`` producing a register value of ``dtype``."""
    out_kind = kind(dtype)
    if op == "pow" and len(operands) == 1:  # x ** n lowered (``fusion/powers.py``)
        (x, dx), = operands
        lowered = powers.expression(float(attrs[1]), f"({convert(x, dx, dtype)})", "1.0", "sqrt")
        return _round_f16(lowered, dtype)
    if op in _ARITHMETIC["f"] or op in _ARITHMETIC["i"]:
        (a, da), (b, db) = operands
        template = _ARITHMETIC[out_kind].get(op)
        if template is None:
            raise NotImplementedError(f"{op}: no WGSL form for {dtype}")
        return _round_f16(template.format(a=convert(a, da, dtype), b=convert(b, db, dtype)), dtype)
    if op in _COMPARISON:
        compute = attrs[0]
        (a, da), (b, db) = operands
        a, b = convert(a, da, compute), convert(b, db, compute)
        if kind(compute) == "b" and op not in ("eq", "ne"):
            a, b = convert(a, "bool", "int32"), convert(b, "bool", "int32")
        return _COMPARISON[op].format(a=a, b=b)
    if op in _FLOAT_FUNCTIONS:
        (x, dx), = operands
        return _round_f16(_FLOAT_FUNCTIONS[op].format(x=f"({convert(x, dx, dtype)})"), dtype)
    if op == "cast" or op == "alias":
        (x, dx), = operands
        return convert(x, dx, dtype)
    if op == "where":
        (c, dc), (a, da), (b, db) = operands
        return f"select({convert(b, db, dtype)}, {convert(a, da, dtype)}, {convert(c, dc, 'bool')})"
    if op == "clamp":
        (x, dx), *bounds = operands
        low_given, high_given = attrs
        y = convert(x, dx, dtype)
        pick = {"f": ("max_f({y}, {v})", "min_f({y}, {v})"),
                "i": ("max({y}, {v})", "min({y}, {v})"),
                "b": ("({y} || {v})", "({y} && {v})")}[out_kind]
        bounds_iter = iter(bounds)
        if low_given:
            v, dv = next(bounds_iter)
            y = pick[0].format(y=y, v=convert(v, dv, dtype))
        if high_given:
            v, dv = next(bounds_iter)
            y = pick[1].format(y=y, v=convert(v, dv, dtype))
        return _round_f16(y, dtype)
    (x, dx), = operands
    return _unary(op, attrs, dtype, convert(x, dx, dtype) if op not in ("isnan", "isinf") else x,
                  dx)


def _unary(op: str, attrs: tuple, dtype: str, x: str, source: str) -> str:
    k = kind(dtype)
    if op in ("isnan", "isinf"):
        return f"{op}_f({x})" if kind(source) == "f" else "false"
    if op == "bitwise_not":
        return f"(~{x})" if k == "i" else f"(!{x})"
    if k == "b":
        return x  # sign / abs / floor / ... of a bool is itself
    if op == "neg":
        return f"(-{x})"
    if op == "abs":
        return f"abs({x})"
    if op == "relu":
        # Not select(x, 0.0, x < 0.0): NVIDIA's compiler turns that into a max that drops
        # NaN (relu(NaN) gave 0 on the H200); max_f tests NaN by its bits.
        return f"max_f({x}, 0.0)" if k == "f" else f"max({x}, 0)"
    if op == "sign":
        return f"sign_f({x})" if k == "f" else f"sign({x})"
    if op in ("floor", "ceil", "round"):
        if k == "i":
            return x
        if op != "round" or not attrs or attrs[0] == 0:
            return f"{op}({x})"  # WGSL's round is half to even, as NumPy's
        decimals = attrs[0]
        scale = f"{10.0 ** abs(decimals)!r}"
        if decimals > 0:
            return _round_f16(f"(round({x} * {scale}) / {scale})", dtype)
        return _round_f16(f"(round({x} / {scale}) * {scale})", dtype)
    raise NotImplementedError(f"{op}: no WGSL form")


def helpers_for(body: str) -> str:
    """The helper functions ``body`` names, with the helpers they name, in a valid order."""
    wanted: list[str] = []
    frontier = body
    while True:
        new = [name for name in HELPERS if name not in wanted and f"{name}(" in frontier]
        if not new:
            break
        wanted.extend(new)
        frontier = "\n".join(HELPERS[n] for n in new)
    # WGSL resolves functions declared in any order at module scope.
    return "\n".join(HELPERS[n] for n in wanted) + ("\n" if wanted else "")
