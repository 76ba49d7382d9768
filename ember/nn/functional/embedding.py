"""Embedding lookup: rows of a weight matrix picked by integer indices."""

from __future__ import annotations

from typing import Any

from ember.errors import DTypeError, ShapeError
from ember.ops.creation import arange
from ember.ops.creation import tensor as make_tensor
from ember.ops.elementwise import where
from ember.tensor import Tensor


def embedding(indices: Any, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """Look up the rows of ``weight`` named by ``indices``.

    out[..., :] = weight[indices[...], :]. The row ``padding_idx`` is returned
    as it is but receives no gradient, as in PyTorch.

    Args:
        indices: an int tensor (or nested lists / NumPy array of ints) of any shape.
        weight: the (num_embeddings, embedding_dim) table.
        padding_idx: a row whose gradient stays zero; negative counts from the
            end. Default None.

    Shape: indices (*) → (*, embedding_dim).

    Raises:
        DTypeError: float or bool indices.
        ShapeError: a weight that is not 2-D, or a ``padding_idx`` out of range.
        KernelError (at the read): an index value outside [0, num_embeddings).

    Example:
        >>> w = em.randn(10, 3)
        >>> F.embedding(em.tensor([[1, 2], [4, 9]]), w).shape
        (2, 2, 3)
    """
    op = "embedding"
    if not isinstance(weight, Tensor) or weight.ndim != 2:
        shape = getattr(weight, "shape", None)
        raise ShapeError(f"{op}: weight must be a 2-D tensor (num_embeddings, embedding_dim), "
                         f"got shape {shape}")
    if not isinstance(indices, Tensor):
        indices = make_tensor(indices, device=weight.device.inner)
    if not indices.dtype.is_integer:
        raise DTypeError(f"{op}: indices must be int32 or int64, got {indices.dtype.name}; "
                         f"help: indices.to(em.int64)")
    rows, dim = weight.shape
    out = weight.index_select(0, indices.reshape(-1)).reshape(*indices.shape, dim)
    if padding_idx is None:
        return out
    if not -rows <= padding_idx < rows:
        raise ShapeError(f"{op}: padding_idx {padding_idx} is out of range for "
                         f"{rows} embeddings")
    padding_idx = padding_idx % rows
    # Same values, no gradient to the padding row: the padded positions read a detached copy.
    is_pad = (indices == padding_idx).unsqueeze(-1)
    return where(is_pad, out.detach(), out)


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """An int64 tensor with one more (last) dim of size ``num_classes``, holding 1 at each
    index's class and 0 elsewhere.

    Args:
        tensor: an int tensor of class indices, any shape.
        num_classes: the number of classes; -1 (default) reads the tensor and uses its
            largest value + 1 (a read: it waits for the data, as PyTorch does).

    Shape: (*) → (*, num_classes).

    Raises:
        DTypeError: a non-integer tensor.
        ShapeError: ``num_classes=-1`` with an empty tensor (nothing to infer from).

    Indices outside [0, num_classes) give rows of zeros (PyTorch raises; checking
    would read the data).

    Example:
        >>> F.one_hot(em.tensor([0, 2]), 3).tolist()
        [[1, 0, 0], [0, 0, 1]]
    """
    op = "one_hot"
    if not isinstance(tensor, Tensor):
        raise TypeError(f"{op}: expected a tensor, got {type(tensor).__name__}")
    if tensor.dtype.kind != "i":
        raise DTypeError(f"{op}: needs an integer tensor of class indices, got "
                         f"{tensor.dtype.name}; help: t.long()")
    if num_classes == -1:
        if tensor.numel() == 0:
            raise ShapeError(f"{op}: cannot infer the number of classes from an empty tensor "
                             f"(shape {tensor.shape}); help: pass num_classes")
        num_classes = int(tensor.max().item()) + 1
    if num_classes < 0:
        raise ValueError(f"{op}: num_classes must be -1 or non-negative, got {num_classes}")
    classes = arange(num_classes, dtype=tensor.dtype, device=tensor.device.inner)
    return (tensor.unsqueeze(-1) == classes).astype("int64")
