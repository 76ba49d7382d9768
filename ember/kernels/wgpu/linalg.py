"""WGSL matmul: a tiled, register-blocked kernel over broadcast batch dims.

A workgroup of 256 invocations computes a 64x64 output tile; each invocation
keeps a 4x4 block of it in registers. The K dim advances 16 at a time: the
workgroup stages a 64x16 slab of ``a`` and a 16x64 slab of ``b`` in
workgroup memory, then every invocation does 16 rank-1 updates of its block
(8 loads feed 16 multiply-adds). Operands are read through their strides,
so transposed views and broadcast batch dims need no copy. float16 computes
in f32 and rounds once on output; integers accumulate in i32.
"""

from __future__ import annotations

import math
from typing import Any

from ember.kernels.wgpu import codegen, sources
from ember.kernels.wgpu.table import WgpuArray, check_dtype, kernel
from ember.precision import read_matmul_attrs

_TILE = 64
_DEPTH = 16
_BLOCK = 4
# Params: M, N, K, a offset, a row stride, a k stride, b offset, b k stride, b col stride,
# then (size, a stride, b stride) per batch dim.
_FIXED_PARAMS = 9


def _render(a_dtype: str, b_dtype: str, out_dtype: str, batch_rank: int) -> str:
    acc = "float32" if codegen.kind(out_dtype) == "f" else "int32"
    acc_type = codegen.register_type(acc)
    zero = f"{acc_type}(0)"

    def operand(name: str, dtype: str, index: str) -> str:
        return codegen.convert(codegen.load(name, index, dtype), dtype, acc)

    batch = ["  var a_base: i32 = pi(3u); var b_base: i32 = pi(6u); var rest: u32 = wid.z;"]
    for d in reversed(range(batch_rank)):
        size, sa, sb = (f"p{k}({_FIXED_PARAMS + 3 * d + j}u)" for j, k in enumerate("uii"))
        batch.append(f"  a_base = a_base + i32(rest % {size}) * {sa}; "
                     f"b_base = b_base + i32(rest % {size}) * {sb}; rest = rest / {size};")
    loads_per_invocation = _TILE * _DEPTH // 256
    main = "\n".join([
        "  let M = pu(0u); let N = pu(1u); let K = pu(2u);",
        *batch,
        "  let tx = lid % 16u; let ty = lid / 16u;",
        f"  let row0 = wid.y * {_TILE}u; let col0 = wid.x * {_TILE}u;",
        f"  var acc: array<{acc_type}, {_BLOCK * _BLOCK}>;",
        f"  for (var i = 0u; i < {_BLOCK * _BLOCK}u; i = i + 1u) {{ acc[i] = {zero}; }}",
        f"  for (var k0 = 0u; k0 < K; k0 = k0 + {_DEPTH}u) {{",
        f"    for (var t = 0u; t < {loads_per_invocation}u; t = t + 1u) {{",
        "      let e = lid + 256u * t;",
        f"      let m = e / {_DEPTH}u; let ka = e % {_DEPTH}u;",
        "      let gm = row0 + m; let gka = k0 + ka;",
        f"      var va = {zero};",
        "      if (gm < M && gka < K) { va = "
        + operand("in0", a_dtype, "a_base + i32(gm) * pi(4u) + i32(gka) * pi(5u)") + "; }",
        f"      As[ka * {_TILE}u + m] = va;",
        f"      let kb = e / {_TILE}u; let n = e % {_TILE}u;",
        "      let gkb = k0 + kb; let gn = col0 + n;",
        f"      var vb = {zero};",
        "      if (gkb < K && gn < N) { vb = "
        + operand("in1", b_dtype, "b_base + i32(gkb) * pi(7u) + i32(gn) * pi(8u)") + "; }",
        f"      Bs[kb * {_TILE}u + n] = vb;",
        "    }",
        "    workgroupBarrier();",
        f"    for (var kk = 0u; kk < {_DEPTH}u; kk = kk + 1u) {{",
        f"      var ra: array<{acc_type}, {_BLOCK}>; var rb: array<{acc_type}, {_BLOCK}>;",
        f"      for (var i = 0u; i < {_BLOCK}u; i = i + 1u) {{",
        f"        ra[i] = As[kk * {_TILE}u + ty * {_BLOCK}u + i];",
        f"        rb[i] = Bs[kk * {_TILE}u + tx * {_BLOCK}u + i];",
        "      }",
        f"      for (var i = 0u; i < {_BLOCK}u; i = i + 1u) {{",
        f"        for (var j = 0u; j < {_BLOCK}u; j = j + 1u) {{",
        f"          acc[i * {_BLOCK}u + j] = acc[i * {_BLOCK}u + j] + ra[i] * rb[j];",
        "        }",
        "      }",
        "    }",
        "    workgroupBarrier();",
        "  }",
        "  let out_base = wid.z * M * N;",
        f"  for (var i = 0u; i < {_BLOCK}u; i = i + 1u) {{",
        f"    let r = row0 + ty * {_BLOCK}u + i;",
        f"    for (var j = 0u; j < {_BLOCK}u; j = j + 1u) {{",
        f"      let c = col0 + tx * {_BLOCK}u + j;",
        "      if (r < M && c < N) { out0[out_base + r * N + c] = "
        + codegen.store(codegen.convert(f"acc[i * {_BLOCK}u + j]", acc, out_dtype), out_dtype)
        + "; }",
        "    }",
        "  }",
    ])
    return (codegen.header([a_dtype, b_dtype, out_dtype])
            + codegen.bindings([out_dtype], [a_dtype, b_dtype], _FIXED_PARAMS + 3 * batch_rank)
            + f"var<workgroup> As: array<{acc_type}, {_TILE * _DEPTH}>;\n"
            f"var<workgroup> Bs: array<{acc_type}, {_TILE * _DEPTH}>;\n"
            + codegen.ENTRY.format(size=256) + main + "\n}\n")


