"""``einsum(equation, *tensors)``, composed from ``diagonal``, ``sum``, ``permute``,
``reshape`` and batched ``matmul``: gradients and every backend come from those.

Operands are contracted left to right; each pair becomes one batched matmul with the
shared labels still needed later as the batch, the ones needed no more as the inner dim.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ember.errors import ShapeError
from ember.ops.linalg import matmul
from ember.ops.rearrange import diagonal
from ember.ops.shape import expand, permute, reshape
from ember.tensor import Tensor


def _parse(equation: str, tensors: Sequence[Tensor]) -> tuple[list[str], str]:
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(tensors):
        raise ShapeError(f"einsum: {equation!r} names {len(inputs)} operands, got "
                         f"{len(tensors)} tensors")
    width = max((len(t.shape) for t in tensors), default=0)
    batch = "".join(chr(0x391 + i) for i in range(width))  # labels for "...": Greek capitals
    expanded = []
    for labels, t in zip(inputs, tensors):
        if "..." in labels:
            n = t.ndim - (len(labels) - 3)
            labels = labels.replace("...", batch[width - n:] if n else "")
        if not all(c.isalpha() for c in labels):
            raise ShapeError(f"einsum: {equation!r}: labels must be letters")
        if len(labels) != t.ndim:
            raise ShapeError(f"einsum: {equation!r}: operand {labels!r} has {len(labels)} "
                             f"labels but a tensor of shape {t.shape}")
        expanded.append(labels)
    if arrow:
        if "..." in out:
            used = max((len(t.shape) - (len(s) - 3) for s, t in zip(inputs, tensors)
                        if "..." in s), default=0)
            out = out.replace("...", batch[width - used:] if used else "")
    else:
        seen = "".join(expanded)
        dots = "".join(c for c in batch if c in seen)
        out = dots + "".join(sorted(c for c in set(seen) if seen.count(c) == 1 and c not in dots))
    for c in out:
        if out.count(c) > 1 or not any(c in s for s in expanded):
            raise ShapeError(f"einsum: {equation!r}: output label {c!r} is repeated or unknown")
    return expanded, out


def _take_diagonals(t: Tensor, labels: str) -> tuple[Tensor, str]:
    """Repeated labels in one operand (``"ii"``) become one dim: its diagonal, last."""
    while len(set(labels)) != len(labels):
        c = next(c for c in labels if labels.count(c) > 1)
        first = labels.index(c)
        second = labels.index(c, first + 1)
        t = diagonal(t, 0, first, second)
        labels = labels[:first] + labels[first + 1:second] + labels[second + 1:] + c
    return t, labels


def _sum_out(t: Tensor, labels: str, keep: set[str]) -> tuple[Tensor, str]:
    gone = tuple(i for i, c in enumerate(labels) if c not in keep)
    if gone:
        t = t.sum(gone)
        labels = "".join(c for c in labels if c in keep)
    return t, labels


def _arrange(t: Tensor, labels: str, order: str) -> Tensor:
    if labels == order:
        return t
    return permute(t, [labels.index(c) for c in order])


def einsum(equation: str, *tensors: Tensor) -> Tensor:
    """Sums of products over labelled dims, as ``torch.einsum`` (``"ij,jk->ik"``;
    ``...`` for broadcast leading dims; without ``->``, the labels seen once, sorted).

    Size-1 dims broadcast against the same label's size in another operand.

    Raises:
        ShapeError: an equation that does not match the tensors, or one label with two
            different sizes.

    Example:
        >>> a, b = em.ones((2, 3)), em.ones((3, 4))
        >>> em.einsum("ij,jk->ik", a, b).tolist()[0]
        [3.0, 3.0, 3.0, 3.0]
        >>> em.einsum("bi,bi->b", a, a).tolist()
        [3.0, 3.0]
    """
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"einsum: expected tensors, got {type(t).__name__}")
    specs, out = _parse(equation, tensors)
    sizes: dict[str, int] = {}
    for labels, t in zip(specs, tensors):
        for c, n in zip(labels, t.shape):
            if sizes.get(c, 1) not in (1, n) and n != 1:
                raise ShapeError(f"einsum: {equation!r}: label {c!r} has sizes {sizes[c]} and "
                                 f"{n} (shapes {', '.join(str(x.shape) for x in tensors)})")
            if n != 1 or c not in sizes:
                sizes[c] = n
    operands = []
    for i, (labels, t) in enumerate(zip(specs, tensors)):
        t, labels = _take_diagonals(t, labels)
        needed = set(out).union(*(set(s) for j, s in enumerate(specs) if j != i))
        operands.append(_sum_out(t, labels, needed))
    result, labels = operands[0]
    for k in range(1, len(operands)):
        other, other_labels = operands[k]
        later = set(out).union(*(set(o[1]) for o in operands[k + 1:]))
        result, labels = _contract(result, labels, other, other_labels, later, sizes)
    result, labels = _sum_out(result, labels, set(out))
    return _arrange(result, labels, out)


def _contract(a: Tensor, la: str, b: Tensor, lb: str, later: set[str],
              sizes: dict[str, int]) -> tuple[Tensor, str]:
    shared = [c for c in la if c in lb]
    batch = "".join(c for c in shared if c in later)
    inner = "".join(c for c in shared if c not in later)
    left = "".join(c for c in la if c not in lb)
    right = "".join(c for c in lb if c not in la)

    def block(t: Tensor, labels: str, order: str, rows: str, cols: str) -> Tensor:
        t = _arrange(t, labels, order)
        full = tuple(sizes[c] for c in order)
        if t.shape != full:
            t = expand(t, full)
        shape = tuple(sizes[c] for c in batch) + (math.prod(sizes[c] for c in rows),
                                                 math.prod(sizes[c] for c in cols))
        return reshape(t, shape)

    product = matmul(block(a, la, batch + left + inner, left, inner),
                     block(b, lb, batch + inner + right, inner, right))
    labels = batch + left + right
    return reshape(product, tuple(sizes[c] for c in labels)), labels
