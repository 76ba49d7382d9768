"""The docstrings of ``Tensor``'s one-line methods, in one table.

``ops/methods.py`` keeps Tensor's methods one line each (they forward to the op
modules); ``attach(Tensor)`` gives each its docstring from here, and ``ops/functions.py``
builds ``em.NAME(t, ...)``'s docstring from the method's, so each text is written
once. A method whose op function already documents it (``reshape`` ->
``ops.shape.reshape``) takes that docstring (``FROM_OPS``); the rest are written
below, families from one template. Examples run as doctests (tests/test_docstrings.py).
"""

from __future__ import annotations

import importlib
from typing import Any

_FLOAT_RULE = ("Integer and bool tensors compute in float32 (PyTorch's promotion); floating "
               "tensors keep their dtype. The result has the input's shape.")
_NUMERIC_RULE = ("The result has the input's shape and dtype (integers stay integers); bool "
                 "tensors raise ``DTypeError``.")
_BINARY_RULE = ("``other`` is a tensor or a Python scalar; the shapes broadcast (NumPy's rules) "
                "and the dtype is PyTorch's ``result_type`` of the two.")
_DIM_ARGS = """Args:
    dim: None (every dim), an int, or a tuple of ints; negative dims count from the end.
    keepdim: keep each reduced dim with size 1."""


def _unary(summary: str, formula: str, example: str, result: str, rule: str = _FLOAT_RULE,
           name: str = "") -> str:
    return f"""{summary}

Elementwise ``{formula}``. {rule}

Example:
    >>> em.tensor({example}).{name}().tolist()
    {result}
"""


# name: (summary, formula, example input, example output)
_FLOAT_UNARY = {
    "exp": ("The exponential of each element.", "e ** x", "[0.0, 1.0]",
            "[1.0, 2.7182817459106445]"),
    "exp2": ("Two to the power of each element.", "2 ** x", "[0.0, 3.0]", "[1.0, 8.0]"),
    "expm1": ("``exp(x) - 1``, accurate for small ``x``.", "e ** x - 1", "[0.0]", "[0.0]"),
    "log": ("The natural logarithm of each element (``nan`` below 0, ``-inf`` at 0).",
            "ln(x)", "[1.0, 0.0]", "[0.0, -inf]"),
    "log1p": ("``log(1 + x)``, accurate for small ``x``.", "ln(1 + x)", "[0.0]", "[0.0]"),
    "log2": ("The base-2 logarithm of each element.", "log2(x)", "[1.0, 8.0]", "[0.0, 3.0]"),
    "log10": ("The base-10 logarithm of each element.", "log10(x)", "[1.0, 100.0]",
              "[0.0, 2.0]"),
    "sqrt": ("The square root of each element (``nan`` below 0).", "x ** 0.5", "[4.0, 9.0]",
             "[2.0, 3.0]"),
    "rsqrt": ("The reciprocal square root of each element.", "1 / sqrt(x)", "[1.0, 4.0]",
              "[1.0, 0.5]"),
    "reciprocal": ("One over each element (``inf`` at 0).", "1 / x", "[2.0, 4.0]",
                   "[0.5, 0.25]"),
    "sin": ("The sine of each element, in radians.", "sin(x)", "[0.0]", "[0.0]"),
    "cos": ("The cosine of each element, in radians.", "cos(x)", "[0.0]", "[1.0]"),
    "tan": ("The tangent of each element, in radians.", "tan(x)", "[0.0]", "[0.0]"),
    "tanh": ("The hyperbolic tangent of each element.", "tanh(x)", "[0.0]", "[0.0]"),
    "sigmoid": ("The logistic sigmoid of each element.", "1 / (1 + e ** -x)", "[0.0]",
                "[0.5]"),
    "silu": ("SiLU (swish) of each element.", "x * sigmoid(x)", "[0.0]", "[0.0]"),
    "erf": ("The Gauss error function of each element.", "erf(x)", "[0.0]", "[0.0]"),
    "asin": ("The arcsine of each element, in radians (``nan`` outside [-1, 1]); alias "
             "``arcsin``.", "asin(x)", "[0.0]", "[0.0]"),
    "acos": ("The arccosine of each element, in radians (``nan`` outside [-1, 1]); alias "
             "``arccos``.", "acos(x)", "[1.0]", "[0.0]"),
    "atan": ("The arctangent of each element, in radians; alias ``arctan``.", "atan(x)",
             "[0.0]", "[0.0]"),
    "sinh": ("The hyperbolic sine of each element.", "sinh(x)", "[0.0]", "[0.0]"),
    "cosh": ("The hyperbolic cosine of each element.", "cosh(x)", "[0.0]", "[1.0]"),
    "asinh": ("The inverse hyperbolic sine of each element; alias ``arcsinh``.", "asinh(x)",
              "[0.0]", "[0.0]"),
    "acosh": ("The inverse hyperbolic cosine of each element (``nan`` below 1); alias "
              "``arccosh``.", "acosh(x)", "[1.0]", "[0.0]"),
    "atanh": ("The inverse hyperbolic tangent of each element (``±inf`` at ±1); alias "
              "``arctanh``.", "atanh(x)", "[0.0]", "[0.0]"),
}

