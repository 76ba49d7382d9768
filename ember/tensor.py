"""``Tensor``: a future handle to data on a device.

Shape, dtype and device are known the moment an op returns; the data comes
later. Only the reads (``numpy``, ``item``, ``tolist``, ``np.asarray``,
``await``) wait for the device.

This module is the handle: ids, device, shape, dtype, reads, the finalizer. It
imports nothing from ``ember.ops`` or ``ember.autodiff``: those layers stand above
it (DESIGN.md, "Layers point one way") and give ``Tensor`` its operators and op
methods with ``attach_methods`` when they are imported (``ember.ops.methods``,
``ember.autodiff.methods``; importing ``ember`` imports both).
"""

from __future__ import annotations

import inspect
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import trio

from ember.device import Device
from ember.dtype import DType
from ember.errors import EmberError, ShapeError


if TYPE_CHECKING:
    # Editors and type checkers see the attached methods as inherited; at run time
    # Tensor has no base but object and the methods sit on the class itself.
    from ember.autodiff.methods import TrackedMethods
    from ember.ops.methods import TensorMethods

    class _Attached(TensorMethods, TrackedMethods):
        pass
else:
    _Attached = object


class BlockingReadInTrio(EmberError, RuntimeError):
    """A blocking read was called from inside a trio task."""


class Tensor(_Attached):
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


def _refuse_inside_trio(what: str) -> None:
    if trio.lowlevel.in_trio_task():
        raise BlockingReadInTrio(
            f"{what}() would block the trio event loop while the device computes; "
            f"inside async code use `await t` (it returns the NumPy array)")


def attach_methods(source: type) -> None:
    """Set the functions and properties defined in ``source``'s body on ``Tensor``.

    How the layers above the handle give it its methods: each is set on the class
    itself, so calling it costs what a method written in the class body costs, and is
    named as one (``Tensor.sum``, module ``ember.tensor``) so that ``help``, ``inspect``
    and the docs see no difference. A name ``Tensor`` already has raises: each method
    has one definition site.
    """
    members = {name: member for name, member in vars(source).items()
               if inspect.isfunction(member.fget if isinstance(member, property) else member)}
    taken = sorted(members.keys() & vars(Tensor).keys())
    if taken:
        raise RuntimeError(f"attach_methods: Tensor.{taken[0]} is already defined; "
                           f"{source.__qualname__} would replace it")
    for name, member in members.items():
        function = member.fget if isinstance(member, property) else member
        function.__module__ = __name__
        function.__qualname__ = f"Tensor.{function.__name__}"
        setattr(Tensor, name, member)
