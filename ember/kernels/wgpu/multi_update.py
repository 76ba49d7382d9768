"""WebGPU's ``optimizer_update``: the program run tensor by tensor through the backend's
elementwise shaders (``elementwise.evaluate``), its prologue as a group over 0-d values
and its body as one fused group over the tensor, no kernel of its own.

``members`` turns a part of the program into the elementwise IR an op would have
submitted (host numbers and constants as scalar operands), so the same steps run, in the
same order, as the per-parameter ops would.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ember.kernels import multi_update
from ember.kernels.multi_update import Program
from ember.kernels.wgpu import elementwise
from ember.kernels.wgpu.table import kernel


class Member(NamedTuple):
    """What the elementwise renderer reads of an IR ``Call``."""

    op: str
    attrs: tuple
    dtype: str


def members(steps: tuple, slots: dict[str, int], numbers: dict[str, float], first: int,
            dtype: str) -> tuple[list[Member], list[tuple[int, ...]], dict[str, int]]:
    """(members, their argument slots, name -> slot after the steps) of ``steps``.

    ``slots``: the names already held in slots (inputs); ``numbers``: host numbers by
    name; ``first``: the slot of the first member (the number of inputs)."""
    slots = dict(slots)
    found, args = [], []
    for name, op, *operands in steps:
        # A name is a value in a slot once an input or a step holds it, else a host number.
        tensor = [slots[a] for a in operands if isinstance(a, str) and a in slots]
        if op in multi_update.UNARY:
            attrs: tuple = ()
        elif len(tensor) == 2:
            attrs = (dtype,)
        else:
            scalar_is_lhs = not (isinstance(operands[0], str) and operands[0] in slots)
            value = operands[0 if scalar_is_lhs else 1]
            attrs = (dtype, float(numbers.get(value, value)), scalar_is_lhs)
        found.append(Member(op, attrs, dtype))
        args.append(tuple(tensor))
        slots[name] = first + len(found) - 1
    return found, args, slots


@kernel(multi_update.OP)
def optimizer_update(msg: Any, rt: Any, *inputs: Any) -> tuple:
    program: Program
    program, host = msg.attrs
    dtype = msg.dtypes[0]
    n_in, n_out = program.inputs_per_tensor, program.outputs_per_tensor
    n_tensors = len(program.tensors)
    results: list = []
    for t, values in enumerate(host):
        mine = inputs[t * n_in:(t + 1) * n_in]
        shape = msg.shapes[t * n_out]
        numbers = dict(zip(program.host, values))
        scalars = list(mine[n_tensors:])
        slots = {role: k for k, role in enumerate(program.scalars)}
        if program.prologue:
            found, args, slots = members(program.prologue, slots, numbers, len(scalars), dtype)
            scalars += elementwise.evaluate(rt, found, args, scalars, [True] * len(found), ())
        # The body reads the tensors, then every 0-d value the prologue held or made.
        body_inputs = list(mine[:n_tensors]) + scalars
        body_slots = {role: k for k, role in enumerate(program.tensors)}
        body_slots.update((name, n_tensors + k) for name, k in slots.items())
        found, args, body_slots = members(program.body, body_slots, numbers,
                                          len(body_inputs), dtype)
        wanted = {body_slots[out] - len(body_inputs) for out in program.outputs}
        made = elementwise.evaluate(rt, found, args, body_inputs,
                                    [j in wanted for j in range(len(found))], shape)
        results += [made[body_slots[out] - len(body_inputs)] for out in program.outputs]
        results += [scalars[slots[out]] for out in program.scalar_outputs]
    return tuple(results)
