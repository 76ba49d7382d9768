"""Elementwise ops cross-checked against PyTorch itself: result dtypes and values.

The grid covers every binary operator over every pair of dtypes, with
dimensioned and 0-d operands on either side, and every Python scalar kind
on either side; then the unary functions, clamp and where. Where torch
refuses a combination (``bool - bool``, ``~float``), ember must refuse it at
the call with an ``EmberError``. The deliberate deviations are listed in
``DEVIATIONS``.
"""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

import ember as em
from tests.ops.harness import NP_DTYPES, TOLERANCE

torch = pytest.importorskip("torch")

DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "bool")
TORCH_DTYPES = {name: getattr(torch, name) for name in DTYPES}

BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "floordiv": lambda a, b: a // b, "remainder": lambda a, b: a % b,
    "pow": lambda a, b: a ** b,
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
    "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
}
TENSOR_ONLY = {  # torch takes tensors only here; ember also takes scalars (a documented extra)
    "maximum": (lambda a, b: a.maximum(b), torch.maximum),
    "minimum": (lambda a, b: a.minimum(b), torch.minimum),
}
SCALARS = (True, False, 3, -2, 0, 2.5, -0.5, 2**33 + 1)
SHAPES = {"dims": (2, 3), "zero_dim": ()}

# Where ember knowingly differs from torch (each is skipped or allowed below):
# - torch computes bool_tensor ** True (a copy) but refuses bool ** bool tensors; ember refuses
#   both (pow is not defined for bool).
# - a Python scalar operand of a float16 / bfloat16 op is kept in float32 by ember; torch
#   rounds it to the tensor's dtype first for some ops (floordiv, remainder) and not for others
#   (mul): the two agree except where the scalar overflows float16 (2**33 + 1 is inf there).
# - gelu and silu of integer / bool tensors compute in float32 like every other float function
#   (torch: not implemented); clamp bounds past the dtype's range saturate (torch: refuses).
EMBER_EXTENDS = ("gelu", "silu", "clamp")


def to_torch(a: np.ndarray):
    if a.dtype == ml_dtypes.bfloat16:  # torch.from_numpy knows no ml_dtypes; float32 is exact
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.array(a))


def from_torch(t) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(ml_dtypes.bfloat16)
    return t.numpy()


def operand(dtype: str, shape: tuple, seed: int, nonzero: bool = False) -> np.ndarray:
    """Values on which every op is exact enough to compare across libraries: floats are
    multiples of 0.25 in [-4, 4] (divisors from ±{0.5, 1, 1.5, 2, 3}, so no floor lands next
    to an integer), integers in [-4, 4] (divisors nonzero)."""
    g = np.random.default_rng(seed)
    if dtype == "bool":
        values = np.ones(shape, bool) if nonzero else g.random(shape) < 0.5
        return np.asarray(values)
    if nonzero:
        pool = [0.5, 1, 1.5, 2, 3] if dtype in ("float32", "float64", "float16", "bfloat16") \
            else [1, 2, 3, 4]
        values = g.choice(pool, shape) * g.choice([-1, 1], shape)
    elif dtype.startswith("int"):
        values = g.integers(-4, 5, shape)
    else:
        values = g.integers(-16, 17, shape) / 4
    return np.asarray(values).astype(NP_DTYPES[dtype])


def outcome(fn, *args):
    """("ok", result) or ("error", exception) of a call (and of reading its result)."""
    try:
        result = fn(*args)
        if isinstance(result, em.Tensor):
            result.numpy()
        return "ok", result
    except Exception as exc:  # noqa: BLE001  (the kind is checked by the caller)
        return "error", exc


def compare(what: str, got, want, problems: list[str], extends: bool = False) -> None:
    """Record in ``problems`` how ember's outcome differs from torch's; with ``extends``,
    ember may compute a result where torch refuses."""
    (g_kind, g), (w_kind, w) = got, want
    if w_kind == "error":
        if g_kind == "ok":
            if not extends:
                problems.append(f"{what}: torch raises {type(w).__name__} ({str(w)[:60]}), "
                                f"ember gives {g.dtype.name}")
        elif not isinstance(g, em.EmberError) or isinstance(g, em.KernelError):
            problems.append(f"{what}: torch raises; ember raises {type(g).__name__} "
                            f"instead of an EmberError at the call: {g}")
        return
    if g_kind == "error":
        problems.append(f"{what}: torch gives {w.dtype}; ember raises {type(g).__name__}: {g}")
        return
    want_dtype = str(w.dtype).removeprefix("torch.")
    if g.dtype.name != want_dtype:
        problems.append(f"{what}: dtype {g.dtype.name}, torch {want_dtype}")
        return
    if g.shape != tuple(w.shape):
        problems.append(f"{what}: shape {g.shape}, torch {tuple(w.shape)}")
        return
    got_values, want_values = g.numpy(), from_torch(w)
    if g.dtype.is_floating_point:
        rtol, atol = TOLERANCE[g.dtype.name]
        close = np.allclose(got_values.astype(np.float64), want_values.astype(np.float64),
                            rtol=rtol, atol=max(atol, 4 * rtol), equal_nan=True)
    else:
        close = np.array_equal(got_values, want_values)
    if not close:
        problems.append(f"{what}: values {got_values.tolist()} vs torch {want_values.tolist()}")


