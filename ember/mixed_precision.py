"""Mixed precision: ``em.autocast``, and the casts ops apply under it.

Ops follow ``torch.autocast``'s op lists (its "Autocast Op Reference", the CUDA lists, on
every device: ember's code never branches on the backend, and the CUDA lists are the
numerically safer ones; torch's CPU lists leave softmax, norms, ``exp`` and ``sum`` in the
low dtype):

- ``low``: matmul, linear, convolutions, scaled-dot-product attention (and the layers
  built on them) cast their floating inputs to the autocast dtype; the kernels accumulate
  in float32 and round the result once.
- ``float32``: reductions, softmax / log_softmax, norms, losses, ``exp``, ``log``, ``pow``
  and the other ops of torch's fp32 list cast float16 / bfloat16 inputs to float32.
- ``promote``: ops of several floating inputs run in the widest of their dtypes, which
  ember's type promotion already does for every such op (binary ops, ``cat``, ``stack``).

float64 tensors are never cast, as in torch. The casts are ordinary ``cast`` ops, so a
gradient flows back through them in the dtype of the forward value each was cast from:
float32 parameters (master weights) get float32 gradients.

Where the casts happen: on the caller's line, where an op of a list is built. The state is
a context variable, so it is per thread (as torch's is) and per trio task (a task sees the
blocks it entered, and a task started inside a block, which copies its context, too); the
autodiff actor's walks run outside any block, so backward passes never re-apply autocast:
the dtypes the forward recorded decide. Ops check one module-level count first, so
outside every block the cost of a listed op is one global read.
"""

from __future__ import annotations

import contextvars
import functools
import threading
import weakref
from collections.abc import Callable
from typing import Any

from ember import dtype as _dtype
from ember.dtype import DType

# How many enabled autocast blocks are open, in every thread and task: ops read this
# first and look up their context's state only when it is not 0.
entered = 0
_count_lock = threading.Lock()

_DEVICE_TYPES = (None, "cpu", "cuda", "wgpu")


class _State:
    """One enabled block's settings, and its cache of parameters already cast."""

    __slots__ = ("dtype", "device_type", "cache")

    def __init__(self, dtype: DType, device_type: str | None, cache: dict) -> None:
        self.dtype = dtype
        self.device_type = device_type
        # id(leaf) -> (weakref to the leaf, its cast): a parameter used twice in a block is
        # cast once.
        # Shared by nested blocks of one dtype; dropped when the outermost block exits.
        self.cache = cache


_state: contextvars.ContextVar[_State | None] = contextvars.ContextVar("ember_autocast",
                                                                      default=None)


class autocast:  # noqa: N801  (torch's name)
    """Run the ops of a block (or of a decorated function) in mixed precision.

    Matmuls, ``linear``, convolutions and attention run in ``dtype`` (float32
    accumulation); reductions, softmax, norms, losses, ``exp`` / ``log`` / ``pow`` run
    in float32; other ops run in the widest floating dtype of their inputs. Parameters
    stay float32, and their gradients arrive in float32. See ``ember/mixed_precision.py``
    for the op lists.

    Blocks nest (an inner block's settings win until it exits; ``enabled=False``
    switches autocast off inside). The setting is per thread and per trio task.

    Args:
        device_type: which devices' ops it applies to: ``"cpu"``, ``"cuda"``, ``"wgpu"``
            (as torch's first argument), or None for every device. Default None.
        dtype: ``em.bfloat16`` or ``em.float16``. Default: float16 for
            ``device_type="cuda"`` (torch's default there), else bfloat16.
        enabled: False makes the block a no-op (or switches an outer block off).
        cache_enabled: cast each tracked parameter once per outermost block. Default True.

    Raises:
        ValueError: an unknown ``device_type``.
        DTypeError: a ``dtype`` other than bfloat16 or float16.

    Example:
        >>> with em.autocast(dtype=em.bfloat16):
        ...     y = model(x)            # linear layers in bfloat16
        ...     loss = F.cross_entropy(y, target)   # float32
    """

    def __init__(self, device_type: str | None = None, dtype: Any = None,
                 enabled: bool = True, cache_enabled: bool | None = None) -> None:
        if isinstance(device_type, str):
            device_type = device_type.split(":")[0]  # torch accepts "cuda:0"
        if device_type not in _DEVICE_TYPES:
            raise ValueError(f"autocast: device_type must be one of 'cpu', 'cuda', 'wgpu' or "
                             f"None, got {device_type!r}")
        if dtype is None:
            dtype = _dtype.float16 if device_type == "cuda" else _dtype.bfloat16
        dtype = _dtype.as_dtype(dtype)
        if dtype is not _dtype.bfloat16 and dtype is not _dtype.float16:
            raise _dtype.DTypeError(f"autocast: dtype must be em.bfloat16 or em.float16, got "
                                    f"{dtype.name}")
        self.device_type = device_type
        self.dtype = dtype
        self.enabled = bool(enabled)
        self.cache_enabled = True if cache_enabled is None else bool(cache_enabled)
        self._entries: list[tuple[contextvars.Token, bool]] = []

    def __enter__(self) -> autocast:
        global entered
        outer = _state.get()
        if self.enabled:
            shared = (outer is not None and outer.dtype is self.dtype and self.cache_enabled
                      and outer.cache is not None)
            cache = outer.cache if shared else ({} if self.cache_enabled else None)
            token = _state.set(_State(self.dtype, self.device_type, cache))
            with _count_lock:
                entered += 1
        else:
            token = _state.set(None)
        self._entries.append((token, self.enabled))
        return self

    def __exit__(self, *exc: Any) -> None:
        global entered
        token, counted = self._entries.pop()
        _state.reset(token)
        if counted:
            with _count_lock:
                entered -= 1

    def __call__(self, fn: Callable) -> Callable:
        settings = (self.device_type, self.dtype, self.enabled, self.cache_enabled)

        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with autocast(*settings):
                return fn(*args, **kwargs)

        return wrapped

    def __repr__(self) -> str:
        return (f"autocast(device_type={self.device_type!r}, dtype={self.dtype!r}, "
                f"enabled={self.enabled})")


