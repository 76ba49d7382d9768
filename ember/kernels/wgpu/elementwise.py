"""One WGSL renderer for every elementwise op and every fused group of them.

A single op is a group of one member. ``evaluate`` renders the group into one
compute shader: each invocation computes one output element, reads each
external input through that input's own strides (broadcasting is a 0
stride), evaluates the members in order in registers, and stores the
members the group must materialize. Python scalars travel as params, so a
learning rate that changes every step reuses one compiled pipeline; the
source depends only on the structure (ops, dtypes, ranks, access patterns).

Access patterns per input, cheapest first: ``s`` a single element (0-d or
size 1), ``c`` contiguous with the output's shape (index = offset + i),
``g`` general strided (coordinates from the linear index). When every
input is ``s`` or ``c`` no coordinates are computed at all.

A group whose inputs plus outputs exceed the adapter's storage buffers per
stage is split into several shaders by output, each recomputing what its
outputs need from the external inputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ember.kernels.fusion import powers
from ember.kernels.fusion.planner import ELEMENTWISE
from ember.kernels.wgpu import codegen, sources
from ember.kernels.wgpu.scalar_ops import expression, helpers_for
from ember.kernels.wgpu.table import STORAGE, WgpuArray, check_dtype, kernel
from ember.op_kinds import BOUNDS, BRANCHES, EITHER_SIDE, scalar_form

_WORKGROUP = 256
_COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})
_INT32_RANGE = (-(1 << 31), (1 << 31) - 1)
# The dtype a scalar param is read as, by the kind of dtype it converts to.
_PARAM_DTYPE = {"f": "float32", "i": "int32", "b": "bool"}


def split_scalars(member: Any) -> tuple[tuple, list[tuple[Any, str]]]:
    """(attrs with scalar values left out, [(scalar, dtype it converts to)])."""
    op, attrs = member.op, member.attrs
    if powers.lowered_exponent(member) is not None:
        return attrs, []  # the exponent is rendered into the shader (products, sqrt)
    form = scalar_form(op)  # declared with the op (ember/op_kinds.py)
    if form == EITHER_SIDE and len(attrs) == 3:
        compute, value, scalar_is_lhs = attrs
        target = compute if op in _COMPARISONS else member.dtype
        return (compute, None, scalar_is_lhs), [(value, target)]
    if form == BOUNDS or form == BRANCHES:
        return (tuple(v is None if form == BRANCHES else v is not None for v in attrs),
                [(v, member.dtype) for v in attrs if v is not None])
    return attrs, []


def param_value(value: Any, dtype: str, op: str) -> int | float:
    k = codegen.kind(dtype)
    if k == "f":
        return float(value)
    if k == "b":
        return int(bool(value))
    value = int(value)
    if not _INT32_RANGE[0] <= value <= _INT32_RANGE[1]:
        from ember.errors import DTypeError

        raise DTypeError(f"{op}: the scalar {value} does not fit the 32-bit integers that "
                         f"hold {dtype} on wgpu devices")
    return value


def input_mode(array: WgpuArray, shape: tuple[int, ...]) -> str:
    if array.size == 1:
        return "s"
    if array.shape == shape and array.contiguous:
        return "c"
    return "g"


def render(shape_rank: int, inputs: Sequence[tuple[str, str]], steps: Sequence[tuple],
           outputs: Sequence[int], vector: bool = False) -> str:
    """WGSL of one group.

    ``inputs``: (dtype, mode) per external input. ``steps``: (op, attrs, dtype,
    argument slots, scalar dtypes) per member; slots below ``len(inputs)`` are
    inputs, the rest members. ``outputs``: the members to store, in binding order.
    ``vector``: every invocation moves four elements as one vec4 load / store
    per binding (inputs ``s`` or ``c`` only, count and offsets multiples of 4);
    the members run once per lane in registers.
    """
    general = any(mode == "g" for _, mode in inputs)
    position = 1 + (shape_rank if general else 0)
    bases = []
    for _, mode in inputs:
        bases.append(position)
        position += 1 + (shape_rank if mode == "g" else 0)
    lines = [f"  let i: u32 = {codegen.LINEAR_INDEX.format(size=_WORKGROUP)};",
             "  if (i >= pu(0u)) { return; }"]
    if general:
        lines.append(codegen.coordinates("i", 1, shape_rank).rstrip("\n"))
    lanes = ("_0", "_1", "_2", "_3") if vector else ("",)
    lane_inputs: list[list[tuple[str, str]]] = [[] for _ in lanes]
    for k, ((dtype, mode), base) in enumerate(zip(inputs, bases)):
        if vector:
            start = f"u32(pi({base}u))"
            index = f"{start} / 4u" + (" + i" if mode == "c" else "")
            lines.append(f"  let q{k} = in{k}[{index}];")
            for lane, values in enumerate(lane_inputs):
                component = str(lane) if mode == "c" else f"{start} % 4u"
                values.append((codegen.load(f"q{k}", component, dtype), dtype))
            continue
        if mode == "s":
            index = f"pi({base}u)"
        elif mode == "c":
            index = f"pi({base}u) + i32(i)"
        else:
            index = codegen.strided_index(base, shape_rank)
        lines.append(f"  let x{k} = {codegen.load(f'in{k}', index, dtype)};")
        lane_inputs[0].append((f"x{k}", dtype))
    scalars_of = scalar_operands(steps, position)
    for lane, values in zip(lanes, lane_inputs):
        for j, (op, attrs, dtype, args, _) in enumerate(steps):
            operands = place_scalars(op, attrs, [values[a] for a in args], scalars_of[j])
            lines.append(f"  let v{j}{lane}: {codegen.register_type(dtype)} = "
                         f"{expression(op, attrs, dtype, operands)};")
            values.append((f"v{j}{lane}", dtype))
    for slot, j in enumerate(outputs):
        dtype = steps[j][2]
        stored = [codegen.store(f"v{j}{lane}", dtype) for lane in lanes]
        if vector:
            lines.append(f"  out{slot}[i] = vec4<{STORAGE[dtype][0]}>({', '.join(stored)});")
        else:
            lines.append(f"  out{slot}[i] = {stored[0]};")
    main = "\n".join(lines)
    dtypes = [d for d, _ in inputs] + [s[2] for s in steps]
    n_params = position + sum(len(s[4]) for s in steps)
    return (codegen.header(dtypes)
            + codegen.bindings([steps[j][2] for j in outputs], [d for d, _ in inputs],
                               n_params, vector=vector)
            + helpers_for(main)
            + codegen.ENTRY.format(size=_WORKGROUP) + main + "\n}\n")


def scalar_operands(steps: Sequence[tuple], position: int) -> list[list[tuple[str, str]]]:
    """Per step, its scalar operands as (param read, dtype), numbered from ``position``."""
    result = []
    for op, _, _, _, scalar_dtypes in steps:
        scalars = []
        for target in scalar_dtypes:
            param_dtype = _PARAM_DTYPE[codegen.kind(target)]
            read = {"float32": "pf", "int32": "pi", "bool": "pu"}[param_dtype]
            text = f"{read}({position}u)" + (" != 0u" if param_dtype == "bool" else "")
            # The CPU computes float16 arithmetic with the scalar unrounded (only
            # comparisons round it first), so it joins as if already float16.
            if target == "float16" and op not in _COMPARISONS:
                param_dtype = target
            scalars.append((f"({text})", param_dtype))
            position += 1
        result.append(scalars)
    return result


def place_scalars(op: str, attrs: tuple, operands: list, scalars: list) -> list:
    """Operands in the op's order, with scalar params where the IR has scalars."""
    if not scalars:
        return operands
    form = scalar_form(op)
    if form == EITHER_SIDE:
        return [scalars[0], operands[0]] if attrs[2] else [operands[0], scalars[0]]
    if form == BRANCHES:
        cond, *tensors = operands
        tensor_iter, scalar_iter = iter(tensors), iter(scalars)
        return [cond] + [next(tensor_iter) if is_tensor else next(scalar_iter)
                         for is_tensor in attrs]
    return operands + scalars  # clamp: x, then the bounds given


