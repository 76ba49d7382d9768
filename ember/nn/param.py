"""``Param`` and ``Buffer``: the named, mutable slots of a module that hold tensors.

Tensors are immutable values; a parameter is the place a value lives. The
optimizer swaps in updated values; ``id`` names the parameter across saves.
"""

from __future__ import annotations

import os
from typing import Any

from ember.tensor import Tensor


def new_param_id() -> str:
    """A 128-bit random hex id: unique across processes, so files from anywhere can mix."""
    return os.urandom(16).hex()


class Param:
    """A trainable tensor of a module.

    On an autodiff device its value is a tracked leaf (``require_grad``), so
    ``loss.backward()`` computes its gradient with nothing else to do.

    Args:
        value: the initial tensor.
        id: a stable identifier (kept by save / load); a fresh one by default.

    Example:
        >>> layer = nn.Linear(3, 1, device=em.cpu().autodiff())
        >>> w = layer.weight                  # a Param
        >>> w.shape, w.value.is_tracked
        ((1, 3), True)
        >>> grads = layer(em.ones((1, 3), device=em.cpu().autodiff())).sum().backward()
        >>> w.grad(grads).tolist()
        [[1.0, 1.0, 1.0]]
    """

    __slots__ = ("_value", "id")

    trainable = True

    def __init__(self, value: Tensor, id: str | None = None) -> None:
        if not isinstance(value, Tensor):
            raise TypeError(f"{type(self).__name__}: expected a tensor, got {type(value).__name__}")
        self.id = id or new_param_id()
        self._value = None
        self.value = value

    @property
    def value(self) -> Tensor:
        """The current tensor; assigning one (on an autodiff device) makes it a tracked leaf."""
        return self._value

    @value.setter
    def value(self, tensor: Tensor) -> None:
        if self.trainable and tensor.device.is_autodiff and not tensor.is_tracked:
            tensor = tensor.require_grad()
        self._value = tensor

    @property
    def shape(self) -> tuple[int, ...]:
        """The value's shape, a tuple of ints."""
        return self._value.shape

    @property
    def dtype(self) -> Any:
        """The value's dtype."""
        return self._value.dtype

    @property
    def device(self) -> Any:
        """The device that holds the value."""
        return self._value.device

    def grad(self, grads: Any) -> Tensor | None:
        """This parameter's gradient in ``grads``, or None."""
        return self._value.grad(grads)

    def numel(self) -> int:
        """The number of elements of the value."""
        return self._value.numel()

    def __repr__(self) -> str:
        v = self._value
        return f"{type(self).__name__}(shape={v.shape}, dtype={v.dtype.name}, device={v.device})"


class Buffer(Param):
    """A non-trainable tensor of a module that is saved with it (BatchNorm's running stats).

    Example:
        >>> class Counter(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.seen = nn.Buffer(em.zeros(1))   # saved with the module, never trained
        >>> list(Counter().state_dict())
        ['seen']
    """

    __slots__ = ()
    trainable = False
