"""Parameter initializers, with PyTorch's formulas and defaults.

Each takes a ``Param`` (whose value it replaces, returning the param) or a
shape (returning a new tensor), plus ``dtype=`` and ``device=`` for shapes.
PyTorch's in-place names (``uniform_``, ``kaiming_normal_``, ...) take a ``Param``
only, with PyTorch's parameter names: tensors are immutable values, so an
initializer rebinds the parameter's value. Random draws go through ``em.rand`` /
``em.randn``, so ``em.manual_seed`` makes them reproducible.

Example:
    >>> layer = nn.Linear(128, 64)
    >>> nn.init.kaiming_uniform_(layer.weight, nonlinearity="relu")
    >>> nn.init.zeros_(layer.bias)
    >>> embedding_table = nn.init.trunc_normal((1000, 64), std=0.02)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember import dtype as _dtype

from ember.nn.param import Param
from ember.ops import creation
from ember.ops.elementwise import where
from ember.tensor import Tensor

_GAINS = {"linear": 1.0, "conv1d": 1.0, "conv2d": 1.0, "conv3d": 1.0, "conv_transpose1d": 1.0,
          "conv_transpose2d": 1.0, "conv_transpose3d": 1.0, "sigmoid": 1.0, "tanh": 5.0 / 3.0,
          "relu": math.sqrt(2.0), "selu": 0.75}


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """PyTorch's recommended gain for ``nonlinearity`` ("relu", "leaky_relu", "tanh", ...).

    Example:
        >>> nn.init.calculate_gain("tanh")
        1.6666666666666667
    """
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity not in _GAINS:
        raise ValueError(f"calculate_gain: unknown nonlinearity {nonlinearity!r}")
    return _GAINS[nonlinearity]


def fan_in_and_out(shape: tuple[int, ...]) -> tuple[int, int]:
    """Fans as PyTorch computes them: dims 1 and 0 times the receptive field size.

    Example:
        >>> nn.init.fan_in_and_out((16, 3, 5, 5))     # a Conv2d weight (out, in, kh, kw)
        (75, 400)
    """
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
    """``value`` everywhere: into a ``Param`` (returned), or a new tensor of a shape.

    Example:
        >>> nn.init.constant((2, 2), 0.5).tolist()
        [[0.5, 0.5], [0.5, 0.5]]
    """
    shape, dtype, device = _target(target, dtype, device)
    return _done(target, creation.full(shape, float(value), dtype=dtype, device=device))


def zeros(target: Param | tuple, *, dtype: Any = None, device: Any = None):
    """Zeros: into a ``Param`` (returned), or a new tensor of a shape (``constant(..., 0)``)."""
    return constant(target, 0.0, dtype=dtype, device=device)


def ones(target: Param | tuple, *, dtype: Any = None, device: Any = None):
    """Ones: into a ``Param`` (returned), or a new tensor of a shape (``constant(..., 1)``)."""
    return constant(target, 1.0, dtype=dtype, device=device)


def uniform(target: Param | tuple, a: float = 0.0, b: float = 1.0, *, dtype: Any = None,
            device: Any = None):
    """Uniform draws from ``U(a, b)``: into a ``Param`` (returned), or a new tensor of a shape.

    Example:
        >>> w = nn.init.uniform((3, 4), -0.1, 0.1)
        >>> w.shape, bool((w.abs() <= 0.1).all().item())
        ((3, 4), True)
    """
    shape, dtype, device = _target(target, dtype, device)
    return _done(target, creation.rand(shape, dtype=dtype, device=device) * (b - a) + a)


def normal(target: Param | tuple, mean: float = 0.0, std: float = 1.0, *, dtype: Any = None,
           device: Any = None):
    """Normal draws from ``N(mean, std²)``: into a ``Param`` (returned), or a new tensor of a
    shape.

    Example:
        >>> abs(nn.init.normal((256, 256), std=0.02).std().item() - 0.02) < 1e-3
        True
    """
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


def _horner(x: Tensor, coefficients: tuple[float, ...]) -> Tensor:
    """The polynomial with these coefficients (highest power first) at x."""
    acc = x * coefficients[0] + coefficients[1]
    for c in coefficients[2:]:
        acc = acc * x + c
    return acc


def _erfinv(p: Tensor) -> Tensor:
    """erfinv(p) for p in (-1, 1): Giles's single-precision polynomials ("Approximating the
    erfinv function", 2010), then one Newton step on erf for the last bits."""
    w = -((1.0 - p) * (1.0 + p)).log()
    central = _horner(w - 2.5, (2.81022636e-08, 3.43273939e-07, -3.5233877e-06,
                                -4.39150654e-06, 0.00021858087, -0.00125372503,
                                -0.00417768164, 0.246640727, 1.50140941))
    tail = _horner(w.clamp(min=5.0).sqrt() - 3.0,
                   (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844,
                    0.00573950773, -0.0076224613, 0.00943887047, 1.00167406, 2.83297682))
    z = where(w < 5.0, central, tail) * p
    return z - (z.erf() - p) / ((-(z * z)).exp() * (2.0 / math.sqrt(math.pi)))


