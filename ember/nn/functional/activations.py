"""Activations, and softmax / log_softmax written stably from primitives (softmax's
gradient in closed form: one recorded node, autodiff/graph.record_composite)."""

from __future__ import annotations

from typing import Any

from ember.ops.gradient_rules import differentiable
from ember.ops.recording import no_record, record_composite
from ember.errors import DTypeError
from ember.mixed_precision import float32_op
from ember.ops.elementwise import where
from ember.tensor import Tensor


def relu(x: Tensor) -> Tensor:
    """ReLU, ``max(x, 0)`` elementwise; the result has ``x``'s shape and dtype.

    Example:
        >>> F.relu(em.tensor([-1.0, 2.0])).tolist()
        [0.0, 2.0]
    """
    return x.relu()


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """x·Φ(x) (exact, with erf), or its tanh approximation with ``approximate="tanh"``.

    Example:
        >>> F.gelu(em.tensor([0.0, 10.0])).tolist()
        [0.0, 10.0]
    """
    return x.gelu(approximate)


def silu(x: Tensor) -> Tensor:
    """SiLU (swish), ``x * sigmoid(x)`` elementwise; the result has ``x``'s shape.

    Integer tensors compute in float32; floating tensors keep their dtype.

    Example:
        >>> F.silu(em.tensor([0.0])).tolist()
        [0.0]
    """
    return x.silu()


