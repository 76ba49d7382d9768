"""Losses, written from ember primitives: their gradients come from the op rules, except
cross_entropy of class indices, one recorded node whose rule issues the closed-form
gradient ``(softmax(x) - onehot(t)) · w[t] · g``: a training step's loss records one node
and walks one rule, where its primitives record and walk sixteen.

Every loss has PyTorch's signature, defaults and values, for the forward and
the gradient (checked against ``torch.nn.functional`` in float64). A class
index is picked with ``gather`` (its gradient a scatter): O(N) work, where a
one-hot mask costs O(N·C); forward plus backward of cross_entropy measured
1.3-2x slower with the mask (N=2048, C=8192, float32, NumPy backend).

Reductions: ``"none"`` keeps the per-element losses, ``"sum"`` adds them,
``"mean"`` divides by their count, or, where PyTorch does (class weights,
ignored targets), by the total weight of the targets that count.

A class index outside ``[0, C)`` that is not ``ignore_index`` surfaces at
the read as a ``KernelError`` naming ``gather`` (PyTorch raises at the call;
checking there would need a read).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember.errors import DTypeError, ShapeError
from ember.mixed_precision import float32_op
from ember.ops.elementwise import where
from ember.ops.gradient_rules import differentiable
from ember.ops.recording import no_record, record_composite
from ember.sites import pins_site
from ember.tensor import Tensor

_REDUCTIONS = ("none", "mean", "sum")


def _check_reduction(op: str, reduction: str, allowed: tuple[str, ...] = _REDUCTIONS) -> None:
    if reduction not in allowed:
        names = ", ".join(repr(r) for r in allowed)
        raise ValueError(f"{op}: reduction must be one of {names}, got {reduction!r}")


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _mean_over(total_loss: Tensor, total_weight: Tensor) -> Tensor:
    """``total_loss / total_weight``; NaN when nothing counts (PyTorch's), with a zero gradient.

    A plain division would send ``g / 0`` back, and the zero weights of the
    ignored targets would turn it into NaN gradients (PyTorch gives zeros).
    """
    nothing = total_weight == 0
    return where(nothing, math.nan, total_loss / where(nothing, 1.0, total_weight))


def _check_float(op: str, x: Any, what: str) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: {what} must be a tensor, got {type(x).__name__}")
    if x.dtype.kind != "f":
        raise DTypeError(f"{op}: {what} must be a floating tensor, got {x.dtype.name}")


def _check_target_like(op: str, input: Tensor, target: Any) -> None:
    """A target that is a tensor of the input's shape (the binary cross-entropies)."""
    if not isinstance(target, Tensor):
        raise TypeError(f"{op}: target must be a tensor, got {type(target).__name__}")
    if target.shape != input.shape:
        raise ShapeError(f"{op}: target of shape {target.shape} must have the input's shape "
                         f"{input.shape}")


# ----- class-index losses ------------------------------------------------------------------


class _Classes:
    """What the class-index losses share: the class dim, the targets that count, their weights.

    ``picked(x)`` is ``x[t]`` along the class dim, by ``gather`` (an ignored
    target reads class 0); ``weighed(loss)`` multiplies each target's loss by
    ``weight[t]`` and puts 0 where the target is ``ignore_index`` (whatever its
    loss, as PyTorch skips it); ``total_weight()`` sums the counted targets'
    weights (their number without ``weight``): the mean's denominator.
    """

    def __init__(self, op: str, input: Tensor, target: Tensor, weight: Tensor | None,
                 ignore_index: int) -> None:
        if input.ndim == 0:
            raise ShapeError(f"{op}: input must have a class dim, got a 0-d tensor")
        self.dim = 1 if input.ndim >= 2 else 0
        self.classes = input.shape[self.dim]
        if self.classes == 0:
            raise ShapeError(f"{op}: input of shape {input.shape} has no classes")
        expected = input.shape[:self.dim] + input.shape[self.dim + 1:]
        if target.shape != expected:
            raise ShapeError(f"{op}: class-index target of shape {target.shape} does not fit "
                             f"input of shape {input.shape}; expected {expected}")
        self.trailing = (1,) * (target.ndim - self.dim)
        self.valid = target != ignore_index
        safe = where(self.valid, target, 0)  # an in-range index where the target is ignored
        self.index = safe.unsqueeze(self.dim)
        self._dtype = input.dtype
        self._per_target = None  # weight[t], with a weight
        if weight is not None:
            _class_weights(op, weight, self.classes, ())
            self._per_target = weight.index_select(0, safe.reshape(-1)).reshape(target.shape)

    def weighed(self, loss: Tensor) -> Tensor:
        """``loss`` (one per target) times ``weight[t]``, 0 where the target is ignored."""
        if self._per_target is not None:
            loss = loss * self._per_target
        return where(self.valid, loss, 0.0)

    def counted_weights(self) -> Tensor:
        """``weight[t]`` (1 without ``weight``) where the target counts, 0 where ignored."""
        if self._per_target is None:
            return self.valid.astype(self._dtype)
        return where(self.valid, self._per_target, 0.0)

    def total_weight(self) -> Tensor:
        """Σ ``weight[t]`` over the counted targets (their number without ``weight``)."""
        if self._per_target is None:
            return self.valid.sum(dtype=self._dtype)
        return where(self.valid, self._per_target, 0.0).sum()

    def picked(self, x: Tensor) -> Tensor:
        """``x[t]`` along the class dim (class 0's entry where the target is ignored)."""
        return x.gather(self.dim, self.index).squeeze(self.dim)


def _class_weights(op: str, weight: Tensor, classes: int, trailing: tuple) -> Tensor:
    _check_float(op, weight, "weight")
    if weight.shape != (classes,):
        raise ShapeError(f"{op}: weight of shape {weight.shape} must have one entry per class "
                         f"({classes},)")
    return weight.reshape((classes,) + trailing) if trailing else weight


def _check_target_index(op: str, target: Any) -> None:
    if not isinstance(target, Tensor):
        raise TypeError(f"{op}: target must be a tensor, got {type(target).__name__}")
    if target.dtype.kind != "i":
        raise DTypeError(f"{op}: a class-index target must be an int32 or int64 tensor, got "
                         f"{target.dtype.name}")


@float32_op
def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None,
             ignore_index: int = -100, reduction: str = "mean") -> Tensor:
    """Negative log likelihood of class indices: ``-weight[t] * input[t]``.

    Args:
        input: log-probabilities, (N, C), (N, C, d1, ...) or (C,).
        target: class indices (int), (N,), (N, d1, ...) or ().
        weight: per-class weights (C,). Default: all 1.
        ignore_index: a target value that contributes nothing (nor to the mean's
            denominator). Default -100.
        reduction: "none" | "mean" | "sum". "mean" divides by the total weight
            of the counted targets (their number without ``weight``).

    Example:
        >>> F.nll_loss(F.log_softmax(logits, 1), labels)
    """
    _check_float("nll_loss", input, "input")
    _check_target_index("nll_loss", target)
    _check_reduction("nll_loss", reduction)
    pick = _Classes("nll_loss", input, target, weight, ignore_index)
    loss = pick.weighed(-pick.picked(input))
    if reduction == "mean":
        return _mean_over(loss.sum(), pick.total_weight())
    return _reduce(loss, reduction)


