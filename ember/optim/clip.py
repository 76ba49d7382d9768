"""Gradient clipping on a ``Gradients``: by total norm, or by value. Nothing waits."""

from __future__ import annotations

import math
from typing import Any

from ember.autodiff.graph import no_record
from ember.ops.creation import tensor
from ember.ops.shape import stack
from ember.tensor import Tensor


def _vector_norm(x: Tensor, p: float) -> Tensor:
    """``torch.linalg.vector_norm(x, p)`` over every element (a 0-d tensor)."""
    if p == 2.0:
        return (x * x).sum().sqrt()
    if p == math.inf:
        return x.abs().max()
    if p == -math.inf:
        return x.abs().min()
    if p == 0.0:
        return (x != 0).astype(x.dtype).sum()
    if p == 1.0:
        return x.abs().sum()
    return (x.abs() ** p).sum() ** (1.0 / p)


def clip_grad_norm(grads: Any, max_norm: float, norm_type: float = 2.0) -> Tensor:
    """Scale every gradient in ``grads`` (in place) so that their total norm is ``<= max_norm``.

    PyTorch's ``torch.nn.utils.clip_grad_norm_``: the total norm is the
    ``norm_type``-norm of the per-gradient norms (``inf`` for the largest
    absolute value), and each gradient is multiplied by
    ``min(max_norm / (total + 1e-6), 1)``. The factor stays on the device: no
    read, no branch on its value.

    Args:
        grads: the ``Gradients`` of ``loss.backward()``.
        max_norm: the largest total norm allowed.
        norm_type: p of the p-norm (``math.inf`` allowed). Default 2.

    Returns:
        The total norm before clipping, a 0-d tensor (float32 when there are no gradients).

    Example:
        >>> grads = loss.backward()
        >>> norm = optim.clip_grad_norm(grads, 1.0)
        >>> opt.step(grads)
    """
    max_norm, norm_type = float(max_norm), float(norm_type)
    with no_record():
        gradients = grads.tensors()
        if not gradients:
            return tensor(0.0)
        device = gradients[0].device
        norms = [_vector_norm(g, norm_type) for g in gradients]
        norms = [n if n.device == device else n.to(device) for n in norms]
        total = _vector_norm(stack(norms), norm_type)
        factor = (max_norm / (total + 1e-6)).clamp(max=1.0)

        def scale(g: Tensor) -> Tensor:
            f = factor if g.device == device else factor.to(g.device)
            return g * f.astype(g.dtype)

        grads.map(scale)
    return total


def clip_grad_value(grads: Any, clip_value: float) -> None:
    """Clamp every gradient in ``grads`` (in place) to ``[-clip_value, clip_value]``.

    PyTorch's ``torch.nn.utils.clip_grad_value_``.

    Example:
        >>> grads = loss.backward()
        >>> optim.clip_grad_value(grads, 1.0)     # every gradient element now in [-1, 1]
        >>> opt.step(grads)
    """
    clip_value = float(clip_value)
    with no_record():
        grads.map(lambda g: g.clamp(min=-clip_value, max=clip_value))
