"""Scaled dot-product attention, written from matmul, softmax and masking."""

from __future__ import annotations

import math

from ember import dtype as _dtype
from ember import mixed_precision as _mixed
from ember.errors import DTypeError, ShapeError
from ember.nn.functional.activations import safe_softmax
from ember.nn.functional.dropout import dropout
from ember.ops._core import broadcast_shapes
from ember.ops.creation import arange
from ember.ops.linalg import _transposed_product
from ember.tensor import Tensor


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor,
                                 attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None) -> Tensor:
    """softmax(Q Kᵀ · scale + mask) V, as PyTorch's ``F.scaled_dot_product_attention``.

    Args:
        query: (..., L, E).
        key: (..., S, E).
        value: (..., S, Ev).
        attn_mask: broadcastable to (..., L, S). A bool mask says which
            positions take part (True = attend, False = masked out); a float
            mask is added to the scores (use -inf to mask). Default None.
        dropout_p: dropout on the attention weights (applied whenever > 0, as
            PyTorch's functional form; layers pass 0 in eval). Default 0.
        is_causal: mask out keys after each query (lower-triangular L × S,
            aligned at the top-left as PyTorch). Not with ``attn_mask``.
        scale: the score factor. Default 1 / sqrt(E).

    A query whose keys are all masked out gets zero weights (a zero output
    row), as PyTorch 2.5 and later.

    Shape: (..., L, E), (..., S, E), (..., S, Ev) → (..., L, Ev).

    Raises:
        ShapeError: mismatched feature or sequence sizes, batch dims that do
            not broadcast, or a mask that does not broadcast to (..., L, S).
        ValueError: ``is_causal`` together with ``attn_mask``.

    Example:
        >>> q = k = v = em.randn(2, 4, 10, 16)     # (batch, heads, seq, head_dim)
        >>> F.scaled_dot_product_attention(q, k, v, is_causal=True).shape
        (2, 4, 10, 16)
    """
    op = "scaled_dot_product_attention"
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{op}: {name} must be a tensor, got {type(t).__name__}")
        if t.ndim < 2:
            raise ShapeError(f"{op}: {name} needs at least 2 dims (..., seq, features), got "
                             f"shape {t.shape}")
        if not t.dtype.is_floating_point:
            raise DTypeError(f"{op}: {name} must be floating, got {t.dtype.name}")
    if query.shape[-1] != key.shape[-1]:
        raise ShapeError(f"{op}: query and key feature sizes differ: query {query.shape} vs "
                         f"key {key.shape}")
    if key.shape[-2] != value.shape[-2]:
        raise ShapeError(f"{op}: key and value sequence lengths differ: key {key.shape} vs "
                         f"value {value.shape}")
    if is_causal and attn_mask is not None:
        raise ValueError(f"{op}: pass either attn_mask or is_causal=True, not both")
    if _mixed.entered:
        query, key, value = _mixed.to_low(query, key, value)
    length, source = query.shape[-2], key.shape[-2]
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1]) if query.shape[-1] else 1.0
    scores = _transposed_product(query, key, False, True) * scale
    if is_causal:
        attn_mask = _causal_mask(length, source, query.device.inner)
    if attn_mask is not None:
        if not isinstance(attn_mask, Tensor):
            raise TypeError(f"{op}: attn_mask must be a tensor, got {type(attn_mask).__name__}")
        try:
            full = broadcast_shapes(op, scores.shape, attn_mask.shape)
        except ShapeError:
            full = None
        if full != scores.shape:
            raise ShapeError(f"{op}: attn_mask of shape {attn_mask.shape} does not broadcast to "
                             f"the scores' shape {scores.shape} (..., L, S)") from None
        if attn_mask.dtype is _dtype.bool_:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask.astype(scores.dtype)
    weights = safe_softmax(scores)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p, training=True)
    return weights @ value


def _causal_mask(length: int, source: int, device) -> Tensor:
    """(L, S) bool: query i attends keys j <= i."""
    rows = arange(length, device=device).reshape(length, 1)
    cols = arange(source, device=device).reshape(1, source)
    return cols <= rows