# name: (summary, formula, example input, example output, dtype rule)
_KEEP_UNARY = {
    "abs": ("The absolute value of each element (also ``abs(t)``).", "|x|", "[-2, 3]", "[2, 3]",
            _NUMERIC_RULE),
    "neg": ("The negation of each element (also ``-t``).", "-x", "[1.5, -2.0]", "[-1.5, 2.0]",
            _NUMERIC_RULE),
    "floor": ("Each element rounded down to an integer value.", "floor(x)", "[1.5, -1.5]",
              "[1.0, -2.0]", _NUMERIC_RULE + " Integer tensors come back unchanged."),
    "ceil": ("Each element rounded up to an integer value.", "ceil(x)", "[1.5, -1.5]",
             "[2.0, -1.0]", _NUMERIC_RULE + " Integer tensors come back unchanged."),
    "trunc": ("Each element rounded toward zero.", "trunc(x)", "[1.5, -1.5]", "[1.0, -1.0]",
              "The result has the input's shape and dtype; integer tensors come back unchanged."),
    "sign": ("The sign of each element: -1, 0 or 1.", "sign(x)", "[-2.0, 0.0, 3.0]",
             "[-1.0, 0.0, 1.0]", "The result has the input's shape and dtype."),
    "relu": ("The rectified linear unit of each element.", "max(x, 0)", "[-1.0, 2.0]",
             "[0.0, 2.0]", _NUMERIC_RULE),
    "square": ("The square of each element.", "x * x", "[-2, 3]", "[4, 9]",
               "The result has the input's shape and dtype (bool stays bool, as ``x & x``)."),
}

# name: (summary, example input, example output)
_PREDICATES = {
    "isnan": ("True where an element is NaN.", "[1.0, float('nan')]", "[False, True]"),
    "isinf": ("True where an element is positive or negative infinity.",
              "[1.0, float('inf')]", "[False, True]"),
    "isfinite": ("True where an element is neither infinite nor NaN.",
                 "[1.0, float('inf'), float('nan')]", "[True, False, False]"),
    "logical_not": ("True where an element is zero (``not x``).", "[0, 2]", "[True, False]"),
}


def _logical(name: str, word: str, result: str) -> str:
    return f"""Elementwise logical {word.upper()} of ``self`` and ``other``, read as ``x != 0``.

Args:
    other: a tensor or Python scalar; the shapes broadcast.

Returns:
    A bool tensor of the broadcast shape.

Example:
    >>> em.tensor([0, 1, 1]).{name}(em.tensor([0, 0, 1])).tolist()
    {result}
"""


def _reduction(summary: str, dtypes: str, example: str, result: str) -> str:
    return f"""{summary}

{dtypes}

{_DIM_ARGS}

Raises:
    IndexError: a dim out of range.

Example:
    >>> {example}
    {result}
"""


def _conversion(name: str, dtype: str) -> str:
    return f"""This tensor converted to {dtype}, ``self.to(em.{dtype})`` (itself if already so).

Floats to integers truncate toward zero; anything to bool is ``x != 0``.

Example:
    >>> em.tensor([1.7, -1.7]).{name}().dtype
    ember.{dtype}
"""


