"""The distributed tests start Ray: they run only where ray is installed and the network
namespace holds loopback alone (``unshare -n``, as .ci/run does), so nothing can leave
this machine even by mistake."""

import pytest


def interfaces() -> set[str]:
    """This network namespace's interfaces (``/proc/net/dev`` follows the namespace;
    ``/sys/class/net`` keeps the host's without a remount)."""
    with open("/proc/net/dev") as f:
        return {line.split(":")[0].strip() for line in f.readlines()[2:]}


@pytest.fixture(autouse=True, scope="module")
def _loopback_only():
    pytest.importorskip("ray")
    if interfaces() != {"lo"}:
        pytest.skip("the distributed tests run only in a loopback-only network namespace "
                    "(unshare -n; see .ci/run)")
