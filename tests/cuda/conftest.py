"""The ``cuda`` fixture: the first GPU (tests using it are marked ``gpu.needs_gpu``)."""

from __future__ import annotations

import pytest

import ember as em


@pytest.fixture
def cuda() -> em.Device:
    return em.cuda(0)