@float32_op
def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) along ``dim``: stable for large inputs.

    Example:
        >>> F.softmax(em.tensor([[1.0, 1.0], [0.0, 0.0]]), dim=-1).tolist()
        [[0.5, 0.5], [0.5, 0.5]]
    """
    with no_record():
        e = (x - x.max(dim=dim, keepdim=True)).exp()
        y = e / e.sum(dim=dim, keepdim=True)
    record_composite("softmax", (x,), (dim,), y)
    return y


def safe_softmax(scores: Tensor) -> Tensor:
    """Softmax over the last dim in which a row of only -inf gives zeros, not NaN (its
    gradient: softmax's rule, which gives such a row zeros)."""
    with no_record():
        top = scores.max(dim=-1, keepdim=True)
        e = (scores - where(top == float("-inf"), 0.0, top)).exp()
        total = e.sum(dim=-1, keepdim=True)
        y = e / where(total == 0.0, 1.0, total)
    record_composite("softmax", (scores,), (-1,), y)
    return y


@differentiable("softmax", inputs=False, output=True, compute_bound=True)
def _softmax_backward(ctx: Any, grad: Tensor) -> tuple:
    """∂L/∂x = y · (g − Σ g · y) along the dim: four ops, from the output alone (a row
    of zeros, safe_softmax's fully masked row, gets a zero gradient)."""
    y = ctx.output
    weighted = grad * y
    return (weighted - y * weighted.sum(dim=ctx.attrs[0], keepdim=True),)


@float32_op
def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """x - logsumexp(x) along ``dim``.

    Example:
        >>> F.log_softmax(em.tensor([0.0, 0.0]), dim=0).exp().tolist()
        [0.5, 0.5]
    """
    return x - x.logsumexp(dim=dim, keepdim=True)


@float32_op
def softmin(x: Tensor, dim: int = -1) -> Tensor:
    """softmax(-x) along ``dim``.

    Example:
        >>> F.softmin(em.tensor([1.0, 1.0]), dim=0).tolist()
        [0.5, 0.5]
    """
    return softmax(-x, dim)


def sigmoid(x: Tensor) -> Tensor:
    """The logistic sigmoid, ``1 / (1 + exp(-x))`` elementwise; the result has ``x``'s shape.

    Integer tensors compute in float32; floating tensors keep their dtype.

    Example:
        >>> F.sigmoid(em.tensor([0.0])).tolist()
        [0.5]
    """
    return x.sigmoid()


def tanh(x: Tensor) -> Tensor:
    """The hyperbolic tangent, elementwise; the result has ``x``'s shape.

    Integer tensors compute in float32; floating tensors keep their dtype.

    Example:
        >>> F.tanh(em.tensor([0.0])).tolist()
        [0.0]
    """
    return x.tanh()


def _floating(op: str, x: Tensor) -> Tensor:
    """``x`` itself, after checking it is a floating tensor (PyTorch refuses these
    activations on integers too)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: expected a tensor, got {type(x).__name__}")
    if not x.dtype.is_floating_point:
        raise DTypeError(f"{op}: needs a floating input, got {x.dtype.name}; help: x.float()")
    return x


def _not_positive(x: Tensor) -> Tensor:
    """min(x, 0) whose gradient is 1 at 0 (``minimum`` would split it at the tie): the
    argument of exp in the negative branches, which must not overflow where unused."""
    return where(x > 0, 0.0, x)


def leaky_relu(x: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """x where x > 0, else negative_slope · x.

    ``inplace`` is accepted for PyTorch's signature; tensors are values, so it changes
    nothing. The same holds for every activation below that takes it.

    Example:
        >>> F.leaky_relu(em.tensor([-2.0, 3.0]), 0.5).tolist()
        [-1.0, 3.0]
    """
    _floating("leaky_relu", x)
    return where(x > 0, x, x * negative_slope)


def elu(x: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """x where x > 0, else alpha · (exp(x) - 1) (Clevert et al., 2015).

    Example:
        >>> F.elu(em.tensor([2.0, 0.0])).tolist()
        [2.0, 0.0]
    """
    _floating("elu", x)
    return where(x > 0, x, (_not_positive(x).exp() - 1.0) * alpha)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(x: Tensor, inplace: bool = False) -> Tensor:
    """scale · elu(x, alpha) with Klambauer et al.'s alpha ≈ 1.6733 and scale ≈ 1.0507.

    Example:
        >>> F.selu(em.tensor([0.0])).tolist()
        [0.0]
    """
    _floating("selu", x)
    return elu(x, _SELU_ALPHA) * _SELU_SCALE


def celu(x: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """max(0, x) + min(0, alpha · (exp(x / alpha) - 1)) (Barron, 2017).

    Raises:
        ValueError: alpha is 0.

    Example:
        >>> F.celu(em.tensor([2.0, 0.0]), alpha=0.5).tolist()
        [2.0, 0.0]
    """
    if alpha == 0:
        raise ValueError("celu: alpha must not be 0 (it divides x)")
    _floating("celu", x)
    return where(x > 0, x, ((_not_positive(x) * (1.0 / alpha)).exp() - 1.0) * alpha)


def hardtanh(x: Tensor, min_val: float = -1.0, max_val: float = 1.0,
             inplace: bool = False) -> Tensor:
    """x clamped to [min_val, max_val]; the gradient is 1 strictly inside, 0 at and past
    the bounds, as PyTorch's.

    Raises:
        ValueError: min_val > max_val.

    Example:
        >>> F.hardtanh(em.tensor([-2.0, 0.5, 2.0])).tolist()
        [-1.0, 0.5, 1.0]
    """
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val ({min_val}) must not exceed max_val ({max_val})")
    if not x.dtype.is_floating_point:  # integers stay integers, as PyTorch's
        return x.clamp(int(min_val), int(max_val))
    return where(x <= min_val, min_val, where(x >= max_val, max_val, x))


def relu6(x: Tensor, inplace: bool = False) -> Tensor:
    """min(max(x, 0), 6): ``hardtanh(x, 0, 6)``.

    Example:
        >>> F.relu6(em.tensor([-1.0, 3.0, 8.0])).tolist()
        [0.0, 3.0, 6.0]
    """
    return hardtanh(x, 0.0, 6.0)


def hardsigmoid(x: Tensor, inplace: bool = False) -> Tensor:
    """0 where x ≤ -3, 1 where x ≥ 3, else x / 6 + 1 / 2.

    Example:
        >>> F.hardsigmoid(em.tensor([-4.0, 0.0, 4.0])).tolist()
        [0.0, 0.5, 1.0]
    """
    _floating("hardsigmoid", x)
    return where(x <= -3.0, 0.0, where(x >= 3.0, 1.0, x * (1.0 / 6.0) + 0.5))


def hardswish(x: Tensor, inplace: bool = False) -> Tensor:
    """x · hardsigmoid(x) (Howard et al., 2019): 0 up to -3, x from 3, x (x + 3) / 6
    between; at ±3 the gradient is the outer pieces' (0 and 1), as PyTorch's.

    Example:
        >>> F.hardswish(em.tensor([0.0, 3.0, 4.0])).tolist()
        [0.0, 3.0, 4.0]
    """
    _floating("hardswish", x)
    return where(x <= -3.0, 0.0, where(x >= 3.0, x, x * (x + 3.0) * (1.0 / 6.0)))


@float32_op
def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta · x)) / beta, and x itself where beta · x > threshold (where the
    two agree to the dtype's precision and exp would overflow).

    Example:
        >>> F.softplus(em.tensor([0.0]), beta=2.0).tolist()   # log(2) / 2
        [0.3465735912322998]
    """
    _floating("softplus", x)
    scaled = x * beta if beta != 1.0 else x
    over = scaled > threshold
    safe = where(over, threshold, scaled)
    soft = safe.exp().log1p()
    return where(over, x, soft * (1.0 / beta) if beta != 1.0 else soft)


def softsign(x: Tensor) -> Tensor:
    """Softsign, ``x / (1 + |x|)`` elementwise; the result has ``x``'s shape.

    Example:
        >>> F.softsign(em.tensor([1.0, -3.0])).tolist()
        [0.5, -0.75]
    """
    return x / (x.abs() + 1.0)


def logsigmoid(x: Tensor) -> Tensor:
    """log(sigmoid(x)) = -softplus(-x): finite for every finite x.

    Example:
        >>> F.logsigmoid(em.tensor([0.0])).exp().tolist()
        [0.5]
    """
    _floating("logsigmoid", x)
    return -softplus(-x)


def mish(x: Tensor, inplace: bool = False) -> Tensor:
    """x · tanh(softplus(x)) (Misra, 2019).

    Example:
        >>> F.mish(em.tensor([0.0])).tolist()
        [0.0]
    """
    _floating("mish", x)
    return x * softplus(x).tanh()
