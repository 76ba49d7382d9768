"""The actor runtime: futures, batching, failures, cancellation, liveness, shutdown."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import trio

import ember as em
from ember.kernels.numpy.table import KERNELS
from ember.ops._core import call
from tests.runtime_mode import lazy_only

_gates: dict[int, threading.Event] = {}


def _blocking_kernel(msg, pool, x):
    """Waits for its gate: lets a test hold a device busy."""
    if not _gates[msg.attrs[0]].wait(10):
        raise TimeoutError("test gate never opened")
    return x.copy()


def _failing_kernel(msg, pool, x):
    raise ValueError("injected failure")


KERNELS.setdefault("test_block", _blocking_kernel)
KERNELS.setdefault("test_fail", _failing_kernel)


def blocked(x: em.Tensor) -> tuple[em.Tensor, threading.Event]:
    gate = threading.Event()
    _gates[id(gate)] = gate
    return call("test_block", (x,), x.shape, x.dtype, (id(gate),)), gate


def failing(x: em.Tensor) -> em.Tensor:
    return call("test_fail", (x,), x.shape, x.dtype)


@lazy_only
def test_ops_return_before_data_exists():
    x = em.ones(4)
    y, gate = blocked(x)
    start = time.perf_counter()
    z = (y * 2 + 1).exp()
    assert time.perf_counter() - start < 0.5
    assert z.shape == (4,) and z.dtype == em.float32
    check = z.device.actor.check(z._id)
    time.sleep(0.05)
    assert not check.done
    gate.set()
    np.testing.assert_allclose(z.numpy(), np.exp(np.full(4, 3.0, np.float32)))


@lazy_only
def test_failure_reaches_its_reader_and_only_its_reader():
    x = em.arange(6).astype(em.float32)
    bad = call("test_fail", (x,), x.shape, x.dtype)  # the line named in the error
    line = sys._getframe().f_lineno - 1
    downstream = bad * 2 + 1
    good = x * 3
    with pytest.raises(em.KernelError) as info:
        downstream.numpy()
    message = str(info.value)
    assert "test_fail" in message and f"test_runtime.py:{line}" in message
    assert isinstance(info.value.__cause__, ValueError)
    assert "injected failure" in str(info.value.__cause__)
    with pytest.raises(em.KernelError):
        bad.numpy()
    np.testing.assert_array_equal(good.numpy(), np.arange(6) * 3.0)
    np.testing.assert_array_equal((x + 1).numpy(), np.arange(6) + 1.0)


@lazy_only
def test_failure_crosses_devices():
    bad = failing(em.ones(3))
    moved = bad.to(em.cpu(1))
    with pytest.raises(em.KernelError, match="test_fail"):
        moved.numpy()
    assert (em.ones(2, device="cpu:1") + 1).tolist() == [2.0, 2.0]


def test_blocking_read_inside_trio_says_await():
    async def main():
        t = em.ones(3)
        with pytest.raises(em.EmberError, match="await"):
            t.numpy()
        with pytest.raises(em.EmberError, match="await"):
            em.ones(1).item()
        with pytest.raises(em.EmberError, match="await"):
            em.sync()
        data = await t
        assert data.tolist() == [1.0, 1.0, 1.0]
        # Once read, the cached value is returned without waiting.
        assert t.tolist() == [1.0, 1.0, 1.0]

    em.run(main)


@lazy_only
async def test_await_parks_the_task_and_cancel_leaves_tensor_readable():
    x = em.ones(5)
    y, gate = blocked(x)
    with trio.move_on_after(0.05) as scope:
        await y
    assert scope.cancelled_caught
    gate.set()
    np.testing.assert_array_equal(await y, np.ones(5, np.float32))
    np.testing.assert_array_equal(await (y + 1), np.full(5, 2.0, np.float32))


async def test_awaits_do_not_use_a_thread_each():
    before = threading.active_count()
    ts = [em.full((3,), float(i)) * 2 for i in range(200)]
    async with trio.open_nursery() as nursery:
        results = {}

        async def read(i):
            results[i] = await ts[i]

        for i in range(len(ts)):
            nursery.start_soon(read, i)
    assert threading.active_count() <= before + 1  # at most a lazily started actor
    for i, value in results.items():
        assert value.tolist() == [2.0 * i] * 3


def _random_program(rng: np.random.Generator, steps: int):
    """A list of (op, operand) steps applied to a running value."""
    ops = ["add", "mul", "sub", "tanh", "abs", "max0"]
    return [(ops[rng.integers(len(ops))], float(rng.uniform(-1, 1))) for _ in range(steps)]


def _apply(value, program, xp_max):
    for op, c in program:
        if op == "add":
            value = value + c
        elif op == "mul":
            value = value * c
        elif op == "sub":
            value = c - value
        elif op == "tanh":
            value = value.tanh() if hasattr(value, "tanh") and not isinstance(value, np.ndarray) else np.tanh(value)
        elif op == "abs":
            value = abs(value)
        else:
            value = xp_max(value)
    return value


async def test_concurrent_tasks_on_two_devices_match_numpy():
    rng = np.random.default_rng(7)
    programs = [_random_program(rng, 300) for _ in range(8)]
    starts = [rng.uniform(-1, 1, (4, 3)).astype(np.float32) for _ in range(8)]
    results = {}

    async def task(i):
        device = em.cpu(i % 2)
        t = em.tensor(starts[i], device=device)
        for j in range(0, 300, 50):  # yield to other tasks between chunks
            t = _apply(t, programs[i][j:j + 50], lambda v: v.maximum(0.0))
            await trio.sleep(0)
        results[i] = await t

    async with trio.open_nursery() as nursery:
        for i in range(8):
            nursery.start_soon(task, i)
    for i in range(8):
        want = _apply(starts[i], programs[i], lambda v: np.maximum(v, np.float32(0)))
        np.testing.assert_allclose(results[i], want, rtol=1e-5, atol=1e-6)


def test_threads_submitting_to_one_device_match_numpy():
    rng = np.random.default_rng(11)
    programs = [_random_program(rng, 200) for _ in range(4)]
    out = {}

    def worker(i):
        t = _apply(em.full((8,), 0.5), programs[i], lambda v: v.maximum(0.0))
        out[i] = t.numpy()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for i in range(4):
        want = _apply(np.full(8, 0.5, np.float32), programs[i],
                      lambda v: np.maximum(v, np.float32(0)))
        np.testing.assert_allclose(out[i], want, rtol=1e-5, atol=1e-6)


def test_bool_raises_and_points_to_item():
    with pytest.raises(TypeError, match=r"item\(\)"):
        bool(em.ones(1))
    with pytest.raises(TypeError, match=r"item\(\)"):
        if em.ones(1) > 0:
            pass


def test_reads_are_read_only_and_survive_buffer_reuse():
    a = em.full((512, 512), 3.0)  # large enough to be pooled
    data = a.numpy()
    assert not data.flags.writeable
    del a
    for _ in range(5):
        em.full((512, 512), 7.0).numpy()
    assert (data == 3.0).all()


def test_dropped_buffers_return_to_the_pool():
    device = em.cpu(3)
    em.sync(device)
    before = em.stats(device)
    for _ in range(20):
        t = em.ones((256, 256), device=device) * 2
        del t
    em.sync(device)
    after = em.stats(device)
    assert after.buffers_pooled >= 1
    assert after.bytes_held <= before.bytes_held + 2 * 256 * 256 * 4


def test_stats_count_submitted_and_executed():
    device = em.cpu(4)
    start = em.stats(device)
    x = em.ones(10, device=device)
    y = (x + 1) * 2
    em.sync(device)
    s = em.stats(device)
    assert s.ops_submitted - start.ops_submitted == 3
    assert s.ops_executed - start.ops_executed == 3
    assert s.queue_depth == 0 and s.ops_in_flight == 0
    assert s.bytes_held >= 2 * 40
    assert set(s.as_dict()) >= {"ops_submitted", "ops_executed", "kernels_launched", "ops_fused",
                                "groups", "plan_cache_hits", "autotune_hits", "autotune_misses",
                                "bytes_held"}
    total = em.stats()
    assert total.ops_submitted >= s.ops_submitted
    del y


@lazy_only
def test_back_pressure_waits_for_the_worker():
    device = em.cpu(5)
    actor = device.actor
    actor.max_ops = 16
    try:
        x = em.ones(2, device=device)
        y, gate = blocked(x)
        submitted = []

        def submit_many():
            t = y
            for _ in range(64):
                t = t + 1
                submitted.append(1)

        thread = threading.Thread(target=submit_many)
        thread.start()
        time.sleep(0.2)
        assert len(submitted) < 64  # held back while the worker is blocked
        gate.set()
        thread.join(5)
        assert len(submitted) == 64
    finally:
        actor.max_ops = 65536


def test_rss_stays_flat_over_create_drop_cycles():
    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def cycle(n):
        for i in range(n):
            t = em.full((1_000_000,), float(i)) + 1.0
            if i % 100 == 0:
                assert t.numpy()[0] == float(i) + 1.0
            del t
        em.sync()

    cycle(300)
    baseline = rss()
    cycle(2000)
    growth = rss() - baseline
    assert growth < 64 << 20, f"RSS grew by {growth / 2**20:.1f} MiB"


def test_trace_records_each_op_with_thread_and_site(tmp_path):
    with em.trace() as tr:
        x = em.ones(3)
        y = x.exp()  # traced line
        line = sys._getframe().f_lineno - 1
        y.numpy()
    names = [e.name for e in tr.events]
    assert "exp" in names
    exp = next(e for e in tr.events if e.name == "exp")
    # The reader found the worker idle and ran the batch itself: the trace says which thread.
    assert exp.device == "cpu:0" and exp.thread == threading.current_thread().name
    assert exp.site.endswith(f"test_runtime.py:{line}") and exp.duration_ns >= 0
    path = tmp_path / "trace.json"
    tr.save(path)
    import json

    data = json.loads(path.read_text())
    events = data["traceEvents"]
    assert any(e["name"] == "exp" and e["ph"] == "X" and "dur" in e for e in events)


def test_a_backward_pass_names_its_callers_line_and_forward_ops_their_own():
    """The backward pass pins its ops' site to its caller's line (found once, not by a
    stack walk per op): the same sites as the walk, and released after the pass."""
    device = em.cpu().autodiff()
    with em.trace() as tr:
        x = em.ones(3, device=device).require_grad()
        y = (x * 2.0).exp()  # forward line
        forward_line = sys._getframe().f_lineno - 1
        grads = y.sum().backward()  # backward line
        backward_line = sys._getframe().f_lineno - 1
        after = x.grad(grads) + 1.0  # after the pass: its own line again
        after_line = sys._getframe().f_lineno - 1
        after.numpy()
    sites = {e.site.rsplit(":", 1)[1] for e in tr.events if e.site.endswith(
        tuple(f"test_runtime.py:{n}" for n in (forward_line, backward_line, after_line)))}
    assert sites == {str(forward_line), str(backward_line), str(after_line)}
    assert sum(e.site.endswith(f":{backward_line}") for e in tr.events) >= 2  # the rules' ops


class _Doubler(em.nn.Module):
    """A module of the user's own: its ops name its own lines."""

    def forward(self, x):
        self.line = sys._getframe().f_lineno + 1
        return x * 2.0


