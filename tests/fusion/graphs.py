"""Random elementwise expression graphs, as JSON data, and their evaluation on a device.

A graph is a dict that survives ``json.dumps`` (so one can be sent to a
process run with ``EMBER_FUSION=0``)::

    {"seed": 3, "inputs": [[shape, dtype, layout], ...], "nodes": [...], "outputs": [k, ...]}

An input's layout is "plain", "permuted" (a transposed view of data stored in
the reversed shape) or "expanded" (its first dim broadcast from 1 by
``expand``: zero strides).

Values are numbered: the inputs first, then one per node. An operand is a
value number (int) or ``{"s": python_scalar}``. Nodes:

    ["unary", name, a]            neg abs exp tanh sigmoid relu gelu silu erf sqrt_abs sin log
                                  cube abs_to_minus_half
    ["binary", name, a, b]        add sub mul div pow maximum minimum
                                  (integer graphs: floordiv remainder bitwise_and/or/xor)
    ["clamp", a, low, high]       low / high: scalar, value number or None (not both)
    ["where", cmp, a, b, c, d]    em.where(a cmp b, c, d); cmp: lt le gt ge eq ne
    ["cast", a, dtype]            float32 float64 float16 bfloat16 (integer graphs: int32 int64)
    ["reduce", name, a, dims, keepdim]
                                  sum mean max min var logsumexp (integer graphs: sum max
                                  min) over ``dims``; without keepdim the result is
                                  reshaped back to keepdim's shape (a view in the group)
    ["expand", a, shape]          a broadcast to ``shape``

``outputs`` lists the value numbers kept (and read); every other handle dies
before its batch runs, as a temporary in user code would.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from hypothesis import strategies as st

import ember as em

COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")
SPECIALS = (0.0, -0.0, math.inf, -math.inf, math.nan, 1e30, -1e30, 1e-30)


class Vocabulary(NamedTuple):
    """What a graph of one kind (floating or integer) is built from."""

    dtypes: tuple[str, ...]
    unary: tuple[str, ...]
    binary: tuple[str, ...]
    scalars: tuple[Any, ...]
    pow_exponents: tuple[Any, ...]
    low_bounds: tuple[Any, ...]
    high_bounds: tuple[Any, ...]
    cast_dtypes: tuple[str, ...]
    reductions: tuple[str, ...]


FLOATING = Vocabulary(
    dtypes=("float32", "float64"),
    unary=("neg", "abs", "exp", "tanh", "sigmoid", "relu", "gelu", "silu", "erf", "sqrt_abs"),
    binary=("add", "sub", "mul", "div", "pow", "maximum", "minimum"),
    scalars=(0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1e-3, 2, -3, math.inf, -math.inf),
    pow_exponents=(2.0, 0.5, 3, -1.0, 0.0),
    low_bounds=(-1.0, 0.0, -0.5), high_bounds=(1.0, 2.0, 0.25),
    # float16 / bfloat16 values are not fused on the CPU: groups must close around them.
    cast_dtypes=("float32", "float64", "float32", "float64", "float16", "bfloat16"),
    reductions=("sum", "mean", "max", "min", "var", "logsumexp"))
# Graphs of the ops the CPU compiles to C (``kernels/numpy/csource.py``), in float32,
# with a few ops, casts and reductions that make the compiled path close its group.
EXACT = FLOATING._replace(
    dtypes=("float32",), unary=("neg", "abs", "relu", "gelu", "erf", "sqrt_abs", "exp", "tanh",
                                 "sigmoid", "silu", "log", "cube", "abs_to_minus_half"),
    binary=("add", "sub", "mul", "div", "maximum", "minimum", "add", "mul"),
    cast_dtypes=("float32", "float32", "float64"), reductions=("sum", "mean", "sum", "max"))
# Integer graphs divide by zero now and then: the reads that fail must be the same.
INTEGER = Vocabulary(
    dtypes=("int32", "int64"),
    unary=("neg", "abs", "relu"),
    binary=("add", "sub", "mul", "floordiv", "remainder", "maximum", "minimum", "pow",
            "bitwise_and", "bitwise_or", "bitwise_xor"),
    scalars=(0, 1, -1, 2, -3, 7, 100),
    pow_exponents=(0, 1, 2, 3),
    low_bounds=(-5, 0), high_bounds=(3, 50), cast_dtypes=("int32", "int64"),
    reductions=("sum", "max", "min"))

_UNARY_FNS = {
    "neg": lambda t: -t, "abs": abs, "exp": lambda t: t.exp(), "tanh": lambda t: t.tanh(),
    "sigmoid": lambda t: t.sigmoid(), "relu": lambda t: t.relu(), "gelu": lambda t: t.gelu(),
    "silu": lambda t: t.silu(), "erf": lambda t: t.erf(), "sqrt_abs": lambda t: t.abs().sqrt(),
    "sin": lambda t: t.sin(), "log": lambda t: t.log(), "cube": lambda t: t ** 3,
    "abs_to_minus_half": lambda t: abs(t) ** -0.5,
}
_BINARY_FNS = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "pow": lambda a, b: a ** b,
    "floordiv": lambda a, b: a // b, "remainder": lambda a, b: a % b,
    "bitwise_and": lambda a, b: a & b, "bitwise_or": lambda a, b: a | b,
    "bitwise_xor": lambda a, b: a ^ b,
    # A scalar on the left of maximum / minimum goes through the tensor's method.
    "maximum": lambda a, b: a.maximum(b) if isinstance(a, em.Tensor) else b.maximum(a),
    "minimum": lambda a, b: a.minimum(b) if isinstance(a, em.Tensor) else b.minimum(a),
}
_COMPARE_FNS = {
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
}


# ----- evaluation ------------------------------------------------------------------------

def input_array(rng: np.random.Generator, shape: list[int], dtype: str) -> np.ndarray:
    """Normal values of a random scale, with zeros, infinities, NaNs and extremes mixed in;
    small integers (zeros among them) for an integer dtype."""
    if np.dtype(dtype).kind == "i":
        return np.asarray(rng.integers(-20, 21, shape), dtype=dtype)
    data = np.asarray(rng.standard_normal(shape) * rng.choice([0.5, 1.0, 4.0]))
    specials = np.asarray(rng.random(shape) < 0.06)
    data[specials] = rng.choice(SPECIALS, size=int(specials.sum()))
    return np.asarray(data, dtype=dtype)


def _operand(spec: Any, values: list) -> Any:
    return values[spec] if isinstance(spec, int) else spec["s"]


def _apply(node: list, values: list) -> em.Tensor:
    kind = node[0]
    if kind == "unary":
        return _UNARY_FNS[node[1]](values[node[2]])
    if kind == "binary":
        return _BINARY_FNS[node[1]](_operand(node[2], values), _operand(node[3], values))
    if kind == "clamp":
        low, high = (None if b is None else _operand(b, values) for b in node[2:4])
        return values[node[1]].clamp(low, high)
    if kind == "where":
        cond = _COMPARE_FNS[node[1]](_operand(node[2], values), _operand(node[3], values))
        return em.where(cond, _operand(node[4], values), _operand(node[5], values))
    if kind == "cast":
        return values[node[1]].astype(getattr(em, node[2]))
    if kind == "reduce":
        _, name, a, dims, keepdim = node
        x = values[a]
        reduced = getattr(x, name)(dim=tuple(dims), keepdim=keepdim)
        kept = [1 if d in dims else n for d, n in enumerate(x.shape)]
        return reduced if keepdim else reduced.reshape(*kept)
    if kind == "expand":
        return values[node[1]].expand(*node[2])
    raise ValueError(f"unknown node {node!r}")


def upload_inputs(graph: dict, device: em.Device) -> list[em.Tensor]:
    rng = np.random.default_rng(graph["seed"])
    tensors = []
    for shape, dtype, layout in graph["inputs"]:
        if layout == "permuted" and len(shape) > 1:
            stored = em.tensor(input_array(rng, shape[::-1], dtype), device=device)
            tensors.append(stored.permute(*reversed(range(len(shape)))))
        elif layout == "expanded" and shape:
            stored = em.tensor(input_array(rng, [1, *shape[1:]], dtype), device=device)
            tensors.append(stored.expand(*shape))
        else:
            tensors.append(em.tensor(input_array(rng, shape, dtype), device=device))
    return tensors


def build(graph: dict, values: list) -> dict[int, em.Tensor]:
    """Submit every node after the ``values`` given (the inputs); returns the kept outputs.

    Handles not kept die at once (each node's value is dropped from the local list
    as soon as no later node reads it), so their drops travel in the same batch.
    """
    values = list(values)
    nodes = graph["nodes"]
    n_inputs = len(values)
    keep = set(graph["outputs"])
    last_use: dict[int, int] = {}
    for position, node in enumerate(nodes):
        for ref in _references(node):
            last_use[ref] = position
    for position, node in enumerate(nodes):
        values.append(_apply(node, values))
        for ref in _references(node):
            if last_use[ref] == position and ref >= n_inputs and ref not in keep:
                values[ref] = None  # the temporary's handle dies here
    return {k: values[k] for k in graph["outputs"]}


def _references(node: list) -> list[int]:
    kind = node[0]
    if kind == "unary":
        operands = [node[2]]
    elif kind == "binary":
        operands = node[2:4]
    elif kind == "clamp":
        operands = node[1:4]
    elif kind == "where":
        operands = node[2:6]
    elif kind == "reduce":
        operands = [node[2]]
    else:
        operands = [node[1]]
    return [o for o in operands if isinstance(o, int)]


# ----- generation ------------------------------------------------------------------------

# Sizes past the CPU executor's chunk (64K elements) as well as tiny ones; odd sizes so
# the last chunk is partial.
_DIMS = (1, 2, 3, 5, 64, 131, 300, 700, 700)


@st.composite
def _base_shape(draw) -> list[int]:
    rank = draw(st.sampled_from((1, 2, 2, 2, 3)))
    shape = [draw(st.sampled_from(_DIMS)) for _ in range(rank)]
    while math.prod(shape) > 200_000:  # keep an example's arrays a few MB at most
        shape[shape.index(max(shape))] //= 4
    return shape


@st.composite
def _operand_shape(draw, base: list[int]) -> list[int]:
    """A shape that broadcasts into ``base``: some dims set to 1, some leading dims gone."""
    if draw(st.integers(0, 2)) == 0:
        return list(base)
    shape = [1 if draw(st.booleans()) else d for d in base]
    drop = draw(st.integers(0, len(base)))
    return shape[drop:]


@st.composite
def graphs(draw, vocabulary: Vocabulary = FLOATING, max_nodes: int = 12) -> dict:
    words = vocabulary
    base = draw(_base_shape())
    n_inputs = draw(st.integers(1, 4))
    inputs = [[draw(_operand_shape(base)), draw(st.sampled_from(words.dtypes)),
               draw(st.sampled_from(("plain", "plain", "permuted", "expanded")))]
              for _ in range(n_inputs)]
    inputs[0][0] = list(base)  # one operand spans the whole shape
    nodes: list[list] = []
    n_values = n_inputs
    shapes = [tuple(shape) for shape, _, _ in inputs]  # every value broadcasts into base

    def value() -> int:
        # Mostly the newest values, so chains form; sometimes anything earlier.
        if draw(st.integers(0, 3)) and n_values > 0:
            return max(0, n_values - 1 - draw(st.integers(0, 2)))
        return draw(st.integers(0, n_values - 1))

    def operand() -> Any:
        if draw(st.integers(0, 3)) == 0:
            return {"s": draw(st.sampled_from(words.scalars))}
        return value()

    for _ in range(draw(st.integers(1, max_nodes))):
        kind = draw(st.sampled_from(("unary", "unary", "binary", "binary", "binary",
                                     "clamp", "where", "cast", "reduce", "reduce", "expand")))
        if kind == "reduce":
            a = value()
            rank = len(shapes[a])
            if rank == 0:
                kind = "unary"
            elif draw(st.integers(0, 4)):  # trailing dims mostly: the rows a group keeps
                dims = list(range(draw(st.integers(0, rank - 1)), rank))
            else:
                dims = sorted(draw(st.sets(st.integers(0, rank - 1), min_size=1)))
        if kind == "reduce":
            nodes.append(["reduce", draw(st.sampled_from(words.reductions)), a, dims,
                          draw(st.booleans())])
            shapes.append(tuple(1 if d in dims else n for d, n in enumerate(shapes[a])))
        elif kind == "expand":
            nodes.append(["expand", value(), list(base)])
            shapes.append(tuple(base))
        elif kind == "unary":
            nodes.append(["unary", draw(st.sampled_from(words.unary)), value()])
        elif kind == "binary":
            op = draw(st.sampled_from(words.binary))
            if op == "pow":  # a scalar exponent: what models write
                exponent = draw(st.sampled_from(words.pow_exponents))
                nodes.append(["binary", op, value(), {"s": exponent}])
            else:
                a, b = value(), operand()
                nodes.append(["binary", op, *((b, a) if draw(st.booleans()) else (a, b))])
        elif kind == "clamp":
            # A scalar bound comes as a 1-tuple: an int alone would read as a value number.
            low = draw(st.one_of(st.none(), st.sampled_from(words.low_bounds).map(_boxed),
                                 st.just(value())))
            high = draw(st.one_of(st.sampled_from(words.high_bounds).map(_boxed),
                                  st.just(value())))
            if draw(st.booleans()):
                high = None if low is not None else high
            nodes.append(["clamp", value(), _scalar_or_ref(low), _scalar_or_ref(high)])
        elif kind == "where":
            a, b = value(), operand()
            # One branch a value: two int scalars would make an int tensor in a floating
            # graph, which a later mean refuses (a DTypeError, not a fusion failure).
            branches = (value(), operand())
            nodes.append(["where", draw(st.sampled_from(COMPARISONS)),
                          *((b, a) if draw(st.booleans()) else (a, b)),
                          *(branches[::-1] if draw(st.booleans()) else branches)])
        else:
            nodes.append(["cast", value(), draw(st.sampled_from(words.cast_dtypes))])
        if len(shapes) == n_values:  # elementwise: the operands' broadcast shape
            shapes.append(np.broadcast_shapes(*(shapes[r] for r in _references(nodes[-1]))))
        n_values += 1
    last = n_values - 1
    outputs = sorted({last} | {k for k in range(n_inputs, last)
                               if draw(st.integers(0, 4)) == 0})
    return {"seed": draw(st.integers(0, 2**16)), "inputs": inputs, "nodes": nodes,
            "outputs": outputs}


def _boxed(scalar: Any) -> tuple:
    return (scalar,)


def _scalar_or_ref(bound: Any) -> Any:
    """None and value numbers as they are; a bound drawn from the vocabulary as a scalar."""
    return bound if bound is None or isinstance(bound, int) else {"s": bound[0]}
