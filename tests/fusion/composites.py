"""softmax and layer_norm written from primitives, as users write them (and NumPy's)."""

from __future__ import annotations

import numpy as np

import ember as em


def softmax(x: em.Tensor) -> em.Tensor:
    e = (x - x.max(dim=-1, keepdim=True).detach()).exp()
    return e / e.sum(dim=-1, keepdim=True)


def layer_norm(x: em.Tensor, w: em.Tensor, b: em.Tensor) -> em.Tensor:
    centered = x - x.mean(dim=-1, keepdim=True)
    var = (centered * centered).mean(dim=-1, keepdim=True)
    return centered * (var + 1e-5).rsqrt() * w + b


def numpy_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def numpy_layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    centered = x - x.mean(-1, keepdims=True)
    return centered / np.sqrt((centered * centered).mean(-1, keepdims=True) + 1e-5) * w + b
