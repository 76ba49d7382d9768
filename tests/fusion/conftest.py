"""Fixtures of the fusion tests."""

from __future__ import annotations

import pytest

from ember.kernels.numpy import fused


@pytest.fixture
def no_fused_failures(monkeypatch):
    """Fail the test if a fused group raised on the CPU: the device would have run its
    members unfused, giving the right bits and hiding the executor's bug."""
    failures = []
    run_fused = fused.run_fused

    def watched(*args):
        try:
            return run_fused(*args)
        except Exception as exc:
            failures.append(exc)
            raise

    monkeypatch.setattr(fused, "run_fused", watched)
    yield
    assert not failures, f"fused groups raised and ran unfused: {failures!r}"