# Elements from which a contiguous group moves vec4s: below it the dispatch cost
# dominates and a second shader variant is not worth compiling (a guess).
VECTOR_MIN = 1 << 14


def evaluate(rt: Any, members: Sequence[Any], args: Sequence[tuple[int, ...]],
             inputs: Sequence[WgpuArray], materialize: Sequence[bool],
             shape: tuple[int, ...]) -> list[WgpuArray | None]:
    """Run ``members`` (IR Calls of one output shape) as fused shaders.

    ``args[j]``: member j's argument slots (inputs first, then members).
    Returns, per member, its array if materialized, else None.
    """
    for m in members:
        check_dtype(m.dtype, m.op, rt.name, rt.has_f16)
    for m, a in zip(members, args):
        for slot in a:
            if slot < len(inputs):
                check_dtype(inputs[slot].dtype, m.op, rt.name, rt.has_f16)
    results: list[WgpuArray | None] = [
        rt.empty(shape, m.dtype) if keep else None for m, keep in zip(members, materialize)]
    count = math.prod(shape)
    if count == 0:
        return results
    wanted = [j for j, keep in enumerate(materialize) if keep]
    for chunk in output_chunks(wanted, args, len(inputs), rt.max_storage_buffers):
        _run_chunk(rt, members, args, inputs, chunk, shape, count, results)
    return results


