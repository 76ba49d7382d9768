"""Activations as modules, for ``Sequential``: PyTorch's names, arguments and defaults."""

from __future__ import annotations

from ember.nn.functional import activations as F
from ember.nn.module import Module
from ember.tensor import Tensor


class ReLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)


class SiLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.silu(x)


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.tanh()


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.sigmoid()


class Mish(Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return F.mish(x)


class Softsign(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.softsign(x)


class LogSigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.logsigmoid(x)


class SELU(Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return F.selu(x)


class ReLU6(Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return F.relu6(x)


class Hardsigmoid(Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return F.hardsigmoid(x)


class Hardswish(Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return F.hardswish(x)


class LeakyReLU(Module):
    """x where x > 0, else negative_slope · x. Default slope 0.01.

    Example:
        >>> nn.LeakyReLU(0.1)(em.tensor([-10.0, 2.0])).tolist()
        [-1.0, 2.0]
    """

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: Tensor) -> Tensor:
        return F.leaky_relu(x, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}"


class ELU(Module):
    """x where x > 0, else alpha · (exp(x) - 1). Default alpha 1.

    Example:
        >>> nn.ELU()(em.tensor([1.0, 0.0])).tolist()
        [1.0, 0.0]
    """

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha = alpha

    def forward(self, x: Tensor) -> Tensor:
        return F.elu(x, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


class CELU(Module):
    """max(0, x) + min(0, alpha · (exp(x / alpha) - 1)). Default alpha 1.

    Example:
        >>> nn.CELU()(em.tensor([1.0, 0.0])).tolist()
        [1.0, 0.0]
    """

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha = alpha

    def forward(self, x: Tensor) -> Tensor:
        return F.celu(x, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


class Hardtanh(Module):
    """x clamped to [min_val, max_val] (defaults -1, 1).

    Example:
        >>> nn.Hardtanh()(em.tensor([-3.0, 0.5, 2.0])).tolist()
        [-1.0, 0.5, 1.0]
    """

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0,
                 inplace: bool = False) -> None:
        super().__init__()
        if min_val > max_val:
            raise ValueError(f"Hardtanh: min_val ({min_val}) must not exceed max_val ({max_val})")
        self.min_val = min_val
        self.max_val = max_val

    def forward(self, x: Tensor) -> Tensor:
        return F.hardtanh(x, self.min_val, self.max_val)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}"


class Softplus(Module):
    """log(1 + exp(beta · x)) / beta, linear past ``threshold`` (defaults 1, 20).

    Example:
        >>> nn.Softplus()(em.tensor([30.0])).tolist()   # linear past the threshold
        [30.0]
    """

    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, x: Tensor) -> Tensor:
        return F.softplus(x, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


def _legacy_dim(ndim: int) -> int:
    """PyTorch's choice when a softmax module is built without ``dim`` (it warns too)."""
    return 0 if ndim in (0, 1, 3) else 1


class _SoftmaxFamily(Module):
    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def _dim(self, x: Tensor) -> int:
        return _legacy_dim(x.ndim) if self.dim is None else self.dim

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Softmax(_SoftmaxFamily):
    """softmax along ``dim``; without one, PyTorch's legacy choice (dim 0 for 0-, 1- and
    3-D inputs, else 1). Pass ``dim``.

    Example:
        >>> nn.Softmax(dim=-1)(em.zeros((2, 4))).tolist()
        [[0.25, 0.25, 0.25, 0.25], [0.25, 0.25, 0.25, 0.25]]
    """

    def forward(self, x: Tensor) -> Tensor:
        return F.softmax(x, self._dim(x))


class LogSoftmax(_SoftmaxFamily):
    """log_softmax along ``dim`` (the same default as ``Softmax``).

    Example:
        >>> nn.LogSoftmax(dim=-1)(em.zeros((1, 2))).exp().tolist()
        [[0.5, 0.5]]
    """

    def forward(self, x: Tensor) -> Tensor:
        return F.log_softmax(x, self._dim(x))


class Softmin(_SoftmaxFamily):
    """softmax(-x) along ``dim`` (the same default as ``Softmax``).

    Example:
        >>> nn.Softmin(dim=0)(em.tensor([0.0, 0.0])).tolist()
        [0.5, 0.5]
    """

    def forward(self, x: Tensor) -> Tensor:
        return F.softmin(x, self._dim(x))
