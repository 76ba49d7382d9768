"""``TransformerEncoderLayer`` and ``TransformerDecoderLayer``, as PyTorch's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember.nn.functional import activations
from ember.nn.layers.attention import MultiHeadAttention
from ember.nn.layers.dropout import Dropout
from ember.nn.layers.linear import Linear
from ember.nn.layers.normalization import LayerNorm
from ember.nn.module import Module
from ember.tensor import Tensor

_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": activations.relu, "gelu": activations.gelu,
}


def _activation(owner: str, activation: str | Callable[[Tensor], Tensor]
                ) -> Callable[[Tensor], Tensor]:
    if not isinstance(activation, str):
        return activation
    if activation not in _ACTIVATIONS:
        raise ValueError(f"{owner}: activation should be relu/gelu, not {activation!r}")
    return _ACTIVATIONS[activation]


class TransformerEncoderLayer(Module):
    """One encoder layer of "Attention Is All You Need", as PyTorch's.

    Post-norm (default)::

        x = norm1(x + dropout1(self_attn(x)))
        x = norm2(x + dropout2(linear2(dropout(activation(linear1(x))))))

    Pre-norm (``norm_first=True``)::

        x = x + dropout1(self_attn(norm1(x)))
        x = x + dropout2(linear2(dropout(activation(linear1(norm2(x))))))

    Sub-modules carry PyTorch's names (``self_attn``, ``linear1``, ``linear2``,
    ``norm1``, ``norm2``, ``dropout``, ``dropout1``, ``dropout2``), so a
    PyTorch layer's state dict loads unchanged.

    Args:
        d_model: the model size E.
        nhead: the number of attention heads.
        dim_feedforward: the hidden size of the feed-forward block. Default 2048.
        dropout: dropout probability everywhere (attention weights included). Default 0.1.
        activation: "relu", "gelu" or a callable on tensors. Default "relu".
        layer_norm_eps: the LayerNorms' eps. Default 1e-5.
        batch_first: inputs are (N, L, E) (True, the ember default; PyTorch's
            default is False) or (L, N, E).
        norm_first: pre-norm instead of post-norm. Default False.
        bias: biases in the linear and norm layers. Default True.
        device, dtype: where and in what type the parameters live.

    Shape: src (N, L, E) (batch_first), (L, N, E) or unbatched (L, E) → the same.

    Example:
        >>> layer = nn.TransformerEncoderLayer(64, 4, dim_feedforward=128)
        >>> layer(em.randn(2, 10, 64), is_causal=True).shape
        (2, 10, 64)
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: str | Callable[[Tensor], Tensor] = "relu",
                 layer_norm_eps: float = 1e-5, batch_first: bool = True,
                 norm_first: bool = False, bias: bool = True, *, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        activation = _activation(type(self).__name__, activation)
        kw = {"device": device, "dtype": dtype}
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, **kw)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = activation
        self.batch_first = batch_first

    def forward(self, src: Tensor, src_mask: Tensor | None = None,
                src_key_padding_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        """Masks as ``MultiHeadAttention``'s (bool True = masked out; floats added)."""
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x

    def _sa_block(self, x: Tensor, attn_mask: Tensor | None, key_padding_mask: Tensor | None,
                  is_causal: bool) -> Tensor:
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           is_causal=is_causal)
        return self.dropout1(x)

    def _ff_block(self, x: Tensor) -> Tensor:
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return self.dropout2(x)


class TransformerDecoderLayer(Module):
    """One decoder layer of "Attention Is All You Need", as PyTorch's: self-attention,
    attention over the encoder's output (``memory``), and a feed-forward block.

    Post-norm (default)::

        x = norm1(x + dropout1(self_attn(x)))
        x = norm2(x + dropout2(multihead_attn(x, memory)))
        x = norm3(x + dropout3(linear2(dropout(activation(linear1(x))))))

    Pre-norm (``norm_first=True``) applies each norm to the block's input instead.
    Sub-modules carry PyTorch's names (``self_attn``, ``multihead_attn``, ``linear1``,
    ``linear2``, ``norm1``-``norm3``, ``dropout``, ``dropout1``-``dropout3``), so a
    PyTorch layer's state dict loads unchanged.

    Args: as ``TransformerEncoderLayer``'s (``batch_first`` True by default, as every
    ember attention layer; PyTorch's default is False).

    Shape: tgt (N, T, E), memory (N, S, E) (batch_first), or (T, N, E) and (S, N, E),
    or unbatched (T, E) and (S, E) → the shape of tgt.

    Example:
        >>> layer = nn.TransformerDecoderLayer(64, 4, dim_feedforward=128)
        >>> layer(em.randn(2, 7, 64), em.randn(2, 10, 64), tgt_is_causal=True).shape
        (2, 7, 64)
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: str | Callable[[Tensor], Tensor] = "relu",
                 layer_norm_eps: float = 1e-5, batch_first: bool = True,
                 norm_first: bool = False, bias: bool = True, *, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        activation = _activation(type(self).__name__, activation)
        kw = {"device": device, "dtype": dtype}
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, **kw)
        self.multihead_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                 batch_first=batch_first, **kw)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = activation
        self.batch_first = batch_first

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False) -> Tensor:
        """Masks as ``MultiHeadAttention``'s (bool True = masked out; floats added)."""
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask,
                                    memory_is_causal)
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
            x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask,
                                               memory_is_causal))
            x = self.norm3(x + self._ff_block(x))
        return x

    def _sa_block(self, x: Tensor, attn_mask: Tensor | None, key_padding_mask: Tensor | None,
                  is_causal: bool) -> Tensor:
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           is_causal=bool(is_causal))
        return self.dropout1(x)

    def _mha_block(self, x: Tensor, memory: Tensor, attn_mask: Tensor | None,
                   key_padding_mask: Tensor | None, is_causal: bool) -> Tensor:
        x = self.multihead_attn(x, memory, memory, attn_mask=attn_mask,
                                key_padding_mask=key_padding_mask, is_causal=bool(is_causal))
        return self.dropout2(x)

    def _ff_block(self, x: Tensor) -> Tensor:
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return self.dropout3(x)