@float32_op
@pins_site
def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                  ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """Cross entropy between logits and class indices or class probabilities.

    With class indices ``t`` (an int target) and ``ε = label_smoothing``::

        nll_i    = -w[t_i] · log_softmax(x)_i[t_i]
        smooth_i = -Σ_c w[c] · log_softmax(x)_i[c]        (0 where t_i is ignored)
        loss     = (1 - ε) · reduce(nll) + ε / C · reduce(smooth)

    where "mean" divides both sums by ``Σ_i w[t_i]`` over the counted targets
    (their number without ``weight``), exactly as PyTorch. With class
    probabilities ``p`` (a float target of the input's shape)::

        loss_i = -Σ_c w[c] · log_softmax(x)_i[c] · ((1 - ε) p_ic + ε / C)

    and "mean" divides by the number of rows (N · d1 · ...); ``ignore_index``
    does not apply.

    Args:
        input: logits, (N, C), (N, C, d1, ...) or (C,).
        target: class indices (N,), (N, d1, ...) or (); or probabilities of the
            input's shape.
        weight: per-class weights (C,). Default: all 1.
        ignore_index: a class-index target value that counts for nothing. Default -100.
        reduction: "none" | "mean" | "sum". Default "mean".
        label_smoothing: ε in [0, 1]. Default 0.

    Example:
        >>> loss = F.cross_entropy(model(x), labels, label_smoothing=0.1)
    """
    op = "cross_entropy"
    _check_float(op, input, "input")
    _check_reduction(op, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"{op}: label_smoothing must be in [0, 1], got {label_smoothing}")
    if not isinstance(target, Tensor):
        raise TypeError(f"{op}: target must be a tensor, got {type(target).__name__}")
    if target.dtype.kind == "f":
        return _cross_entropy_probabilities(input, target, weight, reduction, label_smoothing)
    _check_target_index(op, target)
    if label_smoothing == 0.0:
        return _cross_entropy_of_indices(input, target, weight, ignore_index, reduction)
    pick = _Classes(op, input, target, weight, ignore_index)
    log_p = input - input.logsumexp(pick.dim, keepdim=True)
    nll = pick.weighed(-pick.picked(log_p))
    if weight is None:
        smooth = -log_p.sum(pick.dim)
    else:
        class_weight = _class_weights(op, weight, pick.classes, pick.trailing)
        smooth = -(log_p * class_weight).sum(pick.dim)
    smooth = where(pick.valid, smooth, 0.0)
    if reduction == "mean":
        total = pick.total_weight()
        nll, smooth = _mean_over(nll.sum(), total), _mean_over(smooth.sum(), total)
    else:
        nll, smooth = _reduce(nll, reduction), _reduce(smooth, reduction)
    return (1.0 - label_smoothing) * nll + (label_smoothing / pick.classes) * smooth


