"""Conversions: dtype casts, moves between devices, detach, DLPack."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ember import dtype as _dtype
from ember.ops.recording import no_record, record
from ember.ops.gradient_rules import differentiable, not_differentiable
from ember.device import Device
from ember.errors import DeviceError, DTypeError, ShapeError
from ember.ir import Receive
from ember.op_kinds import ELEMENTWISE, OTHER, declare
from ember.ops import dtype_rules as rules
from ember.ops._core import call, make, next_id, resolve_device, user_site
from ember.tensor import Tensor, _refuse_inside_trio

# A cast or an alias (a move onto an autodiff twin) fuses like any elementwise op.
declare(ELEMENTWISE, "cast")
declare(ELEMENTWISE, "alias", dtype_rule=rules.keep)
declare(OTHER, "bitcast")
not_differentiable("bitcast")

_DEVICE_KINDS = ("cpu", "cuda", "wgpu")


def astype(x: Tensor, dtype: Any) -> Tensor:
    """``x`` converted to ``dtype``; the same tensor if it already has it.

    As in PyTorch: floats to integers truncate toward zero, anything to bool
    is ``x != 0`` (NaN is true), bool to numbers is 0 / 1. Out-of-range
    float-to-integer values are undefined (they are on every backend).

    Example:
        >>> em.tensor([1.7, -1.7, 0.0]).astype(em.int32).tolist()
        [1, -1, 0]
        >>> em.tensor([2, 0]).astype("bool").tolist()
        [True, False]
    """
    target = _dtype.as_dtype(dtype)
    if target is x.dtype:
        return x
    return call("cast", (x,), x.shape, target)


def view_as_dtype(x: Tensor, dtype: Any) -> Tensor:
    """``x``'s bytes read as ``dtype`` (a bitcast), as ``Tensor.view(dtype)`` in PyTorch.

    The same element size keeps the shape; a different one rescales the last dim
    (float32 → float16 doubles it, float16 → float32 halves it: it must divide) and needs a
    tensor of at least one dim. The result carries no gradient (PyTorch's neither).

    Raises:
        ShapeError: a 0-d tensor or a last dim that does not divide, for another size.

    Example:
        >>> em.tensor([1.0]).view(em.int32).tolist()
        [1065353216]
    """
    target = _dtype.as_dtype(dtype)
    if target is x.dtype:
        return x
    old, new = x.dtype.itemsize, target.itemsize
    shape = x.shape
    if old != new:
        where = f"to view {x.dtype.name} as {target.name} (different element sizes)"
        if not shape:
            raise ShapeError(f"view: a 0-d tensor has no last dim {where}; help: reshape it "
                             f"to (1,) first")
        if (shape[-1] * old) % new:
            raise ShapeError(f"view: the last dim of shape {shape} must hold a whole number "
                             f"of {target.name} elements {where}")
        shape = shape[:-1] + (shape[-1] * old // new,)
    return call("bitcast", (x,), shape, target)


def to(x: Tensor, *args: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """``x`` on another device and/or in another dtype, as PyTorch's ``Tensor.to``.

    ``t.to(device)``, ``t.to(dtype)``, ``t.to(device, dtype)``,
    ``t.to(dtype=..., device=...)``, ``t.to(other_tensor)`` (its device and
    dtype). A device is a ``Device`` or a name (``"cpu:1"``); a dtype is an
    ember dtype, its name or a NumPy dtype. Returns ``x`` itself when nothing
    changes.

    Gradients flow through float casts and through moves to an autodiff
    device (back to ``x``'s device); a move to a device without tracking
    gives a constant, as ``detach`` does.

    Example:
        >>> x = em.tensor([1.5, 2.5])
        >>> x.to(em.int64).tolist(), str(x.to("cpu:1").device), x.to("cpu:1", em.float64).dtype
        ([1, 2], 'cpu:1', ember.float64)
    """
    if len(args) > 2:
        raise TypeError(f"to: expected at most a device and a dtype, got {len(args)} arguments")
    for arg in args:
        if isinstance(arg, Tensor):
            device = arg.device if device is None else device
            dtype = arg.dtype if dtype is None else dtype
        elif _is_device(arg):
            device = arg
        else:
            dtype = arg
    out = x
    if dtype is not None:
        try:
            target = _dtype.as_dtype(dtype)
        except DTypeError:
            raise DTypeError(f"to: expected a device or a dtype, got {dtype!r}") from None
        out = astype(out, target)
    if device is not None:
        out = _transfer(out, resolve_device(device))
    return out


def _is_device(value: Any) -> bool:
    if isinstance(value, Device):
        return True
    return isinstance(value, str) and value.strip().partition(":")[0] in _DEVICE_KINDS


def _transfer(x: Tensor, device: Device) -> Tensor:
    if device is x.device:
        return x
    if device.name == x.device.name:
        # Same actor, other autodiff flag: a new handle on the same buffer.
        return call("alias", (x,), x.shape, x.dtype, (), device)
    if device.actor.check_dtype is not None:
        device.actor.check_dtype(x.dtype.name, "to")
    ticket = x.device.actor.send(x._id)
    out = next_id()
    device.actor.submit(Receive(out, ticket, x.shape, x.dtype.name, user_site()),
                        x.numel() * x.dtype.itemsize)
    moved = make(out, x.shape, x.dtype, device)
    if device.is_autodiff:
        # Not submitted through ``call``: recorded here, so gradients travel back.
        record("to", (x,), (x.device,), (moved,))
    return moved


def detach(x: Tensor) -> Tensor:
    """A new handle to the same values, outside any gradient graph."""
    with no_record():
        return call("alias", (x,), x.shape, x.dtype)


# ----- gradients ------------------------------------------------------------------------


@differentiable("cast", "alias", inputs=False)
def _identity_backward(ctx: Any, grad: Tensor) -> tuple:
    # A float-to-float cast passes the gradient back (the engine casts it to the input's
    # dtype); casts to integers or bool are never tracked. An alias (a move between a
    # device and its autodiff twin) is the identity.
    return (grad,)


@differentiable("to", inputs=False, compute_bound=True)
def _to_backward(ctx: Any, grad: Tensor) -> tuple:
    # The gradient goes back to the source device (attrs[0]). Compute-bound so that the
    # moved tensor is kept under "balanced" checkpointing: recomputing it would mean
    # another transfer, which ``call`` cannot submit.
    return (grad.to(ctx.attrs[0]),)


# ----- DLPack ---------------------------------------------------------------------------
#
# NumPy speaks DLPack for every ember dtype but bfloat16. For that one the data
# travels as uint16 and the dtype code in the capsule's DLTensor is rewritten
# (kDLUInt <-> kDLBfloat, both 16 bits), which is all a bfloat16 DLTensor is.

_KDL_CPU = 1
_KDL_UINT = 1
_KDL_BFLOAT = 4

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]

# NumPy speaks versioned DLPack (read-only flag, max_version) from 2.1 on.
_VERSIONED = np.lib.NumpyVersion(np.__version__) >= "2.1.0"

_POINTER = ctypes.sizeof(ctypes.c_void_p)
# DLTensor: void* data; DLDevice device (2 x int32); int32 ndim; DLDataType dtype (uint8 code,
# uint8 bits, uint16 lanes) ... DLManagedTensorVersioned puts a DLPackVersion (2 x uint32),
# manager_ctx, deleter and a uint64 flags field before its DLTensor; DLManagedTensor none.
_DTYPE_OFFSET_IN_TENSOR = _POINTER + 8 + 4
_DTYPE_OFFSET = {
    b"dltensor": _DTYPE_OFFSET_IN_TENSOR,
    b"dltensor_versioned": 8 + 2 * _POINTER + 8 + _DTYPE_OFFSET_IN_TENSOR,
}


def _capsule_dtype(capsule: Any) -> tuple[ctypes.c_uint8, ctypes.c_uint8]:
    """The (code, bits) fields of an unconsumed DLPack capsule's dtype, writable in place."""
    name = _capsule_name(capsule)
    if name not in _DTYPE_OFFSET:
        raise BufferError(f"from_dlpack: not an unconsumed DLPack capsule ({name!r})")
    address = _capsule_pointer(capsule, name) + _DTYPE_OFFSET[name]
    return ctypes.c_uint8.from_address(address), ctypes.c_uint8.from_address(address + 1)


def _retag(capsule: Any, old_code: int, new_code: int) -> bool:
    code, bits = _capsule_dtype(capsule)
    if code.value == old_code and bits.value == 16:
        code.value = new_code
        return True
    return False


def dlpack(x: Tensor, *, stream: Any = None, max_version: tuple[int, int] | None = None,
           dl_device: Any = None, copy: bool | None = None) -> Any:
    """Export ``x`` as a DLPack capsule of host memory (blocks until ``x`` is computed).

    Consumers that speak DLPack 1.0 (``max_version >= (1, 0)``: NumPy 2, PyTorch)
    share the tensor's memory, marked read-only; NumPy honours the mark,
    PyTorch ignores it (writing through such a torch tensor would change an
    ember tensor, which ember treats as immutable). Legacy consumers, which
    cannot be told the memory is read-only, get a private copy.
    """
    where = _device_dlpack(x.device)
    if where is not None and (dl_device is None or tuple(dl_device) == where):
        # The device's own memory, zero copy: the worker hands over the buffer once its
        # stream has written it, so any consumer stream may read it at once.
        _refuse_inside_trio("__dlpack__")
        actor = x.device.actor
        array = actor.wait(actor.export(x._id))
        options = {k: v for k, v in (("max_version", max_version), ("copy", copy))
                   if v is not None}
        return array.__dlpack__(stream=stream, **options)
    if stream is not None:
        raise BufferError("__dlpack__: ember exports host memory; stream must be None")
    if dl_device is not None and tuple(dl_device) != (_KDL_CPU, 0):
        raise BufferError(f"__dlpack__: ember exports host memory (kDLCPU, 0), "
                          f"not {tuple(dl_device)}")
    host = x.numpy()
    if x.dtype is _dtype.bfloat16:
        host = host.view(np.uint16)
    versioned = _VERSIONED and max_version is not None and tuple(max_version) >= (1, 0)
    if not versioned:
        if copy is False:
            raise BufferError("__dlpack__: a tensor's memory is read-only, which legacy DLPack "
                              "cannot signal; pass copy=None or max_version=(1, 0)")
        capsule = np.array(host, copy=True).__dlpack__()
    else:
        try:
            capsule = host.__dlpack__(max_version=max_version, copy=copy)
        except BufferError:  # e.g. a broadcast view NumPy will not export: a private copy
            if copy is False:
                raise
            capsule = np.ascontiguousarray(host).__dlpack__(max_version=max_version)
    if x.dtype is _dtype.bfloat16:
        _retag(capsule, _KDL_UINT, _KDL_BFLOAT)
    return capsule


def dlpack_device(x: Tensor) -> tuple[int, int]:
    """Where ``x``'s DLPack export lives: the device's memory where its backend exports
    it (CUDA), else ``(kDLCPU, 0)`` (a device's data is read back first)."""
    return _device_dlpack(x.device) or (_KDL_CPU, 0)


def _device_dlpack(device: Device) -> tuple[int, int] | None:
    """The DLPack device of ``device``'s own memory, if its backend exports it."""
    if device.kind == "cpu":
        return None
    where = getattr(device.actor.backend, "dlpack_device", None)
    return where() if where is not None else None


def _device_import(obj: Any, source: tuple[int, int], device: Any) -> Tensor | None:
    """``obj``'s memory on the ember device DLPack names ``source``, zero copy (then moved
    to ``device`` if another); None where no ember backend takes that memory."""
    from ember.device import available

    for candidate in available("cuda"):
        backend = candidate.actor.backend
        where = getattr(backend, "dlpack_device", None)
        if where is None or where() != source:
            continue
        array = backend.from_dlpack(obj)
        target = _dtype.from_numpy_dtype(array.dtype, "from_dlpack")
        if array.dtype != target.np:
            array = array.astype(target.np)
        from ember.ops.creation import upload

        tensor = upload(array, target, candidate, "from_dlpack")
        return tensor if device is None else tensor.to(resolve_device(device))
    return None


class _Capsule:
    """A DLPack producer handing NumPy one prepared capsule."""

    def __init__(self, capsule: Any, device: tuple[int, int]) -> None:
        self.capsule = capsule
        self.device = device

    def __dlpack__(self, **kwargs: Any) -> Any:
        capsule, self.capsule = self.capsule, None
        return capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device


def from_dlpack(obj: Any, *, device: Any = None) -> Tensor:
    """A tensor from a DLPack producer (a NumPy array, a torch tensor, a CuPy array, an
    ember tensor).

    GPU memory stays where it is (zero copy) on the ember device of that GPU, then
    moves to ``device`` if another is named; the producer's pending writes are waited
    for (DLPack's stream hand-off).

    The memory is shared where the dtype is an ember dtype (zero copy; the
    producer must not change it afterwards, since ember tensors are
    immutable); uint16 / uint32 data is widened into a copy. bfloat16 is supported both ways.

    Raises:
        TypeError: ``obj`` does not implement ``__dlpack__``.
        DeviceError: the producer's memory is neither host memory nor on a GPU ember
            has a device for.
        DTypeError: a dtype ember has no equivalent for (uint64, complex ...).

    Example:
        >>> em.from_dlpack(np.arange(3.0)).tolist()
        [0.0, 1.0, 2.0]
    """
    if isinstance(obj, Tensor):
        return obj if device is None else obj.to(resolve_device(device))
    if not hasattr(obj, "__dlpack__") or not hasattr(obj, "__dlpack_device__"):
        raise TypeError(f"from_dlpack: expected an object implementing __dlpack__ (a NumPy "
                        f"array, a torch tensor ...), got {type(obj).__name__}")
    source = tuple(obj.__dlpack_device__())
    if source[0] != _KDL_CPU:
        imported = _device_import(obj, source, device)
        if imported is not None:
            return imported
        raise DeviceError(f"from_dlpack: the producer's memory is on DLPack device {source}, "
                          f"not the host; help: move it to the CPU first (torch: t.cpu())")
    try:
        capsule = obj.__dlpack__(max_version=(1, 0)) if _VERSIONED else obj.__dlpack__()
    except TypeError:  # a producer that predates DLPack 1.0
        capsule = obj.__dlpack__()
    is_bfloat16 = _retag(capsule, _KDL_BFLOAT, _KDL_UINT)
    try:
        array = np.from_dlpack(_Capsule(capsule, source))
    except (BufferError, TypeError, ValueError) as exc:
        raise DTypeError(f"from_dlpack: cannot import {type(obj).__name__}: {exc}") from None
    if is_bfloat16:
        array = array.view(_dtype.bfloat16.np)
    target = _dtype.from_numpy_dtype(array.dtype, "from_dlpack")
    if array.dtype != target.np:
        array = array.astype(target.np)
    from ember.ops.creation import upload

    return upload(array, target, device, "from_dlpack")