def _torch_fn(op: str):
    return BINARY[op] if op in BINARY else TENSOR_ONLY[op][1]


def _ember_fn(op: str):
    return BINARY[op] if op in BINARY else TENSOR_ONLY[op][0]


@pytest.mark.parametrize("op", list(BINARY) + list(TENSOR_ONLY))
@pytest.mark.parametrize("a_dtype", DTYPES)
def test_binary_tensor_pairs_match_torch(op: str, a_dtype: str) -> None:
    """Every dtype pair, dimensioned and 0-d on either side: dtype, values, or both refuse."""
    problems: list[str] = []
    divisor = op in ("floordiv", "remainder")
    for b_dtype, (a_layout, b_layout) in itertools.product(DTYPES, itertools.product(SHAPES, SHAPES)):
        a = operand(a_dtype, SHAPES[a_layout], 1)
        b = operand(b_dtype, SHAPES[b_layout], 2, nonzero=divisor)
        what = f"{a_dtype}[{a_layout}] {op} {b_dtype}[{b_layout}]"
        want = outcome(_torch_fn(op), to_torch(a), to_torch(b))
        got = outcome(_ember_fn(op), em.tensor(a), em.tensor(b))
        compare(what, got, want, problems)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("op", list(BINARY))
@pytest.mark.parametrize("dtype", DTYPES)
def test_binary_with_python_scalars_matches_torch(op: str, dtype: str) -> None:
    """Python bool / int / float scalars on either side (a big int wraps into int32)."""
    problems: list[str] = []
    fn = BINARY[op]
    for layout, scalar, scalar_first in itertools.product(SHAPES, SCALARS, (False, True)):
        divisor = op in ("floordiv", "remainder") and scalar_first
        x = operand(dtype, SHAPES[layout], 3, nonzero=divisor)
        if op in ("floordiv", "remainder") and not scalar_first and scalar in (0, False):
            continue  # integer division by zero: test_elementwise_errors.py
        if op == "pow" and dtype == "bool" and isinstance(scalar, bool) and not scalar_first:
            continue  # DEVIATIONS
        if scalar == 2**33 + 1 and (op == "pow" or dtype in ("float16", "bfloat16")):
            continue  # pow: both overflow, differently; float16: see the deviations above
        args = (scalar, x) if scalar_first else (x, scalar)
        what = (f"{scalar!r} {op} {dtype}[{layout}]" if scalar_first
                else f"{dtype}[{layout}] {op} {scalar!r}")
        want = outcome(fn, *(to_torch(v) if isinstance(v, np.ndarray) else v for v in args))
        got = outcome(fn, *(em.tensor(v) if isinstance(v, np.ndarray) else v for v in args))
        compare(what, got, want, problems)
    assert not problems, "\n".join(problems)


def test_integer_pow_negative_exponent_tensor_matches_torch() -> None:
    base = np.array([1, -1, -1, 2, 0, -3, 5], np.int64)
    exponent = np.array([-3, -3, -2, -1, -1, 3, 0], np.int64)
    for dtype in ("int32", "int64"):
        want = to_torch(base.astype(dtype)) ** to_torch(exponent.astype(dtype))
        got = em.tensor(base.astype(dtype)) ** em.tensor(exponent.astype(dtype))
        problems: list[str] = []
        compare(f"{dtype} ** negative", ("ok", got), ("ok", want), problems)
        assert not problems, problems


