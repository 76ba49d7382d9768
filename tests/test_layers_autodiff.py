"""Layers point one way: ``ember/autodiff/`` stands above ``ember/ops/``.

DESIGN.md ("Layers point one way"). Ops declare their backward rules in the registry below
both (``ember/ops/gradient_rules.py``) and record through a hook autodiff installs
(``ember/ops/recording.py``); no file under ``ember/ops/`` imports ``ember.autodiff``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import ember as em
from ember.autodiff import graph
from ember.ops import gradient_rules, recording
from tests.test_layers import PACKAGE, ROOT, _imports

OPS = PACKAGE / "ops"
AUTODIFF = "ember.autodiff"


def _is_autodiff(module: str) -> bool:
    return module == AUTODIFF or module.startswith(AUTODIFF + ".")


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
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
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
