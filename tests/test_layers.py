"""Layers point one way: ``ember/kernels/`` never imports the runtime above it.

DESIGN.md ("Layers point one way"): ``actors`` stands above ``kernels``. What both need
lives below both: the IR (``ember/ir.py``), the trace (``ember/tracing.py``), a read still
in flight (``ember/kernels/later.py``); what a kernel asks of the runtime goes through a
hook the runtime installs (``ember/kernels/worker_hooks.py``). Whether kernels import the
top-level package itself is checked with start-up (``tests/test_startup.py``).
"""

from __future__ import annotations

import ast
import contextlib
import threading
from pathlib import Path

import pytest

import ember as em
from ember.actors import device_actor, waiter
from ember.kernels import later, worker_hooks
from ember.kernels.cupy import rendezvous

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ember"
KERNELS = PACKAGE / "kernels"
RUNTIME = "ember.actors"


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, module) of every module ``path`` imports: ``import a.b``, ``from a import b``
    (as ``a.b`` too, since ``b`` may be a module), relative forms resolved against the
    file's package, and ``importlib.import_module`` / ``__import__`` with a literal name."""
    package = _module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names
                      if alias.name != "*"]
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Name) and node.func.id == "__import__")
                   or (isinstance(node.func, ast.Attribute)
                       and node.func.attr == "import_module"))):
            found.append((node.lineno, node.args[0].value))
    return found


def _is_runtime(module: str) -> bool:
    return module == RUNTIME or module.startswith(RUNTIME + ".")


def _source_of(module: str) -> Path | None:
    """The file under ember/ that defines ``module``, or None (a name imported from a
    module, or something outside the package)."""
    if module != "ember" and not module.startswith("ember."):
        return None
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _kernel_files() -> list[Path]:
    files = sorted(KERNELS.rglob("*.py"))
    assert len(files) > 20 and KERNELS / "cupy" / "rendezvous.py" in files
    return files


def test_no_kernel_file_imports_the_runtime():
    offenders = [f"{path.relative_to(ROOT)}:{line}: {module}"
                 for path in _kernel_files()
                 for line, module in _imports(path) if _is_runtime(module)]
    assert not offenders, "ember/kernels/ imports ember.actors:\n" + "\n".join(offenders)


def test_nothing_kernels_import_reaches_the_runtime():
    """Follow every import from kernels/ through the package (all but ``ember`` itself,
    whose ``__init__`` loads everything): none leads to ember.actors."""
    parents: dict[Path, Path | None] = {path: None for path in _kernel_files()}
    todo = list(parents)
    while todo:
        path = todo.pop()
        for line, module in _imports(path):
            chain = [f"{path.relative_to(ROOT)}:{line}"]
            step = parents[path]
            while step is not None:
                chain.append(str(step.relative_to(ROOT)))
                step = parents[step]
            assert not _is_runtime(module), f"{module} reached from " + " <- ".join(chain)
            source = _source_of(module) if module != "ember" else None
            if source is not None and source not in parents:
                parents[source] = path
                todo.append(source)
    reached = {_module_name(path) for path in parents}
    assert {"ember.ir", "ember.tracing", "ember.dtype", "ember.errors",
            "ember.kernels.later", "ember.kernels.worker_hooks"} <= reached


def test_imports_finds_every_form(tmp_path):
    probe = tmp_path / "ember" / "kernels" / "cupy" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text(
        '"""Mentions ember.actors.waiter in prose only."""\n'
        "import ember.actors.ir as ir\n"
        "from ember.actors import trace\n"
        "from ember import actors\n"
        "from ...actors.waiter import Later\n"
        "from ... import actors as runtime\n"
        "def f():\n"
        "    import importlib\n"
        "    importlib.import_module('ember.actors.device_actor')\n"
        "    __import__('ember.actors')\n"
        "from ..fusion import planner\n"
        "from . import codegen\n"
        "import ember.dtype\n")
    runtime = [(line, module) for line, module in _imports(probe, tmp_path)
               if _is_runtime(module)]
    assert runtime == [(2, "ember.actors.ir"), (3, "ember.actors"), (3, "ember.actors.trace"),
                       (4, "ember.actors"), (5, "ember.actors.waiter"),
                       (5, "ember.actors.waiter.Later"), (6, "ember.actors"),
                       (9, "ember.actors.device_actor"), (10, "ember.actors")]


def test_later_is_the_kernels_and_a_waiter_waits_for_it():
    assert waiter.Later is later.Later

    class Copied(later.Later):
        def __init__(self, value=None, error=None):
            self.value, self.error = value, error

        def done(self):
            return True

        def result(self):
            if self.error is not None:
                raise self.error
            return self.value

    slot = waiter.Waiter()
    slot.resolve(Copied(value=[1.5, 2.0]))
    assert slot.wait(lambda: True, "cpu:0") == [1.5, 2.0]
    failed = waiter.Waiter()
    failed.resolve(Copied(error=ValueError("copy failed")))
    with pytest.raises(ValueError, match="copy failed"):
        failed.wait(lambda: True, "cpu:0")


def test_the_runtime_installs_its_hook_and_the_rendezvous_uses_it():
    # Loading ember loaded the actors, which installed theirs: off a worker thread it
    # does nothing, as device_actor's own does.
    with worker_hooks.waiting_on_others():
        pass
    entered = []

    @contextlib.contextmanager
    def recording():
        entered.append(threading.current_thread().name)
        yield

    cond = threading.Condition()
    try:
        worker_hooks.install_waiting_on_others(recording)
        with cond:
            assert rendezvous._wait_for_others(cond, lambda: True, 1.0)
            assert not rendezvous._wait_for_others(cond, lambda: False, 0.01)
    finally:
        worker_hooks.install_waiting_on_others(device_actor.waiting_on_others)
    assert entered == [threading.current_thread().name] * 2


def test_the_neutral_trace_module_leaves_em_trace_the_function():
    import ember.runtime
    import ember.tracing

    assert em.trace is ember.runtime.trace and callable(em.trace)
    with em.trace() as tr:
        (em.arange(4, dtype=em.float32) * 2).numpy()
    assert isinstance(tr, ember.tracing.Trace)
    assert any(event.name == "mul" for event in tr.events), [e.name for e in tr.events]