def _cross_entropy_of_indices(input: Tensor, target: Tensor, weight: Tensor | None,
                              ignore_index: int, reduction: str) -> Tensor:
    """``(logsumexp(x) - x[t]) · w[t]``, reduced, recorded as one node (no (N, C)
    log_softmax is materialized in the forward)."""
    with no_record():
        pick = _Classes("cross_entropy", input, target, weight, ignore_index)
        lse = input.logsumexp(pick.dim)
        loss = pick.weighed(lse - pick.picked(input))
        counted = pick.counted_weights()
        saved: tuple = (input, lse, pick.index, counted)
        if reduction == "mean":
            total = counted.sum()
            saved += (total,)
            out = loss.sum() / total  # 0 / 0: NaN where no target counts, as in PyTorch
        else:
            out = _reduce(loss, reduction)
    record_composite("cross_entropy", saved, (pick.dim, reduction), out)
    return out


@differentiable("cross_entropy", compute_bound=True)
def _cross_entropy_backward(ctx: Any, grad: Tensor) -> tuple:
    """``(softmax(x) - onehot(t)) · w[t] · g`` (divided by the total weight for "mean"; 0
    when no target counts): the softmax from the saved logsumexp, the one-hot part a
    scatter of the targets' coefficients."""
    x, lse, index, counted, *total = ctx.inputs
    dim, reduction = ctx.attrs
    if reduction == "mean":
        grad = grad / where(total[0] == 0, 1.0, total[0])
    coefficient = (counted * grad).unsqueeze(dim)
    softmax = (x - lse.unsqueeze(dim)).exp()
    grad_x = (softmax * coefficient).scatter_add(dim, index, -coefficient)
    return (grad_x,) + (None,) * (len(ctx.inputs) - 1)


def _cross_entropy_probabilities(input: Tensor, target: Tensor, weight: Tensor | None,
                                 reduction: str, label_smoothing: float) -> Tensor:
    op = "cross_entropy"
    if input.ndim == 0:
        raise ShapeError(f"{op}: input must have a class dim, got a 0-d tensor")
    if target.shape != input.shape:
        raise ShapeError(f"{op}: a probability target (float) must have the input's shape "
                         f"{input.shape}, got {target.shape}; help: class indices need an "
                         f"int tensor")
    dim = 1 if input.ndim >= 2 else 0
    classes = input.shape[dim]
    if classes == 0:
        raise ShapeError(f"{op}: input of shape {input.shape} has no classes")
    log_p = input - input.logsumexp(dim, keepdim=True)
    if label_smoothing > 0.0:
        target = target * (1.0 - label_smoothing) + label_smoothing / classes
    if weight is not None:
        log_p = log_p * _class_weights(op, weight, classes, (1,) * (input.ndim - dim - 1))
    loss = -(log_p * target).sum(dim)
    if reduction == "mean":
        return loss.sum() / (input.numel() / classes)  # the number of rows, N · d1 · ...
    return _reduce(loss, reduction)