UNARY = {
    "neg": (lambda x: -x, lambda t: -t), "abs": (lambda x: abs(x), lambda t: abs(t)),
    "sign": (lambda x: x.sign(), torch.sign), "floor": (lambda x: x.floor(), torch.floor),
    "ceil": (lambda x: x.ceil(), torch.ceil), "round": (lambda x: x.round(), torch.round),
    "relu": (lambda x: x.relu(), torch.relu), "exp": (lambda x: x.exp(), torch.exp),
    "log": (lambda x: x.log(), torch.log), "log1p": (lambda x: x.log1p(), torch.log1p),
    "sqrt": (lambda x: x.sqrt(), torch.sqrt), "rsqrt": (lambda x: x.rsqrt(), torch.rsqrt),
    "sin": (lambda x: x.sin(), torch.sin), "cos": (lambda x: x.cos(), torch.cos),
    "tanh": (lambda x: x.tanh(), torch.tanh), "sigmoid": (lambda x: x.sigmoid(), torch.sigmoid),
    "gelu": (lambda x: x.gelu(), torch.nn.functional.gelu),
    "gelu_tanh": (lambda x: x.gelu(approximate="tanh"),
                  lambda t: torch.nn.functional.gelu(t, approximate="tanh")),
    "silu": (lambda x: x.silu(), torch.nn.functional.silu), "erf": (lambda x: x.erf(), torch.erf),
    "reciprocal": (lambda x: x.reciprocal(), torch.reciprocal),
    "isnan": (lambda x: x.isnan(), torch.isnan), "isinf": (lambda x: x.isinf(), torch.isinf),
    "bitwise_not": (lambda x: ~x, lambda t: ~t),
    "round_decimals": (lambda x: x.round(decimals=1), lambda t: torch.round(t, decimals=1)),
}
SPECIAL = [0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.25, -7.0, 20.0, -20.0,
           float("inf"), float("-inf"), float("nan")]


def _elementwise_reference(torch_fn):
    """``torch_fn`` with each NaN it makes from a non-NaN float input made again from that
    element alone: on AVX-512 CPUs torch 2.13's vectorized float32 gelu gives NaN at +inf
    where its scalar path (and the limit, x) gives inf."""
    def reference(t):
        out = torch_fn(t)
        if t.dtype.is_floating_point and t.ndim == 1 and out.shape == t.shape:
            for i in torch.nonzero(out.isnan() & ~t.isnan()).flatten().tolist():
                out[i] = torch_fn(t[i:i + 1])[0]
        return out

    return reference


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_matches_torch(name: str) -> None:
    """Every unary function over every dtype, special values included."""
    problems: list[str] = []
    ember_fn, torch_fn = UNARY[name]
    for dtype, shape in itertools.product(DTYPES, ((len(SPECIAL),), ())):
        if dtype in ("float32", "float64", "float16", "bfloat16"):
            x = np.array(SPECIAL, NP_DTYPES[dtype]) if shape else np.array(-1.25, NP_DTYPES[dtype])
        else:
            x = operand(dtype, (7,) if shape else (), 4)
        with np.errstate(all="ignore"):
            want = outcome(_elementwise_reference(torch_fn), to_torch(x))
        got = outcome(ember_fn, em.tensor(x))
        compare(f"{name}({dtype}{list(x.shape)})", got, want, problems,
                extends=name.startswith(EMBER_EXTENDS) and dtype in ("int32", "int64", "bool"))
    assert not problems, "\n".join(problems)


CLAMP_BOUNDS = [(-1, 2), (None, 1.5), (-0.5, None), (3, -3), (True, None), (-2**40, 2**40)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_clamp_matches_torch(dtype: str) -> None:
    problems: list[str] = []
    x = operand(dtype, (9,), 5)
    for low, high in CLAMP_BOUNDS:
        want = outcome(lambda t: torch.clamp(t, low, high), to_torch(x))
        got = outcome(lambda t: t.clamp(low, high), em.tensor(x))
        compare(f"clamp({dtype}, {low}, {high})", got, want, problems,
                extends=high == 2**40)
    for b_dtype in DTYPES:
        low, high = operand(b_dtype, (9,), 6), operand(b_dtype, (1,), 7)
        want = outcome(lambda t, lo, hi: torch.clamp(t, lo, hi), to_torch(x), to_torch(low),
                       to_torch(high))
        got = outcome(lambda t, lo, hi: t.clamp(lo, hi), em.tensor(x), em.tensor(low),
                      em.tensor(high))
        compare(f"clamp({dtype}, {b_dtype} tensors)", got, want, problems)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("a_dtype", DTYPES)
def test_where_matches_torch(a_dtype: str) -> None:
    problems: list[str] = []
    cond = np.array([True, False, True, False, True, True])
    a = operand(a_dtype, (6,), 8)
    for b_dtype, b_shape in itertools.product(DTYPES, ((2, 1), ())):
        b = operand(b_dtype, b_shape, 9)
        want = outcome(torch.where, to_torch(cond), to_torch(a), to_torch(b))
        got = outcome(em.where, em.tensor(cond), em.tensor(a), em.tensor(b))
        compare(f"where({a_dtype}, {b_dtype}{list(b_shape)})", got, want, problems)
    for scalar in (True, 3, 2.5):
        for first in (False, True):
            args = (scalar, a) if first else (a, scalar)
            want = outcome(torch.where, to_torch(cond),
                           *(to_torch(v) if isinstance(v, np.ndarray) else v for v in args))
            got = outcome(em.where, em.tensor(cond),
                          *(em.tensor(v) if isinstance(v, np.ndarray) else v for v in args))
            compare(f"where({args[0]!r}, {args[1]!r}) {a_dtype}", got, want, problems)
    assert not problems, "\n".join(problems)
