"""The distributed tests start Ray: they run only where ray is installed and the network
namespace holds loopback alone (``unshare -n``, as .ci/run does), so nothing can leave
this machine even by mistake. Tests marked ``without_ray`` start no Ray process and run
anywhere (the NCCL path's own tests, which the GPU machines without Ray run)."""

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "without_ray: a distributed test that starts no Ray")


def interfaces() -> set[str]:
    """This network namespace's interfaces (``/proc/net/dev`` follows the namespace;
    ``/sys/class/net`` keeps the host's without a remount)."""
    with open("/proc/net/dev") as f:
        return {line.split(":")[0].strip() for line in f.readlines()[2:]}


@pytest.fixture(autouse=True)
def _loopback_only(request):
    if request.node.get_closest_marker("without_ray") is not None:
        return
    pytest.importorskip("ray")
    if interfaces() != {"lo"}:
        pytest.skip("the distributed tests run only in a loopback-only network namespace "
                    "(unshare -n; see .ci/run)")
