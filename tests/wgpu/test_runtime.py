"""The WebGPU runtime and renderer: dtypes, caches, fusion, strided inputs, failures.

Runs on the first wgpu adapter (lavapipe in CI); skips cleanly without one.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import ember as em
from ember.errors import DTypeError, KernelError
from tests.runtime_mode import lazy_only

WGPU = em.available("wgpu")
pytestmark = pytest.mark.skipif(not WGPU, reason="no wgpu adapter (install a Vulkan driver, "
                                                 "e.g. mesa-vulkan-drivers)")
RNG = np.random.default_rng(8)


def _backend():
    return WGPU[0].actor.backend


def _floats(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def test_float64_is_refused_at_the_call_naming_the_op_and_device() -> None:
    with pytest.raises(DTypeError, match="tensor: float64 is not supported on wgpu:0"):
        em.tensor(np.zeros(3), device=WGPU[0])


def test_casting_to_float64_is_refused_at_the_call() -> None:
    t = em.tensor(_floats(3), device=WGPU[0])
    with pytest.raises(DTypeError, match="cast: float64 is not supported on wgpu:0"):
        t.to(em.float64)


def test_moving_a_float64_tensor_to_wgpu_is_refused_at_the_call() -> None:
    with pytest.raises(DTypeError, match="to: float64 is not supported on wgpu:0"):
        em.tensor(np.zeros(3)).to(WGPU[0])


def test_bfloat16_is_refused_at_the_call() -> None:
    with pytest.raises(DTypeError, match="tensor: bfloat16 is not supported on wgpu:0"):
        em.tensor([1.0, 2.0], dtype=em.bfloat16, device=WGPU[0])


def test_int64_is_stored_as_int32_and_read_back_as_int64() -> None:
    values = np.array([-(2 ** 31), -1, 0, 7, 2 ** 31 - 1], dtype=np.int64)
    t = em.tensor(values, device=WGPU[0])
    assert t.dtype == em.int64
    got = (t + 0).numpy()
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, values)


def test_int64_outside_int32_is_refused_at_the_upload() -> None:
    with pytest.raises(DTypeError, match="tensor: int64 values outside the int32 range"):
        em.tensor(np.array([2 ** 40]), device=WGPU[0])


def test_int64_outside_int32_moved_to_wgpu_fails_at_the_read() -> None:
    # The values are a property of the data, known only when the move runs.
    moved = em.tensor(np.array([2 ** 40])).to(WGPU[0])
    with pytest.raises(KernelError, match="outside the int32 range") as info:
        moved.numpy()
    assert isinstance(info.value.__cause__, DTypeError)


def test_bool_round_trips_and_combines() -> None:
    a = np.array([True, False, True, False])
    b = np.array([True, True, False, False])
    ta, tb = em.tensor(a, device=WGPU[0]), em.tensor(b, device=WGPU[0])
    np.testing.assert_array_equal((ta & tb).numpy(), a & b)
    np.testing.assert_array_equal((ta ^ tb).numpy(), a ^ b)
    np.testing.assert_array_equal(ta.numpy(), a)


@pytest.mark.skipif(not WGPU or not WGPU[0].actor.backend.rt.has_f16,
                    reason="the adapter lacks shader-f16")
def test_float16_rounds_once_per_op_like_the_cpu() -> None:
    x = _floats(257).astype(np.float16)
    want = (em.tensor(x) * 3.1 + 0.7).exp().numpy()
    got = (em.tensor(x, device=WGPU[0]) * 3.1 + 0.7).exp().numpy()
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3)


def _float32_values_around_the_float16_grid() -> np.ndarray:
    """Ties and near-ties of the normal and subnormal float16 grids, the overflow edge
    (65504 + 16 is the tie to inf), the subnormal edge 2**-14, specials, random bits."""
    one_ulp = np.float32(2.0 ** -10)
    edges = [1 + one_ulp / 2, 1 + 3 * one_ulp / 2, np.nextafter(1 + one_ulp / 2, 2),
             65504.0, 65519.996, 65520.0, 70000.0, 2.0 ** -14, np.nextafter(2.0 ** -14, 0),
             2.0 ** -25, 3 * 2.0 ** -25, np.nextafter(2.0 ** -25, 1), 2.0 ** -26, 1e-30,
             0.0, -0.0, np.inf, -np.inf, np.nan]
    edges = np.array(edges, np.float32)
    bits = RNG.integers(0x30000000, 0x48000000, 4000, dtype=np.uint32).view(np.float32)
    return np.concatenate([edges, -edges, bits, -bits])


def test_float32_to_float16_rounds_to_nearest_even_like_numpy() -> None:
    # round_f16 rounds on the bits (NVIDIA's compiler dropped f32(f16(x)) round trips);
    # the cast back to float32 keeps the register's value, so each bit is compared.
    x = _float32_values_around_the_float16_grid()
    got = em.tensor(x, device=WGPU[0]).astype(em.float16).astype(em.float32).numpy()
    with np.errstate(over="ignore"):  # past 65520 is inf, as on the device
        want = x.astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    np.testing.assert_array_equal(got[finite].view(np.uint32), want[finite].view(np.uint32))


def test_one_pipeline_serves_every_size_and_scalar() -> None:
    rt = _backend().rt
    em.sync()
    for n in (5, 17, 1000):
        (em.tensor(_floats(n), device=WGPU[0]) * 0.5).numpy()
    compiled = rt.compiles
    for n, scale in ((3, 1.5), (4096, -2.0), (77, 3.0)):
        x = _floats(n)
        got = (em.tensor(x, device=WGPU[0]) * scale).numpy()
        np.testing.assert_allclose(got, x * np.float32(scale), rtol=1e-6)
    assert rt.compiles == compiled


@lazy_only
def test_a_fused_chain_runs_as_one_kernel() -> None:
    x, w, b = _floats(64, 32), _floats(32), _floats(32)
    want = em.nn.functional.gelu(em.tensor(x) * em.tensor(w) + em.tensor(b)).numpy()
    tx, tw, tb = (em.tensor(v, device=WGPU[0]) for v in (x, w, b))
    em.sync()
    before = em.stats(WGPU[0])
    got = em.nn.functional.gelu(tx * tw + tb).numpy()
    after = em.stats(WGPU[0])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert after.groups - before.groups == 1
    assert after.kernels_launched - before.kernels_launched == 1


def test_groups_past_the_storage_buffer_limit_split_by_output() -> None:
    rt = _backend().rt
    limit = rt.max_storage_buffers
    arrays = [_floats(8) for _ in range(limit - 1)]
    tensors = [em.tensor(a, device=WGPU[0]) for a in arrays]
    # Every partial sum stays alive, so the group materializes more outputs than bindings allow.
    partial = [tensors[0]]
    for t in tensors[1:]:
        partial.append(partial[-1] + t)
    got = [p.numpy() for p in partial]
    want = np.cumsum(np.stack(arrays), axis=0)
    np.testing.assert_allclose(np.stack(got), want, rtol=1e-5, atol=1e-5)


def test_strided_and_broadcast_inputs_need_no_copy() -> None:
    x, y = _floats(6, 5), _floats(6, 1)
    tx, ty = em.tensor(x, device=WGPU[0]), em.tensor(y, device=WGPU[0])
    np.testing.assert_allclose((tx.T * 2 + ty.T).numpy(), x.T * 2 + y.T, rtol=1e-6)
    np.testing.assert_allclose(tx.T.numpy(), x.T)


def test_reductions_over_strided_views() -> None:
    x = _floats(4, 6, 5)
    t = em.tensor(x, device=WGPU[0]).permute(2, 0, 1)
    np.testing.assert_allclose(t.sum(dim=(0, 2)).numpy(), x.transpose(2, 0, 1).sum(axis=(0, 2)),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(t.argmax(dim=1).numpy(), x.transpose(2, 0, 1).argmax(axis=1))


def test_matmul_of_transposed_and_batched_operands() -> None:
    a, b = _floats(3, 70, 33), _floats(130, 33)
    got = (em.tensor(a, device=WGPU[0]) @ em.tensor(b, device=WGPU[0]).T).numpy()
    np.testing.assert_allclose(got, a @ b.T, rtol=1e-4, atol=1e-4)


@lazy_only
def test_a_failing_op_reaches_only_its_reader() -> None:
    good = em.tensor(_floats(4), device=WGPU[0]) + 1
    bad = em.tensor(np.full(4, 2 ** 40)).to(WGPU[0]) + 1  # the move fails on the worker
    with pytest.raises(KernelError):
        bad.numpy()
    assert good.numpy().shape == (4,)


def test_buffers_return_to_the_pool() -> None:
    rt = _backend().rt
    for _ in range(3):
        (em.tensor(_floats(1 << 14), device=WGPU[0]) * 2).numpy()
    em.sync()
    assert rt.pool.reused > 0


def test_no_adapter_means_an_empty_list_not_a_hang() -> None:
    # No Vulkan ICD: wgpu finds only what is left (none, or OpenGL, which ember skips).
    code = "import ember as em; print(em.available('wgpu'))"
    env = {"VK_ICD_FILENAMES": "/nonexistent.json", "VK_DRIVER_FILES": "/nonexistent.json",
           "WGPU_BACKEND_TYPE": "Vulkan", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("n", [1 << 15, (1 << 15) + 2])
def test_large_contiguous_groups_move_vec4s(n: int) -> None:
    # 2**15 elements take the vec4 path, 2**15 + 2 the scalar one: same results.
    x, y = _floats(n), _floats(n)
    k = RNG.integers(-5, 5, n).astype(np.int32)
    tx, ty, tk = (em.tensor(v, device=WGPU[0]) for v in (x, y, k))
    scalar = em.tensor(np.float32(0.25), device=WGPU[0])
    got = ((tx * ty + scalar).exp(), tx > ty, tk * 3 - 1)
    want = (np.exp(x * y + np.float32(0.25)), x > y, k * 3 - 1)
    np.testing.assert_allclose(got[0].numpy(), want[0], rtol=1e-5)
    np.testing.assert_array_equal(got[1].numpy(), want[1])
    np.testing.assert_array_equal(got[2].numpy(), want[2])


def _softmax(x):
    shifted = x - x.max(dim=-1, keepdim=True).detach()
    e = shifted.exp()
    return e / e.sum(dim=-1, keepdim=True)


def _layer_norm(x, w, b):
    centered = x - x.mean(dim=-1, keepdim=True)
    var = (centered * centered).mean(dim=-1, keepdim=True)
    return centered * (var + 1e-5).rsqrt() * w + b


def _standardize(x):
    return (x - x.mean(dim=-1, keepdim=True)) / (x.var(dim=-1, keepdim=True) + 1e-5).sqrt()


def _std_ratio(x):
    return x.std(dim=-1, keepdim=True) / (x.abs() + 1).sum(dim=-1, keepdim=True)


@pytest.mark.parametrize("fn, n_inputs", [
    (_softmax, 1), (_layer_norm, 3), (lambda x: em.nn.functional.log_softmax(x), 1),
    (_standardize, 1), (_std_ratio, 1),
], ids=["softmax", "layer_norm", "log_softmax", "var", "std"])
@lazy_only
def test_row_groups_run_as_one_kernel(fn, n_inputs: int) -> None:
    arrays = [_floats(4, 20, 70)] + [_floats(70) for _ in range(n_inputs - 1)]
    want = fn(*[em.tensor(a) for a in arrays]).numpy()
    tensors = [em.tensor(a, device=WGPU[0]) for a in arrays]
    em.sync()
    before = em.stats(WGPU[0])
    got = fn(*tensors).numpy()
    after = em.stats(WGPU[0])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert after.groups - before.groups == 1
    assert after.kernels_launched - before.kernels_launched == 1


@lazy_only
def test_a_reduction_to_a_few_values_leaves_the_row_group() -> None:
    # One workgroup per row would put a whole loss on one workgroup: the mean runs alone.
    x, y = _floats(300, 400), _floats(300, 400)
    tx, ty = em.tensor(x, device=WGPU[0]), em.tensor(y, device=WGPU[0])
    em.sync()
    before = em.stats(WGPU[0])
    loss = ((tx - ty) * (tx - ty)).mean()
    np.testing.assert_allclose(loss.numpy(), ((x - y) ** 2).mean(), rtol=1e-5)
    assert em.stats(WGPU[0]).groups - before.groups == 1  # the elementwise part


@lazy_only
def test_row_groups_with_kept_intermediates_and_row_inputs() -> None:
    x, scale = _floats(4, 20, 9), _floats(4, 20, 1)
    tx, ts = em.tensor(x, device=WGPU[0]), em.tensor(scale, device=WGPU[0])
    em.sync()
    groups = em.stats(WGPU[0]).groups
    # Every intermediate stays alive (materialized); the sum keeps no dims and is reshaped.
    scaled = tx * ts
    total = scaled.sum(dim=(-1,))
    ratio = scaled / total.reshape(4, 20, 1)
    peak = ratio.max(dim=-1, keepdim=True)
    got = [t.numpy() for t in (scaled, total, ratio, peak)]
    assert em.stats(WGPU[0]).groups == groups + 1
    s = x * scale
    want = [s, s.sum(-1), s / s.sum(-1, keepdims=True), (s / s.sum(-1, keepdims=True)).max(
        -1, keepdims=True)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape, dims", [((300_000,), (0,)), ((3, 70_000), (1,)),
                                         ((70_000, 3), (0,))])
def test_reductions_to_few_outputs_split_across_workgroups(shape, dims) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    t = em.tensor(x, device=WGPU[0])
    for name in ("sum", "mean", "max", "min"):
        np.testing.assert_allclose(getattr(t, name)(dim=dims).numpy(),
                                   getattr(x, name)(axis=dims), rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(em.tensor(x > 3.5, device=WGPU[0]).any(dim=dims).numpy(),
                                  (x > 3.5).any(axis=dims))


class _FailingQueue:
    """Wraps the device queue; its next submit raises, as a late validation error would."""

    def __init__(self, queue) -> None:
        self.queue = queue
        self.armed = True

    def submit(self, buffers) -> None:
        if self.armed:
            self.armed = False
            raise RuntimeError("injected submit failure")
        self.queue.submit(buffers)

    def __getattr__(self, name: str):
        return getattr(self.queue, name)


def test_a_failed_submit_fails_what_it_would_have_written() -> None:
    rt = _backend().rt
    x = em.tensor(_floats(8), device=WGPU[0])
    em.sync()
    real = rt.queue
    rt.queue = _FailingQueue(real)
    try:
        lost = x.exp()
        with pytest.raises(KernelError, match="injected submit failure"):
            lost.numpy()
        with pytest.raises(KernelError, match="failed when its commands were submitted"):
            (lost + 1).numpy()
    finally:
        rt.queue = real
    np.testing.assert_allclose((x * 2).numpy(), x.numpy() * 2)


def test_buffers_destroyed_past_the_pool_capacity_never_break_cached_bind_groups() -> None:
    rt = _backend().rt
    capacity, rt.pool.capacity = rt.pool.capacity, 0  # every dropped buffer is destroyed
    try:
        x = _floats(5000)
        for step in range(6):
            # Temporaries die while their dispatches are recorded but not yet submitted.
            t = em.tensor(x, device=WGPU[0])
            got = ((t * step + 1).exp() * 0.5).sum().numpy()
            want = (np.exp(x * np.float32(step) + 1) * np.float32(0.5)).sum()
            np.testing.assert_allclose(got, want, rtol=1e-4)
    finally:
        rt.pool.capacity = capacity


@lazy_only
def test_pipeline_compiles_show_in_traces() -> None:
    x = em.tensor(_floats(6), device=WGPU[0])
    with em.trace() as recording:
        # A structure no other test builds: its shader is compiled here.
        (x.sin() * x.cos() + x.erf() * 0.375).numpy()
    compiles = [e for e in recording.events if e.kind == "compile"]
    assert compiles and compiles[0].device == str(WGPU[0]) and compiles[0].duration_ns > 0


@pytest.mark.parametrize("shape, axis, dtype", [
    ((20_000,), 0, "float32"), ((3, 9000), 1, "int32"), ((9000, 2), 0, "float32"),
    ((5000,), 0, "bool"),
])
def test_long_cumsums_scan_in_blocks(shape, axis: int, dtype: str) -> None:
    x = RNG.integers(-3, 4, shape)
    x = (x > 0) if dtype == "bool" else x.astype(dtype)
    got = em.tensor(x, device=WGPU[0]).cumsum(axis).numpy()
    np.testing.assert_allclose(got, np.cumsum(x, axis=axis), rtol=1e-6)


def _long_line_values(op: str, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Values whose running op stays finite and exact where it can: signs for products,
    small integers with ties (and NaN for the extremes of floats) otherwise."""
    if op == "cumprod":
        return np.where(RNG.random(shape) < 0.5, -1, 1).astype(dtype)
    x = RNG.integers(-50, 50, shape).astype(dtype)
    if op in ("cummax", "cummin") and dtype != "int32":
        x.reshape(-1)[RNG.integers(0, x.size, 3)] = np.nan
    return x


