"""WGSL building blocks every kernel shares: bindings, params, indices, values and casts.

Values in registers: every float dtype computes as ``f32`` (float16 is rounded
to the f16 grid after each op by ``round_f16``, as the CPU backend rounds once
per op), int32 and int64 as ``i32``, bool as ``bool``. ``load`` / ``store``
convert between those and the storage types of ``table.STORAGE``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ember.kernels.wgpu.table import STORAGE

# Recovers the linear invocation index of a dispatch made with ``Runtime.groups(n, 256)``.
LINEAR_INDEX = "gid.x + gid.y * nwg.x * {size}u"
ENTRY = ("@compute @workgroup_size({size})\n"
         "fn main(@builtin(global_invocation_id) gid: vec3<u32>, "
         "@builtin(num_workgroups) nwg: vec3<u32>, "
         "@builtin(local_invocation_index) lid: u32, "
         "@builtin(workgroup_id) wid: vec3<u32>) {{\n")


def kind(dtype: str) -> str:
    """"f", "i" or "b": how a dtype computes in registers."""
    if dtype in ("float32", "float16"):
        return "f"
    return "b" if dtype == "bool" else "i"


REGISTER = {"f": "f32", "i": "i32", "b": "bool"}


def register_type(dtype: str) -> str:
    return REGISTER[kind(dtype)]


# An f32 rounded to the nearest float16 (ties to even), kept in an f32, on the bits: NVIDIA's
# Vulkan compiler drops the round trip f32(f16(x)) (the H200 run: a fused float16 chain
# came out as if computed in f32 and rounded once), integer operations it cannot.
# Past 65504 and half an ulp is inf; below 2**-14 the grid is f16's subnormal step, 2**-24.
_ROUND_F16 = """fn round_f16(v: f32) -> f32 {
  let bits = bitcast<u32>(v);
  let sign = bits & 0x80000000u;
  let magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) { return v; }
  if (magnitude >= 0x477ff000u) { return bitcast<f32>(sign | 0x7f800000u); }
  if (magnitude < 0x38800000u) {
    let steps = round(bitcast<f32>(magnitude) * 16777216.0);
    return bitcast<f32>(sign | bitcast<u32>(steps * 5.9604644775390625e-8));
  }
  let kept = (magnitude + 0xfffu + ((magnitude >> 13u) & 1u)) & 0xffffe000u;
  return bitcast<f32>(sign | kept);
}
"""


def header(dtypes: Sequence[str]) -> str:
    """``enable f16;`` and ``round_f16`` when any of ``dtypes`` is float16."""
    return "enable f16;\n" + _ROUND_F16 if "float16" in dtypes else ""


def round_f16(value: str) -> str:
    """Register value ``value`` (an f32) rounded to float16; the source's header must
    name float16 among its dtypes."""
    return f"round_f16({value})"


def bindings(writes: Sequence[str], reads: Sequence[str], n_params: int,
             vector: bool = False) -> str:
    """Declarations in the binding order of ``Runtime.dispatch``.

    Writes are named ``out0, out1, ...``, reads ``in0, in1, ...``; both are
    arrays of their dtype's storage type (of ``vec4``s of it with ``vector``).
    Params are read with ``pu(i)``, ``pi(i)`` and ``pf(i)``.
    """

    def element(dtype: str) -> str:
        return f"vec4<{STORAGE[dtype][0]}>" if vector else STORAGE[dtype][0]

    lines = [f"@group(0) @binding({i}) var<storage, read_write> out{i}: "
             f"array<{element(d)}>;" for i, d in enumerate(writes)]
    lines += [f"@group(0) @binding({len(writes) + i}) var<storage, read> in{i}: "
              f"array<{element(d)}>;" for i, d in enumerate(reads)]
    words = max(1, -(-n_params // 4))
    lines += [
        f"struct Params {{ v: array<vec4<u32>, {words}> }}",
        f"@group(0) @binding({len(writes) + len(reads)}) var<uniform> P: Params;",
        "fn pu(i: u32) -> u32 { return P.v[i / 4u][i % 4u]; }",
        "fn pi(i: u32) -> i32 { return bitcast<i32>(pu(i)); }",
        "fn pf(i: u32) -> f32 { return bitcast<f32>(pu(i)); }",
    ]
    return "\n".join(lines) + "\n"


def load(array: str, index: str, dtype: str) -> str:
    """The register value of ``array[index]`` holding ``dtype``."""
    storage = STORAGE[dtype][0]
    if storage == "f16":
        return f"f32({array}[{index}])"
    if storage == "u32":
        return f"({array}[{index}] != 0u)"
    return f"{array}[{index}]"


def store(value: str, dtype: str) -> str:
    """The storage form of register value ``value`` of ``dtype``."""
    storage = STORAGE[dtype][0]
    if storage == "f16":
        return f"f16({value})"
    if storage == "u32":
        return f"select(0u, 1u, {value})"
    return value


def convert(value: str, source: str, target: str) -> str:
    """Register value ``value`` of dtype ``source`` converted to dtype ``target``.

    NumPy's unsafe casts: floats truncate to integers, anything non-zero is
    true. A float is tested by its bits (any but the sign bit set): NaN is
    true, and a driver that assumes no NaN may turn ``!(x == 0.0)`` into an
    ordered ``x != 0.0``, false for NaN. Converting to float16 rounds through f16.
    """
    src, dst = kind(source), kind(target)
    if src == dst:
        out = value
    elif dst == "f":
        out = f"f32({value})" if src == "i" else f"select(0.0, 1.0, {value})"
    elif dst == "i":
        out = f"i32({value})" if src == "f" else f"select(0, 1, {value})"
    else:
        out = (f"((bitcast<u32>({value}) & 0x7fffffffu) != 0u)" if src == "f"
               else f"({value} != 0)")
    if target == "float16" and source != "float16":
        out = round_f16(out)
    return out


def literal(value: float | int | bool, dtype: str) -> str:
    k = kind(dtype)
    if k == "b":
        return "true" if value else "false"
    if k == "i":
        return f"{int(value)}"
    return f"bitcast<f32>({_f32_bits(float(value))}u)"


def _f32_bits(value: float) -> int:
    import struct

    return struct.unpack("<I", struct.pack("<f", value))[0]


def strided_index(base: int, rank: int, coords: str = "c") -> str:
    """``pi(base) + c0 * pi(base + 1) + ...``: the element offset of a strided view whose
    offset and strides sit in params ``base .. base + rank``."""
    terms = [f"pi({base}u)"] + [f"i32({coords}{d}) * pi({base + 1 + d}u)" for d in range(rank)]
    return " + ".join(terms)


def coordinates(index: str, shape_base: int, rank: int, coords: str = "c") -> str:
    """Statements splitting linear ``index`` into ``c0 .. c{rank-1}`` over the shape in
    params ``shape_base .. shape_base + rank - 1``."""
    if rank == 0:
        return ""
    lines = [f"  var rest_{coords}: u32 = {index};"]
    for d in reversed(range(rank)):
        size = f"pu({shape_base + d}u)"
        if d == 0:
            lines.append(f"  let {coords}{d}: u32 = rest_{coords};")
        else:
            lines.append(f"  let {coords}{d}: u32 = rest_{coords} % {size}; "
                         f"rest_{coords} = rest_{coords} / {size};")
    return "\n".join(lines) + "\n"
