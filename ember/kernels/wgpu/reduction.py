"""WGSL reductions: one workgroup per output element, a shared-memory tree inside it.

Each of the 64 invocations of a workgroup walks the reduced elements of its
output with a stride of 64 (any dims, any input strides: no copy first),
then the workgroup combines the 64 partial results in a tree. Two-pass
reductions (var / std: the mean, then squared deviations; logsumexp: the max,
then the shifted sum of exponentials) run both passes in the same workgroup.
Floats accumulate in f32 (float16 too, rounded once on output), integers and
bools in i32 (int64 on the device).
"""

from __future__ import annotations

import math
from typing import Any

from ember.kernels.wgpu import codegen, sources
from ember.kernels.wgpu.scalar_ops import helpers_for
from ember.kernels.wgpu.table import WgpuArray, check_dtype, kernel

# Invocations per output: 64 beat 256 by 3x on lavapipe (fewer barrier steps) and still
# give a 4096-element GPU row 64 elements per invocation (a guess for GPUs).
_WORKGROUP = 64
_F32_MAX = "bitcast<f32>(0x7f800000u)"
_I32_MAX = "2147483647"
_I32_MIN = "(-2147483647 - 1)"

# op -> (identity by kind, combine template by kind); the accumulator has the output's kind.
# Bools accumulate as i32 0 / 1 (``_BOOL_WORD``), any / max as max, all / min as min: a
# bool array in workgroup memory read back wrong on NVIDIA's Vulkan driver (the H200 run:
# all() of an empty row gave false), while i32 workgroup arrays are read right everywhere.
MONOIDS = {
    "sum": ({"f": "0.0", "i": "0"}, {"f": "({a} + {b})", "i": "({a} + {b})"}),
    "prod": ({"f": "1.0", "i": "1"}, {"f": "({a} * {b})", "i": "({a} * {b})"}),
    "max": ({"f": f"(-{_F32_MAX})", "i": _I32_MIN, "b": "0"},
            {"f": "max_f({a}, {b})", "i": "max({a}, {b})", "b": "max({a}, {b})"}),
    "min": ({"f": _F32_MAX, "i": _I32_MAX, "b": "1"},
            {"f": "min_f({a}, {b})", "i": "min({a}, {b})", "b": "min({a}, {b})"}),
    "any": ({"b": "0"}, {"b": "max({a}, {b})"}),
    "all": ({"b": "1"}, {"b": "min({a}, {b})"}),
}
_BOOL_WORD = "int32"


def _offset_code(name: str, index: str, base: int, rank: int) -> str:
    """Statements setting ``var {name}: i32`` to the input offset of ``index`` over the
    (size, stride) pairs in params ``base .. base + 2 * rank``."""
    lines = [f"    var {name}: i32 = 0;", f"    var {name}_rest: u32 = {index};"]
    for d in reversed(range(rank)):
        size, stride = f"pu({base + 2 * d}u)", f"pi({base + 2 * d + 1}u)"
        lines.append(f"    {name} = {name} + i32({name}_rest % {size}) * {stride}; "
                     f"{name}_rest = {name}_rest / {size};")
    return "\n".join(lines) + "\n"


def _tree(value: str, combine: str, result: str, shared: str = "sh") -> str:
    """Workgroup tree over ``value`` per invocation; every invocation gets ``result``."""
    folded = combine.format(a=f"{shared}[lid]", b=f"{shared}[lid + s]")
    return (f"  {shared}[lid] = {value};\n  workgroupBarrier();\n"
            f"  for (var s = {_WORKGROUP // 2}u; s > 0u; s = s >> 1u) {{\n"
            f"    if (lid < s) {{ {shared}[lid] = {folded}; }}\n    workgroupBarrier();\n  }}\n"
            f"  let {result} = {shared}[0];\n  workgroupBarrier();\n")


