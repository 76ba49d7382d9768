"""Shared fixtures: the devices every backend-agnostic test runs on."""

from __future__ import annotations

import pytest

import ember as em
from ember.actors import step_graphs
from ember.errors import DeviceError, DTypeError, KernelError

# Later backends join here: cuda:0 / wgpu:0 when em.available() lists them.
DEVICES = ["cpu:0", "cpu:1"] + [str(d) for d in em.available("cuda")[:1] + em.available("wgpu")[:1]]


@pytest.fixture(params=DEVICES)
def device(request) -> em.Device:
    return em.device(request.param)


_CUDA = em.available("cuda")[:1]


@pytest.fixture(autouse=True)
def _graph_room(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests share cuda:0, and a device keeps at most MAX_GRAPHS captured graphs: each test
    gets room for its own captures, whatever ran before it in the process."""
    if _CUDA and _CUDA[0]._actor is not None:  # started by an earlier test, not here
        held = _CUDA[0].actor.graphs
        if held is not None:
            monkeypatch.setattr(step_graphs, "MAX_GRAPHS", held._graphs + step_graphs.MAX_GRAPHS)


def _refused_dtype(error: BaseException) -> DTypeError | DeviceError | None:
    """The device's refusal of a dtype it cannot hold (WGSL has no float64, bfloat16 or
    int64 past int32), or of an op it declares it does not run (linalg on wgpu): raised at
    the call, or as the cause of a failed read for values that reached the device by a
    move."""
    cause = error.__cause__ if isinstance(error, KernelError) else error
    if isinstance(cause, DTypeError) and ("is not supported on" in str(cause)
                                          or "do not fit" in str(cause)
                                          or "does not fit" in str(cause)):
        return cause
    if isinstance(cause, DeviceError) and ("no kernel on" in str(cause)
                                           or "not supported on" in str(cause)):
        return cause
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A device-parametrized test that fails only because its device refuses a dtype is
    reported as skipped, with the refusal as the reason (never silently)."""
    outcome = yield
    report = outcome.get_result()
    if call.when != "call" or call.excinfo is None or "device" not in item.fixturenames:
        return
    refusal = _refused_dtype(call.excinfo.value)
    if refusal is not None:
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {refusal}")
