"""The top-level functions ``em.NAME(t, ...)``, as ``torch.NAME``: one table, generated.

Most forward to the tensor method of the same name (``em.exp(t)`` is ``t.exp()``); the rest
are functions of their own (``einsum``, ``meshgrid``) or operators by name (``em.add``).
``ember/__init__.py`` exports every entry of ``FUNCTIONS``.
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Callable
from typing import Any

from ember.ops import decompositions, einsum, elementwise, more_math, rearrange
from ember.ops import methods  # noqa: F401  (Tensor's methods, with their docstrings, copied below)
from ember.tensor import Tensor

# Tensor methods that are also top-level functions, torch's list for each family.
METHODS = """
abs neg sign floor ceil round trunc exp exp2 expm1 log log1p log2 log10 sqrt rsqrt square
sin cos tan tanh asin acos atan atan2 sinh cosh asinh acosh atanh arcsin arccos arctan
arctan2 arcsinh arccosh arctanh copysign logaddexp sigmoid relu erf reciprocal isnan isinf isfinite clamp clip pow maximum
minimum fmod lerp logical_not logical_and logical_or logical_xor isclose allclose
sum mean prod max min var std argmax argmin any all logsumexp cumsum cumprod cummax cummin logcumsumexp sort argsort topk norm
std_mean var_mean
reshape flatten squeeze unsqueeze permute transpose chunk split flip roll clone tril triu
diag diagonal repeat_interleave gather scatter scatter_add scatter_reduce index_select masked_fill masked_select
matmul softmax log_softmax nonzero unique
""".split()


def _forward(name: str, attribute: str | None = None) -> Callable[..., Any]:
    """``em.name(input, ...)`` as ``input.attribute(...)`` (``attribute`` defaults to ``name``;
    a property is read, not called)."""
    attribute = attribute or name
    method = getattr(Tensor, attribute)

    def function(input: Tensor, *args: Any, **kwargs: Any) -> Any:  # noqa: A002 (torch's name)
        if not isinstance(input, Tensor):
            raise TypeError(f"{name}: expected a tensor as the first argument, got "
                            f"{type(input).__name__}; help: wrap it with em.tensor(...)")
        found = getattr(input, attribute)
        return found if isinstance(method, property) else found(*args, **kwargs)

    function.__name__ = function.__qualname__ = name
    call = attribute if isinstance(method, property) else f"{attribute}(...)"
    function.__doc__ = (f"{inspect.cleandoc(method.__doc__ or '')}\n\n"
                        f"As a function: ``em.{name}(input, ...)`` is ``input.{call}``.")
    return function


def _scaled(op: Callable[[Any, Any], Any], name: str) -> Callable[..., Any]:
    def function(input: Any, other: Any, *, alpha: Any = 1) -> Any:  # noqa: A002
        return op(input, other if alpha == 1 else other * alpha)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = _operator_doc(name, f"``input {_SYMBOLS[op]} alpha * other``",
                                     f"em.{name}(em.tensor([1, 2]), 3, alpha=2)",
                                     "[7, 8]" if op is operator.add else "[-5, -4]")
    return function


def _operator(op: Callable[[Any, Any], Any], name: str) -> Callable[..., Any]:
    def function(input: Any, other: Any) -> Any:  # noqa: A002
        return op(input, other)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = _operator_doc(name, f"``input {_SYMBOLS[op]} other``",
                                     f"em.{name}(em.tensor([6, 7]), 4)", _EXAMPLES[op])
    return function


# The operator each name spells, and its example's result for em.NAME(em.tensor([6, 7]), 4).
_SYMBOLS = {operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/",
            operator.floordiv: "//", operator.mod: "%", operator.eq: "==", operator.ne: "!=",
            operator.lt: "<", operator.le: "<=", operator.gt: ">", operator.ge: ">="}
_EXAMPLES = {operator.mul: "[24, 28]", operator.truediv: "[1.5, 1.75]",
             operator.floordiv: "[1, 1]", operator.mod: "[2, 3]",
             operator.eq: "[False, False]", operator.ne: "[True, True]",
             operator.lt: "[False, False]", operator.le: "[False, False]",
             operator.gt: "[True, True]", operator.ge: "[True, True]"}


def _operator_doc(name: str, formula: str, example: str, result: str) -> str:
    return f"""{formula} elementwise, as ``torch.{name}``.

Either operand may be a tensor or a Python scalar (at least one a tensor); the shapes
broadcast (NumPy's rules) and the dtype is PyTorch's promotion of the two (comparisons give
bool; ``/`` of integers gives float32; ``//`` floors; ``%`` takes the divisor's sign).

Example:
    >>> {example}.tolist()
    {result}
"""


FUNCTIONS: dict[str, Callable[..., Any]] = {name: _forward(name) for name in METHODS}
FUNCTIONS.update({
    "add": _scaled(operator.add, "add"),
    "sub": _scaled(operator.sub, "sub"),
    "subtract": _scaled(operator.sub, "subtract"),
    "mul": _operator(operator.mul, "mul"),
    "multiply": _operator(operator.mul, "multiply"),
    "true_divide": _operator(operator.truediv, "true_divide"),
    "floor_divide": _operator(operator.floordiv, "floor_divide"),
    "remainder": _operator(operator.mod, "remainder"),
    "eq": _operator(operator.eq, "eq"), "ne": _operator(operator.ne, "ne"),
    "lt": _operator(operator.lt, "lt"), "le": _operator(operator.le, "le"),
    "gt": _operator(operator.gt, "gt"), "ge": _operator(operator.ge, "ge"),
    "div": more_math.div,
    "bitwise_left_shift": elementwise.bitwise_left_shift,
    "bitwise_right_shift": elementwise.bitwise_right_shift,
    "einsum": einsum.einsum,
    "meshgrid": rearrange.meshgrid,
    "det": decompositions.det,
    "inverse": decompositions.inv,
    "t": _forward("t", "T"),
})