def _pass(acc: str, identity: str, combine: str, element: str, kept_rank: int,
          reduced_rank: int, split: bool = False) -> str:
    """One strided walk over the reduced elements, folding ``element`` (of ``x``) into ``acc``.

    ``split``: the workgroup walks only its part of them (``part`` of ``splits``)."""
    base = 3 + 2 * kept_rank
    start, step = (f"part * {_WORKGROUP}u + lid", f"splits * {_WORKGROUP}u") if split else (
        "lid", f"{_WORKGROUP}u")
    return (f"  var {acc} = {identity};\n"
            f"  for (var j = {start}; j < pu(1u); j = j + {step}) {{\n"
            + _offset_code("r", "j", base, reduced_rank)
            + f"    let x = {element.format(index='kept + r')};\n"
            f"    {acc} = {combine.format(a=acc, b='x')};\n  }}\n")


def _render(op: str, in_dtype: str, out_dtype: str, kept_rank: int, reduced_rank: int,
            split: bool) -> str:
    """Params: n_out, n_reduced, offset, (size, stride) per kept dim, then per reduced dim,
    then op extras (count as f32; var/std: count - correction as f32), then the number
    of splits.

    ``split`` (monoids and mean): workgroup ``w`` folds part ``w % splits`` of output
    ``w / splits`` and stores the raw partial at ``w``, in the accumulator's dtype
    (``out_dtype``); a second reduction combines the partials.
    """
    acc_dtype = "bool" if op in ("any", "all") else out_dtype
    k = codegen.kind(acc_dtype)
    raw = codegen.load("in0", "{index}", in_dtype)
    element = codegen.convert(raw, in_dtype, acc_dtype if k != "f" else "float32")
    if k == "b":
        element = codegen.convert(element, "bool", _BOOL_WORD)
    acc_type = codegen.register_type(_BOOL_WORD if k == "b" else acc_dtype)
    extra = 3 + 2 * (kept_rank + reduced_rank)
    index = f"{codegen.LINEAR_INDEX.format(size=1).replace('gid', 'wid')}"
    body = [f"  let w: u32 = {index};", "  if (w >= pu(0u)) { return; }"]
    if split:
        body.append(f"  let splits = pu({extra + 2}u); let o = w / splits; let part = w % splits;")
    else:
        body.append("  let o = w;")
    body += [
        _offset_code("kept_o", "o", 3, kept_rank).replace("    ", "  ")
        + "  let kept = pi(2u) + kept_o;",
    ]
    shared = f"var<workgroup> sh: array<{acc_type}, {_WORKGROUP}>;\n"
    if op in MONOIDS:
        identity, combine = (t[k] for t in MONOIDS[op])
        body.append(_pass("acc", identity, combine, element, kept_rank, reduced_rank, split))
        body.append(_tree("acc", combine, "total"))
        result = codegen.convert("total", _BOOL_WORD, "bool") if k == "b" else "total"
    elif op == "mean":
        combine = "({a} + {b})"
        body.append(_pass("acc", "0.0", combine, element, kept_rank, reduced_rank, split))
        body.append(_tree("acc", combine, "total"))
        result = "total" if split else f"total / pf({extra}u)"
    elif op in ("var", "std"):
        combine = "({a} + {b})"
        body.append(_pass("acc", "0.0", combine, element, kept_rank, reduced_rank))
        body.append(_tree("acc", combine, "total"))
        body.append("  let mean = total / pf({}u);\n".format(extra))
        squared = "(({e}) - mean) * (({e}) - mean)".format(e=element)
        body.append(_pass("dev", "0.0", combine, squared, kept_rank, reduced_rank))
        body.append(_tree("dev", combine, "spread"))
        result = f"spread / max(pf({extra + 1}u), 0.0)"
        if op == "std":
            result = f"sqrt({result})"
    elif op == "logsumexp":
        body.append(_pass("peak", f"(-{_F32_MAX})", "max_f({a}, {b})", element, kept_rank,
                          reduced_rank))
        body.append(_tree("peak", "max_f({a}, {b})", "top"))
        # An infinite max shifts by 0: inf - inf would turn the answer into NaN.
        body.append("  let shift = select(top, 0.0, isinf_f(top) || isnan_f(top));\n")
        body.append(_pass("acc", "0.0", "({a} + {b})", f"exp(({element}) - shift)", kept_rank,
                          reduced_rank))
        body.append(_tree("acc", "({a} + {b})", "total"))
        result = "log(total) + shift"
    else:
        raise NotImplementedError(f"{op}: no wgpu reduction")
    if codegen.kind(out_dtype) == "f" and out_dtype == "float16":
        result = codegen.round_f16(result)
    body.append(f"  if (lid == 0u) {{ out0[w] = {codegen.store(f'({result})', out_dtype)}; }}")
    main = "\n".join(body)
    return (codegen.header([in_dtype, out_dtype])
            + codegen.bindings([out_dtype], [in_dtype], extra + 3)
            + shared + helpers_for(main)
            + codegen.ENTRY.format(size=_WORKGROUP) + main + "\n}\n")


