"""Every differentiable op's backward, against finite differences and torch.autograd.

Runs twice: without checkpointing and with "balanced" checkpointing.
"""

from __future__ import annotations

import importlib
import pkgutil

import numpy as np
import pytest

import ember as em
import tests.ops as _cases_package
from tests.ops.grad_harness import GradCase, ember_vjp, finite_differences, torch_vjp


def _all_grad_cases() -> list[GradCase]:
    cases: list[GradCase] = []
    for info in pkgutil.iter_modules(_cases_package.__path__):
        if info.name.startswith("cases_"):
            cases.extend(getattr(importlib.import_module(f"tests.ops.{info.name}"),
                                 "GRAD_CASES", []))
    ids = [c.id for c in cases]
    duplicates = {i for i in ids if ids.count(i) > 1}
    assert not duplicates, f"duplicate grad case ids: {sorted(duplicates)}"
    return cases


GRAD_CASES = _all_grad_cases()
CHECKPOINTING = [None, "balanced"]


@pytest.fixture(params=CHECKPOINTING, ids=["plain", "balanced"])
def autodiff_device(request) -> em.Device:
    return em.cpu(0).autodiff(checkpointing=request.param)


@pytest.mark.parametrize("case", GRAD_CASES, ids=[c.id for c in GRAD_CASES])
def test_gradient_matches_finite_differences(case: GradCase, autodiff_device) -> None:
    _, cot, grads = ember_vjp(case, autodiff_device)
    expected = finite_differences(case, autodiff_device, cot)
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol, err_msg=case.id)


@pytest.mark.parametrize("case", [c for c in GRAD_CASES if c.torch_fn is not None],
                         ids=[c.id for c in GRAD_CASES if c.torch_fn is not None])
def test_gradient_matches_torch(case: GradCase, autodiff_device) -> None:
    pytest.importorskip("torch")
    _, cot, grads = ember_vjp(case, autodiff_device)
    expected = torch_vjp(case, cot)
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=case.id)
