"""Every public name has a docstring: the reference (mkdocstrings) is built from them.

The public names are walked, not listed, so that a name added later is covered: each
public module's ``__all__`` (names not starting with ``_`` where it has none), and for
each public class its public methods and properties (inherited docstrings count: a
layer's ``forward`` may rely on ``Module.forward``'s). Tensor's operator dunders are
covered by the class docstring's ``Operators:`` section.
"""

from __future__ import annotations

import doctest
import inspect
import re
import types

import numpy as np

import ember as em
from ember import distributed, linalg, nn, optim, train
from ember.nn import functional, init
from ember.optim import lr_scheduler

# The public modules whose names are walked (em.__all__ reaches most; these may not be in it).
MODULES = (em, nn, functional, init, optim, lr_scheduler, train, linalg, distributed)
# Enough text to be a sentence: a few words, not just a restated name.
MIN_WORDS = 3


def _public_names(module: types.ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:  # the functions and classes the module defines (not those it imports)
        names = [n for n, obj in vars(module).items() if not n.startswith("_")
                 and getattr(obj, "__module__", None) == module.__name__]
    return list(names)


def _is_trivial(doc: str | None) -> bool:
    if not doc:
        return True
    return len(re.findall(r"[A-Za-z]{2,}", doc)) < MIN_WORDS


def _members(cls: type) -> list[tuple[str, object]]:
    """The public methods and properties of ``cls``, its own and those inherited from
    ember's classes (a base outside ember, such as ``msgspec.Struct``, is not ours to
    document)."""
    found = []
    for klass in cls.__mro__:
        if not klass.__module__.startswith("ember"):
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") or any(n == name for n, _ in found):
                continue
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if inspect.isfunction(value) or isinstance(value, property):
                found.append((name, getattr(cls, name, value) if not isinstance(value, property)
                              else value))
    return found


def _walk() -> dict[str, object]:
    """``{qualified public name: object}`` over every public module and class."""
    seen: dict[str, object] = {}
    classes: dict[str, type] = {}
    for module in MODULES:
        for name in _public_names(module):
            obj = getattr(module, name)
            if isinstance(obj, types.ModuleType):
                continue  # a public module: walked as one of MODULES (and checked below)
            if isinstance(obj, em.DType):
                continue  # a value (em.float32), not a callable with a docstring
            qualified = f"{module.__name__}.{name}"
            seen[qualified] = obj
            if inspect.isclass(obj) and obj.__module__.startswith("ember"):
                classes[qualified] = obj
    for qualified, cls in classes.items():
        for name, member in _members(cls):
            seen[f"{qualified}.{name}"] = member
    return seen


def _doc(obj: object) -> str | None:
    if isinstance(obj, property):
        return obj.__doc__ or (obj.fget.__doc__ if obj.fget else None)
    return inspect.getdoc(obj)


def test_the_walk_reaches_the_names_it_must():
    names = _walk()
    for name in ("ember.exp", "ember.Tensor.exp", "ember.cpu",
                 "ember.Tensor.T", "ember.nn.Linear", "ember.nn.Module.parameters",
                 "ember.nn.functional.cross_entropy", "ember.nn.init.xavier_uniform_",
                 "ember.optim.Adam.step", "ember.optim.lr_scheduler.StepLR",
                 "ember.train.Learner.fit", "ember.train.DataLoader", "ember.linalg.solve",
                 "ember.distributed.RayCluster", "ember.Device.autodiff", "ember.save"):
        assert name in names, name
    assert len(names) > 500


def test_every_public_module_has_a_docstring():
    missing = [m.__name__ for m in MODULES if _is_trivial(m.__doc__)]
    assert not missing, f"modules without a docstring: {missing}"


def test_every_public_name_has_a_docstring():
    missing = sorted(name for name, obj in _walk().items() if _is_trivial(_doc(obj)))
    assert not missing, (f"{len(missing)} public names without a docstring of a sentence or "
                         f"more:\n  " + "\n  ".join(missing))


def test_tensor_lists_its_operators():
    doc = em.Tensor.__doc__ or ""
    assert "Operators:" in doc
    operators = {"__add__": "+", "__sub__": "-", "__mul__": "*", "__truediv__": "/",
                 "__floordiv__": "//", "__mod__": "%", "__pow__": "**", "__matmul__": "@",
                 "__and__": "&", "__or__": "|", "__xor__": "^", "__invert__": "~",
                 "__eq__": "==", "__ne__": "!=", "__lt__": "<", "__le__": "<=",
                 "__gt__": ">", "__ge__": ">=", "__getitem__": "t[", "__setitem__": "] ="}
    section = doc.split("Operators:", 1)[1]
    spelled = {word for span in re.findall(r"``(.+?)``", section, re.S) for word in span.split()}
    spelled |= {span for span in re.findall(r"``(.+?)``", section, re.S)}
    for dunder, symbol in operators.items():
        if dunder in vars(em.Tensor):
            assert any(symbol in word for word in spelled), (dunder, symbol)


def test_the_tensor_docs_table_has_no_dead_entry():
    # ember/tensor_docs.py documents Tensor's one-line methods: an entry whose method is
    # gone, or that a docstring written on the method shadows, is dead text.
    from ember import tensor_docs

    dead = []
    for name in tensor_docs.DOCS.keys() | tensor_docs.FROM_OPS.keys():
        member = vars(em.Tensor).get(name)
        table = (tensor_docs.DOCS[name] if name in tensor_docs.DOCS
                 else tensor_docs._from_ops(tensor_docs.FROM_OPS[name]))
        if member is None or member.__doc__ != table:
            dead.append(name)
    assert not dead, f"entries of ember/tensor_docs.py to remove: {sorted(dead)}"


def test_generated_functions_share_their_method_docstring():
    # em.NAME(t, ...) is generated from the Tensor method: one source for both docstrings.
    assert em.exp.__doc__ and em.Tensor.exp.__doc__ in em.exp.__doc__
    assert em.sum.__doc__ and em.Tensor.sum.__doc__ in em.sum.__doc__


def test_examples_are_true(tmp_path, monkeypatch):
    # Every public docstring's examples run as doctests on cpu:0 (in a scratch folder: some
    # write files). An example that uses names it does not define (``model``, ``opt``,
    # ``loader``: a usage sketch) raises NameError and is left out; every other failure is
    # a false example.
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EMBER_DEVICE", raising=False)  # the examples' default device: cpu:0
    precision = em.get_float32_matmul_precision()  # an example sets it
    try:
        _run_examples()
    finally:
        em.set_float32_matmul_precision(precision)


def _run_examples() -> None:
    names = {"em": em, "np": np, "nn": nn, "F": functional, "optim": optim, "train": train,
             "linalg": linalg, "lr_scheduler": lr_scheduler}
    runner = doctest.DocTestRunner(verbose=False,  # not doctest's default: '-v' in sys.argv
                                   optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    failures, checked, seen = [], 0, set()
    for name, obj in sorted(_walk().items()):
        doc = _doc(obj) or ""
        if ">>>" not in doc or doc in seen:
            continue
        seen.add(doc)
        report: list[str] = []
        runner.run(doctest.DocTestParser().get_doctest(doc, dict(names), name, None, 0),
                   out=report.append)
        if not report:
            checked += 1
        elif "NameError" not in "".join(report):
            failures.append("".join(report))
    assert not failures, "\n".join(failures)
    assert checked > 300  # the Tensor methods' and em.NAME functions' examples among them
