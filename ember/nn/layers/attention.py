"""``MultiHeadAttention``: PyTorch's ``nn.MultiheadAttention``, batch-first, output only."""

from __future__ import annotations

import math
from typing import Any

from ember import dtype as _dtype
from ember.errors import DTypeError, ShapeError
from ember.nn import init
from ember.nn.functional.activations import safe_softmax
from ember.nn.functional.attention import scaled_dot_product_attention
from ember.nn.functional.dropout import dropout
from ember.nn.functional.linear import linear
from ember.nn.layers.linear import Linear
from ember.nn.module import Module
from ember.nn.param import Param
from ember.ops._core import resolve_device
from ember.ops.creation import arange, zeros
from ember.ops.elementwise import where
from ember.ops.shape import cat
from ember.tensor import Tensor


class MultiHeadAttention(Module):
    """Multi-head attention (Vaswani et al., 2017), as PyTorch's ``nn.MultiheadAttention``.

    MultiHead(Q, K, V) = Concat(head_1, …, head_h) W_Oᵀ + b_O, with
    head_i = softmax(Q W_Qiᵀ (K W_Kiᵀ)ᵀ / √d + mask) V W_Viᵀ, d = embed_dim / num_heads.

    Parameters carry PyTorch's names and layouts: ``in_proj_weight`` (3E, E)
    packs W_Q, W_K, W_V (or ``q_proj_weight`` / ``k_proj_weight`` /
    ``v_proj_weight`` when ``kdim`` / ``vdim`` differ from E), ``in_proj_bias``
    (3E), ``bias_k`` / ``bias_v`` (1, 1, E) with ``add_bias_kv``, and
    ``out_proj`` (a ``Linear(E, E)``). Initialization is PyTorch's: Xavier
    uniform input projections, zero biases, bias_k / bias_v Xavier normal.

    Masks follow ``nn.MultiheadAttention``, not ``scaled_dot_product_attention``:
    in a bool ``attn_mask`` or ``key_padding_mask`` **True means "do not
    attend"**; float masks are added to the scores.

    Args:
        embed_dim: E, the model size; must be divisible by ``num_heads``.
        num_heads: the number of heads.
        dropout: dropout on the attention weights, in training. Default 0.
        bias: learn the input and output projection biases. Default True.
        add_bias_kv: learn a key and a value appended to the sequence. Default False.
        add_zero_attn: append a zero key and value (after projection). Default False.
        kdim, vdim: feature sizes of key and value. Default E.
        batch_first: inputs are (N, L, E) (True, the ember default) or (L, N, E).
        device, dtype: where and in what type the parameters live.

    Shape (batch_first):
        query (N, L, E), key (N, S, kdim), value (N, S, vdim) (or unbatched
        (L, E), (S, kdim), (S, vdim)); attn_mask (L, S) or (N·num_heads, L, S);
        key_padding_mask (N, S) → output (N, L, E).

    Example:
        >>> mha = nn.MultiHeadAttention(64, 8)
        >>> x = em.randn(2, 10, 64)
        >>> mha(x, is_causal=True).shape     # self-attention: key and value default to x
        (2, 10, 64)
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = True, *, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"MultiHeadAttention: embed_dim and num_heads must be positive, got "
                             f"{embed_dim} and {num_heads}")
        if embed_dim % num_heads:
            raise ValueError(f"MultiHeadAttention: embed_dim ({embed_dim}) must be divisible by "
                             f"num_heads ({num_heads})")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self.batch_first = batch_first
        self.add_zero_attn = add_zero_attn
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        device = resolve_device(device)

        def param(*shape: int) -> Param:
            return Param(zeros(shape, dtype=dtype, device=device))

        if self._qkv_same_embed_dim:
            self.in_proj_weight = init.xavier_uniform(param(3 * embed_dim, embed_dim))
            self.q_proj_weight = self.k_proj_weight = self.v_proj_weight = None
        else:
            self.in_proj_weight = None
            self.q_proj_weight = init.xavier_uniform(param(embed_dim, embed_dim))
            self.k_proj_weight = init.xavier_uniform(param(embed_dim, self.kdim))
            self.v_proj_weight = init.xavier_uniform(param(embed_dim, self.vdim))
        self.in_proj_bias = param(3 * embed_dim) if bias else None
        if add_bias_kv:
            self.bias_k = init.xavier_normal(param(1, 1, embed_dim))
            self.bias_v = init.xavier_normal(param(1, 1, embed_dim))
        else:
            self.bias_k = self.bias_v = None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, device=device, dtype=dtype)
        if bias:
            init.zeros(self.out_proj.bias)

    def forward(self, query: Tensor, key: Tensor | None = None, value: Tensor | None = None,
                attn_mask: Tensor | None = None, key_padding_mask: Tensor | None = None,
                is_causal: bool = False, *, need_weights: bool = False,
                average_attn_weights: bool = True) -> Tensor | tuple[Tensor, Tensor]:
        """Attend from ``query`` to ``key`` / ``value`` (both default to ``query``).

        Args:
            query, key, value: see the class Shape.
            attn_mask: bool (True = masked out) or float (added), (L, S) or
                (N·num_heads, L, S).
            key_padding_mask: (N, S), bool (True = a padding key, ignored) or float (added).
            is_causal: with no ``attn_mask``, mask out keys after each query;
                with one, a hint that it is causal (it is used as given), as PyTorch.
            need_weights: also return the attention weights. Default False
                (the output alone, as the ember API promises).
            average_attn_weights: average the returned weights over heads.

        Returns:
            the output; with ``need_weights``, ``(output, weights)``, weights of
            shape (N, L, S) (or (N, num_heads, L, S) without averaging).
        """
        key = query if key is None else key
        value = key if value is None else value
        self_attention = key is query and value is query
        batched = query.ndim == 3
        self._check_inputs(query, key, value, batched)
        if not batched:
            query, key, value = (t.unsqueeze(0) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif not self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        n, length, e = query.shape
        heads, head_dim = self.num_heads, self.head_dim

        packed = self._qkv_same_embed_dim and self_attention and self.bias_k is None
        if packed:
            q, k, v = self._packed_heads(query)
        else:
            q, k, v = self._project(query, key, value, self_attention)
        mask = self._merged_mask(attn_mask, key_padding_mask, is_causal, n, length,
                                 key.shape[1], q.dtype, q.device.inner, batched)
        if self.bias_k is not None:
            k = cat([k, self.bias_k.value.expand(n, 1, e)], dim=1)
            v = cat([v, self.bias_v.value.expand(n, 1, e)], dim=1)
            mask = _pad_last(mask)
        if not packed:
            q, k, v = (t.reshape(n, t.shape[1], heads, head_dim).transpose(1, 2)
                       for t in (q, k, v))
        if self.add_zero_attn:
            zero = zeros((n, heads, 1, head_dim), dtype=k.dtype, device=k.device.inner)
            k = cat([k, zero], dim=2)
            v = cat([v, zero], dim=2)
            mask = _pad_last(mask)
        p = self.dropout if self.training else 0.0
        if need_weights:
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(head_dim))
            weights = safe_softmax(scores if mask is None else scores + mask)
            if p > 0.0:
                weights = dropout(weights, p, training=True)
            out = weights @ v
        else:
            out = scaled_dot_product_attention(q, k, v, mask, p)
        # Through (N·heads, L, d) and back: on the way back the heads' gradient, a transposed
        # view, becomes one contiguous copy here instead of a copy in each product reading it.
        out = out.reshape(n * heads, length, head_dim).reshape(n, heads, length, head_dim)
        out = self.out_proj(out.transpose(1, 2).reshape(n, length, e))
        if not batched:
            out = out.reshape(length, e)
        elif not self.batch_first:
            out = out.transpose(0, 1)
        if not need_weights:
            return out
        if average_attn_weights:
            weights = weights.mean(dim=1)
        if not batched:
            weights = weights.reshape(*weights.shape[1:])
        return out, weights

    def _check_inputs(self, query: Tensor, key: Tensor, value: Tensor, batched: bool) -> None:
        name = type(self).__name__
        rank = 3 if batched else 2
        for label, t, size in (("query", query, self.embed_dim), ("key", key, self.kdim),
                               ("value", value, self.vdim)):
            if not isinstance(t, Tensor):
                raise TypeError(f"{name}: {label} must be a tensor, got {type(t).__name__}")
            if t.ndim != rank:
                raise ShapeError(f"{name}: query, key and value must all be 3-D (batched) or all "
                                 f"2-D (unbatched); got query {query.shape}, key {key.shape}, "
                                 f"value {value.shape}")
            if t.shape[-1] != size:
                raise ShapeError(f"{name}: {label} has {t.shape[-1]} features, expected {size} "
                                 f"(shape {t.shape})")
        batch_dim = 0 if self.batch_first else 1
        if batched and not query.shape[batch_dim] == key.shape[batch_dim] == value.shape[batch_dim]:
            raise ShapeError(f"{name}: batch sizes differ: query {query.shape}, key {key.shape}, "
                             f"value {value.shape}")
        seq_dim = 1 if (self.batch_first and batched) else 0
        if key.shape[seq_dim] != value.shape[seq_dim]:
            raise ShapeError(f"{name}: key and value sequence lengths differ: key {key.shape}, "
                             f"value {value.shape}")

    def _packed_heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Q, K, V of self-attention, each (N, heads, L, d), from one packed projection.

        The heads are copied once, together, into (3·N·heads, L, d) (a reshape that cannot
        be a view), so every product reads them as they lie, forward and backward; split
        into heads apart, each would be copied by every product reading it. Their
        gradients meet in one ``cat`` and one copy back to the projection's layout."""
        n, length, _ = x.shape
        heads, head_dim = self.num_heads, self.head_dim
        bias = None if self.in_proj_bias is None else self.in_proj_bias.value
        qkv = linear(x, self.in_proj_weight.value, bias)
        laid = qkv.reshape(n, length, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
        flat = laid.reshape(3 * n * heads, length, head_dim)
        return tuple(t.reshape(n, heads, length, head_dim) for t in flat.chunk(3))

    def _project(self, query: Tensor, key: Tensor, value: Tensor,
                 self_attention: bool) -> tuple[Tensor, Tensor, Tensor]:
        """Q, K, V from PyTorch's packed (or separate) input projections, each (N, *, E)."""
        bias = None if self.in_proj_bias is None else self.in_proj_bias.value
        biases = (None, None, None) if bias is None else bias.chunk(3)
        if self._qkv_same_embed_dim:
            if self_attention:  # one matmul for all three
                return linear(query, self.in_proj_weight.value, bias).chunk(3, dim=-1)
            weights = self.in_proj_weight.value.chunk(3)
        else:
            weights = (self.q_proj_weight.value, self.k_proj_weight.value,
                       self.v_proj_weight.value)
        return tuple(linear(x, w, b) for x, w, b in zip((query, key, value), weights, biases))

    def _merged_mask(self, attn_mask: Tensor | None, key_padding_mask: Tensor | None,
                     is_causal: bool, n: int, length: int, source: int, dtype: Any, device: Any,
                     batched: bool) -> Tensor | None:
        """One additive float mask broadcastable to (N, heads, L, S), or None."""
        name = type(self).__name__
        heads = self.num_heads
        if attn_mask is None and is_causal:
            rows = arange(length, device=device).reshape(length, 1)
            attn_mask = arange(source, device=device).reshape(1, source) > rows
        mask = None
        if attn_mask is not None:
            mask = _additive(name, "attn_mask", attn_mask, dtype)
            if mask.shape == (length, source):
                mask = mask.reshape(1, 1, length, source)
            elif mask.ndim == 3 and mask.shape == ((n * heads) if batched else heads,
                                                   length, source):
                mask = mask.reshape(n, heads, length, source)
            else:
                expected = f"({length}, {source}) or ({n * heads if batched else heads}, " \
                           f"{length}, {source})"
                raise ShapeError(f"{name}: attn_mask has shape {attn_mask.shape}, expected "
                                 f"{expected}")
        if key_padding_mask is not None:
            padding = _additive(name, "key_padding_mask", key_padding_mask, dtype)
            if padding.shape != (n, source):
                raise ShapeError(f"{name}: key_padding_mask has shape {key_padding_mask.shape}, "
                                 f"expected ({n}, {source})")
            padding = padding.reshape(n, 1, 1, source)
            mask = padding if mask is None else mask + padding
        return mask


def _additive(name: str, label: str, mask: Tensor, dtype: Any) -> Tensor:
    """A mask as values added to the scores: bool True → -inf, False → 0; floats as they are."""
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name}: {label} must be a tensor, got {type(mask).__name__}")
    if mask.dtype is _dtype.bool_:
        return where(mask, float("-inf"), 0.0).astype(dtype)
    if not mask.dtype.is_floating_point:
        raise DTypeError(f"{name}: {label} must be bool or floating, got {mask.dtype.name}")
    return mask.astype(dtype)


def _pad_last(mask: Tensor | None) -> Tensor | None:
    """One more (unmasked) key column at the end of the mask."""
    if mask is None:
        return None
    column = zeros(mask.shape[:-1] + (1,), dtype=mask.dtype, device=mask.device.inner)
    return cat([mask, column], dim=-1)