def trunc_normal(target: Param | tuple, mean: float = 0.0, std: float = 1.0, a: float = -2.0,
                 b: float = 2.0, *, dtype: Any = None, device: Any = None):
    """N(mean, std²) truncated to [a, b] (absolute bounds, not in units of std), drawn as
    PyTorch draws it: a uniform draw between the bounds' CDF values, mapped through the
    inverse normal CDF, then clamped to [a, b]."""
    if not a < b:
        raise ValueError(f"trunc_normal: needs a < b, got a={a}, b={b}")
    shape, dtype, device = _target(target, dtype, device)
    work = _dtype.as_dtype(dtype or "float32")
    if work.name not in ("float32", "float64"):
        work = _dtype.float32

    def cdf(v: float) -> float:
        return (1.0 + math.erf(v / math.sqrt(2.0))) / 2.0
    low, high = 2.0 * cdf((a - mean) / std) - 1.0, 2.0 * cdf((b - mean) / std) - 1.0
    u = creation.rand(shape, dtype=work, device=device) * (high - low) + low
    # erfinv(±1) is infinite: keep the draw strictly inside (the clamp to [a, b] follows).
    tiny = float(np.finfo(work.np).eps)
    u = u.clamp(-1.0 + tiny, 1.0 - tiny)
    value = (_erfinv(u) * (std * math.sqrt(2.0)) + mean).clamp(a, b)
    return _done(target, value.astype(dtype) if dtype is not None else value)


# ----- PyTorch's in-place names: a Param in, its value rebound, the Param out ------------------

def _param(op: str, tensor: Any, generator: Any) -> Param:
    if generator is not None:
        raise ValueError(f"{op}: generator is not supported; seed with em.manual_seed")
    if not isinstance(tensor, Param):
        raise TypeError(f"{op}: expected a Param, got {type(tensor).__name__}; tensors are "
                        f"immutable values, so an initializer rebinds a Param's value; help: "
                        f"nn.init.{op.rstrip('_')}(shape) makes a new tensor")
    return tensor


def uniform_(tensor: Param, a: float = 0.0, b: float = 1.0, generator: Any = None) -> Param:
    """U(a, b) into ``tensor`` (a ``Param``); returns it."""
    return uniform(_param("uniform_", tensor, generator), a, b)


def normal_(tensor: Param, mean: float = 0.0, std: float = 1.0, generator: Any = None) -> Param:
    """N(mean, std²) into ``tensor`` (a ``Param``); returns it."""
    return normal(_param("normal_", tensor, generator), mean, std)


def trunc_normal_(tensor: Param, mean: float = 0.0, std: float = 1.0, a: float = -2.0,
                  b: float = 2.0, generator: Any = None) -> Param:
    """N(mean, std²) truncated to [a, b] into ``tensor`` (a ``Param``); returns it.

    Example:
        >>> w = nn.init.trunc_normal_(nn.Embedding(100, 16).weight, std=0.02, a=-0.04, b=0.04)
        >>> bool((w.value.abs() <= 0.04).all().item())
        True
    """
    return trunc_normal(_param("trunc_normal_", tensor, generator), mean, std, a, b)


def constant_(tensor: Param, val: float) -> Param:
    """``val`` everywhere in ``tensor`` (a ``Param``); returns it."""
    return constant(_param("constant_", tensor, None), val)


def zeros_(tensor: Param) -> Param:
    """Zeros into ``tensor`` (a ``Param``, rebinding its value); returns it.

    Example:
        >>> layer = nn.Linear(4, 2)
        >>> nn.init.zeros_(layer.bias).value.tolist()
        [0.0, 0.0]
    """
    return constant(_param("zeros_", tensor, None), 0.0)


def ones_(tensor: Param) -> Param:
    """Ones into ``tensor`` (a ``Param``, rebinding its value); returns it."""
    return constant(_param("ones_", tensor, None), 1.0)


def xavier_uniform_(tensor: Param, gain: float = 1.0, generator: Any = None) -> Param:
    """U(-a, a), a = gain · sqrt(6 / (fan_in + fan_out)), into ``tensor``; returns it.

    Example:
        >>> layer = nn.Linear(100, 50)
        >>> _ = nn.init.xavier_uniform_(layer.weight)
        >>> bool((layer.weight.value.abs() <= (6 / 150) ** 0.5).all().item())
        True
    """
    return xavier_uniform(_param("xavier_uniform_", tensor, generator), gain)


def xavier_normal_(tensor: Param, gain: float = 1.0, generator: Any = None) -> Param:
    """N(0, std²), std = gain · sqrt(2 / (fan_in + fan_out)), into ``tensor``; returns it."""
    return xavier_normal(_param("xavier_normal_", tensor, generator), gain)


def kaiming_uniform_(tensor: Param, a: float = 0.0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu", generator: Any = None) -> Param:
    """U(-bound, bound), bound = gain · sqrt(3 / fan), into ``tensor``; returns it."""
    return kaiming_uniform(_param("kaiming_uniform_", tensor, generator), a, mode, nonlinearity)


def kaiming_normal_(tensor: Param, a: float = 0.0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu", generator: Any = None) -> Param:
    """N(0, std²), std = gain / sqrt(fan), into ``tensor``; returns it.

    Example:
        >>> conv = nn.Conv2d(3, 16, 3)
        >>> nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu").shape
        (16, 3, 3, 3)
    """
    return kaiming_normal(_param("kaiming_normal_", tensor, generator), a, mode, nonlinearity)


def orthogonal_(tensor: Param, gain: float = 1.0, generator: Any = None) -> Param:
    """A (semi-)orthogonal matrix times ``gain`` into ``tensor``; returns it.

    Example:
        >>> w = nn.Linear(4, 4).weight
        >>> q = nn.init.orthogonal_(w).value
        >>> (q @ q.T).allclose(em.eye(4), atol=1e-5)
        True
    """
    return orthogonal(_param("orthogonal_", tensor, generator), gain)