def test_ops_in_embers_modules_name_the_callers_line_and_users_modules_their_own():
    """ember's modules pin their ops' site to the line that called them (found once);
    a user's module inside one (here in a Sequential) unpins it for its own ops."""
    doubler = _Doubler()
    model = em.nn.Sequential(em.nn.Linear(3, 4), doubler, em.nn.ReLU())
    with em.trace() as tr:
        out = model(em.ones((2, 3)))  # the model's line
        model_line = sys._getframe().f_lineno - 1
        plain = out + 1.0  # after the call: its own line again
        plain_line = sys._getframe().f_lineno - 1
        plain.numpy()
    by_op = {}
    for event in tr.events:
        by_op.setdefault(event.name, set()).update(event.site.split(", "))
    here = "test_runtime.py:{}".format
    assert any(site.endswith(here(model_line)) for site in by_op["matmul"])
    assert all(site.endswith(here(model_line)) for op in ("matmul", "relu")
               for site in by_op.get(op, ()) if "test_runtime" in site)
    mul_sites = {site for name, sites in by_op.items() if "mul" in name for site in sites}
    assert any(site.endswith(here(doubler.line)) for site in mul_sites)
    assert any(site.endswith(here(plain_line)) for name, sites in by_op.items()
               if "add" in name for site in sites)
    assert em.ops._core.pinned_site_state().site is None  # released after the call


