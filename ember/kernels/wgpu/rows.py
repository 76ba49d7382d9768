"""Row groups in WGSL: reductions over trailing dims with their prologue and epilogue.

A row group (see the fusion planner) has a base shape S whose first ``rows``
dims every reduction keeps: softmax and layer_norm written from primitives
are one group each. One workgroup runs one row of ``L`` elements. Values
live at one of two levels: per element (members of shape S) or per row
(reductions, and members of the reduced shape). Each reduction needs one
strided walk over its row, so the shader is a sequence of phases: a loop
over the row that evaluates the per-element members a reduction reads
(recomputed from the inputs: no intermediate touches memory) and folds
them, then a workgroup tree, then the per-row members that became
computable. A last loop stores the per-element members the group must
materialize. Reductions: sum, mean, max, min, prod, and var, std and
logsumexp, which walk their row twice (the mean or the max first).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ember.kernels.fusion.planner import VIEWS
from ember.kernels.wgpu import codegen, sources
from ember.kernels.wgpu.elementwise import (
    chunk_slots,
    input_mode,
    output_chunks,
    param_value,
    place_scalars,
    scalar_operands,
    split_scalars,
)
from ember.kernels.wgpu.reduction import MONOIDS
from ember.kernels.wgpu.scalar_ops import expression, helpers_for
from ember.kernels.wgpu.table import WgpuArray, check_dtype

ROW_REDUCTIONS = frozenset({"sum", "mean", "max", "min", "prod", "var", "std", "logsumexp"})
_WORKGROUP = 64


def evaluate_rows(rt: Any, members: Sequence[Any], args: Sequence[tuple[int, ...]],
                  inputs: Sequence[WgpuArray], materialize: Sequence[bool],
                  shape: tuple[int, ...], rows: int) -> list[WgpuArray | None]:
    """Run a row group (members after its prologue); per member, its array or None."""
    for m in members:
        check_dtype(m.dtype, m.op, rt.name, rt.has_f16)
    for x in inputs:
        check_dtype(x.dtype, "fused group", rt.name, rt.has_f16)
    length = math.prod(shape[rows:])
    if length == 0:
        raise NotImplementedError("a row group of empty rows runs unfused")
    results: list[WgpuArray | None] = [
        rt.empty(m.shape, m.dtype) if keep else None for m, keep in zip(members, materialize)]
    n_rows = math.prod(shape[:rows])
    if n_rows == 0:
        return results
    wanted = [j for j, keep in enumerate(materialize) if keep]
    for chunk in output_chunks(wanted, args, len(inputs), rt.max_storage_buffers):
        _run_chunk(rt, members, args, inputs, chunk, shape, rows, results)
    return results


def _run_chunk(rt: Any, members: Sequence[Any], args: Sequence[tuple[int, ...]],
               inputs: Sequence[WgpuArray], outputs: list[int], shape: tuple[int, ...],
               rows: int, results: list) -> None:
    used, member_ids, slot_map = chunk_slots(outputs, args, inputs)
    n_used = len(used)
    steps = []
    scalar_values: list[int | float] = []
    per_row: list[bool] = []
    for j in member_ids:
        m = members[j]
        attrs, scalars = split_scalars(m)
        local_args = tuple(slot_map[s] for s in args[j])
        row_level = (m.op in ROW_REDUCTIONS or m.shape != shape
                     or (m.op in VIEWS and all(a >= n_used and per_row[a - n_used]
                                               for a in local_args)))
        per_row.append(row_level)
        steps.append((m.op, attrs, m.dtype, local_args, tuple(d for _, d in scalars),
                      row_level, m.shape))
        scalar_values.extend(param_value(v, d, m.op) for v, d in scalars)
    # How each input is read: per element (through S) and / or per row (through the
    # shape of the first per-row member that reads it).
    element_modes: list[str | None] = [None] * n_used
    row_shapes: list[tuple[int, ...] | None] = [None] * n_used
    for op, _, _, local_args, _, row_level, member_shape in steps:
        for a in local_args:
            if a >= n_used:
                continue
            if row_level and op not in ROW_REDUCTIONS:
                row_shapes[a] = row_shapes[a] or member_shape
            else:
                element_modes[a] = input_mode(used[a], shape)
    local_out = [member_ids.index(j) for j in outputs]
    key = (len(shape), rows, tuple(a.dtype for a in used), tuple(element_modes),
           tuple(s is not None for s in row_shapes), tuple(s[:6] for s in steps),
           tuple(per_row), tuple(local_out))
    source = sources.source("rows", key, _render)
    params: list[int | float] = [math.prod(shape[:rows]), math.prod(shape[rows:]), *shape]
    for array, mode, row_shape in zip(used, element_modes, row_shapes):
        if mode is not None:
            params.append(array.offset)
            if mode == "g":
                params.extend(array.broadcast_strides(shape))
        if row_shape is not None:
            params.append(array.offset)
            strides = array.broadcast_strides(row_shape)
            params.extend(strides + (0,) * (len(shape) - len(strides)))
    params.extend(scalar_values)
    rt.dispatch(source, [results[j] for j in outputs], used, params, rt.groups(params[0], 1))


def _render(rank: int, rows: int, dtypes: tuple[str, ...], element_modes: tuple,
            row_read: tuple[bool, ...], steps: tuple, per_row: tuple[bool, ...],
            outputs: tuple[int, ...]) -> str:
    """Params: n_rows, L, S, then per input its per-element read (offset, strides if
    general) and its per-row read (offset, strides over S), then the scalars."""
    n_used = len(dtypes)
    position = 2 + rank
    element_base: list[int] = []
    row_base: list[int] = []
    for mode, by_row in zip(element_modes, row_read):
        element_base.append(position)
        if mode is not None:
            position += 1 + (rank if mode == "g" else 0)
        row_base.append(position)
        if by_row:
            position += 1 + rank
    scalars_of = scalar_operands([s[:5] for s in steps], position)
    n_params = position + sum(len(s[4]) for s in steps)
    general = "g" in element_modes

    def element_value(slot: int) -> str:
        return f"x{slot}" if slot < n_used else f"v{slot - n_used}"

    def row_value(slot: int) -> str:
        return f"y{slot}" if slot < n_used else f"v{slot - n_used}"

    def member_line(j: int, value_of: Any) -> str:
        op, attrs, dtype, local_args = steps[j][:4]
        operands = [(value_of(a), dtypes[a] if a < n_used else steps[a - n_used][2])
                    for a in local_args]
        if op in VIEWS:
            text = operands[0][0]  # per-row values are the same seen through any row view
        else:
            text = expression(op, attrs, dtype, place_scalars(op, attrs, operands, scalars_of[j]))
        return f"let v{j}: {codegen.register_type(dtype)} = {text};"

    def element_code(targets: Sequence[int], indent: str) -> list[str]:
        """Loads and per-element members that ``targets`` (local slots) need, in order."""
        inputs_needed: set[int] = set()
        members_needed: set[int] = set()
        stack = list(targets)
        while stack:
            slot = stack.pop()
            if slot < n_used:
                inputs_needed.add(slot)
            elif not per_row[slot - n_used] and slot - n_used not in members_needed:
                members_needed.add(slot - n_used)
                stack.extend(steps[slot - n_used][3])
        lines = []
        for k in sorted(inputs_needed):
            base = element_base[k]
            mode = element_modes[k]
            index = {"s": f"pi({base}u)", "c": f"pi({base}u) + i32(i)"}.get(mode)
            if index is None:
                index = codegen.strided_index(base, rank)
            lines.append(f"{indent}let x{k} = {codegen.load(f'in{k}', index, dtypes[k])};")
        lines += [indent + member_line(j, element_value) for j in sorted(members_needed)]
        return lines

    def loop(body: list[str]) -> list[str]:
        head = [f"  for (var j = lid; j < pu(1u); j = j + {_WORKGROUP}u) {{",
                "    let i: u32 = row * pu(1u) + j;"]
        if general:
            head.append(codegen.coordinates("i", 2, rank).rstrip("\n"))
        return head + body + ["  }"]

    lines = [f"  let row: u32 = {codegen.LINEAR_INDEX.format(size=1).replace('gid', 'wid')};",
             "  if (row >= pu(0u)) { return; }"]
    for k in range(n_used):
        if row_read[k]:
            lines.append(codegen.coordinates("row * pu(1u)", 2, rank, coords=f"r{k}_")
                         .rstrip("\n"))
            index = codegen.strided_index(row_base[k], rank, coords=f"r{k}_")
            lines.append(f"  let y{k} = {codegen.load(f'in{k}', index, dtypes[k])};")
    done = [False] * len(steps)
    walked = [0] * len(steps)  # walks over the row each reduction has made
    shared_types: set[str] = set()
    while not all(done[j] for j in range(len(steps)) if per_row[j]):
        # Per-row members whose per-row inputs are ready run now (in function scope).
        progressed = False
        for j, step in enumerate(steps):
            if done[j] or not per_row[j] or step[0] in ROW_REDUCTIONS:
                continue
            if all(a < n_used or done[a - n_used] for a in step[3]):
                lines.append("  " + member_line(j, row_value))
                done[j] = progressed = True
        # Reductions whose per-element input is computable fold in one walk.
        ready = [j for j, step in enumerate(steps) if not done[j] and step[0] in ROW_REDUCTIONS
                 and _computable(step[3][0], steps, per_row, done, n_used)]
        if ready:
            body = element_code([steps[j][3][0] for j in ready], "    ")
            after = []
            for j in ready:
                op, attrs, dtype, local_args = steps[j][:4]
                source_dtype = (dtypes[local_args[0]] if local_args[0] < n_used
                                else steps[local_args[0] - n_used][2])
                acc_dtype = "float32" if codegen.kind(dtype) == "f" else dtype
                value = codegen.convert(element_value(local_args[0]), source_dtype, acc_dtype)
                walk, finished = _walk(op, attrs, walked[j], j, value)
                monoid, element, result = walk
                k = codegen.kind(acc_dtype)
                identity, combine = (t[k] for t in MONOIDS[monoid])
                acc_type = codegen.REGISTER[k]
                shared_types.add(acc_type)
                name = f"acc{j}_{walked[j]}"
                lines.append(f"  var {name}: {acc_type} = {identity};")
                body.append(f"    {name} = {combine.format(a=name, b=element)};")
                shared = f"sh_{acc_type}"
                folded = combine.format(a=f"{shared}[lid]", b=f"{shared}[lid + s]")
                after += [f"  {shared}[lid] = {name};", "  workgroupBarrier();",
                          f"  for (var s = {_WORKGROUP // 2}u; s > 0u; s = s >> 1u) {{",
                          f"    if (lid < s) {{ {shared}[lid] = {folded}; }}",
                          "    workgroupBarrier();", "  }",
                          f"  let t{j}_{walked[j]}: {acc_type} = {shared}[0];",
                          "  workgroupBarrier();"]
                walked[j] += 1
                if finished:
                    if dtype == "float16":
                        result = codegen.round_f16(result)
                    after.append(f"  let v{j}: {codegen.register_type(dtype)} = "
                                 f"{codegen.convert(result, acc_dtype, dtype)};")
                    done[j] = True
            lines += loop(body) + after
            progressed = True
        if not progressed:
            raise NotImplementedError("row group with a dependency the WGSL renderer cannot order")
    element_outputs = [slot for slot, j in enumerate(outputs) if not per_row[j]]
    if element_outputs:
        body = element_code([n_used + outputs[slot] for slot in element_outputs], "    ")
        for slot in element_outputs:
            j = outputs[slot]
            body.append(f"    out{slot}[i] = {codegen.store(f'v{j}', steps[j][2])};")
        lines += loop(body)
    for slot, j in enumerate(outputs):
        if per_row[j]:
            lines.append(f"  if (lid == 0u) {{ out{slot}[row] = "
                         f"{codegen.store(f'v{j}', steps[j][2])}; }}")
    main = "\n".join(lines)
    shared_decls = "".join(f"var<workgroup> sh_{t}: array<{t}, {_WORKGROUP}>;\n"
                           for t in sorted(shared_types))
    all_dtypes = list(dtypes) + [s[2] for s in steps]
    return (codegen.header(all_dtypes)
            + codegen.bindings([steps[j][2] for j in outputs], list(dtypes), n_params)
            + shared_decls + helpers_for(main)
            + codegen.ENTRY.format(size=_WORKGROUP) + main + "\n}\n")


def _walk(op: str, attrs: tuple, walked: int, j: int,
          value: str) -> tuple[tuple[str, str, str], bool]:
    """Walk number ``walked`` of reduction ``j`` over ``value`` (one element, in the
    accumulator's dtype): ((monoid, element folded, result after the last walk),
    whether it is the last). Walk results are ``t{j}_{walk}``; the row length is
    ``pu(1u)``. var / std and logsumexp walk twice: the mean or max first."""
    count = "f32(pu(1u))"
    if op in ("var", "std"):
        if walked == 0:
            return ("sum", value, ""), False
        deviation = f"(({value}) - t{j}_0 / {count})"
        spread = f"t{j}_1 / max({count} - {float(attrs[2])!r}, 0.0)"
        return ("sum", f"{deviation} * {deviation}",
                f"sqrt({spread})" if op == "std" else spread), True
    if op == "logsumexp":
        # An infinite max shifts by 0: inf - inf would turn the answer into NaN.
        shift = f"select(t{j}_0, 0.0, isinf_f(t{j}_0) || isnan_f(t{j}_0))"
        if walked == 0:
            return ("max", value, ""), False
        return ("sum", f"exp(({value}) - {shift})", f"log(t{j}_1) + {shift}"), True
    if op == "mean":
        return ("sum", value, f"t{j}_0 / {count}"), True
    return (op, value, f"t{j}_0"), True


def _computable(slot: int, steps: tuple, per_row: tuple, done: list, n_used: int) -> bool:
    """Whether a per-element value needs only inputs and per-row values already computed."""
    if slot < n_used:
        return True
    j = slot - n_used
    if per_row[j]:
        return done[j]
    return all(_computable(a, steps, per_row, done, n_used) for a in steps[j][3])
