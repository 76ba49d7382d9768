"""Parameter initializers, with PyTorch's formulas and defaults.

Each takes a ``Param`` (whose value it replaces, returning the param) or a
shape (returning a new tensor), plus ``dtype=`` and ``device=`` for shapes.
Random draws go through ``em.rand`` / ``em.randn``, so ``em.manual_seed``
makes them reproducible.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember.nn.param import Param
from ember.ops import creation
from ember.tensor import Tensor

_GAINS = {"linear": 1.0, "conv1d": 1.0, "conv2d": 1.0, "conv3d": 1.0, "sigmoid": 1.0,
          "tanh": 5.0 / 3.0, "relu": math.sqrt(2.0), "selu": 0.75}


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """PyTorch's recommended gain for ``nonlinearity`` ("relu", "leaky_relu", "tanh", ...)."""
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity not in _GAINS:
        raise ValueError(f"calculate_gain: unknown nonlinearity {nonlinearity!r}")
    return _GAINS[nonlinearity]


def fan_in_and_out(shape: tuple[int, ...]) -> tuple[int, int]:
    """Fans as PyTorch computes them: dims 1 and 0 times the receptive field size."""
    if len(shape) < 2:
        raise ValueError(f"fan in and fan out need at least 2 dims, got shape {shape}")
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def _target(target: Param | tuple, dtype: Any, device: Any) -> tuple[tuple, Any, Any]:
    if isinstance(target, Param):
        return target.shape, target.dtype, target.device.inner
    return tuple(target), dtype, device


def _done(target: Param | tuple, value: Tensor) -> Param | Tensor:
    if isinstance(target, Param):
        target.value = value.to(target.device)
        return target
    return value


def constant(target: Param | tuple, value: float, *, dtype: Any = None, device: Any = None):
    shape, dtype, device = _target(target, dtype, device)
    return _done(target, creation.full(shape, float(value), dtype=dtype, device=device))


def zeros(target: Param | tuple, *, dtype: Any = None, device: Any = None):
    return constant(target, 0.0, dtype=dtype, device=device)


def ones(target: Param | tuple, *, dtype: Any = None, device: Any = None):
    return constant(target, 1.0, dtype=dtype, device=device)


def uniform(target: Param | tuple, a: float = 0.0, b: float = 1.0, *, dtype: Any = None,
            device: Any = None):
    """U(a, b)."""
    shape, dtype, device = _target(target, dtype, device)
    return _done(target, creation.rand(shape, dtype=dtype, device=device) * (b - a) + a)


def normal(target: Param | tuple, mean: float = 0.0, std: float = 1.0, *, dtype: Any = None,
           device: Any = None):
    """N(mean, std²)."""
    shape, dtype, device = _target(target, dtype, device)
    return _done(target, creation.randn(shape, dtype=dtype, device=device) * std + mean)


def _kaiming_std(shape: tuple, a: float, mode: str, nonlinearity: str) -> float:
    fan_in, fan_out = fan_in_and_out(shape)
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"kaiming: mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan = fan_in if mode == "fan_in" else fan_out
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform(target: Param | tuple, a: float = 0.0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu", *, dtype: Any = None, device: Any = None):
    """U(-bound, bound), bound = gain · sqrt(3 / fan) (He et al.)."""
    shape = target.shape if isinstance(target, Param) else tuple(target)
    bound = math.sqrt(3.0) * _kaiming_std(shape, a, mode, nonlinearity)
    return uniform(target, -bound, bound, dtype=dtype, device=device)


def kaiming_normal(target: Param | tuple, a: float = 0.0, mode: str = "fan_in",
                   nonlinearity: str = "leaky_relu", *, dtype: Any = None, device: Any = None):
    """N(0, std²), std = gain / sqrt(fan) (He et al.)."""
    shape = target.shape if isinstance(target, Param) else tuple(target)
    return normal(target, 0.0, _kaiming_std(shape, a, mode, nonlinearity), dtype=dtype,
                  device=device)


def xavier_uniform(target: Param | tuple, gain: float = 1.0, *, dtype: Any = None,
                   device: Any = None):
    """U(-a, a), a = gain · sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio)."""
    shape = target.shape if isinstance(target, Param) else tuple(target)
    fan_in, fan_out = fan_in_and_out(shape)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform(target, -bound, bound, dtype=dtype, device=device)


def xavier_normal(target: Param | tuple, gain: float = 1.0, *, dtype: Any = None,
                  device: Any = None):
    """N(0, std²), std = gain · sqrt(2 / (fan_in + fan_out))."""
    shape = target.shape if isinstance(target, Param) else tuple(target)
    fan_in, fan_out = fan_in_and_out(shape)
    return normal(target, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), dtype=dtype,
                  device=device)


def orthogonal(target: Param | tuple, gain: float = 1.0, *, dtype: Any = None,
               device: Any = None):
    """A (semi-)orthogonal matrix over dim 0 vs the rest, from the QR of a Gaussian matrix."""
    shape, dtype, device = _target(target, dtype, device)
    if len(shape) < 2:
        raise ValueError(f"orthogonal: needs at least 2 dims, got shape {shape}")
    rows, cols = shape[0], math.prod(shape[1:])
    flat = creation.randn((rows, cols), dtype="float64", device=device).numpy()
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))  # a uniform distribution over orthogonal matrices
    if rows < cols:
        q = q.T
    value = creation.tensor((gain * q).reshape(shape), device=device)
    return _done(target, value.astype(dtype) if dtype is not None else value.astype("float32"))