def _rebinding(name: str, what: str, example: str, result: str) -> str:
    return f"""Rebind this handle to {what}, and return it (a rebinding update).

Tensors are immutable values: other handles to the old value, and views taken before, keep
the old value; this is the one documented difference from PyTorch's in-place methods. The
new value is converted to this tensor's dtype and must keep its shape.

Example:
    >>> t = em.tensor([1.0, 2.0])
    >>> t.{example}.tolist()
    {result}
    >>> t.tolist()
    {result}
"""


# Methods documented by their op function: "module.function" in ember/ops.
FROM_OPS = {
    "reshape": "shape.reshape", "flatten": "shape.flatten", "squeeze": "shape.squeeze",
    "unsqueeze": "shape.unsqueeze", "permute": "shape.permute", "transpose": "shape.transpose",
    "expand": "shape.expand", "repeat": "shape.repeat", "chunk": "shape.chunk",
    "split": "shape.split", "T": "shape.t",
    "gather": "indexing.gather", "scatter_add": "indexing.scatter_add",
    "index_select": "indexing.index_select", "masked_fill": "indexing.masked_fill",
    "index_put": "indexing.index_put",
    "bitwise_left_shift": "elementwise.bitwise_left_shift",
    "bitwise_right_shift": "elementwise.bitwise_right_shift",
    "cumsum": "reduction.cumsum", "sort": "sorting.sort", "argsort": "sorting.argsort",
    "topk": "sorting.topk", "matmul": "linalg.matmul", "clamp": "elementwise.clamp",
    "to": "conversion.to", "astype": "conversion.astype", "diagonal": "rearrange.diagonal",
    "copysign": "more_math.copysign", "logaddexp": "more_math.logaddexp",
    "cumprod": "scans.cumprod", "cummax": "scans.cummax", "cummin": "scans.cummin",
    "logcumsumexp": "scans.logcumsumexp", "scatter": "scatter.scatter",
    "scatter_reduce": "scatter.scatter_reduce", "unfold": "rearrange.unfold",
}

DOCS: dict[str, str] = {}
DOCS.update({name: _unary(*entry, name=name) for name, entry in _FLOAT_UNARY.items()})
DOCS.update({name: _unary(*entry, name=name) for name, entry in _KEEP_UNARY.items()})
DOCS.update({name: _unary(summary, name + "(x)", example,
                          result, "The result is a bool tensor of the input's shape; any dtype.",
                          name=name)
             for name, (summary, example, result) in _PREDICATES.items()})
DOCS.update({
    "logical_and": _logical("logical_and", "and", "[False, False, True]"),
    "logical_or": _logical("logical_or", "or", "[False, True, True]"),
    "logical_xor": _logical("logical_xor", "xor", "[False, True, False]"),
    "float": _conversion("float", "float32"),
    "double": _conversion("double", "float64"),
    "half": _conversion("half", "float16"),
    "int": _conversion("int", "int32"),
    "long": _conversion("long", "int64"),
    "short": _conversion("short", "int16"),
    "char": _conversion("char", "int8"),
    "byte": _conversion("byte", "uint8"),
    "bool": _conversion("bool", "bool"),
    "add_": _rebinding("add_", "``self + alpha * other``", "add_(1.0)", "[2.0, 3.0]"),
    "sub_": _rebinding("sub_", "``self - alpha * other``", "sub_(1.0)", "[0.0, 1.0]"),
    "mul_": _rebinding("mul_", "``self * other``", "mul_(2.0)", "[2.0, 4.0]"),
    "div_": _rebinding("div_", "``self / other`` (``rounding_mode`` as ``div``)", "div_(2.0)",
                       "[0.5, 1.0]"),
    "clamp_": _rebinding("clamp_", "``self.clamp(min, max)``", "clamp_(max=1.5)", "[1.0, 1.5]"),
    "fill_": _rebinding("fill_", "a tensor of its shape filled with ``value`` (a scalar, or a "
                        "tensor that broadcasts to the shape)", "fill_(7.0)", "[7.0, 7.0]"),
    "zero_": _rebinding("zero_", "zeros of its shape and dtype", "zero_()", "[0.0, 0.0]"),
    "copy_": _rebinding("copy_", "``src``'s values (broadcast to its shape, moved to its device, "
                        "converted to its dtype)", "copy_(em.tensor([5.0, 6.0]))", "[5.0, 6.0]"),
})

