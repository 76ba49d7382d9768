"""Layers point one way: ``ember/autodiff/`` above ``ember/ops/``, both above the handle.

DESIGN.md ("Layers point one way"). Ops declare their backward rules in the registry below
both (``ember/ops/gradient_rules.py``) and record through a hook autodiff installs
(``ember/ops/recording.py``); no file under ``ember/ops/`` imports ``ember.autodiff``.
``ember/tensor.py`` (the handle) imports neither: ``ember.ops.methods`` and
``ember.autodiff.methods`` attach Tensor's methods to it (``tensor.attach_methods``).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import numpy as np
import pytest

import ember as em
from ember import op_kinds
from ember.actors import device_actor
from ember.autodiff import graph
from ember.autodiff import methods as autodiff_methods
from ember.kernels.fusion import planner
from ember.ops import gradient_rules
from ember.ops import methods as ops_methods
from ember.ops import recording
from ember.tensor import attach_methods
from tests.test_layers import PACKAGE, ROOT, _imports

OPS = PACKAGE / "ops"
TENSOR = PACKAGE / "tensor.py"
AUTODIFF = "ember.autodiff"


def _is_autodiff(module: str) -> bool:
    return module == AUTODIFF or module.startswith(AUTODIFF + ".")


def _is_above_tensor(module: str) -> bool:
    return _is_autodiff(module) or module == "ember.ops" or module.startswith("ember.ops.")


def _type_checking_lines(path) -> set[int]:
    """The lines of ``path``'s ``if TYPE_CHECKING:`` blocks (never run)."""
    lines = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                and node.test.id == "TYPE_CHECKING"):
            lines.update(range(node.body[0].lineno, node.body[-1].end_lineno + 1))
    return lines


def test_no_ops_file_imports_autodiff():
    files = sorted(OPS.rglob("*.py"))
    assert OPS / "_core.py" in files and OPS / "recording.py" in files
    offenders = [f"{path.relative_to(ROOT)}:{line}: {module}"
                 for path in files for line, module in _imports(path) if _is_autodiff(module)]
    assert not offenders, "ember/ops/ imports ember.autodiff:\n" + "\n".join(offenders)


def test_the_finder_sees_autodiff_in_every_form(tmp_path):
    probe = tmp_path / "ember" / "ops" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text(
        "from ember.autodiff.graph import record\n"
        "from ..autodiff import engine\n"
        "def f():\n"
        "    import ember.autodiff\n"
        "from ember.ops.recording import record\n")
    found = [(line, module) for line, module in _imports(probe, tmp_path)
             if _is_autodiff(module)]
    assert found == [(1, "ember.autodiff.graph"), (1, "ember.autodiff.graph.record"),
                     (2, "ember.autodiff"), (2, "ember.autodiff.engine"),
                     (4, "ember.autodiff")]


def _last_json_line(script: str) -> object:
    """What ``script``, run by a fresh Python in the repository, printed last, as JSON."""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_importing_ops_alone_loads_no_autodiff():
    """In a fresh Python with ``ember`` a bare package (its ``__init__``, which loads every
    layer, not run): importing the tensor and every op module loads no autodiff module."""
    script = (
        "import importlib, json, pkgutil, sys, types\n"
        "package = types.ModuleType('ember'); package.__path__ = ['ember']\n"
        "sys.modules['ember'] = package\n"
        "import ember.tensor, ember.ops\n"
        "for info in pkgutil.iter_modules(ember.ops.__path__):\n"
        "    importlib.import_module('ember.ops.' + info.name)\n"
        "print(json.dumps(sorted(sys.modules)))")
    loaded = set(_last_json_line(script))
    assert {"ember.ops._core", "ember.ops.elementwise", "ember.ops.recording"} <= loaded
    assert "ember.autodiff.engine" not in loaded
    assert not {name for name in loaded if _is_autodiff(name)}


def test_autodiff_installs_its_recorder_and_no_record_is_one_switch():
    assert recording._recorder is graph.record
    assert graph.no_record is recording.no_record
    assert graph.record_composite is recording.record_composite
    device = em.cpu().autodiff()
    w = em.tensor([1.0, -2.0, 3.0], device=device).require_grad()
    with graph.no_record():
        assert not em.is_grad_enabled()
        assert not (w * w).is_tracked
    with em.no_grad():
        assert not (w * 2).is_tracked
    y = (w * w).sum()
    assert y.is_tracked
    np.testing.assert_allclose(y.backward().get(w).numpy(), [2.0, -4.0, 6.0])


def test_without_a_recorder_ops_record_nothing():
    device = em.cpu().autodiff()
    w = em.tensor([1.0, 2.0], device=device).require_grad()
    try:
        recording.install(recording._record_nothing)
        y = w * 3
    finally:
        recording.install(graph.record)
    assert not y.is_tracked
    np.testing.assert_allclose(y.numpy(), [3.0, 6.0])
    assert (w * 3).is_tracked


def test_record_composite_names_a_missing_rule():
    device = em.cpu().autodiff()
    x = em.tensor([1.0], device=device).require_grad()
    assert "no_such_composite" not in gradient_rules.BACKWARD
    with pytest.raises(RuntimeError, match="record_composite: 'no_such_composite' needs a rule"):
        recording.record_composite("no_such_composite", (x,), (), x * 1)


