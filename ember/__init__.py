"""ember: tensors as lazy futures on device actors, with NumPy, CuPy and WebGPU backends.

``import ember as em``; the public names are listed in ``__all__`` (API.md).
"""

from ember._version import __version__
from ember.device import Device, available, cpu, cuda, default_device, device, wgpu
from ember.dtype import (
    DType,
    bfloat16,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
)
from ember.dtype import bool_ as bool  # noqa: A001  (em.bool, as torch.bool)
from ember.errors import (DeviceError, DTypeError, EmberError, KernelError, OutOfMemoryError,
                          RecordError, ShapeError)
from ember.kernels.cache import clear_cache
# Tensor's operators and op methods (the handle in ember/tensor.py has none of its own).
from ember.ops import methods as _tensor_methods  # noqa: F401
from ember.ops.conversion import from_dlpack
from ember.ops.creation import (
    arange,
    eye,
    from_numpy,
    full,
    full_like,
    linspace,
    manual_seed,
    ones,
    ones_like,
    rand,
    randint,
    randn,
    tensor,
    zeros,
    zeros_like,
)
from ember.ops.elementwise import where
from ember.ops.shape import cat, stack
from ember.precision import get_float32_matmul_precision, set_float32_matmul_precision
from ember.mixed_precision import autocast, get_autocast_dtype, is_autocast_enabled
from ember.record import load, load_safetensors, save, save_safetensors
from ember.actors.stats import ActorInfo
from ember.runtime import graphed, list_actors, run, stats, sync, sync_async, trace
from ember.tensor import Tensor
from ember.nn.config import Config
from ember import nn, optim, train  # after Tensor: they build on it
from ember import linalg
from ember.autodiff.grad_mode import enable_grad, is_grad_enabled, no_grad
from ember.ops.creation_extra import empty, normal
from ember.ops.functions import FUNCTIONS as _FUNCTIONS


__all__ = [
    "Device", "DType", "Tensor",
    "available", "cpu", "cuda", "default_device", "device", "wgpu",
    "bfloat16", "bool", "float16", "float32", "float64", "int32", "int64",
    "uint8", "int8", "int16", "short",
    "DeviceError", "DTypeError", "EmberError", "KernelError", "OutOfMemoryError", "RecordError",
    "ShapeError",
    "arange", "eye", "from_dlpack", "from_numpy", "full", "full_like", "linspace",
    "manual_seed", "ones", "ones_like", "rand", "randint", "randn", "tensor", "zeros",
    "zeros_like",
    "cat", "stack", "where",
    "run", "stats", "sync", "sync_async", "trace", "graphed", "clear_cache", "list_actors",
    "ActorInfo",
    "get_float32_matmul_precision", "set_float32_matmul_precision",
    "autocast", "get_autocast_dtype", "is_autocast_enabled",
    "nn", "optim", "train", "Config",
    "load", "load_safetensors", "save", "save_safetensors",
    "linalg", "no_grad", "enable_grad", "is_grad_enabled", "empty", "normal",
    "float", "double", "half", "long", "int",
]

# torch's dtype aliases, and em.NAME(t, ...) for the tensor ops (ops/functions.py's table);
# set last: several shadow builtins (sum, abs, max, float ...) in this module only.
globals().update(_FUNCTIONS, float=float32, double=float64, half=float16, long=int64, int=int32,
                 short=int16)
__all__ += sorted(_FUNCTIONS)
