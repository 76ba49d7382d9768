"""Tensor's gradient methods (``require_grad``, ``backward`` ...), attached on import.

The handle (``ember/tensor.py``) imports no autodiff: this layer, above it, sets these on
``Tensor`` with ``tensor.attach_methods`` when ``ember.autodiff`` is imported (importing
``ember`` imports it), as ``ember.ops.methods`` does for the op methods.
"""

from __future__ import annotations

from typing import Any

from ember.autodiff.engine import ACTOR
from ember.autodiff.graph import LEAF, leaf
from ember.errors import EmberError
from ember.tensor import Tensor, attach_methods


class TrackedMethods:
    """The methods ``attach_methods`` sets on ``Tensor`` (never instantiated)."""

    def require_grad(self) -> Tensor:
        """Mark this tensor as a leaf whose gradient ``backward`` computes; returns it.

        Raises:
            EmberError: the tensor is not on an autodiff device, or was computed
                from tracked tensors (only leaves can be marked).

        Example:
            >>> w = em.tensor([1.0, 2.0], device=em.cpu().autodiff()).require_grad()
            >>> grads = (w * w).sum().backward()
            >>> w.grad(grads).tolist()
            [2.0, 4.0]
        """
        if not self.device.is_autodiff:
            raise EmberError(f"require_grad: {self.device} does not track gradients; help: create "
                             f"the tensor on {self.device}.autodiff() or move it with "
                             f".to(device.autodiff())")
        if self._node is not None and self._node.op != LEAF:
            raise EmberError(f"require_grad: this tensor was computed by {self._node.op} from "
                             f"tracked tensors; only leaves can be marked (help: .detach() first)")
        if self.dtype.kind != "f":
            raise EmberError(f"require_grad: only floating tensors have gradients, got "
                             f"{self.dtype.name}")
        if self._node is None:
            self._node = leaf(self)
        return self

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """PyTorch's name for ``require_grad()`` (``requires_grad=False`` is refused: a
        tracked leaf stays tracked; use ``.detach()``).

        Example:
            >>> em.ones(2, device=em.cpu().autodiff()).requires_grad_().is_tracked
            True
        """
        if not requires_grad:
            raise EmberError("requires_grad_(False): tracking cannot be switched off in place; "
                             "help: use t.detach()")
        return self.require_grad()

    def backward(self, grad: Tensor | None = None) -> Any:
        """Gradients of this tensor with respect to every tracked leaf it depends on.

        A non-scalar tensor needs ``grad``, the gradient seeding the walk. The
        graph is consumed: a second ``backward`` through it raises.

        Example:
            >>> x = em.tensor([1.0, 2.0, 3.0], device=em.cpu().autodiff()).require_grad()
            >>> grads = (x ** 2).sum().backward()      # returns at once: the gradients are futures
            >>> x.grad(grads).tolist()
            [2.0, 4.0, 6.0]
            >>> y = x * 3                              # a non-scalar output needs grad=
            >>> x.grad(y.backward(em.ones(3, device=x.device))).tolist()
            [3.0, 3.0, 3.0]
        """
        return ACTOR.backward(self, grad)

    def grad(self, grads: Any) -> Tensor | None:
        """This leaf's gradient in ``grads`` (on the inner device), or None if untracked.

        Example:
            >>> x = em.tensor(2.0, device=em.cpu().autodiff()).require_grad()
            >>> x.grad((x ** 3).backward()).item()
            12.0
        """
        return grads.get(self)


attach_methods(TrackedMethods)
