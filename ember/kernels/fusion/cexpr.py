"""C expressions of fused members, shared by the backends that render groups to C:
CUDA C++ (``kernels/cupy/codegen.py``, ``rowgen.py``) and the CPU's C
(``kernels/numpy/csource.py``).

Pure Python. Every value lives in a register as ``float`` (float32, float16 and
bfloat16) or ``bool``; each member's result is rounded to its own dtype, and
operands are first converted to the op's compute dtype, as the NumPy kernels'
``_cast`` does. Scalars travel as arguments, not literals, so a learning rate that
changes every step does not compile a new kernel. The expressions call helpers each
backend's preamble defines: ``nan_max`` / ``nan_min`` (NumPy's NaN-propagating
maximum / minimum) and, for float16 / bfloat16, ``f16_round`` / ``bf16_round``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.dtype import NUMPY_BY_NAME
from ember.kernels.fusion import powers

FLOATS = ("float32", "float16", "bfloat16")

# Ops the generated kernels cover, by their rendering below. Integer dtypes (every
# uint8 ... int64 op: registers hold float or bool), floor division and remainder (Python's
# sign rules) and round with decimals run unfused.
BINARY = {
    "add": "({a} + {b})", "sub": "({a} - {b})", "mul": "({a} * {b})", "div": "({a} / {b})",
    "pow": "powf({a}, {b})", "maximum": "nan_max({a}, {b})", "minimum": "nan_min({a}, {b})",
    "atan2": "atan2f({a}, {b})",
}
COMPARISON = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
LOGICAL = {"bitwise_and": "&&", "bitwise_or": "||", "bitwise_xor": "!="}
UNARY = {
    "neg": "(-{x})", "abs": "fabsf({x})", "floor": "floorf({x})", "ceil": "ceilf({x})",
    "round": "rintf({x})", "exp": "expf({x})", "log": "logf({x})", "log1p": "log1pf({x})",
    "sqrt": "sqrtf({x})", "rsqrt": "(1.0f / sqrtf({x}))", "sin": "sinf({x})",
    "cos": "cosf({x})", "tanh": "tanhf({x})", "erf": "erff({x})",
    "reciprocal": "(1.0f / {x})", "alias": "{x}",
    "asin": "asinf({x})", "acos": "acosf({x})", "atan": "atanf({x})", "sinh": "sinhf({x})",
    "cosh": "coshf({x})", "asinh": "asinhf({x})", "acosh": "acoshf({x})",
    "atanh": "atanhf({x})",
    "sign": "((float)(0.0f < {x}) - (float)({x} < 0.0f))",
    "relu": "(({x} > 0.0f || {x} != {x}) ? {x} : 0.0f)",
    "sigmoid": "(1.0f / (1.0f + expf(-{x})))",
    "silu": "({x} / (1.0f + expf(-{x})))",
    "gelu": "(0.5f * {x} * (1.0f + erff({x} * 0.70710678118654752f)))",
    "gelu_tanh": ("(0.5f * {x} * (1.0f + tanhf(0.79788456080286536f * "
                  "({x} + 0.044715f * {x} * {x} * {x}))))"),
}
# isinf compares with CUDA's bit pattern of infinity; the CPU's C renders its own.
FLOAT_TESTS = {"isnan": "({x} != {x})", "isinf": "(fabsf({x}) == __int_as_float(0x7f800000))"}
OPS = frozenset(BINARY) | frozenset(COMPARISON) | frozenset(LOGICAL) | frozenset(UNARY) \
    | frozenset(FLOAT_TESTS) | {"bitwise_not", "clamp", "where", "cast"}
# Declared elementwise ops (ember/op_kinds.py) left to their unfused kernels: Python's sign
# rules for floor division and remainder; the shifts, which take integer dtypes only.
UNRENDERED = frozenset({"floordiv", "remainder", "bitwise_left_shift", "bitwise_right_shift"})


def scalar_arguments(members: Sequence[Any], steps: Sequence[tuple[int, tuple[int, ...]]]
                     ) -> list[tuple[str, Any]]:
    """(dtype to round to, value) of each scalar argument, in the kernel's parameter order.

    Arithmetic meets a scalar in float32 (NumPy's kernels widen only arrays), a
    comparison rounds it to its compute dtype, ``where`` to its output dtype.
    """
    scalars: list[tuple[str, Any]] = []
    for j, args in steps:
        member = members[j]
        op, attrs = member.op, member.attrs
        if op in BINARY and len(args) == 1:
            if powers.lowered_exponent(member) is not None:
                continue  # its exponent is rendered into the code, not passed
            scalars.append(("float32", attrs[1]))
        elif op in COMPARISON and len(args) == 1:
            scalars.append((attrs[0], attrs[1]))
        elif op in LOGICAL and len(args) == 1:
            scalars.append(("bool", attrs[1]))
        elif op == "clamp":
            scalars += [("float32", v) for v in attrs if v is not None]
        elif op == "where":
            scalars += [(member.dtype, v) for v in attrs if v is not None]
    return scalars


def convert(expr: str, source: str, target: str) -> str:
    """``expr`` (a register value of dtype ``source``) as a value of dtype ``target``."""
    if source == target:
        return expr
    if target == "bool":
        return f"({expr} != 0.0f)"
    if source == "bool":
        return f"({expr} ? 1.0f : 0.0f)"
    if target == "float32":
        return expr  # float16 / bfloat16 values are already exact floats
    return f"{ROUND[target]}({expr})"


ROUND = {"float16": "f16_round", "bfloat16": "bf16_round"}

def scalar_type(dtype: str) -> str:
    return "bool" if dtype == "bool" else "float"


class Renderer:
    """Builds the statements of one element: member by member, into registers ``v<slot>``."""

    def __init__(self, members: Sequence[Any], input_dtypes: Sequence[str]) -> None:
        self.members = members
        self.dtypes = list(input_dtypes)  # dtype per slot, members appended as rendered
        self.scalars: list[tuple[str, Any]] = []  # (compute dtype, value) per scalar argument
        self.lines: list[str] = []

    def scalar(self, value: Any, dtype: str) -> str:
        self.scalars.append((dtype, value))
        return f"s{len(self.scalars) - 1}"

    def operand(self, slot: int, target: str) -> str:
        return convert(f"v{slot}", self.dtypes[slot], target)

    def render(self, steps: Sequence[tuple[int, tuple[int, ...]]]) -> list[str]:
        for j, args in steps:
            member = self.members[j]
            slot = len(self.dtypes)
            expr = self.expression(member, args)
            if member.dtype in ROUND:
                expr = f"{ROUND[member.dtype]}({expr})"
            self.lines.append(f"{scalar_type(member.dtype)} v{slot} = {expr};")
            self.dtypes.append(member.dtype)
        return self.lines

    def binary_operands(self, member: Any, args: tuple[int, ...], compute: str,
                        scalar_dtype: str) -> list[str]:
        if len(args) == 2:
            return [self.operand(args[0], compute), self.operand(args[1], compute)]
        _, value, scalar_is_lhs = member.attrs
        tensor = self.operand(args[0], compute)
        scalar = self.scalar(value, scalar_dtype)
        return [scalar, tensor] if scalar_is_lhs else [tensor, scalar]

    def expression(self, member: Any, args: tuple[int, ...]) -> str:
        op, dtype = member.op, member.dtype
        if op == "pow":
            exponent = powers.lowered_exponent(member)
            if exponent is not None:
                x = self.operand(args[0], dtype)
                return powers.expression(exponent, x, "1.0f", "sqrtf")
        if op in BINARY:
            # Arithmetic kernels widen array operands only: a scalar meets them in float32.
            a, b = self.binary_operands(member, args, dtype, "float32")
            return BINARY[op].format(a=a, b=b)
        if op in COMPARISON:
            # ... where comparisons round the scalar to the compute dtype first.
            compute = member.attrs[0]
            a, b = self.binary_operands(member, args, compute, compute)
            return f"({a} {COMPARISON[op]} {b})"
        if op in LOGICAL:
            a, b = self.binary_operands(member, args, "bool", "bool")
            return f"({a} {LOGICAL[op]} {b})"
        if op == "bitwise_not":
            return f"(!{self.operand(args[0], 'bool')})"
        if op in UNARY:
            return UNARY[op].format(x=self.operand(args[0], dtype))
        if op in FLOAT_TESTS:
            source = self.dtypes[args[0]]
            if source == "bool":
                return "false"
            return FLOAT_TESTS[op].format(x=f"v{args[0]}")
        if op == "clamp":
            x = self.operand(args[0], dtype)
            low, high = member.attrs
            if low is not None:
                x = f"nan_max({x}, {self.scalar(low, 'float32')})"
            if high is not None:
                x = f"nan_min({x}, {self.scalar(high, 'float32')})"
            return x
        if op == "where":
            tensors = iter(args[1:])
            a, b = (self.operand(next(tensors), dtype) if v is None else self.scalar(v, dtype)
                    for v in member.attrs)
            return f"({self.operand(args[0], 'bool')} ? {a} : {b})"
        if op == "cast":
            return self.operand(args[0], dtype)
        raise ValueError(f"no C rendering for op {op!r}")



def kernel_name(members: Sequence[Any], digest: str) -> str:
    """A readable, unique C identifier: the source ops in order, then a digest."""
    ops = "_".join(m.op for m in members[:6])
    more = f"_and{len(members) - 6}" if len(members) > 6 else ""
    return f"ember_{ops}{more}_{digest[:10]}"



def attr_shape(member: Any) -> tuple:
    """A member's attrs with scalar values replaced by their place (they are arguments)."""
    op, attrs = member.op, member.attrs
    exponent = powers.lowered_exponent(member)
    if exponent is not None:  # the exponent picks the code
        return (attrs[0], attrs[2], exponent)
    if op in BINARY or op in COMPARISON or op in LOGICAL:
        # (dtype,) beside a tensor; (dtype, scalar, scalar is lhs) beside a scalar.
        return (attrs[0], attrs[2]) if len(attrs) > 1 else tuple(attrs)
    if op == "clamp" or op == "where":
        return tuple(v is None for v in attrs)
    return tuple(attrs)


def digest(key: tuple) -> str:
    return hashlib.sha256(repr(key).encode()).hexdigest()



def coalesce(shape: tuple[int, ...], strides: Sequence[tuple[int, ...]]
             ) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """Merge adjacent dims that every input walks as one (strides in elements, 0 where an
    input broadcasts), so index math runs over as few dims as possible."""
    if not shape:
        return (), [() for _ in strides]
    dims = [d for d, size in enumerate(shape) if size != 1] or [len(shape) - 1]
    sizes = [shape[d] for d in dims]
    per_input = [[s[d] for d in dims] for s in strides]
    out_sizes = [sizes[0]]
    out_strides = [[p[0]] for p in per_input]
    for k in range(1, len(sizes)):
        if all(p[k - 1] == p[k] * sizes[k] for p in per_input):
            out_sizes[-1] *= sizes[k]
            for o, p in zip(out_strides, per_input):
                o[-1] = p[k]
        else:
            out_sizes.append(sizes[k])
            for o, p in zip(out_strides, per_input):
                o.append(p[k])
    return tuple(out_sizes), [tuple(o) for o in out_strides]


def broadcast_strides(shape: tuple[int, ...], array_shape: tuple[int, ...],
                      array_strides: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """An input's element strides over the output's dims (0 where it broadcasts)."""
    pad = len(shape) - len(array_shape)
    out = []
    for d in range(len(shape)):
        if d < pad or array_shape[d - pad] == 1:
            out.append(0)
        else:
            out.append(array_strides[d - pad] // itemsize)
    return tuple(out)


def scalar_value(dtype: str, value: Any) -> np.generic:
    """A scalar argument as the kernel takes it: a bool, or a float32 rounded to ``dtype``."""
    if dtype == "bool":
        return np.bool_(value)
    rounded = np.asarray(value, np.float32)
    if dtype != "float32":
        rounded = rounded.astype(NUMPY_BY_NAME[dtype]).astype(np.float32)
    return np.float32(rounded.item())