def test_tensor_imports_no_ops_and_no_autodiff():
    """Any form, at any depth of tensor.py (module level, inside a function), outside the
    type checkers' ``if TYPE_CHECKING:`` block."""
    found = [(line, module) for line, module in _imports(TENSOR) if _is_above_tensor(module)]
    typing_only = _type_checking_lines(TENSOR)
    offenders = [f"ember/tensor.py:{line}: {module}" for line, module in found
                 if line not in typing_only]
    assert not offenders, "ember/tensor.py imports a layer above it:\n" + "\n".join(offenders)
    # The typing-only imports are the two method sources, for editors.
    assert {module for _, module in found} == {
        "ember.ops.methods", "ember.ops.methods.TensorMethods",
        "ember.autodiff.methods", "ember.autodiff.methods.TrackedMethods"}
    assert "# noqa: E402" not in TENSOR.read_text(), "tensor.py has bottom imports again"


def test_type_checking_lines_are_only_the_block(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from typing import TYPE_CHECKING\n"
                     "if TYPE_CHECKING:\n"
                     "    from ember.ops.methods import TensorMethods\n"
                     "    import ember.autodiff\n"
                     "else:\n"
                     "    import ember.ops.shape\n"
                     "def f():\n"
                     "    from ember.ops import _core\n")
    assert _type_checking_lines(probe) == {3, 4}
    found = [(line, module) for line, module in _imports(probe, tmp_path)
             if _is_above_tensor(module)]
    assert [line for line, _ in found if line not in _type_checking_lines(probe)] == [6, 8, 8]


def test_importing_the_tensor_alone_loads_no_layer_above_it():
    """A fresh Python, ``ember`` a bare package: the handle loads only what is below it,
    and has no op methods until a layer above attaches them."""
    script = (
        "import json, sys, types\n"
        "package = types.ModuleType('ember'); package.__path__ = ['ember']\n"
        "sys.modules['ember'] = package\n"
        "import ember.tensor\n"
        "print(json.dumps([sorted(sys.modules), hasattr(ember.tensor.Tensor, 'sum')]))")
    loaded, has_sum = _last_json_line(script)
    assert "ember.tensor" in loaded and not has_sum
    assert not [name for name in loaded if _is_above_tensor(name)]


@pytest.mark.parametrize("source", [ops_methods.TensorMethods, autodiff_methods.TrackedMethods])
def test_attached_methods_are_the_functions_themselves(source):
    # Set on the class, not wrapped: a call costs no extra layer, and help() / the docs
    # see a method of ember.tensor.Tensor.
    members = {name: member for name, member in vars(source).items()
               if callable(member) or isinstance(member, property)}
    assert len(members) > (100 if source is ops_methods.TensorMethods else 3)
    for name, member in members.items():
        assert vars(em.Tensor)[name] is member, name
        function = member.fget if isinstance(member, property) else member
        assert function.__module__ == "ember.tensor", name
        assert function.__qualname__ == f"Tensor.{function.__name__}", name
        assert function.__code__.co_filename == sys.modules[source.__module__].__file__
    assert em.Tensor.__mro__ == (em.Tensor, object)


def test_the_attached_methods_work():
    x = em.tensor([[1.0, -2.0], [3.0, 4.0]])
    np.testing.assert_allclose((x + 1).numpy(), [[2.0, -1.0], [4.0, 5.0]])
    np.testing.assert_allclose((2 ** x).sum(dim=1).numpy(), [2.25, 24.0])
    np.testing.assert_allclose(x.T.numpy(), [[1.0, 3.0], [-2.0, 4.0]])
    assert x.size(-1) == 2 and x.size() == (2, 2)
    with pytest.raises(IndexError, match="size"):
        x.size(2)
    y = x.clone()
    y[0] = 0.0
    np.testing.assert_allclose(y.numpy(), [[0.0, 0.0], [3.0, 4.0]])
    w = em.tensor([1.0, 2.0], device=em.cpu().autodiff()).requires_grad_()
    np.testing.assert_allclose(w.grad((w * w * w).sum().backward()).numpy(), [3.0, 12.0])
    with pytest.raises(em.EmberError, match="require_grad: cpu:0 does not track"):
        em.tensor([1.0]).require_grad()


def test_attach_refuses_a_name_the_tensor_has():
    class Shadowing:
        def a_new_name(self):
            return None

        def numpy(self):
            return None

    numpy = vars(em.Tensor)["numpy"]
    with pytest.raises(RuntimeError, match="attach_methods: Tensor.numpy is already defined"):
        attach_methods(Shadowing)
    assert vars(em.Tensor)["numpy"] is numpy and not hasattr(em.Tensor, "a_new_name")


def test_the_runtime_reads_the_declared_kinds_live():
    # The batching tests each message against the live set of joinable ops, so an op
    # module imported after the runtime still runs at once and fuses there (an op
    # declared late: tests/test_declarations.py).
    assert device_actor._JOINABLE is op_kinds.JOINABLE
    assert device_actor._JOINABLE == planner.ELEMENTWISE | planner.REDUCTIONS | planner.VIEWS
    assert {"add", "sum", "exp"} <= device_actor._JOINABLE
