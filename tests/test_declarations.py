"""One declaration per op (``ember/op_kinds.py``), and every table that reads it in step.

DESIGN.md ("An op is declared once"): ``ember/ops/`` declares each op's kind, scalar
form and dtype rule; the planner's sets, the device actor's batching and each backend's
kernel table follow it. A backend either has a kernel for every declared op or lists it
in its ``REFUSED_OPS``, whose kernel raises a ``DeviceError`` naming the op.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import numpy as np
import pytest

import ember as em
from ember import op_kinds
from ember.actors import device_actor
from ember.errors import DeviceError, DTypeError
from ember.ir import Call
from ember.kernels.fusion import cexpr, planner
from ember.ops import elementwise
from ember.ops._core import multi_call
from tests.runtime_mode import lazy_only

PACKAGE = Path(__file__).resolve().parents[1] / "ember"
_ISSUERS = {"call", "multi_call", "issue"}


def _declared(kind: str) -> set[str]:
    return {name for name, d in op_kinds.DECLARED.items() if d.kind == kind}


def _issued_names() -> dict[str, str]:
    """Op name -> file:line of every ``call("op", ...)`` / ``multi_call`` / ``issue`` with a
    literal name in the package (names built at run time are checked through the tables)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in _ISSUERS and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)):
                found[node.args[0].value] = f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
    return found


def test_every_op_the_package_issues_is_declared():
    issued = _issued_names()
    assert len(issued) > 30 and {"matmul", "reshape", "collective_broadcast"} <= issued.keys()
    missing = {name: where for name, where in issued.items() if name not in op_kinds.DECLARED}
    assert not missing, f"ops issued but not declared (ember/op_kinds.py): {missing}"


def test_every_kind_and_scalar_form_is_known_and_declared_ops_are_many():
    assert len(op_kinds.DECLARED) >= 98
    for name, d in op_kinds.DECLARED.items():
        assert d.name == name and d.kind in op_kinds.KINDS and d.scalar in op_kinds.SCALAR_FORMS
        assert name in op_kinds.OPS[d.kind]
    assert sum(len(s) for s in op_kinds.OPS.values()) == len(op_kinds.DECLARED)
    assert {n for n, d in op_kinds.DECLARED.items() if d.scalar == op_kinds.EITHER_SIDE} == {
        "add", "sub", "mul", "div", "floordiv", "remainder", "pow", "maximum", "minimum",
        "eq", "ne", "lt", "le", "gt", "ge", "bitwise_and", "bitwise_or", "bitwise_xor", "atan2",
        "bitwise_left_shift", "bitwise_right_shift"}
    assert op_kinds.scalar_form("clamp") == op_kinds.BOUNDS
    assert op_kinds.scalar_form("where") == op_kinds.BRANCHES
    assert op_kinds.scalar_form("exp") is None and op_kinds.scalar_form("no_such_op") is None


def test_the_planner_sets_and_the_actor_batching_are_the_declarations():
    assert planner.ELEMENTWISE == _declared(op_kinds.ELEMENTWISE)
    assert planner.REDUCTIONS == _declared(op_kinds.REDUCTION)
    assert planner.VIEWS == _declared(op_kinds.VIEW)
    assert planner.REDUCTIONS == {"sum", "prod", "mean", "max", "min", "var", "std", "logsumexp"}
    assert planner.VIEWS == {"reshape", "permute", "expand"}
    assert {"gelu", "where", "clamp", "cast", "alias"} <= planner.ELEMENTWISE
    assert device_actor._JOINABLE == planner.ELEMENTWISE | planner.REDUCTIONS | planner.VIEWS


def test_an_op_declared_later_joins_the_planner_sets_at_once():
    name = "test_declarations_probe"
    try:
        op_kinds.declare(op_kinds.ELEMENTWISE, name, dtype_rule=op_kinds.DECLARED["exp"].dtype_rule)
        assert name in planner.ELEMENTWISE and name not in planner.REDUCTIONS
        assert name in device_actor._JOINABLE  # the devices' batching sees it too
        assert op_kinds.undeclared([name, "exp", "nope"]) == ["nope"]
    finally:
        op_kinds.undeclare(name)
    assert name not in planner.ELEMENTWISE and name not in device_actor._JOINABLE
    assert name not in op_kinds.DECLARED


def test_declare_refuses_contradictions_and_unknown_words():
    with pytest.raises(ValueError, match="'exp' declared twice differently"):
        op_kinds.declare(op_kinds.REDUCTION, "exp")
    with pytest.raises(ValueError, match="unknown kind 'pointwise'"):
        op_kinds.declare("pointwise", "exp")
    with pytest.raises(ValueError, match="unknown scalar form 'left'"):
        op_kinds.declare(op_kinds.ELEMENTWISE, "exp", scalar="left")
    # Saying the same thing again is harmless: a module reloaded declares its ops again.
    before = op_kinds.DECLARED["exp"]
    op_kinds.declare(op_kinds.ELEMENTWISE, "exp", dtype_rule=before.dtype_rule)
    assert op_kinds.DECLARED["exp"] is not None and op_kinds.DECLARED["exp"] == before
    assert op_kinds.DECLARED["sub"].kind == op_kinds.ELEMENTWISE


# ----- each backend's table ----------------------------------------------------------------


def _table(backend: str):
    if backend == "numpy":
        importlib.import_module("ember.kernels.numpy")
        return importlib.import_module("ember.kernels.numpy.table")
    if backend == "wgpu":
        pytest.importorskip("wgpu")
        importlib.import_module("ember.kernels.wgpu")
        return importlib.import_module("ember.kernels.wgpu.table")
    pytest.importorskip("cupy")
    importlib.import_module("ember.kernels.cupy.backend")
    return importlib.import_module("ember.kernels.cupy.table")


