"""Multi-tensor optimizer updates: the program every backend runs, and its C rendering.

An optimizer's update of one parameter is a short elementwise program; the
``optimizer_update`` op (a ``MultiCall``) runs one program over every parameter of a
group (one device, one dtype). The program is data, carried in the op's attrs, so the
formula is written once (beside the algorithm, in ``ember/optim/``) and each backend
renders it: the CPU as one compiled C loop over all the tensors (``numpy/multi_update``),
CUDA as one generated kernel (``cupy/multi_update``), WebGPU as its elementwise shaders
tensor by tensor (``wgpu/multi_update``). Every backend evaluates the steps in the
program's order, each rounded to the group's dtype, as the per-parameter ops did.

A program (``Program``) names, per tensor of the group:

- ``tensors``: its full-size inputs (``grad``, ``param``, state), and ``scalars``: its
  0-d inputs (a capturable optimizer's step count and learning rate on the device);
- ``host``: numbers the op's attrs give (hyperparameters, bias corrections);
- ``prologue``: steps over 0-d values (once per tensor), ``body``: steps per element;
- ``outputs``: full-size results (the new parameter first, then state), and
  ``scalar_outputs``: 0-d results of the prologue (a new step count).

A step is ``(name, op, *args)``: ``name`` takes the value of ``op`` (``UNARY`` or
``BINARY``) of ``args``, each a name (an input, a host number, an earlier step) or a
Python float (rounded to the dtype). A name may be assigned again; a step reads the
latest value. At least one argument of a binary step is not a host number or constant
(Python computes those).

The op: inputs tensor by tensor (``tensors`` then ``scalars`` of each), outputs tensor
by tensor (``outputs`` then ``scalar_outputs``), attrs ``(program, host)`` with
``host[t]`` the tuple of tensor ``t``'s host numbers.
"""

from __future__ import annotations

from typing import Any, NamedTuple

OP = "optimizer_update"
UNARY = frozenset({"neg", "sqrt"})
BINARY = frozenset({"add", "sub", "mul", "div", "maximum", "pow"})
DTYPES = frozenset({"float32", "float64"})
_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


class Program(NamedTuple):
    """One optimizer's update of one tensor (see the module's docstring)."""

    name: str
    tensors: tuple[str, ...]
    scalars: tuple[str, ...]
    host: tuple[str, ...]
    prologue: tuple[tuple, ...]
    body: tuple[tuple, ...]
    outputs: tuple[str, ...]
    scalar_outputs: tuple[str, ...] = ()

    @property
    def inputs_per_tensor(self) -> int:
        return len(self.tensors) + len(self.scalars)

    @property
    def outputs_per_tensor(self) -> int:
        return len(self.outputs) + len(self.scalar_outputs)


def check(program: Program) -> Program:
    """``program`` if every step is well formed and reads only known names; raises
    ``ValueError`` naming the step otherwise."""
    known_scalar = set(program.scalars) | set(program.host)
    host = set(program.host)
    for part, steps, known in (("prologue", program.prologue, known_scalar),
                               ("body", program.body, None)):
        if known is None:
            known = known_scalar | set(program.tensors)
        for step in steps:
            name, op, *args = step
            arity = 1 if op in UNARY else 2 if op in BINARY else None
            if arity is None or len(args) != arity:
                raise ValueError(f"{program.name} {part}: bad step {step!r}")
            for a in args:
                if isinstance(a, str) and a not in known:
                    raise ValueError(f"{program.name} {part}: step {step!r} reads unknown {a!r}")
            if all(not isinstance(a, str) or a in host for a in args):
                raise ValueError(f"{program.name} {part}: step {step!r} reads no tensor")
            known.add(name)
        if part == "prologue":
            known_scalar = known
    assigned = {step[0] for step in program.body}
    missing = set(program.outputs) - assigned
    if missing or set(program.scalar_outputs) - {step[0] for step in program.prologue}:
        raise ValueError(f"{program.name}: outputs must be computed by the program's steps")
    return program


def c_literal(value: float, ctype: str) -> str:
    """A constant, exactly, converted to ``ctype`` as NumPy rounds it (to nearest)."""
    return f"(({ctype}){float(value).hex()})"


def render_steps(steps: tuple, names: dict[str, str], ctype: str, math: dict[str, str],
                 prefix: str) -> list[str]:
    """C statements for ``steps``: ``names`` maps a program name to the C expression
    holding its value now (updated as steps assign); ``math`` names ``sqrt``, ``pow`` and
    ``max`` (NumPy's maximum: NaN wins) for ``ctype``. Shared by C and CUDA."""
    lines = []
    for k, (name, op, *args) in enumerate(steps):
        operands = [names[a] if isinstance(a, str) else c_literal(a, ctype) for a in args]
        if op in _INFIX:
            expr = f"{operands[0]} {_INFIX[op]} {operands[1]}"
        elif op == "neg":
            expr = f"-{operands[0]}"
        elif op == "maximum":
            expr = f"{math['max']}({operands[0]}, {operands[1]})"
        else:
            expr = f"{math[op]}({', '.join(operands)})"
        variable = f"{prefix}{k}"
        lines.append(f"const {ctype} {variable} = {expr};")
        names[name] = variable
    return lines


def group_sizes(msg: Any) -> list[int]:
    """Element counts of the group's tensors (from the message's output shapes)."""
    program = msg.attrs[0]
    stride = program.outputs_per_tensor
    sizes = []
    for shape in msg.shapes[::stride]:
        size = 1
        for s in shape:
            size *= s
        sizes.append(size)
    return sizes


def last_good_inputs(msg: Any) -> tuple[int, ...] | None:
    """For each output of an update, the input holding its value before the update (the
    parameter for the new parameter, each state for its new state): what a step whose
    gradients failed keeps. None if some output has no such input."""
    program = msg.attrs[0]
    names = program.tensors + program.scalars
    per_in, per_out = program.inputs_per_tensor, program.outputs_per_tensor
    inputs = []
    for t in range(len(msg.outs) // per_out):
        for name in program.outputs + program.scalar_outputs:
            if name not in names:
                return None
            inputs.append(msg.inputs[t * per_in + names.index(name)])
    return tuple(inputs)