def _transposed(x: WgpuArray) -> WgpuArray:
    return x.view(x.shape[:-2] + (x.shape[-1], x.shape[-2]),
                  x.strides[:-2] + (x.strides[-1], x.strides[-2]), x.offset)


@kernel("matmul")
def _matmul(msg: Any, rt: Any, a: WgpuArray, b: WgpuArray) -> WgpuArray:
    for x in (a, b):
        check_dtype(x.dtype, "matmul", rt.name, rt.has_f16)
    _, transpose_a, transpose_b = read_matmul_attrs(msg.attrs)
    if transpose_a:  # strided views: the shader reads any strides
        a = _transposed(a)
    if transpose_b:
        b = _transposed(b)
    out = rt.empty(msg.shape, msg.dtype)
    # A 1-D operand is a row (lhs) or a column (rhs); the output simply lacks that dim.
    a2 = a if a.ndim >= 2 else a.view((1, a.shape[0]), (0, a.strides[0]), a.offset)
    b2 = b if b.ndim >= 2 else b.view((b.shape[0], 1), (b.strides[0], 0), b.offset)
    m, k = a2.shape[-2:]
    n = b2.shape[-1]
    batch = tuple(msg.shape[:len(msg.shape) - (a.ndim >= 2) - (b.ndim >= 2)])
    count = math.prod(batch)
    if m == 0 or n == 0 or count == 0:
        return out
    a_strides = a2.broadcast_strides(batch + a2.shape[-2:])
    b_strides = b2.broadcast_strides(batch + b2.shape[-2:])
    params: list[int | float] = [m, n, k, a2.offset, a_strides[-2], a_strides[-1],
                                 b2.offset, b_strides[-2], b_strides[-1]]
    for d, size in enumerate(batch):
        params.extend((size, a_strides[d], b_strides[d]))
    key = (a.dtype, b.dtype, msg.dtype, len(batch))
    source = sources.source("matmul", key, _render)
    if count > 65535:
        raise NotImplementedError(f"matmul: {count} batch matrices exceed one dispatch's "
                                  f"65535 workgroups along z on {rt.name}")
    rt.dispatch(source, [out], [a2, b2], params,
                (-(-n // _TILE), -(-m // _TILE), count))
    return out
