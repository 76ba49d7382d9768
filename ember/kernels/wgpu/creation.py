"""WebGPU kernels that create tensors: fills, ranges, identity, counter-based random numbers.

Every creator is one generator kernel: element ``i`` is a function of ``i`` and
the params. Random numbers come from Philox4x64-10 (``philox.py``), the CPU
backend's generator, over the same (seed, stream) key:

- ``rand`` (float32, float16) equals the CPU's bit for bit.
- ``randint`` equals the CPU's unless one of its Lemire draws is rejected
  (chance ``2**32 mod (high - low)`` in ``2**32`` per element, never for a power
  of two range): the CPU then shifts every later element to the next draw, which
  a parallel generator cannot follow; here the rejected element alone redraws
  from a side lane of the same counter.
- ``randn`` uses Box-Muller on the same stream, not NumPy's ziggurat (whose
  rejections shift the stream, as above, 1 time in 140): the same numbers on
  every wgpu device and run, different ones from the CPU.

Float ranges are computed in f32 from ``start`` and ``step`` split into several
f32 parts with exact partial products, within an ulp of the CPU's float64
computation (equal to it wherever that is exactly representable).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ember.errors import DTypeError
from ember.kernels.wgpu import codegen
from ember.kernels.wgpu.philox import PHILOX
from ember.kernels.wgpu.table import check_dtype, kernel

_SOURCES: dict[tuple[str, str], str] = {}
_INT32 = np.iinfo(np.int32)


def _source(name: str, dtype: str, n_params: int, body: str, prelude: str = "",
            per_thread: int = 1) -> str:
    """A generator: each invocation writes ``per_thread`` elements from ``body``.

    ``body`` sees ``i`` (the first element's index) and ``count`` (params slot 0) and
    calls ``put(j, value)`` to write element ``i + j`` (a register value of ``dtype``).
    """
    key = (name, dtype)
    found = _SOURCES.get(key)
    if found is not None:
        return found
    found = _SOURCES[key] = (
        codegen.header([dtype]) + prelude + codegen.bindings([dtype], [], n_params)
        + f"fn put(at: u32, value: {codegen.register_type(dtype)}) "
        f"{{ if (at < pu(0u)) {{ out0[at] = {codegen.store('value', dtype)}; }} }}\n"
        + codegen.ENTRY.format(size=256) + f"""
    let i = ({codegen.LINEAR_INDEX.format(size=256)}) * {per_thread}u;
    let count = pu(0u);
    if (i >= count) {{ return; }}
{body}
}}
""")
    return found


def _run(rt, msg, source: Callable[[], str], params: list, per_thread: int = 1):
    """Allocate the output (which checks its dtype), then dispatch ``source()`` over it."""
    out = rt.empty(msg.shape, msg.dtype)
    count = out.size
    if count:
        rt.dispatch(source(), [out], [], [count, *params], rt.groups(-(-count // per_thread)))
    return out


def _affine_params(origin: float, step: float) -> list[float]:
    """Params of ``affine`` in ``_AFFINE``: ``origin`` in two f32 halves, ``step`` in three
    (its f32 value cut into 12-bit halves, and the rest)."""
    origin_high = np.float32(origin)
    step_f32 = np.float32(step)
    step_a = (step_f32.view(np.uint32) & np.uint32(0xFFFFF000)).view(np.float32)
    return [float(origin_high), float(np.float32(origin - float(origin_high))),
            float(step_a), float(step_f32 - step_a), float(np.float32(step - float(step_f32)))]


# origin + step · n to within an ulp of float64 arithmetic rounded to f32: step · n as four
# exact f32 products (12-bit halves of each factor, n < 2**24), summed with their rounding
# errors (two-sum), so values near zero keep their digits.
_AFFINE = """
fn two_sum(a: f32, b: f32) -> vec2<f32> {
    let s = a + b;
    let b_part = s - a;
    return vec2<f32>(s, (a - (s - b_part)) + (b - b_part));
}