def is_autocast_enabled() -> bool:
    """Whether ops here run under an enabled ``em.autocast`` block."""
    return entered != 0 and _state.get() is not None


def get_autocast_dtype() -> DType | None:
    """The dtype of the innermost enabled ``em.autocast`` block here, or None."""
    state = _state.get() if entered else None
    return None if state is None else state.dtype


class suspended:  # noqa: N801  (a context manager, named as one)
    """No autocast inside the block, whatever blocks enclose it (a backward walk that
    runs on the caller's thread: the forward's recorded dtypes decide its ops)."""

    def __enter__(self) -> None:
        self._token = _state.set(None)

    def __exit__(self, *exc: Any) -> None:
        _state.reset(self._token)


# ----- the casts ops apply ------------------------------------------------------------------


def _applies(state: _State, t: Any) -> bool:
    """Whether ``t`` is a tensor autocast may cast here: floating, not float64, on a
    device of the block's ``device_type``."""
    if not hasattr(t, "_node"):  # not a tensor (a Python scalar, None, a string ...)
        return False
    dtype = t.dtype
    if dtype.kind != "f" or dtype is _dtype.float64:
        return False
    return state.device_type is None or t.device.kind == state.device_type


def _recording_paused() -> bool:
    from ember.ops.recording import paused

    return paused.get()


def _cast(t: Any, dtype: DType) -> Any:
    from ember.ops.conversion import astype

    return astype(t, dtype)


def _to_low(state: _State, t: Any) -> Any:
    if not _applies(state, t) or t.dtype is state.dtype:
        return t
    cache = state.cache
    node = t._node
    # Only tracked leaves (parameters), and only while recording: a cast made under
    # no_grad is a constant that a later recorded use must not reuse.
    if cache is None or node is None or node.parents or _recording_paused():
        return _cast(t, state.dtype)
    key = id(t)
    found = cache.get(key)
    if found is not None and found[0]() is t:
        return found[1]
    cast = _cast(t, state.dtype)
    # A weak reference: a parameter the optimizer replaced (a training loop inside one
    # block) leaves the cache when its old value dies, before its id can be reused.
    cache[key] = (weakref.ref(t, lambda _, key=key: cache.pop(key, None)), cast)
    return cast


def to_low(*tensors: Any) -> tuple:
    """``tensors`` in the autocast dtype, for an op of the low list (unchanged outside
    autocast, and for anything autocast does not cast)."""
    state = _state.get()
    if state is None:
        return tensors
    return tuple([_to_low(state, t) for t in tensors])


def to_float32(*tensors: Any) -> tuple:
    """``tensors`` with float16 / bfloat16 ones in float32, for an op of the float32 list
    (unchanged outside autocast)."""
    state = _state.get()
    if state is None:
        return tensors
    return tuple([_cast(t, _dtype.float32)
                  if _applies(state, t) and t.dtype.rank < _dtype.float32.rank else t
                  for t in tensors])


_FLOAT32_UNARY = frozenset({"exp", "log", "log1p", "rsqrt", "reciprocal", "tan", "log2",
                            "log10", "expm1", "sinh", "cosh", "asin", "acos", "erfinv"})
_FLOAT32_BINARY = frozenset({"pow"})


def unary_input(op: str, x: Any) -> Any:
    """``x`` as elementwise op ``op`` reads it under autocast (float32 for the fp32 list)."""
    if op in _FLOAT32_UNARY:
        return to_float32(x)[0]
    return x


def binary_inputs(op: str, a: Any, b: Any) -> tuple:
    """``(a, b)`` as binary op ``op`` reads them under autocast."""
    if op in _FLOAT32_BINARY:
        return to_float32(a, b)
    return a, b


def float32_op(fn: Callable) -> Callable:
    """Decorate an op of the float32 list: under autocast, its float16 / bfloat16 tensor
    arguments are cast to float32 before it runs; elsewhere it runs as it is."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if entered:
            args = to_float32(*args)
            if kwargs:
                names = tuple(kwargs)
                kwargs = dict(zip(names, to_float32(*[kwargs[n] for n in names])))
        return fn(*args, **kwargs)

    return wrapped
