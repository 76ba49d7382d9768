"""The exceptions ember raises.

Every error is an ``EmberError`` and also the builtin that fits, so code
written against PyTorch or NumPy (``except ValueError``) still catches it.
"""

from __future__ import annotations


class EmberError(Exception):
    """Base class of every error ember raises."""


class ShapeError(EmberError, ValueError, RuntimeError):
    """Shapes that do not fit the op: raised on the caller's line.

    Also a ``RuntimeError``, which is what PyTorch raises for a shape mismatch.
    """


class DeviceError(EmberError, ValueError):
    """Tensors on different devices, or a device that is not available."""


class DTypeError(EmberError, TypeError, RuntimeError):
    """A dtype the op does not support, or dtypes that do not combine.

    Also a ``RuntimeError``, which is what PyTorch raises for a dtype mismatch.
    """


class DimError(EmberError, IndexError):
    """A dim out of range for the tensor's shape (PyTorch raises ``IndexError`` too)."""


class KernelError(EmberError, RuntimeError):
    """A read whose tensor's computation failed on the device worker.

    It names the op and the user's source line that created it; the original
    exception is chained as ``__cause__``.
    """

    def __init__(self, message: str, op: str = "", site: str = "") -> None:
        super().__init__(message)
        self.op = op
        self.site = site


class OutOfMemoryError(KernelError, MemoryError):
    """An output that can never fit its device (raised at the call), or an allocation that
    failed on the device worker (raised at the read; the device keeps working)."""


class RecordError(EmberError, ValueError):
    """A corrupt, truncated or hostile file."""