# ----- regression losses -------------------------------------------------------------------


def _weighted(op: str, input: Tensor, loss: Tensor, weight: Tensor | None, reduction: str,
              mean_by_weight: bool) -> Tensor:
    if weight is None:
        return _reduce(loss, reduction)
    if weight.shape != input.shape:
        raise ShapeError(f"{op}: weight of shape {weight.shape} must have the input's shape "
                         f"{input.shape}")
    loss = loss * weight
    if reduction == "mean" and mean_by_weight:
        return loss.sum() / weight.sum()
    return _reduce(loss, reduction)


@float32_op
def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean",
             weight: Tensor | None = None) -> Tensor:
    """Squared error ``(input - target)²``, input and target broadcasting.

    With ``weight`` (the input's shape) each error is multiplied by it and
    "mean" divides by ``Σ weight``, as PyTorch.

    Example:
        >>> F.mse_loss(em.tensor([1.0, 3.0]), em.tensor([1.0, 1.0])).item()
        2.0
    """
    _check_float("mse_loss", input, "input")
    _check_reduction("mse_loss", reduction)
    diff = input - target
    return _weighted("mse_loss", input, diff * diff, weight, reduction, True)


@float32_op
def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean",
            weight: Tensor | None = None) -> Tensor:
    """Absolute error ``|input - target|``; ``weight`` as in ``mse_loss``.

    Example:
        >>> F.l1_loss(em.tensor([1.0, 3.0]), em.tensor([1.0, 1.0])).item()
        1.0
    """
    _check_float("l1_loss", input, "input")
    _check_reduction("l1_loss", reduction)
    return _weighted("l1_loss", input, (input - target).abs(), weight, reduction, True)


@float32_op
def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0,
               weight: Tensor | None = None) -> Tensor:
    """Huber loss: ``½ d²`` where ``|d| < delta``, else ``delta · (|d| - ½ delta)``.

    ``d = input - target``. With ``weight`` (the input's shape), "mean" is the
    plain mean of the weighted losses (PyTorch's choice for this loss).

    Example:
        >>> F.huber_loss(em.tensor([0.5, 3.0]), em.tensor([0.0, 0.0]), reduction="none").tolist()
        [0.125, 2.5]
    """
    _check_float("huber_loss", input, "input")
    _check_reduction("huber_loss", reduction)
    if delta <= 0:
        raise ValueError(f"huber_loss: delta must be positive, got {delta}")
    diff = input - target
    size = diff.abs()
    loss = where(size < delta, 0.5 * diff * diff, delta * (size - 0.5 * delta))
    return _weighted("huber_loss", input, loss, weight, reduction, False)


# ----- binary losses -----------------------------------------------------------------------


# PyTorch's EPSILON for this loss is a C float: 1e-12 rounded to float32, in every dtype.
_BCE_EPSILON = float(np.float32(1e-12))