DOCS.update({
    "ndim": """The number of dims, ``len(self.shape)`` (0 for a scalar tensor).

Example:
    >>> em.zeros((2, 3)).ndim
    2
""",
    "numel": """The number of elements, the product of ``self.shape`` (1 for a 0-d tensor).

Example:
    >>> em.zeros((2, 3)).numel()
    6
""",
    "size": """The shape (``dim=None``) or the size of one dim, as PyTorch's ``Tensor.size``.

Args:
    dim: a dim, negative counting from the end; None for the whole shape.

Raises:
    IndexError: ``dim`` out of range.

Example:
    >>> em.zeros((2, 3)).size(-1)
    3
""",
    "dim": """The number of dims, as ``ndim`` (PyTorch's name).

Example:
    >>> em.zeros((2, 3)).dim()
    2
""",
    "tolist": """The data as nested Python lists of scalars; blocks until it is computed.

A 0-d tensor gives a Python scalar. Inside a trio task use ``(await t).tolist()``:
the blocking read raises there.

Example:
    >>> em.arange(4).reshape(2, 2).tolist()
    [[0, 1], [2, 3]]
""",
    "round": """Each element rounded half to even, to ``decimals`` places (negative: tens...).

The result has the input's shape and dtype; integer tensors come back unchanged for
``decimals=0`` (as in PyTorch); bool tensors raise ``DTypeError``.

Args:
    decimals: the number of decimal places to keep. Default 0.

Example:
    >>> em.tensor([0.5, 1.5, 2.5]).round().tolist()
    [0.0, 2.0, 2.0]
""",
    "gelu": """GELU of each element: exact ``x * Φ(x)`` (with erf), or its tanh approximation.

Integer and bool tensors compute in float32; floating tensors keep their dtype. The
result has the input's shape.

Args:
    approximate: ``"none"`` (exact, PyTorch's default) or ``"tanh"``.

Example:
    >>> em.tensor([0.0]).gelu(approximate="tanh").tolist()
    [0.0]
""",
    "clip": """Alias of ``clamp``: limit the values to ``[min, max]`` (either bound may be None).

Example:
    >>> em.tensor([-2, 0, 5]).clip(-1, 3).tolist()
    [-1, 0, 3]
""",
    "pow": f"""Each element raised to ``exponent`` (also ``self ** exponent``).

{_BINARY_RULE} An integer tensor to a float power gives float32.

Args:
    exponent: a tensor or Python scalar.

Example:
    >>> em.tensor([1, 2, 3]).pow(2).tolist()
    [1, 4, 9]
""",
    "maximum": f"""The elementwise larger of ``self`` and ``other`` (NaN propagates).

{_BINARY_RULE}

Example:
    >>> em.tensor([1, 5]).maximum(em.tensor([3, 2])).tolist()
    [3, 5]
""",
    "minimum": f"""The elementwise smaller of ``self`` and ``other`` (NaN propagates).

{_BINARY_RULE}

Example:
    >>> em.tensor([1, 5]).minimum(em.tensor([3, 2])).tolist()
    [1, 2]
""",
    "fmod": f"""The remainder of truncated division, C's ``fmod``: it has the dividend's sign.

``%`` (``remainder``) instead takes the divisor's sign. {_BINARY_RULE} Integer division
by zero fails at the read.

Example:
    >>> em.tensor([-3, 3]).fmod(2).tolist()
    [-1, 1]
""",
    "div": f"""``self / other``: true division, or rounded with ``rounding_mode``.

{_BINARY_RULE} Without a rounding mode, integers divide to float32 (as ``/``); with
``"trunc"`` (toward zero) or ``"floor"`` (down) integer operands give an integer result.

Args:
    other: the divisor, a tensor or Python scalar.
    rounding_mode: None, ``"trunc"`` or ``"floor"``.

Raises:
    ValueError: an unknown ``rounding_mode``.

Example:
    >>> em.tensor([-7, 7]).div(2, rounding_mode="trunc").tolist()
    [-3, 3]
""",
    "lerp": """Linear interpolation ``self + weight * (end - self)``, elementwise.

``end`` and ``weight`` are tensors or Python scalars; the shapes broadcast.

Example:
    >>> em.tensor([0.0, 10.0]).lerp(em.tensor([10.0, 20.0]), 0.5).tolist()
    [5.0, 15.0]
""",
    "isclose": """True where ``|self - other| <= atol + rtol * |other|``, elementwise.

Equal infinities are close; NaNs are close to each other only with ``equal_nan=True``.
The shapes broadcast; the result is a bool tensor.

Args:
    other: a tensor or Python scalar.
    rtol: the relative tolerance. Default 1e-5.
    atol: the absolute tolerance. Default 1e-8.
    equal_nan: count NaN as close to NaN.

Example:
    >>> em.tensor([1.0, 2.0]).isclose(em.tensor([1.0, 2.1])).tolist()
    [True, False]
""",
    "allclose": """Whether every element is close to ``other`` (``isclose(...).all()``), as a bool.

This reads the answer, so it waits for the device (it raises inside a trio task).

Example:
    >>> em.tensor([1.0, 2.0]).allclose(em.tensor([1.0, 2.0 + 1e-7]))
    True
""",
    "softmax": """``exp(x) / sum(exp(x))`` along ``dim``: each slice along it sums to 1.

Computed stably (the slice maximum is subtracted first). Integer tensors compute in
float32; floating tensors keep their dtype. The result has the input's shape.

Args:
    dim: the dim to normalize along.

Example:
    >>> em.tensor([1.0, 1.0]).softmax(0).tolist()
    [0.5, 0.5]
""",
    "log_softmax": """``log(softmax(x, dim))``, computed stably as ``x - logsumexp(x, dim)``.

Integer tensors compute in float32; floating tensors keep their dtype. The result has the
input's shape.

Args:
    dim: the dim to normalize along.

Example:
    >>> em.tensor([0.0, 0.0]).log_softmax(0).exp().tolist()
    [0.5, 0.5]
""",
    "sum": _reduction(
        "The sum of the elements over ``dim``.",
        "Bool and integer tensors sum to int64 (as in PyTorch); floating tensors keep their\n"
        "dtype. ``dtype=`` converts the input first.",
        "em.tensor([[1, 2], [3, 4]]).sum(0).tolist()", "[4, 6]"),
    "mean": _reduction(
        "The arithmetic mean of the elements over ``dim``.",
        "Needs a floating tensor (integers raise ``DTypeError``, as in PyTorch); the result\n"
        "keeps its dtype. An empty slice gives NaN.",
        "em.tensor([[1.0, 2.0], [3.0, 4.0]]).mean(1).tolist()", "[1.5, 3.5]"),
    "prod": _reduction(
        "The product of the elements over ``dim``.",
        "Bool and integer tensors multiply to int64; floating tensors keep their dtype.",
        "em.tensor([1, 2, 3, 4]).prod().item()", "24"),
    "max": _reduction(
        "The largest element over ``dim`` (values only: indices come from ``argmax``).",
        "The result keeps the input's dtype; NaN propagates. An empty slice raises\n"
        "``ShapeError``.",
        "em.tensor([[1, 5], [7, 2]]).max(dim=1).tolist()", "[5, 7]"),
    "min": _reduction(
        "The smallest element over ``dim`` (values only: indices come from ``argmin``).",
        "The result keeps the input's dtype; NaN propagates. An empty slice raises\n"
        "``ShapeError``.",
        "em.tensor([[1, 5], [7, 2]]).min(dim=1).tolist()", "[1, 2]"),
    "any": _reduction(
        "True where any element over ``dim`` is nonzero.",
        "Any dtype; the result is bool. An empty slice gives False.",
        "em.tensor([[0, 0], [0, 3]]).any(1).tolist()", "[False, True]"),
    "all": _reduction(
        "True where every element over ``dim`` is nonzero.",
        "Any dtype; the result is bool. An empty slice gives True.",
        "em.tensor([[1, 0], [2, 3]]).all(1).tolist()", "[False, True]"),
    "logsumexp": _reduction(
        "``log(sum(exp(x)))`` over ``dim``, computed without overflow.",
        "The slice maximum is subtracted first; a slice of all ``-inf`` gives ``-inf``. Integer\n"
        "tensors compute in float32; floating tensors keep their dtype.",
        "em.tensor([0.0, 0.0]).logsumexp(0).exp().item()", "2.0"),
    "var": _reduction(
        "The variance over ``dim``: ``sum((x - mean)**2) / max(N - correction, 0)``.",
        "``correction=1`` (default) is Bessel's correction, 0 the population variance. Needs\n"
        "a floating tensor (integers raise ``DTypeError``); the result keeps its dtype.",
        "em.tensor([1.0, 2.0, 3.0, 4.0]).var(correction=0).item()", "1.25"),
    "std": _reduction(
        "The standard deviation over ``dim``: ``sqrt(var(dim, correction))``.",
        "``correction=1`` (default) is Bessel's correction, 0 the population one. Needs a\n"
        "floating tensor (integers raise ``DTypeError``); the result keeps its dtype.",
        "em.tensor([1.0, 3.0]).std(correction=0).item()", "1.0"),
    "argmax": _reduction(
        "The int64 index of the largest element along ``dim`` (of the flattened tensor for\nNone).",
        "Ties give the first occurrence; NaN counts as the largest value. ``dim`` is one int\n"
        "or None.",
        "em.tensor([[1, 5], [7, 2]]).argmax(dim=1).tolist()", "[1, 0]"),
    "argmin": _reduction(
        "The int64 index of the smallest element along ``dim`` (of the flattened tensor for\n"
        "None).",
        "Ties give the first occurrence; NaN counts as the smallest value. ``dim`` is one int\n"
        "or None.",
        "em.tensor([[1, 5], [7, 2]]).argmin(dim=1).tolist()", "[0, 1]"),
    "norm": """The vector ``p``-norm over ``dim`` (every element when None).

``p`` is a number (2 by default; ``inf`` / ``-inf`` the max / min of ``|x|``; 0 counts the
nonzeros; otherwise ``sum(|x|**p) ** (1/p)``) or ``"fro"`` (the 2-norm). Needs a floating
tensor; the result keeps its dtype.

Args:
    p: the order of the norm.
    dim: None, an int or a tuple of ints.
    keepdim: keep each reduced dim with size 1.

Raises:
    DTypeError: an integer or bool tensor.

Example:
    >>> em.tensor([3.0, 4.0]).norm().item()
    5.0
""",
    "std_mean": """``(std, mean)`` over ``dim`` in one call, as ``torch.std_mean``.

Example:
    >>> [r.item() for r in em.tensor([1.0, 3.0]).std_mean(correction=0)]
    [1.0, 2.0]
""",
    "var_mean": """``(var, mean)`` over ``dim`` in one call, as ``torch.var_mean``.

Example:
    >>> [r.item() for r in em.tensor([1.0, 3.0]).var_mean(correction=0)]
    [1.0, 2.0]
""",
    "view": """``view(*shape)``: ``reshape`` (tensors are immutable, so a view and a copy cannot
differ); ``view(dtype)``: the same bytes read as ``dtype``, as PyTorch's bitcast.

A bitcast to a dtype of the same size keeps the shape; to another size it rescales the last
dim (float32 to float16 doubles it; float16 to float32 halves it, which must divide). The
bitcast carries no gradient.

Example:
    >>> em.arange(6).view(3, 2).shape
    (3, 2)
    >>> em.tensor([1.0]).view(em.int32).tolist()    # float32 1.0's bits
    [1065353216]
""",
    "atan2": f"""The angle of the point ``(other, self)``: ``atan2(self, other)`` in radians, in
``[-pi, pi]``, elementwise; alias ``arctan2``.

{_BINARY_RULE} Integer tensors compute in float32.

Example:
    >>> em.tensor([0.0, 1.0]).atan2(em.tensor([1.0, 0.0])).tolist()
    [0.0, 1.5707963705062866]
""",
    "flip": """The elements in reverse order along each of ``dims``, as ``torch.flip``.

Args:
    dims: an int or a sequence of ints.

Raises:
    IndexError: a dim out of range.

Example:
    >>> em.tensor([[1, 2], [3, 4]]).flip(1).tolist()
    [[2, 1], [4, 3]]
""",
    "roll": """The elements shifted by ``shifts`` along ``dims``, wrapping around.

With ``dims=None`` the tensor is rolled as if flattened, then reshaped back.

Args:
    shifts: an int, or one int per dim of ``dims``.
    dims: an int, a sequence of ints, or None.

Example:
    >>> em.tensor([1, 2, 3, 4]).roll(1).tolist()
    [4, 1, 2, 3]
""",
    "clone": """A new handle to the same value; gradients flow through it.

Tensors are immutable values, so nothing needs copying; a rebinding update of the clone
(``c.add_(1)``) leaves the original alone.

Example:
    >>> em.tensor([1, 2]).clone().tolist()
    [1, 2]
""",
    "tril": """The lower triangle of the last two dims (``j - i <= diagonal``), zeros elsewhere.

Works on batches (any leading dims); the result has the input's shape and dtype.

Args:
    diagonal: 0 keeps the main diagonal; positive keeps more above it, negative fewer.

Example:
    >>> em.ones((2, 2)).tril().tolist()
    [[1.0, 0.0], [1.0, 1.0]]
""",
    "triu": """The upper triangle of the last two dims (``j - i >= diagonal``), zeros elsewhere.

Works on batches (any leading dims); the result has the input's shape and dtype.

Args:
    diagonal: 0 keeps the main diagonal; positive keeps fewer, negative more below it.

Example:
    >>> em.ones((2, 2)).triu(1).tolist()
    [[0.0, 1.0], [0.0, 0.0]]
""",
    "diag": """A 1-D tensor: the square matrix with it on the ``diagonal``-th diagonal; a 2-D one:
that diagonal, as a 1-D tensor (``torch.diag``).

Raises:
    ShapeError: a tensor neither 1-D nor 2-D.

Example:
    >>> em.tensor([1, 2]).diag().tolist()
    [[1, 0], [0, 2]]
""",
    "repeat_interleave": """Each element repeated ``repeats`` times along ``dim`` (flattened when
None), as ``torch.repeat_interleave``; ``repeat`` tiles instead.

A tensor ``repeats`` (one count per element along ``dim``) is read first, since the
result's size depends on its values.

Example:
    >>> em.tensor([1, 2]).repeat_interleave(2).tolist()
    [1, 1, 2, 2]
""",
    "mT": """The transpose of the last two dims (batched matrices), ``transpose(-2, -1)``.

Example:
    >>> em.zeros((5, 2, 3)).mT.shape
    (5, 3, 2)
""",
    "masked_select": """The elements where ``mask`` (a bool tensor broadcast with this one) is true,
as a 1-D tensor in row-major order.

The result's size depends on the mask's values, so the mask is read first. Gradients flow
back to the selected elements.

Raises:
    DTypeError: a mask that is not bool.

Example:
    >>> x = em.tensor([[1, 5], [7, 2]])
    >>> x.masked_select(x > 2).tolist()
    [5, 7]
""",
    "nonzero": """The indices of the nonzero elements, in row-major order.

An int64 tensor of shape ``(count, ndim)``, one row per element; with ``as_tuple=True`` a
tuple of ``ndim`` 1-D tensors, one per dim (usable as an index). The count depends on the
values, so this reads the tensor first.

Example:
    >>> em.tensor([0, 3, 0, 4]).nonzero().tolist()
    [[1], [3]]
""",
    "unique": """The distinct values (of the flattened tensor), ascending, as ``torch.unique``.

With ``return_inverse`` also each element's position among them (shaped like the input),
with ``return_counts`` how often each occurs; the result is then a tuple. The count
depends on the values, so this reads the tensor first.

Raises:
    NotImplementedError: ``dim`` given (unique slices).

Example:
    >>> em.tensor([3, 1, 3, 2]).unique().tolist()
    [1, 2, 3]
""",
    "detach": """A new handle to the same values, outside any gradient graph (a constant).

Example:
    >>> em.tensor([1.0]).detach().is_tracked
    False
""",
})


def _from_ops(path: str) -> str:
    module, function = path.split(".")
    return getattr(importlib.import_module(f"ember.ops.{module}"), function).__doc__


def attach(cls: Any) -> None:
    """Give each of ``cls``'s methods and properties named in the tables its docstring.

    A docstring written on the method itself wins, and a name ``cls`` lacks is passed over:
    tests/test_docstrings.py names such entries, so the table loses them, but an import
    never fails on one.
    """
    for name in DOCS.keys() | FROM_OPS.keys():
        member = vars(cls).get(name)
        if member is None or member.__doc__:
            continue
        member.__doc__ = DOCS[name] if name in DOCS else _from_ops(FROM_OPS[name])