_SPLITTABLE = frozenset(MONOIDS) | {"mean"}
# A reduction to at most this many outputs, each of more than 4 x _SPLIT_ELEMENTS
# elements, runs as partial sums of _SPLIT_ELEMENTS elements per workgroup plus a
# second reduction (guesses: enough workgroups to fill a GPU, few enough partials).
_SPLIT_MAX_OUTPUTS = 256
_SPLIT_ELEMENTS = 4096
_MAX_SPLITS = 1024


def _layout(x: WgpuArray, dims: tuple[int, ...]) -> tuple[list[int], list[int], int, int]:
    """(kept dims, reduced dims, kept count, reduced count) of reducing ``x`` over ``dims``."""
    kept = [d for d in range(x.ndim) if d not in dims]
    reduced = [d for d in range(x.ndim) if d in dims]
    return (kept, reduced, math.prod(x.shape[d] for d in kept),
            math.prod(x.shape[d] for d in reduced))


def reduce(rt: Any, op: str, x: WgpuArray, dims: tuple[int, ...], out_shape: tuple[int, ...],
           out_dtype: str, extras: tuple[float, ...] = ()) -> WgpuArray:
    """``op`` of ``x`` over ``dims`` into a fresh array of ``out_shape`` (kept dims' order)."""
    check_dtype(x.dtype, op, rt.name, rt.has_f16)
    check_dtype(out_dtype, op, rt.name, rt.has_f16)
    kept, reduced, n_out, n_reduced = _layout(x, dims)
    splits = min(_MAX_SPLITS, -(-n_reduced // _SPLIT_ELEMENTS))
    if op in _SPLITTABLE and n_out <= _SPLIT_MAX_OUTPUTS and splits >= 4:
        # Few outputs of many elements: one workgroup each would leave the GPU idle.
        acc = "bool" if op in ("any", "all") else (
            "float32" if codegen.kind(out_dtype) == "f" else out_dtype)
        partials = rt.empty((n_out, splits), acc)
        _dispatch(rt, op, x, kept, reduced, n_out * splits, n_reduced, partials, extras, splits)
        return reduce(rt, op, partials, (1,), out_shape, out_dtype, extras)
    out = rt.empty(out_shape, out_dtype)
    if n_out == 0:
        return out
    _dispatch(rt, op, x, kept, reduced, n_out, n_reduced, out, extras, 0)
    return out


def _dispatch(rt: Any, op: str, x: WgpuArray, kept: list[int], reduced: list[int],
              groups: int, n_reduced: int, out: WgpuArray, extras: tuple[float, ...],
              splits: int) -> None:
    params: list[int | float] = [groups, n_reduced, x.offset]
    for d in kept + reduced:
        params.extend((x.shape[d], x.strides[d]))
    params.extend((*extras, 0.0, 0.0)[:2])  # the shader declares two extras always
    params.append(splits)
    source = sources.source("reduce", (op, x.dtype, out.dtype, len(kept), len(reduced),
                                       splits > 0), _render)
    rt.dispatch(source, [out], [x], params, rt.groups(groups, 1))


@kernel("sum", "prod", "max", "min", "any", "all")
def _monoid(msg: Any, rt: Any, x: WgpuArray) -> WgpuArray:
    dims, _ = msg.attrs
    return reduce(rt, msg.op, x, tuple(dims), msg.shape, msg.dtype)


@kernel("mean", "logsumexp")
def _mean(msg: Any, rt: Any, x: WgpuArray) -> WgpuArray:
    dims, _ = msg.attrs
    count = math.prod(x.shape[d] for d in dims)
    return reduce(rt, msg.op, x, tuple(dims), msg.shape, msg.dtype, (float(count), 0.0))


@kernel("var", "std")
def _variance(msg: Any, rt: Any, x: WgpuArray) -> WgpuArray:
    dims, _, correction = msg.attrs
    count = math.prod(x.shape[d] for d in dims)
    return reduce(rt, msg.op, x, tuple(dims), msg.shape, msg.dtype,
                  (float(count), float(count - correction)))


def _render_arg(op: str, in_dtype: str, kept_rank: int, reduced_rank: int) -> str:
    """argmax / argmin: the first index of the extreme value (the first NaN beats all)."""
    k = codegen.kind(in_dtype)
    value_dtype = "float32" if k == "f" else "int32"
    value_type = codegen.REGISTER[codegen.kind(value_dtype)]
    element = codegen.convert(codegen.load("in0", "kept + r", in_dtype), in_dtype, value_dtype)
    wins = ">" if op == "argmax" else "<"
    nan_rules = ("  if (isnan_f(b)) { return isnan_f(x) && i < bi; }\n"
                 "  if (isnan_f(x)) { return true; }\n") if k == "f" else ""
    better = (f"fn better(x: {value_type}, i: u32, b: {value_type}, bi: u32) -> bool {{\n"
              "  if (i == 0xffffffffu) { return false; }\n"  # an invocation that saw nothing
              "  if (bi == 0xffffffffu) { return true; }\n" + nan_rules
              + f"  return x {wins} b || (x == b && i < bi);\n}}\n")
    base = 3 + 2 * kept_rank
    main = "\n".join([
        f"  let o: u32 = {codegen.LINEAR_INDEX.format(size=1).replace('gid', 'wid')};",
        "  if (o >= pu(0u)) { return; }",
        _offset_code("kept_o", "o", 3, kept_rank) + "  let kept = pi(2u) + kept_o;",
        f"  var best: {value_type} = {value_type}(0);",
        "  var besti = 0xffffffffu;",
        f"  for (var j = lid; j < pu(1u); j = j + {_WORKGROUP}u) {{",
        _offset_code("r", "j", base, reduced_rank) + f"    let x = {element};",
        "    if (better(x, j, best, besti)) { best = x; besti = j; }",
        "  }",
        "  sv[lid] = best; si[lid] = besti;",
        "  workgroupBarrier();",
        f"  for (var s = {_WORKGROUP // 2}u; s > 0u; s = s >> 1u) {{",
        "    if (lid < s && better(sv[lid + s], si[lid + s], sv[lid], si[lid])) {",
        "      sv[lid] = sv[lid + s]; si[lid] = si[lid + s];",
        "    }",
        "    workgroupBarrier();",
        "  }",
        "  if (lid == 0u) { out0[o] = i32(si[0]); }",
    ])
    return (codegen.header([in_dtype]) + codegen.bindings(["int64"], [in_dtype], base)
            + f"var<workgroup> sv: array<{value_type}, {_WORKGROUP}>;\n"
            f"var<workgroup> si: array<u32, {_WORKGROUP}>;\n"
            + better + helpers_for(better)
            + codegen.ENTRY.format(size=_WORKGROUP) + main + "\n}\n")


@kernel("argmax", "argmin")
def _arg_extreme(msg: Any, rt: Any, x: WgpuArray) -> WgpuArray:
    axis, _ = msg.attrs
    check_dtype(x.dtype, msg.op, rt.name, rt.has_f16)
    dims = tuple(range(x.ndim)) if axis is None else (axis,)
    kept, reduced, n_out, n_reduced = _layout(x, dims)
    out = rt.empty(msg.shape, "int64")
    if n_out == 0:
        return out
    params: list[int | float] = [n_out, n_reduced, x.offset]
    for d in kept + reduced:
        params.extend((x.shape[d], x.strides[d]))
    source = sources.source("arg", (msg.op, x.dtype, len(kept), len(reduced)), _render_arg)
    rt.dispatch(source, [out], [x], params, rt.groups(n_out, 1))
    return out