@float32_op
def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                         reduction: str = "mean") -> Tensor:
    """``-w · (t · log x + (1 - t) · log(1 - x))`` for probabilities ``x``.

    Each log is clamped to ``>= -100`` (PyTorch's), so ``x`` of exactly 0 or 1
    (a saturated float32 sigmoid) gives a finite loss. The gradients are
    PyTorch's formulas, ``w · (x - t) / max((1 - x) · x, 1e-12)`` for the input
    (finite there too: differentiating the clamped logs would give 0 / 0) and
    ``w · (log(1 - x) - log x)`` for the target. ``weight`` broadcasts to the
    input's shape.

    Example:
        >>> F.binary_cross_entropy(em.tensor([0.5, 0.5]), em.tensor([1.0, 0.0])).item()  # log 2
        0.6931471824645996
    """
    op = "binary_cross_entropy"
    _check_float(op, input, "input")
    _check_reduction(op, reduction)
    _check_target_like(op, input, target)
    x = input.detach() if input.is_tracked else input
    t = target.detach() if target.is_tracked else target
    log_x = x.log().clamp(min=-100.0)
    log_rest = (-x).log1p().clamp(min=-100.0)
    loss = (t - 1.0) * log_rest - t * log_x
    # value + (v - v̄) · ∂loss/∂v for v̄ = v detached: adds exactly 0, and the
    # gradient is the formula, whatever the clamps did to the logs.
    if input.is_tracked:
        loss = loss + (input - x) * ((x - t) / ((1.0 - x) * x).clamp(min=_BCE_EPSILON))
    if target.is_tracked:
        loss = loss + (target - t) * ((-x).log1p() - x.log())
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def _log_sigmoid(x: Tensor) -> Tensor:
    """``log σ(x) = min(x, 0) - log1p(exp(-|x|))``: exp never overflows.

    ``-|x|`` is written ``where(x >= 0, -x, x)`` so that its gradient at 0 is
    -1, not ``abs``'s 0: the sum then has the true derivative ``σ(-x) = ½`` at
    0 (a zero-initialized classifier starts exactly there).
    """
    nonnegative = x >= 0
    return where(nonnegative, 0.0, x) - where(nonnegative, -x, x).exp().log1p()


@float32_op
def binary_cross_entropy_with_logits(input: Tensor, target: Tensor,
                                     weight: Tensor | None = None, reduction: str = "mean",
                                     pos_weight: Tensor | None = None) -> Tensor:
    """``binary_cross_entropy(sigmoid(input), target)``, computed stably from the logits.

    ``loss = (1 - t) · x - (1 + (pos_weight - 1) · t) · log σ(x)``, times ``weight``.

    Args:
        input: logits, any shape.
        target: probabilities of the input's shape.
        weight: broadcasts to the input's shape; multiplies each loss.
        reduction: "none" | "mean" | "sum".
        pos_weight: the weight of positive examples, broadcasting along the
            last (class) dim, e.g. (C,).

    Example:
        >>> F.binary_cross_entropy_with_logits(em.tensor([0.0]), em.tensor([1.0])).item()  # log 2
        0.6931471824645996
    """
    op = "binary_cross_entropy_with_logits"
    _check_float(op, input, "input")
    _check_reduction(op, reduction)
    _check_target_like(op, input, target)
    log_sigmoid = _log_sigmoid(input)
    if pos_weight is not None:
        log_sigmoid = log_sigmoid * ((pos_weight - 1.0) * target + 1.0)
    loss = (1.0 - target) * input - log_sigmoid
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


# ----- divergences -------------------------------------------------------------------------


@float32_op
def kl_div(input: Tensor, target: Tensor, reduction: str = "mean",
           log_target: bool = False) -> Tensor:
    """Kullback-Leibler divergence, pointwise ``target · (log target - input)``.

    ``input`` holds log-probabilities; ``target`` probabilities (log-probabilities
    with ``log_target=True``: then ``exp(target) · (target - input)``). A zero
    target contributes 0. Reductions are PyTorch's: "none", "sum", "mean" (over
    every element), and "batchmean" (the sum divided by the batch size
    ``input.shape[0]``: the true KL divergence per example).

    Example:
        >>> p = em.tensor([[0.5, 0.5]])
        >>> F.kl_div(p.log(), p, reduction="batchmean").item()   # identical distributions
        0.0
    """
    op = "kl_div"
    _check_float(op, input, "input")
    _check_reduction(op, reduction, ("none", "mean", "sum", "batchmean"))
    if log_target:
        loss = target.exp() * (target - input)
    else:
        # xlogy(t, t): 0 where t == 0 (log is taken of 1 there, so no 0 · -inf).
        safe = where(target == 0, 1.0, target)
        loss = target * safe.log() - target * input
    if reduction == "batchmean":
        total = loss.sum()
        return total / float(input.shape[0]) if input.ndim else total
    return _reduce(loss, reduction)
