"""Tensor's operators and op methods, attached to the handle when this module loads.

``ember/tensor.py`` is the handle and imports no op; this layer, above it, defines the
methods that forward to the op modules and sets them on ``Tensor``
(``tensor.attach_methods``), then gives the one-line ones their docstrings
(``ember/tensor_docs.py``). ``ember/__init__.py`` imports it, so every ``Tensor`` a user
sees has them. ``ember.autodiff.methods`` attaches the gradient methods the same way.
"""

from __future__ import annotations

from ember import tensor_docs
from ember.ops import conversion as _conv
from ember.ops import creation as _creation
from ember.ops import data_dependent as _data
from ember.ops import elementwise as _ew
from ember.ops import indexing as _idx
from ember.ops import linalg as _linalg
from ember.ops import more_math as _more
from ember.ops import rearrange as _rearrange
from ember.ops import reduction as _red
from ember.ops import scans as _scans
from ember.ops import scatter as _scatter
from ember.ops import shape as _shape
from ember.ops import sorting as _sort
from ember.ops._core import normalize_dim
from ember.errors import ShapeError
from ember.tensor import Tensor, attach_methods


class TensorMethods:
    """The methods ``attach_methods`` sets on ``Tensor`` (never instantiated)."""

    # ----- metadata ------------------------------------------------------------------

    def size(self, dim: int | None = None) -> tuple[int, ...] | int:
        if dim is None:
            return self.shape
        return self.shape[normalize_dim("size", dim, self.shape)]

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


attach_methods(TensorMethods)
tensor_docs.attach(Tensor)
