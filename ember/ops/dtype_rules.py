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


def widen_integers(op: str, d: DType) -> DType:
    """Sums and products of bool and integer tensors are int64 (PyTorch)."""
    return d if d.kind == "f" else _dtype.int64
