"""``Tensor``: a future handle to data on a device.

Shape, dtype and device are known the moment an op returns; the data comes
later. Methods forward to ``ember/ops/``. Only the reads (``numpy``,
``item``, ``tolist``, ``np.asarray``, ``await``) wait for the device.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import trio

from ember.device import Device
from ember.dtype import DType
from ember.errors import EmberError


class BlockingReadInTrio(EmberError, RuntimeError):
    """A blocking read was called from inside a trio task."""


class Tensor:
    """An immutable n-dimensional array on a device, computed asynchronously.

    Create tensors with ``em.tensor``, ``em.zeros``, ``em.randn`` ... (not ``Tensor()``).
    Every op returns a new tensor at once, a future: ``shape``, ``dtype`` and ``device``
    are known immediately, the data later. Only the reads wait for the device:
    ``t.numpy()``, ``t.item()``, ``t.tolist()``, ``np.asarray(t)`` and, in async code,
    ``await t`` (which returns the NumPy array). ``bool(t)`` raises: use ``t.item()``.

    Known at once: ``t.shape`` (the sizes of the dims, a tuple of ints), ``t.dtype`` (the
    element type: ``em.float32``, ``em.int64``, ``em.bool`` ...) and ``t.device`` (the
    ``Device`` that holds the data and computes on it).

    Operators:
        ``+ - * / // % **`` (elementwise arithmetic, as ``add sub mul div
        floor_divide remainder pow``; ``//`` floors, ``%`` takes the divisor's sign,
        ``/`` of integers gives float32), ``@`` (``matmul``), unary ``-`` and
        ``abs(t)``, ``== != < <= > >=`` (elementwise, bool result), ``& | ^ ~``
        (bitwise on bool and integer tensors). Python scalars and NumPy arrays work on
        either side; shapes broadcast with NumPy's rules and dtypes promote as in
        PyTorch (int with float gives the float; a Python float with an int tensor gives
        float32). ``t[key]`` indexes with ints, slices (with steps), ``None``,
        ``...``, bool masks and int tensors (NumPy's advanced indexing);
        ``t[key] = value`` rebinds ``t`` to the updated value (other handles keep the
        old one). ``len(t)``, ``iter(t)`` (over dim 0), ``float(t)`` and ``int(t)``
        (reads) work as in PyTorch.

    Example:
        >>> x = em.tensor([[1.0, 2.0], [3.0, 4.0]])
        >>> y = (x @ x.T + 1).relu()     # returns at once: a future
        >>> y.shape, y.dtype
        ((2, 2), ember.float32)
        >>> y.tolist()                   # the read waits for the device
        [[6.0, 12.0], [12.0, 26.0]]
    """

    __slots__ = ("_id", "shape", "dtype", "device", "_host", "_node", "__weakref__")
    __array_priority__ = 1000  # numpy scalars and arrays defer to Tensor's operators

    _id: int
    shape: tuple[int, ...]
    dtype: DType
    device: Device

    @classmethod
    def _new(cls, tensor_id: int, shape: tuple[int, ...], dtype: DType, device: Device) -> Tensor:
        t = object.__new__(cls)
        t._id = tensor_id
        t.shape = shape
        t.dtype = dtype
        t.device = device
        t._host = None
        t._node = None
        return t

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("create tensors with em.tensor(data), em.zeros(shape), ... not Tensor()")

    def __del__(self) -> None:
        try:
            self.device._actor.drop(self._id)
        except Exception:  # interpreter shutdown: the runtime is already gone
            pass

    # ----- metadata ------------------------------------------------------------------

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)

    def size(self, dim: int | None = None) -> tuple[int, ...] | int:
        if dim is None:
            return self.shape
        from ember.ops._core import normalize_dim

        return self.shape[normalize_dim("size", dim, self.shape)]

    def dim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    # ----- autodiff ------------------------------------------------------------------

    @property
    def is_tracked(self) -> bool:
        """Whether gradients flow to or through this tensor.

        Example:
            >>> w = em.zeros(3, device=em.cpu().autodiff()).require_grad()
            >>> w.is_tracked, (w * 2).is_tracked, em.zeros(3).is_tracked
            (True, True, False)
        """
        return self._node is not None

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
        from ember.autodiff.graph import LEAF, leaf

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
        from ember.autodiff.engine import ACTOR

        return ACTOR.backward(self, grad)

    def grad(self, grads: Any) -> Tensor | None:
        """This leaf's gradient in ``grads`` (on the inner device), or None if untracked.

        Example:
            >>> x = em.tensor(2.0, device=em.cpu().autodiff()).require_grad()
            >>> x.grad((x ** 3).backward()).item()
            12.0
        """
        return grads.get(self)

    # ----- reads ---------------------------------------------------------------------

    def numpy(self) -> np.ndarray:
        """The data as a read-only NumPy array; blocks until it is computed.

        Example:
            >>> em.arange(3).numpy()
            array([0, 1, 2])
        """
        host = self._host
        if host is None:
            _refuse_inside_trio("numpy")
            host = self._read_blocking()
        return host

    def _read_blocking(self) -> np.ndarray:
        host = self.device.actor.read(self._id)
        self._host = host
        return host

    async def _read_async(self) -> np.ndarray:
        host = self._host
        if host is None:
            host = await self.device.actor.fetch(self._id).wait_async()
            self._host = host
        return host

    def __await__(self):
        if not trio.lowlevel.in_trio_task():
            raise RuntimeError("await on an ember tensor needs a trio task; run async code with "
                               "em.run(fn), or read with t.numpy() in plain code")
        return self._read_async().__await__()

    def item(self) -> bool | int | float:
        """The value of a one-element tensor as a Python scalar.

        Example:
            >>> em.tensor([[2.5]]).item()
            2.5
        """
        if math.prod(self.shape) != 1:
            from ember.errors import ShapeError

            raise ShapeError(f"item: needs a tensor of one element, got shape {self.shape}")
        host = self._host
        if host is None:
            _refuse_inside_trio("item")
            host = self._read_blocking()
        return host.item(0)

    def tolist(self) -> Any:
        if self._host is None:
            _refuse_inside_trio("tolist")
        return self.numpy().tolist()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if self._host is None:
            _refuse_inside_trio("np.asarray")
        array = self.numpy()
        if dtype is not None and np.dtype(dtype) != array.dtype:
            return array.astype(dtype)
        if copy:
            return array.copy()
        return array

    def __bool__(self) -> bool:
        raise TypeError("the truth value of an ember tensor would need to wait for the device; "
                        "use t.item() (or (t == x).all().item()) to read it explicitly")

    def __index__(self) -> int:
        raise TypeError("an ember tensor cannot be used as a Python index; use int(t.item())")

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def __repr__(self) -> str:
        head = f"shape={self.shape}, dtype={self.dtype.name}, device={self.device}"
        if self._host is not None:
            return f"tensor({np.array2string(self._host, separator=', ')}, {head})"
        return f"Tensor(<future>, {head})"

    def __hash__(self) -> int:
        return id(self)

    # ----- operators -----------------------------------------------------------------

    def __add__(self, other): return _ew.binary("add", self, other)
    def __radd__(self, other): return _ew.binary("add", other, self)
    def __sub__(self, other): return _ew.binary("sub", self, other)
    def __rsub__(self, other): return _ew.binary("sub", other, self)
    def __mul__(self, other): return _ew.binary("mul", self, other)
    def __rmul__(self, other): return _ew.binary("mul", other, self)
    def __truediv__(self, other): return _ew.binary("div", self, other)
    def __rtruediv__(self, other): return _ew.binary("div", other, self)
    def __floordiv__(self, other): return _ew.binary("floordiv", self, other)
    def __rfloordiv__(self, other): return _ew.binary("floordiv", other, self)
    def __mod__(self, other): return _ew.binary("remainder", self, other)
    def __rmod__(self, other): return _ew.binary("remainder", other, self)
    def __pow__(self, other): return _ew.binary("pow", self, other)
    def __rpow__(self, other): return _ew.binary("pow", other, self)
    def __matmul__(self, other): return _linalg.matmul(self, other)
    def __rmatmul__(self, other): return _linalg.matmul(other, self)
    def __and__(self, other): return _ew.binary("bitwise_and", self, other)
    def __rand__(self, other): return _ew.binary("bitwise_and", other, self)
    def __or__(self, other): return _ew.binary("bitwise_or", self, other)
    def __ror__(self, other): return _ew.binary("bitwise_or", other, self)
    def __xor__(self, other): return _ew.binary("bitwise_xor", self, other)
    def __rxor__(self, other): return _ew.binary("bitwise_xor", other, self)
    def __lshift__(self, other): return _ew.binary("bitwise_left_shift", self, other)
    def __rlshift__(self, other): return _ew.binary("bitwise_left_shift", other, self)
    def __rshift__(self, other): return _ew.binary("bitwise_right_shift", self, other)
    def __rrshift__(self, other): return _ew.binary("bitwise_right_shift", other, self)
    def __eq__(self, other): return _ew.binary("eq", self, other)  # type: ignore[override]
    def __ne__(self, other): return _ew.binary("ne", self, other)  # type: ignore[override]
    def __lt__(self, other): return _ew.binary("lt", self, other)
    def __le__(self, other): return _ew.binary("le", self, other)
    def __gt__(self, other): return _ew.binary("gt", self, other)
    def __ge__(self, other): return _ew.binary("ge", self, other)
    def __neg__(self): return _ew.unary("neg", self)
    def __pos__(self): return self
    def __abs__(self): return _ew.unary("abs", self)
    def __invert__(self): return _ew.unary("bitwise_not", self)

    # ----- elementwise ---------------------------------------------------------------

    def exp(self): return _ew.unary("exp", self)
    def log(self): return _ew.unary("log", self)
    def log1p(self): return _ew.unary("log1p", self)
    def sqrt(self): return _ew.unary("sqrt", self)
    def rsqrt(self): return _ew.unary("rsqrt", self)
    def abs(self): return _ew.unary("abs", self)
    def neg(self): return _ew.unary("neg", self)
    def sign(self): return _ew.unary("sign", self)
    def floor(self): return _ew.unary("floor", self)
    def ceil(self): return _ew.unary("ceil", self)
    def round(self, decimals=0): return _ew.round(self, decimals)
    def sin(self): return _ew.unary("sin", self)
    def cos(self): return _ew.unary("cos", self)
    def tanh(self): return _ew.unary("tanh", self)
    def asin(self): return _ew.unary("asin", self)
    def acos(self): return _ew.unary("acos", self)
    def atan(self): return _ew.unary("atan", self)
    def sinh(self): return _ew.unary("sinh", self)
    def cosh(self): return _ew.unary("cosh", self)
    def asinh(self): return _ew.unary("asinh", self)
    def acosh(self): return _ew.unary("acosh", self)
    def atanh(self): return _ew.unary("atanh", self)
    def atan2(self, other): return _ew.binary("atan2", self, other)
    arcsin, arccos, arctan, arctan2, arcsinh, arccosh, arctanh = asin, acos, atan, atan2, asinh, acosh, atanh
    def sigmoid(self): return _ew.unary("sigmoid", self)
    def relu(self): return _ew.unary("relu", self)
    def gelu(self, approximate: str = "none"): return _ew.gelu(self, approximate)
    def silu(self): return _ew.unary("silu", self)
    def erf(self): return _ew.unary("erf", self)
    def reciprocal(self): return _ew.unary("reciprocal", self)
    def isnan(self): return _ew.unary("isnan", self)
    def isinf(self): return _ew.unary("isinf", self)
    def clamp(self, min=None, max=None): return _ew.clamp(self, min, max)
    def clip(self, min=None, max=None): return _ew.clamp(self, min, max)
    def trunc(self): return _more.trunc(self)
    def fmod(self, other): return _more.fmod(self, other)
    def div(self, other, rounding_mode=None): return _more.div(self, other, rounding_mode)
    def isfinite(self): return _more.isfinite(self)
    def isclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False): return _more.isclose(self, other, rtol, atol, equal_nan)
    def allclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False): return _data.allclose(self, other, rtol, atol, equal_nan)
    def logical_not(self): return _more.logical_not(self)
    def logical_and(self, other): return _more.logical_and(self, other)
    def logical_or(self, other): return _more.logical_or(self, other)
    def logical_xor(self, other): return _more.logical_xor(self, other)
    def lerp(self, end, weight): return _more.lerp(self, end, weight)
    def tan(self): return _more.tan(self)
    def copysign(self, other): return _more.copysign(self, other)
    def logaddexp(self, other): return _more.logaddexp(self, other)
    def log2(self): return _more.log2(self)
    def log10(self): return _more.log10(self)
    def exp2(self): return _more.exp2(self)
    def expm1(self): return _more.expm1(self)
    def square(self): return _more.square(self)
    def softmax(self, dim): return _more.softmax(self, dim)
    def log_softmax(self, dim): return _more.log_softmax(self, dim)
    def pow(self, exponent): return _ew.binary("pow", self, exponent)
    def maximum(self, other): return _ew.binary("maximum", self, other)
    def bitwise_left_shift(self, other): return _ew.bitwise_left_shift(self, other)
    def bitwise_right_shift(self, other): return _ew.bitwise_right_shift(self, other)
    def minimum(self, other): return _ew.binary("minimum", self, other)

    # ----- reductions ----------------------------------------------------------------

    def sum(self, dim=None, keepdim=False, *, dtype=None): return _more.sum(self, dim, keepdim, dtype=dtype)
    def mean(self, dim=None, keepdim=False): return _red.reduce("mean", self, dim, keepdim)
    def prod(self, dim=None, keepdim=False): return _red.reduce("prod", self, dim, keepdim)
    def max(self, dim=None, keepdim=False): return _red.reduce("max", self, dim, keepdim)
    def min(self, dim=None, keepdim=False): return _red.reduce("min", self, dim, keepdim)
    def any(self, dim=None, keepdim=False): return _red.reduce("any", self, dim, keepdim)
    def all(self, dim=None, keepdim=False): return _red.reduce("all", self, dim, keepdim)
    def logsumexp(self, dim=None, keepdim=False): return _red.reduce("logsumexp", self, dim, keepdim)
    def var(self, dim=None, keepdim=False, correction=1): return _red.var("var", self, dim, keepdim, correction)
    def std(self, dim=None, keepdim=False, correction=1): return _red.var("std", self, dim, keepdim, correction)
    def argmax(self, dim=None, keepdim=False): return _red.arg_reduce("argmax", self, dim, keepdim)
    def argmin(self, dim=None, keepdim=False): return _red.arg_reduce("argmin", self, dim, keepdim)
    def cumsum(self, dim, *, dtype=None): return _red.cumsum(self if dtype is None else self.astype(dtype), dim)
    def cumprod(self, dim, *, dtype=None): return _scans.cumprod(self, dim, dtype=dtype)
    def cummax(self, dim): return _scans.cummax(self, dim)
    def cummin(self, dim): return _scans.cummin(self, dim)
    def logcumsumexp(self, dim): return _scans.logcumsumexp(self, dim)
    def sort(self, dim=-1, descending=False, stable=False): return _sort.sort(self, dim, descending)  # always stable
    def argsort(self, dim=-1, descending=False): return _sort.argsort(self, dim, descending)
    def topk(self, k, dim=-1, largest=True, sorted=True): return _sort.topk(self, k, dim, largest, sorted)
    def norm(self, p=2, dim=None, keepdim=False): return _more.norm(self, p, dim, keepdim)
    def std_mean(self, dim=None, *, correction=1, keepdim=False): return _more.std_mean(self, dim, correction=correction, keepdim=keepdim)
    def var_mean(self, dim=None, *, correction=1, keepdim=False): return _more.var_mean(self, dim, correction=correction, keepdim=keepdim)

    # ----- linear algebra and shape --------------------------------------------------

    def matmul(self, other): return _linalg.matmul(self, other)

    @property
    def T(self): return _shape.t(self)

    def reshape(self, *shape): return _shape.reshape(self, shape)
    def view(self, *shape):
        # view(dtype) is a bitcast; view(sizes) a reshape, as in PyTorch.
        if len(shape) == 1 and not isinstance(shape[0], tuple | list) and not hasattr(shape[0], "__index__"):
            return _conv.view_as_dtype(self, shape[0])
        return _shape.reshape(self, shape)
    def unfold(self, dimension, size, step): return _rearrange.unfold(self, dimension, size, step)
    def flatten(self, start=0, end=-1): return _shape.flatten(self, start, end)
    def squeeze(self, dim=None): return _shape.squeeze(self, dim)
    def unsqueeze(self, dim): return _shape.unsqueeze(self, dim)
    def permute(self, *dims): return _shape.permute(self, dims)
    def transpose(self, dim0, dim1): return _shape.transpose(self, dim0, dim1)
    def expand(self, *shape): return _shape.expand(self, shape)
    def repeat(self, *sizes): return _shape.repeat(self, sizes)
    def chunk(self, chunks, dim=0): return _shape.chunk(self, chunks, dim)
    def split(self, split_size_or_sections, dim=0): return _shape.split(self, split_size_or_sections, dim)
    def flip(self, dims): return _rearrange.flip(self, dims)
    def roll(self, shifts, dims=None): return _rearrange.roll(self, shifts, dims)
    def clone(self): return _rearrange.clone(self)
    def tril(self, diagonal=0): return _rearrange.tril(self, diagonal)
    def triu(self, diagonal=0): return _rearrange.triu(self, diagonal)
    def diag(self, diagonal=0): return _rearrange.diag(self, diagonal)
    def diagonal(self, offset=0, dim1=0, dim2=1): return _rearrange.diagonal(self, offset, dim1, dim2)
    def repeat_interleave(self, repeats, dim=None): return _rearrange.repeat_interleave(self, repeats, dim)
    @property
    def mT(self): return _shape.transpose(self, -2, -1)

    # ----- indexing ------------------------------------------------------------------

    def __getitem__(self, key): return _idx.getitem(self, key)

    def __setitem__(self, key, value): self._rebind(_idx.index_put(self, key, value))

    def gather(self, dim, index): return _idx.gather(self, dim, index)
    def scatter_add(self, dim, index, src): return _idx.scatter_add(self, dim, index, src)
    def scatter(self, dim, index, src=None, *, value=None, reduce=None): return _scatter.scatter(self, dim, index, src, value=value, reduce=reduce)
    def scatter_reduce(self, dim, index, src, reduce, *, include_self=True): return _scatter.scatter_reduce(self, dim, index, src, reduce, include_self=include_self)
    def index_select(self, dim, index): return _idx.index_select(self, dim, index)
    def masked_fill(self, mask, value): return _idx.masked_fill(self, mask, value)
    def index_put(self, key, value): return _idx.index_put(self, key, value)
    def masked_select(self, mask): return _data.masked_select(self, mask)
    def nonzero(self, *, as_tuple=False): return _data.nonzero(self, as_tuple=as_tuple)
    def unique(self, sorted=True, return_inverse=False, return_counts=False, dim=None): return _data.unique(self, sorted, return_inverse, return_counts, dim)

    # ----- rebinding updates: the handle takes the new value; other handles keep the old --

    def _rebind(self, value: Tensor) -> Tensor:
        """Make this handle name ``value``'s data (and ``value`` the old data, which its
        finalizer then drops): tensors stay immutable values; only this handle moves."""
        if value.shape != self.shape:
            from ember.errors import ShapeError

            raise ShapeError(f"in-place update: the result of shape {value.shape} does not fit "
                             f"the tensor of shape {self.shape}")
        if value.dtype != self.dtype:
            value = _conv.astype(value, self.dtype)
        for slot in ("_id", "device", "_host", "_node"):
            mine = getattr(self, slot)
            setattr(self, slot, getattr(value, slot))
            setattr(value, slot, mine)
        return self

    def add_(self, other, *, alpha=1): return self._rebind(self + (other if alpha == 1 else other * alpha))
    def sub_(self, other, *, alpha=1): return self._rebind(self - (other if alpha == 1 else other * alpha))
    def mul_(self, other): return self._rebind(self * other)
    def div_(self, other, *, rounding_mode=None): return self._rebind(_more.div(self, other, rounding_mode))
    def clamp_(self, min=None, max=None): return self._rebind(_ew.clamp(self, min, max))
    def fill_(self, value): return self._rebind(_rearrange.filled(self, value))
    def zero_(self): return self._rebind(_creation.zeros_like(self))
    def copy_(self, src): return self._rebind(_rearrange.filled(self, src))

    # ----- conversion ----------------------------------------------------------------

    def to(self, *args, **kwargs): return _conv.to(self, *args, **kwargs)
    def astype(self, dtype): return _conv.astype(self, dtype)
    def float(self): return _conv.astype(self, "float32")
    def double(self): return _conv.astype(self, "float64")
    def half(self): return _conv.astype(self, "float16")
    def int(self): return _conv.astype(self, "int32")
    def long(self): return _conv.astype(self, "int64")
    def short(self): return _conv.astype(self, "int16")
    def char(self): return _conv.astype(self, "int8")
    def byte(self): return _conv.astype(self, "uint8")
    def bool(self): return _conv.astype(self, "bool")
    def detach(self): return _conv.detach(self)
    def __dlpack__(self, **kwargs): return _conv.dlpack(self, **kwargs)
    def __dlpack_device__(self): return _conv.dlpack_device(self)


def _refuse_inside_trio(what: str) -> None:
    if trio.lowlevel.in_trio_task():
        raise BlockingReadInTrio(
            f"{what}() would block the trio event loop while the device computes; "
            f"inside async code use `await t` (it returns the NumPy array)")


# Imported last: the op modules build Tensors.
from ember.ops import conversion as _conv  # noqa: E402
from ember.ops import creation as _creation  # noqa: E402
from ember.ops import data_dependent as _data  # noqa: E402
from ember.ops import more_math as _more  # noqa: E402
from ember.ops import rearrange as _rearrange  # noqa: E402
from ember.ops import elementwise as _ew  # noqa: E402
from ember.ops import indexing as _idx  # noqa: E402
from ember.ops import linalg as _linalg  # noqa: E402
from ember.ops import reduction as _red  # noqa: E402
from ember.ops import scans as _scans  # noqa: E402
from ember.ops import scatter as _scatter  # noqa: E402
from ember.ops import shape as _shape  # noqa: E402
from ember.ops import sorting as _sort  # noqa: E402