def test_sync_and_sync_async():
    x = em.ones(100) * 3
    em.sync()
    em.sync("cpu:0")
    em.run(em.sync_async)
    assert x.device.actor.statistics().queue_depth == 0


def test_run_returns_the_result():
    async def double(v):
        return await (em.tensor(v) * 2)

    assert em.run(double, [1, 2]).tolist() == [2, 4]


def _run_python(code: str, env: dict | None = None, timeout: float = 60):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def test_exit_with_work_queued_is_clean():
    started = time.perf_counter()
    result = _run_python("""
        import ember as em
        x = em.ones((1000, 1000))
        ys = [(x * i).exp().tanh() for i in range(200)]
        zs = [em.ones(10, device=em.cpu(1)) + i for i in range(1000)]
    """)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert time.perf_counter() - started < 30


def test_eager_mode_raises_at_the_op_line():
    result = _run_python("""
        import ember as em
        from ember.kernels.numpy.table import KERNELS
        from ember.ops._core import call
        def fail(msg, pool, x):
            raise ValueError("boom")
        KERNELS["test_fail"] = fail
        x = (em.ones(3) + 1) * 2
        stats = x.device.actor.statistics()
        assert stats.ops_executed == stats.ops_submitted
        try:
            call("test_fail", (x,), x.shape, x.dtype)
        except em.KernelError as e:
            print("raised", "boom" in str(e.__cause__))
    """, env={"EMBER_EAGER": "1"})
    assert result.returncode == 0, result.stderr
    assert "raised True" in result.stdout