@pytest.mark.parametrize("shape, axis, dtype", [
    ((20_000,), 0, "float32"), ((3, 9000), 1, "int32"), ((9000, 2), 0, "float16"),
    ((70_000,), 0, "float32"),
])
@pytest.mark.parametrize("op", ["cumprod", "logcumsumexp", "cummax", "cummin"])
def test_long_running_ops_scan_in_blocks_as_the_cpu(op: str, shape, axis: int,
                                                    dtype: str) -> None:
    if dtype == "float16" and not _backend().rt.has_f16:
        pytest.skip("the adapter has no shader-f16")
    if op == "logcumsumexp" and dtype == "int32":
        dtype = "float32"
    x = _long_line_values(op, shape, dtype)
    got = getattr(em.tensor(x, device=WGPU[0]), op)(axis)
    want = getattr(em.tensor(x), op)(axis)
    for g, w in zip(*[t if isinstance(t, tuple) else (t,) for t in (got, want)]):
        if op == "logcumsumexp":
            # Against float64: the blocks add in a tree, which drifts less over a long line
            # than the CPU's sequential float32 does.
            exact = np.logaddexp.accumulate(x.astype(np.float64), axis)
            np.testing.assert_allclose(g.numpy(), exact, rtol=2e-3 if dtype == "float16"
                                       else 1e-6)
        else:
            np.testing.assert_array_equal(g.numpy(), w.numpy())


def test_lines_past_the_loop_limit_scan_in_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """lavapipe ends a loop after 65535 iterations: many lines longer than that scan in
    blocks too (here "many" is 0, so that the tensor stays small)."""
    from ember.kernels.wgpu import scan

    monkeypatch.setattr(scan, "_BLOCKED_MAX_LINES", 0)
    x = RNG.integers(-3, 4, (2, 70_000)).astype(np.int32)
    np.testing.assert_array_equal(em.tensor(x, device=WGPU[0]).cumsum(1).numpy(),
                                  np.cumsum(x, axis=1))
    values, indices = em.tensor(x, device=WGPU[0]).cummax(1)
    want = em.tensor(x).cummax(1)
    np.testing.assert_array_equal(values.numpy(), want[0].numpy())
    np.testing.assert_array_equal(indices.numpy(), want[1].numpy())
