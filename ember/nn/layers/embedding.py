"""``Embedding``: a learned lookup table from integer ids to vectors."""

from __future__ import annotations

from typing import Any

from ember.nn.functional.embedding import embedding
from ember.nn.module import Module
from ember.nn.param import Buffer, Param
from ember.ops._core import resolve_device
from ember.ops.creation import arange, randn
from ember.ops.creation import tensor as make_tensor
from ember.ops.elementwise import where
from ember.tensor import Tensor


class Embedding(Module):
    """A table of ``num_embeddings`` vectors of size ``embedding_dim``, indexed by ints.

    out[..., :] = weight[indices[...], :]; ``weight`` starts as N(0, 1), as in
    PyTorch, with the ``padding_idx`` row (if any) zeroed; that row gets no
    gradient.

    Args:
        num_embeddings: the table size (indices lie in [0, num_embeddings)).
        embedding_dim: the size of each vector.
        padding_idx: a row that starts at zero and is never trained (negative
            counts from the end). Default None.
        device, dtype: where and in what type the table lives.

    Shape: indices (*) int → (*, embedding_dim).

    PyTorch's ``max_norm``, ``scale_grad_by_freq`` and ``sparse`` are not supported.

    Example:
        >>> emb = nn.Embedding(100, 16, padding_idx=0)
        >>> emb(em.tensor([[1, 5, 0], [7, 0, 0]])).shape
        (2, 3, 16)
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 *, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"Embedding: padding_idx {padding_idx} must be within "
                                 f"[-{num_embeddings}, {num_embeddings})")
            padding_idx %= num_embeddings
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.padding_idx = padding_idx
        device = resolve_device(device)
        value = randn((num_embeddings, embedding_dim), dtype=dtype, device=device.inner)
        if padding_idx is not None:
            pad = (arange(num_embeddings, device=device.inner) == padding_idx).unsqueeze(1)
            value = where(pad, 0.0, value)
        self.weight = Param(value.to(device))

    @classmethod
    def from_pretrained(cls, embeddings: Any, freeze: bool = True,
                        padding_idx: int | None = None, *, device: Any = None) -> Embedding:
        """An Embedding holding ``embeddings`` (a 2-D tensor or array), as PyTorch's.

        With ``freeze`` the table is a ``Buffer``: saved as ``weight`` but not
        trained (PyTorch keeps it a parameter with ``requires_grad=False``).
        """
        table = embeddings if isinstance(embeddings, Tensor) else make_tensor(embeddings)
        if table.ndim != 2:
            raise ValueError(f"Embedding.from_pretrained: embeddings must be 2-D, got shape "
                             f"{table.shape}")
        device = resolve_device(device) if device is not None else table.device
        module = cls(*table.shape, padding_idx=padding_idx, device=device, dtype=table.dtype)
        slot = Buffer if freeze else Param
        module.weight = slot(table.detach().to(device))
        return module

    def forward(self, indices: Any) -> Tensor:
        return embedding(indices, self.weight.value, self.padding_idx)

    def extra_repr(self) -> str:
        pad = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"