@pytest.mark.parametrize("backend", ["numpy", "wgpu", "cupy"])
def test_each_backend_implements_or_refuses_every_declared_op(backend):
    table = _table(backend)
    kernels, refused = table.KERNELS, table.REFUSED_OPS
    missing = sorted(op_kinds.DECLARED.keys() - kernels.keys())
    assert not missing, f"{backend} neither implements nor refuses declared ops {missing}"
    # (Other tests register kernels of their own, defined outside the package.)
    own = [name for name, fn in kernels.items()
           if getattr(fn, "__module__", "ember").startswith("ember.")]
    assert len(own) > 90
    assert not op_kinds.undeclared(own), f"{backend} has kernels for undeclared ops"
    assert not op_kinds.undeclared(refused)
    for name in op_kinds.DECLARED:
        stub = getattr(kernels[name], "refuses", False)
        # A refused op whose real kernel was registered since (CUDA's NCCL) is not a stub.
        assert stub <= (name in refused), f"{backend}: {name} refused but not listed"
    for name in refused:
        if getattr(kernels[name], "refuses", False):
            msg = Call(name, 1, (0,), (), (2,), "float32", ("<test>", 0))
            with pytest.raises(DeviceError, match=f"^{name}: not supported on .*help: "):
                kernels[name](msg, None, np.zeros(2, np.float32))


@lazy_only
def test_a_refused_op_fails_its_read_with_the_device_error_on_the_cpu():
    # The CPU has no check on the caller's line (it would cost every op): the refusal
    # travels to the read, as any kernel failure does.
    x = em.arange(3, dtype=em.float32, device=em.cpu())
    (out,) = multi_call("collective_broadcast", (x,), (x.shape,), (x.dtype,), (0, 1, 0))
    with pytest.raises(em.KernelError, match="DeviceError: collective_broadcast: not "
                                             "supported on CPU devices: .* help: replicate"):
        out.numpy()
    np.testing.assert_array_equal((x + 1).numpy(), [1.0, 2.0, 3.0])  # the device still runs


def test_registry_refuses_to_hide_a_real_kernel():
    from ember.kernels.registry import refuse

    table = {"exp": lambda msg, pool, x: x}
    with pytest.raises(RuntimeError, match="Test refuses op 'exp', which it has a kernel for"):
        refuse(table, "Test", {"exp": "no; help: none"})
    refuse(table, "Test", {"sin": "never; help: cpu"})
    refuse(table, "Other", {"sin": "a copied refusal is replaced; help: x"})
    with pytest.raises(DeviceError, match="sin: not supported on Other devices: a copied"):
        table["sin"](None)


# ----- one expression per backend for each elementwise op ----------------------------------


def _sample(name: str) -> tuple[str, str, int]:
    """(compute dtype, output dtype, tensor operands) of one valid use of elementwise op
    ``name``, from its declared dtype rule."""
    d = op_kinds.DECLARED[name]
    operands = {op_kinds.EITHER_SIDE: 2, op_kinds.BOUNDS: 3, op_kinds.BRANCHES: 3}.get(d.scalar, 1)
    if d.dtype_rule is None:
        return "float32", "float32", operands
    for compute in (em.float32, em.int32, em.bool):
        try:
            return compute.name, d.dtype_rule(name, compute).name, operands
        except DTypeError:
            continue
    raise AssertionError(f"{name}: its dtype rule refuses float32, int32 and bool")


def test_every_elementwise_op_has_a_c_and_a_wgsl_expression():
    scalar_ops = pytest.importorskip("ember.kernels.wgpu.scalar_ops")
    elementwise_ops = _declared(op_kinds.ELEMENTWISE)
    assert cexpr.UNRENDERED <= elementwise_ops
    assert not (cexpr.OPS - elementwise_ops), "C renders ops nobody declared elementwise"
    assert elementwise_ops <= cexpr.OPS | cexpr.UNRENDERED, (
        f"no C expression (kernels/fusion/cexpr.py) for "
        f"{sorted(elementwise_ops - cexpr.OPS - cexpr.UNRENDERED)}")
    for name in sorted(elementwise_ops):
        compute, out, n = _sample(name)
        attrs = {op_kinds.EITHER_SIDE: (compute,),
                 op_kinds.BOUNDS: (True, True)}.get(op_kinds.scalar_form(name), ())
        operands = [(f"v{i}", "bool" if name == "where" and i == 0 else compute)
                    for i in range(n)]
        text = scalar_ops.expression(name, attrs, out, operands)
        assert isinstance(text, str) and "v0" in text, (name, text)


@pytest.mark.parametrize("dtype", [em.float32, em.float16, em.int64, em.int32, em.bool])
def test_the_declared_dtype_rules_are_the_ones_the_ops_apply(dtype):
    x = em.ones(3, dtype=dtype)  # no integer division by zero (EMBER_EAGER=1 raises at it)
    checked = 0
    for name, d in sorted(op_kinds.DECLARED.items()):
        if d.kind != op_kinds.ELEMENTWISE or d.dtype_rule is None or name in ("clamp", "alias"):
            continue
        try:
            expected = d.dtype_rule(name, dtype)
        except DTypeError:
            expected = DTypeError
        try:
            if d.scalar == op_kinds.EITHER_SIDE:
                got = elementwise.binary(name, x, x).dtype
            else:
                got = elementwise.unary(name, x).dtype
        except DTypeError:
            got = DTypeError
        if name == "sub" and dtype is em.bool:
            expected = DTypeError  # refused before the rule: bool subtraction is ambiguous
        assert got is expected, (name, dtype, got, expected)
        checked += 1
    assert checked >= 40
    assert em.where(x == x, x, x).dtype is dtype
