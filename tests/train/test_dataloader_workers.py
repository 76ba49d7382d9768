"""DataLoader worker processes: the same batches as num_workers=0, errors, shutdown."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import trio

from ember.train import DataLoader


class Squares:
    """A map-style dataset; item 13 fails when ``fail`` is set."""

    def __init__(self, n: int, fail: bool = False) -> None:
        self.n, self.fail = n, fail

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self.fail and i == 13:
            raise KeyError(f"item {i} is missing")
        return np.array([i, i * i], dtype=np.float32), np.int64(i % 3)


def pairs_then_sum(items):
    """A collate_fn: the features, and the sum of each item's label and first feature."""
    features = np.stack([x for x, _ in items])
    return features, np.array([y + x[0] for x, y in items], dtype=np.float32)


def host(loader):
    return [tuple(t.numpy() for t in batch) for batch in loader]


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert len(x) == len(y)
        for u, v in zip(x, y):
            np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("prefetch", [0, 2])
def test_workers_give_the_batches_of_num_workers_0(prefetch):
    data = Squares(37)
    kwargs = dict(batch_size=5, shuffle=True, seed=11, device="cpu", prefetch=prefetch)
    plain = DataLoader(data, **kwargs)
    workers = DataLoader(data, num_workers=3, **kwargs)
    for _ in range(2):  # two epochs: two different orders, the same on both sides
        expected = host(plain)
        assert_same(host(workers), expected)
    assert expected[0][1].dtype == np.int64 and expected[-1][0].shape == (2, 2)


def test_array_dataset_collate_fn_and_sampler_with_workers():
    x = np.arange(40, dtype=np.float32).reshape(20, 2)
    y = np.arange(20) % 4
    sampler = [19, 3, 3, 7, 0, 11, 5]
    for workers in (0, 2):
        loader = DataLoader((x, y), batch_size=3, sampler=sampler, num_workers=workers,
                            collate_fn=pairs_then_sum, device="cpu")
        batches = host(loader)
        assert len(loader) == 3 and len(batches) == 3
        np.testing.assert_array_equal(batches[0][0], x[[19, 3, 3]])
        np.testing.assert_array_equal(batches[2][1], y[[5]] + x[[5], 0])
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader((x, y), batch_size=3, sampler=sampler, shuffle=True)
    with pytest.raises(ValueError, match="num_workers"):
        DataLoader((x, y), batch_size=3, num_workers=-1)
    with pytest.raises(ValueError, match="persistent_workers"):
        DataLoader((x, y), batch_size=3, persistent_workers=True)


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_worker_error_reaches_the_caller_with_its_type(prefetch):
    loader = DataLoader(Squares(30, fail=True), batch_size=4, num_workers=2, device="cpu",
                        prefetch=prefetch)
    seen = []
    with pytest.raises(KeyError, match="item 13 is missing"):
        for batch in loader:
            seen.append(batch)
    assert len(seen) == 3  # batches 0..2 came in order before the failing batch 3


def test_async_iteration_and_persistent_workers():
    loader = DataLoader(Squares(23), batch_size=4, shuffle=True, seed=2, num_workers=2,
                        persistent_workers=True, device="cpu")
    plain = DataLoader(Squares(23), batch_size=4, shuffle=True, seed=2, device="cpu")

    async def collect():
        return [tuple([await t for t in batch]) async for batch in loader]

    first = trio.run(collect)
    pids = loader.worker_pids()
    assert len(pids) == 2
    second = host(loader)
    assert loader.worker_pids() == pids  # the same processes served the second epoch
    assert_same(first, host(plain))
    assert_same(second, host(plain))
    loader.close()
    assert loader.worker_pids() == []
    for pid in pids:
        assert not _alive(pid)


def test_state_dict_resume_is_exact_with_workers():
    kwargs = dict(batch_size=3, shuffle=True, device="cpu")
    loader = DataLoader(Squares(17), num_workers=2, **kwargs)
    host(loader)
    state = loader.state_dict()
    expected = host(loader)
    again = DataLoader(Squares(17), num_workers=2, **kwargs)
    again.load_state_dict(state)
    assert_same(host(again), expected)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purpose
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    import numpy as np
    from ember.train import DataLoader
    from tests.train.test_dataloader_workers import Squares

    loader = DataLoader(Squares(400), batch_size=2, num_workers=2, device="cpu")
    mode = sys.argv[1]
    for k, batch in enumerate(loader):
        if k == 0:
            kids = [int(p) for p in os.popen(f"pgrep -P {os.getpid()}").read().split()]
            print("PIDS", *kids, flush=True)
        if mode == "break" and k == 3:
            break
        if mode == "interrupt" and k == 3:
            os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)
    print("DONE", flush=True)
""")


@pytest.mark.parametrize("mode", ["break", "interrupt"])
def test_no_orphan_workers_after_break_or_ctrl_c(mode):
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True,
                          timeout=120, env=env)
    line = next(line for line in proc.stdout.splitlines() if line.startswith("PIDS"))
    pids = [int(p) for p in line.split()[1:]]
    if mode == "break":
        assert proc.returncode == 0 and "DONE" in proc.stdout, proc.stderr
    else:
        assert proc.returncode != 0 and "KeyboardInterrupt" in proc.stderr
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids), pids


def test_workers_exit_when_their_parent_is_killed():
    script = textwrap.dedent("""
        import os, time
        from ember.train import DataLoader
        from tests.train.test_dataloader_workers import Squares
        loader = DataLoader(Squares(10), batch_size=2, num_workers=2, persistent_workers=True,
                            device="cpu")
        list(loader)
        print("PIDS", *loader.worker_pids(), flush=True)
        time.sleep(60)
    """)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env=env)
    try:
        line = proc.stdout.readline()
        pids = [int(p) for p in line.split()[1:]]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids), pids