def test_eager_and_lazy_give_identical_results():
    code = """
        import ember as em, numpy as np
        em.manual_seed(3)
        x = em.randn((64, 33))
        y = ((x * 1.5 - 0.25).tanh() + x.exp() / 3).clamp(-1, 2)
        np.save("{path}", y.numpy())
    """
    paths = []
    for eager in ("0", "1"):
        path = f"/tmp/ember_eager_{eager}_{os.getpid()}.npy"
        result = _run_python(code.format(path=path), env={"EMBER_EAGER": eager})
        assert result.returncode == 0, result.stderr
        paths.append(path)
    a, b = (np.load(p) for p in paths)
    np.testing.assert_array_equal(a, b)
    for p in paths:
        os.unlink(p)


@lazy_only
def test_worker_crash_fails_readers_instead_of_hanging(monkeypatch):
    device = em.cpu(9)
    actor = device.actor
    x = em.ones(4096, device=device)  # large enough to queue: tiny ops run at once when idle
    em.sync(device)

    def crash(batch):
        raise SystemError("simulated runtime bug")

    monkeypatch.setattr(actor, "_run_batch", crash)
    y = x + 1
    started = time.perf_counter()
    with pytest.raises(em.KernelError):
        y.numpy()
    assert time.perf_counter() - started < 5


@pytest.mark.parametrize("setting, backend_bound, expected", [
    (None, None, 4 << 30), (None, 123 << 20, 123 << 20), ("456", 123 << 20, 456)])
def test_the_byte_bound_comes_from_the_setting_else_the_backend(monkeypatch, setting,
                                                                  backend_bound, expected):
    """EMBER_MAX_BYTES_IN_FLIGHT wins; else a backend's own bound (a GPU: a quarter of its
    memory, so 1 GiB elementwise chains are not cut into batches); else 4 GiB."""
    from ember.actors import device_actor
    from ember.kernels.numpy import NumpyBackend

    monkeypatch.setattr(device_actor, "_MAX_BYTES_SETTING", setting)
    backend = NumpyBackend(0)
    if backend_bound is not None:
        backend.max_bytes_in_flight = backend_bound
    actor = device_actor.DeviceActor("cpu:98", backend)
    try:
        assert actor.max_bytes == expected
    finally:
        actor.stop()
