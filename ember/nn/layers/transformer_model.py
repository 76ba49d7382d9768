"""``TransformerEncoder``, ``TransformerDecoder`` and ``Transformer``: stacks of copies of a
layer, with PyTorch's names (``layers.0.…``, ``norm``, ``encoder.…``, ``decoder.…``), so
PyTorch state dicts load unchanged."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember.errors import ShapeError
from ember.nn import init
from ember.nn.layers.container import ModuleList
from ember.nn.layers.normalization import LayerNorm
from ember.nn.layers.transformer import TransformerDecoderLayer, TransformerEncoderLayer
from ember.nn.module import Module, copy_module
from ember.ops._core import resolve_device
from ember.ops.creation import arange
from ember.ops.elementwise import where
from ember.tensor import Tensor


class TransformerEncoder(Module):
    """``num_layers`` copies of ``encoder_layer`` applied in turn, then ``norm`` if given.

    Each copy has its own parameters, starting from the given layer's values (PyTorch
    deep-copies the layer; the layer passed in is not itself part of the stack).

    Args:
        encoder_layer: a ``TransformerEncoderLayer`` (or any module called as one).
        num_layers: how many copies.
        norm: a module applied to the last layer's output (e.g. ``LayerNorm``). Default None.
        enable_nested_tensor, mask_check: accepted for PyTorch's signature (they select
            PyTorch's fast paths); they change nothing here.

    Shape: as the layer's.

    Example:
        >>> layer = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64)
        >>> encoder = nn.TransformerEncoder(layer, num_layers=3, norm=nn.LayerNorm(32))
        >>> encoder(em.randn(2, 10, 32)).shape
        (2, 10, 32)
    """

    def __init__(self, encoder_layer: Module, num_layers: int, norm: Module | None = None,
                 enable_nested_tensor: bool = True, mask_check: bool = True) -> None:
        super().__init__()
        self.layers = ModuleList(copy_module(encoder_layer) for _ in range(num_layers))
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, src: Tensor, mask: Tensor | None = None,
                src_key_padding_mask: Tensor | None = None,
                is_causal: bool | None = None) -> Tensor:
        """Masks as ``TransformerEncoderLayer``'s, passed to every layer."""
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                      is_causal=bool(is_causal))
        return x if self.norm is None else self.norm(x)


class TransformerDecoder(Module):
    """``num_layers`` copies of ``decoder_layer`` applied in turn, each attending to
    ``memory``, then ``norm`` if given.

    Args:
        decoder_layer: a ``TransformerDecoderLayer`` (or any module called as one).
        num_layers: how many copies.
        norm: a module applied to the last layer's output. Default None.

    Shape: as the layer's.

    Example:
        >>> layer = nn.TransformerDecoderLayer(d_model=32, nhead=4, batch_first=True)
        >>> decoder = nn.TransformerDecoder(layer, num_layers=2)
        >>> decoder(em.randn(2, 5, 32), em.randn(2, 7, 32)).shape    # (tgt, memory)
        (2, 5, 32)
    """

    def __init__(self, decoder_layer: Module, num_layers: int,
                 norm: Module | None = None) -> None:
        super().__init__()
        self.layers = ModuleList(copy_module(decoder_layer) for _ in range(num_layers))
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False) -> Tensor:
        """Masks as ``TransformerDecoderLayer``'s, passed to every layer."""
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask,
                      tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        return x if self.norm is None else self.norm(x)


class Transformer(Module):
    """The encoder-decoder model of "Attention Is All You Need", as ``torch.nn.Transformer``.

    memory = encoder(src); output = decoder(tgt, memory). The encoder and decoder end
    in a ``LayerNorm`` each; every parameter with more than one dim starts Xavier
    uniform, as PyTorch's.

    Args:
        d_model: the model size E. Default 512.
        nhead: attention heads. Default 8.
        num_encoder_layers, num_decoder_layers: Default 6 each.
        dim_feedforward: the feed-forward blocks' hidden size. Default 2048.
        dropout: Default 0.1.
        activation: "relu", "gelu" or a callable. Default "relu".
        custom_encoder, custom_decoder: modules used instead of the built ones.
        layer_norm_eps: Default 1e-5.
        batch_first: inputs are (N, S, E) (True, the ember default for attention
            layers; PyTorch's default is False) or (S, N, E).
        norm_first: pre-norm layers. Default False.
        bias: biases in the linear and norm layers. Default True.
        device, dtype: where and in what type the parameters live.

    Shape (batch_first): src (N, S, E), tgt (N, T, E) → (N, T, E); unbatched (S, E),
    (T, E) → (T, E).

    Example:
        >>> model = nn.Transformer(d_model=32, nhead=4, num_encoder_layers=2,
        ...                        num_decoder_layers=2, dim_feedforward=64)
        >>> model(em.randn(2, 10, 32), em.randn(2, 7, 32), tgt_is_causal=True).shape
        (2, 7, 32)
    """

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: str | Callable[[Tensor], Tensor] = "relu",
                 custom_encoder: Module | None = None, custom_decoder: Module | None = None,
                 layer_norm_eps: float = 1e-5, batch_first: bool = True,
                 norm_first: bool = False, bias: bool = True, *, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        device = resolve_device(device)
        kw = {"device": device, "dtype": dtype}
        layer_args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                      batch_first, norm_first, bias)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            self.encoder = TransformerEncoder(
                TransformerEncoderLayer(*layer_args, **kw), num_encoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            self.decoder = TransformerDecoder(
                TransformerDecoderLayer(*layer_args, **kw), num_decoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        for p in self.parameters():
            if len(p.shape) > 1:
                init.xavier_uniform_(p)
        self.d_model = d_model
        self.nhead = nhead
        self.batch_first = batch_first

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None,
                tgt_mask: Tensor | None = None, memory_mask: Tensor | None = None,
                src_key_padding_mask: Tensor | None = None,
                tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None,
                src_is_causal: bool | None = None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> Tensor:
        """Encode ``src``, decode ``tgt`` against it. Masks as the layers' (bool True =
        masked out; floats added); ``tgt_is_causal`` with no ``tgt_mask`` masks each
        target position from the later ones.

        Raises:
            ShapeError: src and tgt differ in batch size, or their features are not d_model.
        """
        batched = src.ndim == 3
        batch_dim = 0 if self.batch_first else 1
        if batched and src.shape[batch_dim] != tgt.shape[batch_dim]:
            raise ShapeError(f"Transformer: src and tgt batch sizes differ: src {src.shape}, "
                             f"tgt {tgt.shape}")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise ShapeError(f"Transformer: src and tgt must have d_model = {self.d_model} "
                             f"features, got src {src.shape}, tgt {tgt.shape}")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device: Any = None,
                                        dtype: Any = None) -> Tensor:
        """An (sz, sz) float mask: -inf above the diagonal (later positions), 0 elsewhere."""
        rows = arange(sz, device=device).reshape(sz, 1)
        later = arange(sz, device=device).reshape(1, sz) > rows
        return where(later, float("-inf"), 0.0).astype(dtype or "float32")
