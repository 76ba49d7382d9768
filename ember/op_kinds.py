"""Op declarations: each IR op's kind, scalar-operand form and dtype rule, declared once.

The modules that issue ops (``ember/ops/`` and the two actors' ops: the optimizer's
update, the replicas' collectives) declare them here, one line per op or one call per
rule table; the fusion planner (its ``ELEMENTWISE`` / ``REDUCTIONS`` / ``VIEWS``), the
device actor's batching (which reads the planner's sets) and each backend's kernel
table read them. ``tests/test_declarations.py`` keeps every backend's table in step.

This module imports nothing from ember: like ``ember/ir.py`` it is the language between
layers, so ``kernels/`` may read it without importing ``ops/`` (which stands above
``kernels/``) and ``ops/`` may fill it without importing the backends.

Kinds (how the runtime may schedule an op):

- ``ELEMENTWISE``: each output element depends on the elements at its index only; the
  output has the broadcast shape of the inputs. Fuses into elementwise and row groups.
- ``REDUCTION``: reduces dims of one input, attrs start with ``(dims, keepdim)``, one
  floating or numeric value per row: a row group may hold it.
- ``VIEW``: an index map of one input (reshape, permute, expand): no arithmetic.
- ``OTHER``: everything else (matmul, indexing, random numbers, scans; and reductions
  fused code does not hold: any / all, argmax / argmin), which runs as its own kernel.

Scalar-operand forms (where a Python scalar travels in ``attrs`` instead of a tensor):

- ``EITHER_SIDE``: binary ops; with one tensor operand, attrs are
  ``(compute dtype name, scalar, scalar_is_lhs)``, else ``(compute dtype name,)``.
- ``BOUNDS``: clamp; attrs ``(low, high)``, each a scalar or None (no bound).
- ``BRANCHES``: where; attrs ``(a, b)``, each a scalar or None (a tensor input).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

ELEMENTWISE = "elementwise"
REDUCTION = "reduction"
VIEW = "view"
OTHER = "other"
KINDS = (ELEMENTWISE, REDUCTION, VIEW, OTHER)

EITHER_SIDE = "either_side"
BOUNDS = "bounds"
BRANCHES = "branches"
SCALAR_FORMS = (None, EITHER_SIDE, BOUNDS, BRANCHES)

DtypeRule = Callable[[str, Any], Any]  # (op name, input dtype) -> output dtype, or raises


class Declaration(NamedTuple):
    """What the runtime and the backends know of an op without importing its module.

    ``dtype_rule``: (op, compute dtype) -> output dtype, raising ``DTypeError`` for a
    refused dtype; None where the op's own code computes the dtype (several inputs of
    different roles, a dtype argument ...).
    """

    name: str
    kind: str
    scalar: str | None
    dtype_rule: DtypeRule | None


DECLARED: dict[str, Declaration] = {}

# Live sets, one per kind: filled by ``declare`` only, so a reader that bound one at
# import (the planner) still sees ops that modules imported later declare.
OPS: dict[str, set[str]] = {kind: set() for kind in KINDS}
# The ops that may join a fused group (elementwise, reductions, views), live as OPS is: the
# device actors' batching tests each message against it.
_JOINING_KINDS = (ELEMENTWISE, REDUCTION, VIEW)
JOINABLE: set[str] = set()


def declare(kind: str, *names: str, scalar: str | None = None,
            dtype_rule: DtypeRule | None = None) -> None:
    """Declare ops ``names`` of ``kind``; declaring one again must say the same thing.

    Raises:
        ValueError: an unknown kind or scalar form, or an op declared twice differently.
    """
    if kind not in KINDS:
        raise ValueError(f"declare: unknown kind {kind!r}; expected one of {KINDS}")
    if scalar not in SCALAR_FORMS:
        raise ValueError(f"declare: unknown scalar form {scalar!r}; expected one of "
                         f"{SCALAR_FORMS}")
    for name in names:
        new = Declaration(name, kind, scalar, dtype_rule)
        old = DECLARED.get(name)
        if old is not None and old != new:
            raise ValueError(f"declare: op {name!r} declared twice differently: {old} vs {new}")
        DECLARED[name] = new
        OPS[kind].add(name)
        if kind in _JOINING_KINDS:
            JOINABLE.add(name)


def undeclare(name: str) -> None:
    """Take back the declaration of ``name`` (a probe op a test declared), from every set."""
    found = DECLARED.pop(name, None)
    if found is not None:
        OPS[found.kind].discard(name)
        JOINABLE.discard(name)


def declare_rules(kind: str, rules: Mapping[str, DtypeRule], scalar: str | None = None) -> None:
    """Declare every op of a dtype rule table (op name -> rule) as ``kind``."""
    for name, rule in rules.items():
        declare(kind, name, scalar=scalar, dtype_rule=rule)


def scalar_form(op: str) -> str | None:
    """The declared scalar-operand form of ``op`` (None: no scalar operands, or undeclared)."""
    found = DECLARED.get(op)
    return None if found is None else found.scalar


def of_kind(kind: str) -> frozenset[str]:
    """A snapshot of the ops declared as ``kind``."""
    return frozenset(OPS[kind])


def undeclared(names: Iterable[str]) -> list[str]:
    """The names among ``names`` that no module declared, sorted."""
    return sorted(set(names) - DECLARED.keys())
