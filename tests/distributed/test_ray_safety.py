"""A local RayCluster stays on loopback and leaves no process behind.

The test adds an interface with an address leading nowhere (inside the
loopback-only namespace the tests run in), so a server binding every interface or a
process using the machine's own address would show in the namespace's socket tables.
"""

import ipaddress
import os
import subprocess
import time

import numpy as np
import pytest

import ember as em
from ember import distributed as dist
from ember import nn, train
from tests.distributed.models import adam_fn, data, model_fn


def gone(pids, within=20.0):
    """The pids still alive (not zombies) after waiting up to ``within`` seconds."""
    deadline = time.monotonic() + within
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [p for p in alive if _alive(p)]
    return alive


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _address(hex_address):
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return ipaddress.IPv4Address(raw[::-1])
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    address = ipaddress.IPv6Address(words)
    return address.ipv4_mapped or address


def sockets():
    """(table, local address, remote address, state) of every socket in the namespace."""
    found = []
    for table in ("tcp", "tcp6", "udp", "udp6"):
        with open(f"/proc/net/{table}") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                local, remote = (_address(x.split(":")[0]) for x in fields[1:3])
                found.append((table, local, remote, fields[3]))
    return found


@pytest.fixture
def dummy_interface():
    if os.geteuid() != 0:
        pytest.skip("adding a dummy interface needs root in the namespace")
    run = lambda *cmd: subprocess.run(cmd, check=True)  # noqa: E731
    # A veth pair (the kernel may lack the dummy type) whose far end has no address,
    # carrying the default route: the machine's "own address" is 10.213.0.1.
    run("ip", "link", "add", "ember-dummy0", "type", "veth", "peer", "name", "ember-dummy1")
    run("ip", "addr", "add", "10.213.0.1/24", "dev", "ember-dummy0")
    run("ip", "link", "set", "ember-dummy0", "up")
    run("ip", "link", "set", "ember-dummy1", "up")
    run("ip", "route", "add", "default", "dev", "ember-dummy0")
    try:
        yield
    finally:
        run("ip", "link", "del", "ember-dummy0")


def test_local_cluster_uses_loopback_only_and_ends_its_processes(dummy_interface):
    with dist.RayCluster(2) as cluster:
        pids = cluster.ray_pids()
        em.manual_seed(0)
        learner = train.Learner(model_fn, adam_fn, nn.F.cross_entropy, cluster=cluster,
                                progress=False)
        history = learner.fit_sync(train.DataLoader(data(), batch_size=32), epochs=1)
        assert np.isfinite(history.train["loss"][0])
        seen = sockets()
        assert len(seen) > 5  # Ray's servers and their connections are in the tables
        outside = [s for s in seen if not s[1].is_loopback
                   or not (s[2].is_loopback or s[2].is_unspecified)]
        assert outside == [], outside
    assert gone(pids) == []


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_workers"):
        dist.RayCluster(0)
    with pytest.raises(ValueError, match="device"):
        dist.RayCluster(1, device="tpu")
    with pytest.raises(ValueError, match="shard"):
        train.DataLoader(data(), batch_size=4, shard=(2, 2))
