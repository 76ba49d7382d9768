"""Dtype rules shared by op families: (op name, input dtype) → output dtype, or a DTypeError."""

from __future__ import annotations

from ember import dtype as _dtype
from ember.dtype import DType
from ember.errors import DTypeError


def keep(op: str, d: DType) -> DType:
    return d


def to_bool(op: str, d: DType) -> DType:
    return _dtype.bool_


def floating(op: str, d: DType) -> DType:
    """Integer and bool inputs compute in the default float (PyTorch's float functions)."""
    return d if d.kind == "f" else _dtype.DEFAULT_FLOAT


def floating_only(op: str, d: DType) -> DType:
    if d.kind != "f":
        raise DTypeError(f"{op}: needs a floating-point tensor, got {d.name} (as in PyTorch); "
                         f"help: convert first with .to(em.float32)")
    return d


def numeric(op: str, d: DType) -> DType:
    if d.kind == "b":
        raise DTypeError(f"{op}: not defined for bool tensors; help: convert with .to(em.int64) "
                         f"or use the logical operators & | ^ ~")
    return d


def integral(op: str, d: DType) -> DType:
    if d.kind == "f":
        raise DTypeError(f"{op}: needs bool or integer tensors, got {d.name}")
    return d


def integer(op: str, d: DType) -> DType:
    """Integer tensors only: PyTorch's shifts refuse bool and floating tensors."""
    if d.kind != "i":
        raise DTypeError(f"{op}: needs integer tensors (uint8, int8, int16, int32, int64), "
                         f"got {d.name}; help: convert first with .to(em.int64)")
    return d


def widen_integers(op: str, d: DType) -> DType:
    """Sums and products of bool and integer tensors are int64 (PyTorch)."""
    return d if d.kind == "f" else _dtype.int64
