"""Shared fixtures: the devices every backend-agnostic test runs on."""

from __future__ import annotations

import pytest

import ember as em

# Later backends join here: cuda:0 / wgpu:0 when em.available() lists them.
DEVICES = ["cpu:0", "cpu:1"] + [str(d) for d in em.available("cuda")[:1] + em.available("wgpu")[:1]]


@pytest.fixture(params=DEVICES)
def device(request) -> em.Device:
    return em.device(request.param)