fn affine(base: u32, n: u32) -> f32 {
    let n_high = f32(n & 0xFFFFF000u);
    let n_low = f32(n & 0xFFFu);
    var sum = vec2<f32>(pf(base), 0.0);
    for (var t = 0; t < 4; t++) {
        let factor = select(pf(base + 3u), pf(base + 2u), t < 2);
        let part = two_sum(sum.x, factor * select(n_low, n_high, t % 2 == 0));
        sum = vec2<f32>(part.x, sum.y + part.y);
    }
    return sum.x + (sum.y + (pf(base + 1u) + pf(base + 4u) * f32(n)));
}
"""


def _int32(rt, msg, *values: int) -> None:
    """Raise ``DTypeError`` for an unsupported dtype or an integer past int32."""
    check_dtype(msg.dtype, msg.op, rt.name, rt.has_f16)
    for value in values:
        if not _INT32.min <= value <= _INT32.max:
            raise DTypeError(f"{msg.op}: {value} does not fit the int32 that holds integers "
                             f"on {rt.name} (WGSL has no 64-bit integers)")


@kernel("full")
def _full(msg, rt):
    (value,) = msg.attrs
    k = codegen.kind(msg.dtype)
    _int32(rt, msg, *((value,) if k == "i" else ()))
    param = {"f": float, "i": int, "b": int}[k](value)
    read = {"f": "pf(1u)", "i": "pi(1u)", "b": "(pu(1u) != 0u)"}[k]
    return _run(rt, msg, lambda: _source("full", msg.dtype, 2, f"    put(i, {read});"), [param])


@kernel("arange")
def _arange(msg, rt):
    start, step = msg.attrs
    check_dtype(msg.dtype, "arange", rt.name, rt.has_f16)
    if codegen.kind(msg.dtype) == "i" and isinstance(start, int) and isinstance(step, int):
        _int32(rt, msg, start, start + step * max(msg.shape[0] - 1, 0))
        body = "    put(i, pi(1u) + i32(i) * pi(2u));"
        return _run(rt, msg, lambda: _source("arange_int", msg.dtype, 3, body), [start, step])
    body = f"    put(i, {codegen.convert('affine(1u, i)', 'float32', msg.dtype)});"
    return _run(rt, msg, lambda: _source("arange", msg.dtype, 6, body, _AFFINE),
                _affine_params(start, step))


@kernel("linspace")
def _linspace(msg, rt):
    # PyTorch's two halves: the first counts up from start, the second down from stop,
    # so both ends are exact (a single point is start).
    start, stop = msg.attrs
    num = msg.shape[0]
    step = (stop - start) / max(num - 1, 1)
    value = "select(affine(6u, pu(11u) - i), affine(1u, i), i < pu(12u))"
    body = f"    put(i, {codegen.convert(value, 'float32', msg.dtype)});"
    params = (_affine_params(start, step) + _affine_params(stop, -step)
              + [max(num - 1, 0), max(num // 2, 1)])
    return _run(rt, msg, lambda: _source("linspace", msg.dtype, 13, body, _AFFINE), params)


@kernel("eye")
def _eye(msg, rt):
    body = f"    put(i, {codegen.convert('(i / pu(1u) == i % pu(1u))', 'bool', msg.dtype)});"
    return _run(rt, msg, lambda: _source("eye", msg.dtype, 2, body), [max(msg.shape[1], 1)])


# ----- random ----------------------------------------------------------------------------

# Params 1..4: seed (low, high), stream (low, high). One invocation per Philox block:
# eight 32-bit draws, one per element (two per pair of normals).
_SEED = "vec2<u32>(pu(1u), pu(2u))"
_STREAM = "vec2<u32>(pu(3u), pu(4u))"
_DRAWS = 8
# Mantissa digits of float16's uniform numbers: multiples of 2**-11, never rounding to 1.0
# (the CPU draws integers(0, 2**11) and scales them, for the same reason).
_F16_DIGITS = 11


def _random(rt, msg, name: str, body: str, params: list, n_params: int):
    seed, stream = msg.attrs[-2:]

    def source() -> str:
        return _source(name, msg.dtype, n_params, f"""
    let block = philox_block(i / {_DRAWS}u, {_STREAM}, 0u, {_SEED});
{body}""", PHILOX, _DRAWS)

    key = [seed & 0xFFFFFFFF, seed >> 32 & 0xFFFFFFFF, stream & 0xFFFFFFFF,
           stream >> 32 & 0xFFFFFFFF]
    return _run(rt, msg, source, key + params, _DRAWS)


@kernel("rand")
def _rand(msg, rt):
    if msg.dtype == "float16":
        # integers(0, 2**11) on the CPU: Lemire's method keeps a draw's top 11 bits.
        scale = f"f32(draw(block, j) >> {32 - _F16_DIGITS}u) * {2.0 ** -_F16_DIGITS}"
    else:
        # NumPy's float32: the top 24 bits of a draw, scaled by 2**-24.
        scale = f"f32(draw(block, j) >> 8u) * {2.0 ** -24}"
    body = f"    for (var j = 0u; j < {_DRAWS}u; j++) {{ put(i + j, {scale}); }}"
    return _random(rt, msg, "rand", body, [], 5)


@kernel("randn")
def _randn(msg, rt):
    # Box-Muller on pairs of draws; the first is moved into (0, 1] so its log is finite.
    body = f"""    for (var j = 0u; j < {_DRAWS}u; j += 2u) {{
        let radius = sqrt(-2.0 * log(f32((draw(block, j) >> 8u) + 1u) * {2.0 ** -24}));
        let angle = 6.283185307179586 * f32(draw(block, j + 1u) >> 8u) * {2.0 ** -24};
        put(i + j, {codegen.convert('radius * cos(angle)', 'float32', msg.dtype)});
        put(i + j + 1u, {codegen.convert('radius * sin(angle)', 'float32', msg.dtype)});
    }}"""
    return _random(rt, msg, "randn", body, [], 5)


@kernel("randint")
def _randint(msg, rt):
    low, high = msg.attrs[:2]
    _int32(rt, msg, low, high - 1)
    span = high - 1 - low  # NumPy's rng: 0 means one value, 2**32 - 1 every u32
    # Lemire's method as NumPy's 32-bit path runs it: the high word of draw · (span + 1),
    # rejected when the low word falls under 2**32 mod (span + 1).
    threshold = (1 << 32) % (span + 1)
    body = f"""    for (var j = 0u; j < {_DRAWS}u; j++) {{
        var u = draw(block, j);
        var offset = u;
        if (pu(6u) != 0xFFFFFFFFu) {{
            var m = mul_wide(u, pu(6u) + 1u);
            for (var lane = 1u; m.x < pu(7u); lane++) {{
                let side = philox_block(i / {_DRAWS}u, {_STREAM}, lane, {_SEED});
                m = mul_wide(draw(side, j), pu(6u) + 1u);
            }}
            offset = m.y;
        }}
        put(i + j, {codegen.convert('pi(5u) + bitcast<i32>(offset)', 'int32', msg.dtype)});
    }}"""
    return _random(rt, msg, "randint", body, [low, span, threshold], 8)
