"""Runs every declared op case on every available device (see harness.py)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import tests.ops as _cases_package
from tests.ops.harness import Case, run_case


def _all_cases() -> list[Case]:
    cases: list[Case] = []
    for info in pkgutil.iter_modules(_cases_package.__path__):
        if info.name.startswith("cases_"):
            cases.extend(importlib.import_module(f"tests.ops.{info.name}").CASES)
    ids = [c.id for c in cases]
    duplicates = {i for i in ids if ids.count(i) > 1}
    assert not duplicates, f"duplicate case ids: {sorted(duplicates)}"
    return cases


CASES = _all_cases()


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_op(case: Case, device) -> None:
    run_case(case, device)