def needs(targets: Sequence[int], args: Sequence[tuple[int, ...]], n_inputs: int) -> set[int]:
    """Slots (inputs and members) that ``targets`` (member indices) depend on, themselves too."""
    seen: set[int] = set()
    stack = [n_inputs + j for j in targets]
    while stack:
        slot = stack.pop()
        if slot in seen:
            continue
        seen.add(slot)
        if slot >= n_inputs:
            stack.extend(args[slot - n_inputs])
    return seen


def output_chunks(wanted: list[int], args: Sequence[tuple[int, ...]], n_inputs: int,
                   limit: int) -> list[list[int]]:
    chunks: list[list[int]] = []
    for j in wanted:
        if chunks:
            trial = chunks[-1] + [j]
            used = sum(1 for s in needs(trial, args, n_inputs) if s < n_inputs)
            if used + len(trial) <= limit:
                chunks[-1] = trial
                continue
        chunks.append([j])
    return chunks


def chunk_slots(outputs: Sequence[int], args: Sequence[tuple[int, ...]],
                inputs: Sequence[WgpuArray]) -> tuple[list[WgpuArray], list[int], dict[int, int]]:
    """What a chunk computing members ``outputs`` reads: (the inputs it uses, the members
    it computes, group slot -> the chunk's slot: its used inputs first, then its members)."""
    n_inputs = len(inputs)
    needed = needs(outputs, args, n_inputs)
    input_slots = sorted(s for s in needed if s < n_inputs)
    member_ids = sorted(s - n_inputs for s in needed if s >= n_inputs)
    slot_map = {s: k for k, s in enumerate(input_slots)}
    slot_map.update({n_inputs + j: len(input_slots) + k for k, j in enumerate(member_ids)})
    return [inputs[s] for s in input_slots], member_ids, slot_map


def _run_chunk(rt: Any, members: Sequence[Any], args: Sequence[tuple[int, ...]],
               inputs: Sequence[WgpuArray], outputs: list[int], shape: tuple[int, ...],
               count: int, results: list) -> None:
    used, member_ids, slot_map = chunk_slots(outputs, args, inputs)
    modes = [input_mode(a, shape) for a in used]
    steps = []
    scalar_values: list[int | float] = []
    for j in member_ids:
        m = members[j]
        attrs, scalars = split_scalars(m)
        steps.append((m.op, attrs, m.dtype, tuple(slot_map[s] for s in args[j]),
                      tuple(d for _, d in scalars)))
        scalar_values.extend(param_value(v, d, m.op) for v, d in scalars)
    local_out = [member_ids.index(j) for j in outputs]
    rank = len(shape)
    vector = (count >= VECTOR_MIN and count % 4 == 0 and "g" not in modes
              and all(a.offset % 4 == 0 for a in used))
    key = (rank, tuple((a.dtype, mode) for a, mode in zip(used, modes)), tuple(steps),
           tuple(local_out), vector)
    source = sources.source("elementwise", key, render)
    general = "g" in modes
    params: list[int | float] = [count // 4 if vector else count]
    if general:
        params.extend(shape)
    for array, mode in zip(used, modes):
        params.append(array.offset)
        if mode == "g":
            params.extend(array.broadcast_strides(shape))
    params.extend(scalar_values)
    rt.dispatch(source, [results[j] for j in outputs], used, params,
                rt.groups(params[0], _WORKGROUP))


def _single(msg: Any, rt: Any, *inputs: WgpuArray) -> WgpuArray:
    (out,) = evaluate(rt, (msg,), (tuple(range(len(inputs))),), inputs, (True,), msg.shape)
    return out


for _op in ELEMENTWISE - {"alias"}:
    kernel(_op)(_single)


@kernel("alias")
def _alias(msg: Any, rt: Any, x: WgpuArray) -> WgpuArray:
    return x  # arrays are never written in place, so sharing one is safe
