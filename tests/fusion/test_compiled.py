"""Fused elementwise groups compiled to C on the CPU: the same bits as the NumPy kernels.

The compiled path (``kernels/numpy/compiled.py``) is taken by groups of at least
``MIN_ELEMENTS`` elements; tests lower that bound so small graphs compile too, and
compare against the same programs run unfused in a process with ``EMBER_FUSION=0``.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings

import ember as em
from ember.kernels.numpy import compiled, csource, fused
from tests.fusion import graphs, programs
from tests.fusion.batching import fresh_index
from tests.fusion.composites import layer_norm, numpy_layer_norm, numpy_softmax, softmax
from tests.fusion.programs import ROOT, UnfusedWorker
from tests.fusion.test_fusion import (
    _GRAPH_SETTINGS,
    GRAPH_DEVICE,
    assert_same_bits,
    check_graph,
    compare_graph,
)
from tests.runtime_mode import lazy_only
from tests.threads import run_in_threads

pytestmark = [
    pytest.mark.skipif(os.environ.get("EMBER_FUSION", "1") in ("", "0"),
                       reason="EMBER_FUSION=0: fusion is off in this process"),
    pytest.mark.skipif(compiled.compiler().compiler is None,
                       reason="no C compiler (cc, gcc) on PATH: groups keep the NumPy executor"),
]


@pytest.fixture(scope="module")
def unfused():
    worker = UnfusedWorker()
    yield worker
    worker.close()


@pytest.fixture
def compile_small(monkeypatch, no_fused_failures):
    """Every group compiles what it can, however small; counts the compiled calls (and,
    through ``no_fused_failures``, fails the test if a fused group raised)."""
    monkeypatch.setattr(compiled, "MIN_ELEMENTS", 0)
    monkeypatch.delenv("EMBER_CPU_COMPILE", raising=False)
    runs = []
    original = compiled._call

    def counted(*args):
        runs.append(args[1])
        original(*args)

    monkeypatch.setattr(compiled, "_call", counted)
    run_rows = compiled.run_rows

    def counted_rows(group, *args):
        done = run_rows(group, *args)
        if done:
            runs.append(("rows", math.prod(group.shape)))
        return done

    monkeypatch.setattr(compiled, "run_rows", counted_rows)
    return runs


# The graphs' own device, whose planner fuses groups of any size (made with the bound
# lowered), so small graphs exercise the compiled path too.
SMALL_GROUPS_DEVICE = 61


@pytest.fixture(scope="module")
def small_groups_device():
    bound = fused.MIN_FUSED_ELEMENTS
    fused.MIN_FUSED_ELEMENTS = 0
    try:
        device = em.cpu(SMALL_GROUPS_DEVICE)
        em.tensor(np.zeros(1, np.float32), device=device).numpy()  # its actor starts here
    finally:
        fused.MIN_FUSED_ELEMENTS = bound
    return device


@settings(_GRAPH_SETTINGS, max_examples=60,
          suppress_health_check=[*_GRAPH_SETTINGS.suppress_health_check,
                                 HealthCheck.function_scoped_fixture])
@given(graph=graphs.graphs(graphs.EXACT))
def test_random_graphs_compiled_match_unfused_bitwise(unfused, small_groups_device,
                                                     compile_small, graph):
    compiled_before = len(compile_small)
    check_graph(unfused, graph, SMALL_GROUPS_DEVICE)
    event("compiled" if len(compile_small) > compiled_before else "not compiled")


_SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 1e-30, -1e-45,
                      3.4e38, 0.5, -0.5, 1.5, 2.5, -2.5, 4.0, -4.0, 3.9, 1e-3], np.float32)


def _special_operands(n: int = 5000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    a = (rng.standard_normal(n) * rng.choice([1e-3, 1.0, 8.0, 1e5], n)).astype(np.float32)
    b = (rng.standard_normal(n) * rng.choice([1e-3, 1.0, 8.0], n)).astype(np.float32)
    grid = np.array(np.meshgrid(_SPECIALS, _SPECIALS)).reshape(2, -1)
    a[:grid.shape[1]], b[:grid.shape[1]] = grid
    return a, b


_BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "maximum": lambda a, b: a.maximum(b),
    "minimum": lambda a, b: a.minimum(b),
    "lt": lambda a, b: em.where(a < b, a, b), "eq": lambda a, b: em.where(a == b, b, a),
    "ne": lambda a, b: em.where(a != b, a, -b), "ge": lambda a, b: em.where(a >= b, 1.0, b),
}
_UNARY = {
    "neg": lambda x: -x, "abs": lambda x: x.abs(), "sign": lambda x: x.sign(),
    "floor": lambda x: x.floor(), "ceil": lambda x: x.ceil(), "round": lambda x: x.round(),
    "relu": lambda x: x.relu(), "sqrt": lambda x: x.sqrt(), "rsqrt": lambda x: x.rsqrt(),
    "reciprocal": lambda x: x.reciprocal(), "erf": lambda x: x.erf(),
    "gelu": lambda x: x.gelu(), "clamp": lambda x: x.clamp(-1.0, 2.0),
    "isnan": lambda x: em.where(x.isnan(), 1.0, x), "isinf": lambda x: em.where(x.isinf(), 2.0, x),
    "cast": lambda x: (x != 0.0).float() * x,
    # ember's own float32 functions (float32_math), the same C on both paths.
    "exp": lambda x: x.exp(), "log": lambda x: x.log(), "tanh": lambda x: x.tanh(),
    "sigmoid": lambda x: x.sigmoid(), "silu": lambda x: x.silu(),
    "gelu_tanh": lambda x: x.gelu("tanh"), "cube": lambda x: x ** 3,
}


def _both_ways(build, *arrays: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``build`` on fresh tensors, compiled, then with the path off (NumPy chunks)."""
    results = []
    for setting in ("1", "0"):
        os.environ["EMBER_CPU_COMPILE"] = setting
        try:
            tensors = [em.tensor(a) for a in arrays]
            results.append(build(*tensors).numpy())
        finally:
            os.environ.pop("EMBER_CPU_COMPILE")
    return results[0], results[1]


@pytest.mark.parametrize("name", sorted(_BINARY))
@lazy_only
def test_each_binary_op_compiled_is_bitwise_numpy_on_special_values(compile_small, name):
    a, b = _special_operands()
    fused, plain = _both_ways(lambda x, y: _BINARY[name](x * 1.0, y) + 0.0, a, b)
    assert compile_small, "the group did not compile"
    assert_same_bits({name: fused}, {name: plain})


@pytest.mark.parametrize("name", sorted(_UNARY))
@lazy_only
def test_each_unary_op_compiled_is_bitwise_numpy_on_special_values(compile_small, name):
    a, _ = _special_operands()
    fused, plain = _both_ways(lambda x: _UNARY[name](x * 1.0) * 1.0, a)
    assert compile_small, "the group did not compile"
    assert_same_bits({name: fused}, {name: plain})


def test_erf_compiled_equals_fast_erf_on_a_dense_grid(compile_small):
    x = np.linspace(-5, 5, 1 << 17, dtype=np.float32)
    fused, plain = _both_ways(lambda t: (t * 1.0).erf(), x)
    np.testing.assert_array_equal(fused, plain)


@pytest.mark.parametrize("layout", ["row", "column", "scalar", "permuted", "sliced"])
@lazy_only
def test_broadcast_and_strided_inputs_compile_and_match(compile_small, layout):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((37, 1029), dtype=np.float32)
    other = {"row": rng.standard_normal(1029, dtype=np.float32),
             "column": rng.standard_normal((37, 1), dtype=np.float32),
             "scalar": np.float32(1.5).reshape(()),
             "permuted": rng.standard_normal((1029, 37), dtype=np.float32),
             "sliced": rng.standard_normal((37, 2058), dtype=np.float32)}[layout]

    def build(t, o):
        if layout == "permuted":
            o = o.permute(1, 0)
        elif layout == "sliced":
            o = o[:, ::2]
        return ((t * o) + 1.0).erf() - o

    fused, plain = _both_ways(build, x, other)
    assert compile_small
    np.testing.assert_array_equal(fused, plain)


@lazy_only
def test_custom_gelu_compiles_into_one_group_and_uses_every_core(monkeypatch):
    """At its real size the group compiles by default, and its range is split."""
    monkeypatch.delenv("EMBER_CPU_COMPILE", raising=False)
    calls = []
    original = compiled._call
    monkeypatch.setattr(compiled, "_call", lambda *a: (calls.append(a[1]), original(*a)))
    x_np = np.random.default_rng(2).standard_normal((4, 512, 256), dtype=np.float32)
    x = em.tensor(x_np)
    before = em.stats(x.device).groups
    y = (x * 0.5 * (1.0 + (x / math.sqrt(2.0)).erf())).numpy()
    assert em.stats(x.device).groups == before + 1
    assert calls == [x_np.size]
    half = np.float32(0.5)
    expected = x_np * half * (np.float32(1.0) + _fast_erf(x_np / np.float32(math.sqrt(2.0))))
    np.testing.assert_allclose(y, expected, rtol=2e-6, atol=1e-7)


def _fast_erf(x: np.ndarray) -> np.ndarray:
    from ember.kernels.numpy import fast_erf
    return fast_erf.erf(x, np.empty_like(x))


def test_a_range_split_gives_the_same_bits_as_one_call(compile_small, monkeypatch):
    x_np = np.random.default_rng(3).standard_normal((3, 777, 101), dtype=np.float32)
    results = []
    for per_thread in (1 << 30, 1000):
        monkeypatch.setattr(compiled, "_PER_THREAD", per_thread)
        x = em.tensor(x_np)
        results.append(((x[:, :, :1] * x).gelu() + x).numpy())
    np.testing.assert_array_equal(*results)


def test_ops_without_an_exact_c_rendering_keep_the_numpy_executor(compile_small):
    x = em.tensor(np.ones((64, 64), np.float32))
    (x.sin() * 2.0).cos().numpy()
    assert compile_small == []


@pytest.mark.parametrize("shape", [(3, 70000), (200, 333), (5000,)])
@lazy_only
def test_runs_of_exact_ops_around_an_inexact_one_compile_as_pieces(unfused, compile_small,
                                                                   shape):
    """custom_gelu's forward and backward with a sin in it: one group that the sin splits
    into two compiled pieces with NumPy's sin between, evaluated chunk by chunk."""
    graph = {"seed": 4, "inputs": [[list(shape), "float32", "plain"],
                                   [list(shape[-1:]), "float32", "plain"]],
             "nodes": [["binary", "mul", 0, {"s": 0.7071067811865476}],  # 2
                       ["unary", "erf", 2], ["binary", "add", 3, {"s": 1.0}],  # 3, 4
                       ["binary", "mul", 0, 4], ["binary", "mul", 2, 2],  # 5, 6
                       ["unary", "neg", 6], ["unary", "sin", 7],  # 7, 8
                       ["binary", "mul", 8, 0], ["binary", "add", 9, 4],  # 9, 10
                       ["binary", "mul", 10, 1], ["binary", "maximum", 11, 5]],  # 11, 12
             "outputs": [5, 12]}
    compare_graph(unfused, graph, GRAPH_DEVICE)
    assert len(compile_small) >= 2


@lazy_only
def test_the_source_names_its_ops_and_compiles_without_fma_or_fast_math(compile_small,
                                                                        monkeypatch):
    sources = []
    original = csource.render
    monkeypatch.setattr(compiled.csource, "render",
                        lambda *a: sources.append(original(*a)) or sources[-1])
    x = em.tensor(np.ones((8, 300), np.float32))
    b = em.tensor(np.ones(300, np.float32))
    ((x * b + 1.0).gelu()).numpy()
    (source,) = sources
    assert source.name.startswith("ember_mul_add_gelu_")
    assert "ember_gelu(" in source.code and "in1[0]" not in source.code
    assert "-ffp-contract=off" in csource.FLAGS
    assert not any(flag.startswith("-ffast-math") or flag == "-Ofast" for flag in csource.FLAGS)


@lazy_only
def test_a_second_process_loads_the_compiled_library_from_disk(tmp_path):
    script = (
        "import numpy as np, ember as em\n"
        "from ember.kernels.numpy import compiled\n"
        "compiled.MIN_ELEMENTS = 0\n"
        "x = em.tensor(np.arange(4096, dtype=np.float32))\n"
        "print(float(((x * 0.5 + 1.0).erf() * 3.0).numpy().sum()), compiled.compiler().compiled)\n")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    env.pop("EMBER_CPU_COMPILE", None)
    first, second = (subprocess.run([sys.executable, "-c", script], env=env, check=True,
                                    capture_output=True, text=True).stdout.split()
                     for _ in range(2))
    assert first[0] == second[0]
    assert (first[1], second[1]) == ("1", "0")
    libraries = list((tmp_path / "ember" / "cpu").glob("ember_mul_add_erf_mul_*.so"))
    assert len(libraries) == 1
    assert not [p for p in (tmp_path / "ember" / "cpu").iterdir() if p.is_dir()]


def test_without_a_compiler_groups_run_on_numpy_and_status_says_why(monkeypatch):
    monkeypatch.delenv("EMBER_CPU_COMPILE", raising=False)
    monkeypatch.setattr(compiled, "MIN_ELEMENTS", 0)
    monkeypatch.setattr(compiled, "_compiler", None)
    monkeypatch.setattr(compiled.shutil, "which", lambda name: None)
    assert compiled.status() == "off: no C compiler (cc, gcc) on PATH"
    x_np = np.linspace(-3, 3, 5000, dtype=np.float32)
    y = ((em.tensor(x_np) * 2.0).erf() + 1.0).numpy()
    np.testing.assert_array_equal(y, _fast_erf(x_np * np.float32(2.0)) + np.float32(1.0))


@lazy_only
def test_a_failing_compiler_is_reported_and_groups_still_run(monkeypatch, tmp_path):
    monkeypatch.delenv("EMBER_CPU_COMPILE", raising=False)
    monkeypatch.setattr(compiled, "MIN_ELEMENTS", 0)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(compiled, "_compiler", None)
    broken = tmp_path / "cc"
    broken.write_text("#!/bin/sh\necho 'cc: broken' >&2\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setenv("CC", str(broken))
    x_np = np.linspace(-3, 3, 5000, dtype=np.float32)
    y = ((em.tensor(x_np) * 3.0).erf() - 1.0).numpy()
    np.testing.assert_array_equal(y, _fast_erf(x_np * np.float32(3.0)) - np.float32(1.0))
    assert "broken" in compiled.status()
    monkeypatch.setattr(compiled, "_compiler", None)


def test_compile_off_setting(monkeypatch, compile_small):
    monkeypatch.setenv("EMBER_CPU_COMPILE", "0")
    assert compiled.status() == "off (EMBER_CPU_COMPILE=0)"
    x = em.tensor(np.ones(5000, np.float32))
    ((x * 2.0).erf() + 1.0).numpy()
    assert compile_small == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_a_forked_child_runs_compiled_groups_on_new_threads():
    x_np = np.linspace(-3, 3, 1 << 17, dtype=np.float32)
    expected = ((em.tensor(x_np) * 2.0).erf() + 1.0).numpy()  # the parent's pool starts
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only if the result is right
        try:
            y = ((em.tensor(x_np, device=em.cpu(7)) * 2.0).erf() + 1.0).numpy()
            os._exit(0 if np.array_equal(y, expected) else 1)
        finally:
            os._exit(2)
    deadline = time.monotonic() + 60
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child's compiled group never finished")
    assert os.waitstatus_to_exitcode(done[1]) == 0


@pytest.mark.parametrize("dtype, checkpointing", [("float32", None), ("float32", "balanced")])
@lazy_only
def test_gradients_through_compiled_pieces_match_unfused_bitwise(unfused, compile_small, dtype,
                                                                  checkpointing):
    """A block with gelu, layer norms, softmax, clamp and where, forward and backward: row
    groups run as compiled row kernels, elementwise groups as compiled calls."""
    args = {"device_index": fresh_index(), "dtype": dtype, "checkpointing": checkpointing}
    fused_run = programs.run_program("block_grads", args)
    reference = unfused.run("block_grads", **args)
    rows = [r for r in compile_small if isinstance(r, tuple)]
    assert len(rows) >= 3 and len(compile_small) - len(rows) >= 3, compile_small
    assert_same_bits(fused_run, reference)


@lazy_only
def test_devices_share_the_kernel_threads_without_waiting_on_each_other(monkeypatch):
    """Two CPU devices run compiled groups (whole and in pieces) at once from two threads;
    the shared pool of kernel threads never deadlocks and every result is right."""
    monkeypatch.delenv("EMBER_CPU_COMPILE", raising=False)
    calls = []
    original = compiled._call
    monkeypatch.setattr(compiled, "_call", lambda *a: (calls.append(a[1]), original(*a)))
    x_np = np.random.default_rng(6).standard_normal((8, 40000), dtype=np.float32)
    expected_whole = _fast_erf(x_np * np.float32(2.0)) + np.float32(1.0)
    expected_pieces = np.sin(_fast_erf(x_np * np.float32(2.0))) * np.float32(3.0) \
        + np.float32(1.0)
    results: dict = {}

    def work(index: int) -> None:
        device = em.cpu(40 + index)
        x = em.tensor(x_np, device=device)
        for _ in range(5):
            whole = ((x * 2.0).erf() + 1.0).numpy()
            pieces = (((x * 2.0).erf()).sin() * 3.0 + 1.0).numpy()
        results[index] = (whole, pieces)

    run_in_threads(work, range(2), 120, "a device never finished its groups")
    assert x_np.size in calls and len(calls) > 20  # whole groups, and pieces chunk by chunk
    for whole, pieces in results.values():
        np.testing.assert_array_equal(whole, expected_whole)
        np.testing.assert_allclose(pieces, expected_pieces, rtol=1e-6)


@lazy_only
def test_a_layer_norm_from_primitives_is_one_compiled_row_kernel(compile_small):
    """mean, sub, mul, mean, add, rsqrt, mul, mul, add over rows of 700: one C function,
    its means summed as NumPy sums (pairwise), bitwise the NumPy executor's result."""
    rng = np.random.default_rng(8)
    x, w, b = (rng.standard_normal(s, dtype=np.float32) * 3 for s in ((6, 50, 700), 700, 700))
    fused_run, plain = _both_ways(layer_norm, x, w, b)
    assert ("rows", x.size) in compile_small
    np.testing.assert_array_equal(fused_run, plain)
    np.testing.assert_allclose(fused_run, numpy_layer_norm(x, w, b), rtol=2e-5, atol=2e-5)


def test_row_groups_whose_bits_c_cannot_promise_keep_numpy(compile_small):
    x = np.random.default_rng(9).standard_normal((700, 300), dtype=np.float32)
    fused_run, plain = _both_ways(
        lambda t: t.permute(1, 0).sum(dim=-1, keepdim=True) * t.permute(1, 0) * 2.0, x)
    assert not [r for r in compile_small if isinstance(r, tuple)]
    np.testing.assert_array_equal(fused_run, plain)


def _extreme_rows(length: int) -> np.ndarray:
    """Rows whose max or min is a tie of ±0 (in both orders, and all of one sign), rows
    with NaN, ±inf and denormals, then random rows (enough for the group to fuse)."""
    rng = np.random.default_rng(length)
    x = rng.standard_normal((max(40, 2048 // length), length)).astype(np.float32)
    zeros = x[:8]
    zeros[:4] = -np.abs(zeros[:4])  # max rows: at most 0
    zeros[4:] = np.abs(zeros[4:])  # min rows
    for r, (first, second) in enumerate([(0.0, -0.0), (-0.0, 0.0), (-0.0, -0.0), (0.0, 0.0)]):
        for row in (r, r + 4):
            zeros[row, 0] = first
            zeros[row, -1] = second
            zeros[row, length // 2] = first if length > 2 else second
    x[8, length // 3] = np.nan
    x[9, -1] = np.nan
    x[10, 0] = np.inf
    x[11, -1] = -np.inf
    x[12] = -np.inf
    x[13] = np.float32(1e-45) * np.sign(x[13])
    x[14] = -0.0
    return x


@pytest.mark.parametrize("length", [1, 7, 16, 300, 4096])
@lazy_only
def test_compiled_max_and_min_rows_are_the_unfused_kernels_bits(compile_small, length):
    """max and min compile into row kernels: -0 orders below +0 and a NaN wins, in the
    compiled kernel and in the unfused one alike, whatever position the tie is in; over a
    computed row, an input's row, and an input walked with a stride."""
    x = _extreme_rows(length)
    strided = np.ascontiguousarray(x.T)

    def build(t, u):
        top = (t * 1.0).max(dim=-1, keepdim=True)
        bottom = t.min(dim=-1, keepdim=True)
        across = u.permute(1, 0).max(dim=-1, keepdim=True)
        return ((t * 2.0 - top) + (t - bottom)) * 0.5 + across

    fused_run, plain = _both_ways(build, x, strided)
    # (Over rows of one element the planner's reductions are elementwise.)
    assert ("rows", x.size) in compile_small if length > 1 else compile_small
    assert_same_bits({"extremes": fused_run}, {"extremes": plain})
    alone = [_both_ways(lambda t: getattr(t * 1.0, op)(dim=-1, keepdim=True) * 1.0, x)
             for op in ("max", "min")]
    for (fused_run, plain), op in zip(alone, ("max", "min")):
        assert_same_bits({op: fused_run}, {op: plain})
        np.testing.assert_array_equal(fused_run, getattr(np, op)(x, axis=-1, keepdims=True))
        assert np.isnan(fused_run[8:10]).all()
        # A zero extreme is +0 for a max whose row holds a +0, -0 for a min whose row
        # holds a -0.
        holds = ((x == 0) & (np.signbit(x) == (op == "min"))).any(axis=-1)
        zero = fused_run[:, 0] == 0
        assert zero.sum() >= 4
        np.testing.assert_array_equal(np.signbit(fused_run[zero, 0]),
                                      (holds == (op == "min"))[zero])


@pytest.mark.parametrize("shape", [(700, 300), (4, 3, 4096), (64, 16_384)])
@lazy_only
def test_softmax_is_one_compiled_row_kernel_with_the_unfused_bits(compile_small, shape):
    rng = np.random.default_rng(10)
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    x.reshape(-1, shape[-1])[0] = -0.0  # a zero max of ±0 ties
    x.reshape(-1, shape[-1])[1, ::2] = 0.0
    x.reshape(-1, shape[-1])[2, 5] = np.nan
    x.reshape(-1, shape[-1])[3, 7] = -np.inf
    fused_run, plain = _both_ways(softmax, x)
    assert ("rows", x.size) in compile_small
    assert_same_bits({"softmax": fused_run}, {"softmax": plain})
    np.testing.assert_allclose(fused_run, numpy_softmax(x), rtol=2e-6, atol=1e-9)


@pytest.mark.parametrize("length", [1, 7, 8, 9, 127, 128, 129, 300, 4096, 100_003])
@lazy_only
def test_compiled_sums_are_numpys_pairwise_sums_bit_for_bit(compile_small, length):
    """Rows of every length class of NumPy's pairwise summation (under 8, blocks up to
    128, halves above), with ±0, ±inf and NaN in some rows, summed and averaged in one
    compiled row kernel: the bits of np.sum and np.mean over the same rows."""
    rows = max(3, 4096 // length)
    rng = np.random.default_rng(length)
    x = rng.standard_normal((rows, length)).astype(np.float32) * np.float32(1e3)
    x[0] = -0.0
    x[1, 0] = np.inf if length > 1 else -0.0
    x[2, -1] = np.nan
    fused_run, plain = _both_ways(
        lambda t: (t * 1.0).sum(dim=-1, keepdim=True) + (t * 2.0).mean(dim=-1, keepdim=True), x)
    assert ("rows", x.size) in compile_small
    assert_same_bits({"sum": fused_run}, {"sum": plain})
    half, twice = x * np.float32(1.0), x * np.float32(2.0)
    expected = half.sum(-1, keepdims=True) + twice.mean(-1, keepdims=True, dtype=np.float32)
    assert_same_bits({"sum": fused_run}, {"sum": expected})


def test_the_disk_cache_of_libraries_stays_bounded(tmp_path, monkeypatch):
    folder = tmp_path / "cpu"
    folder.mkdir()
    for k in range(12):
        path = folder / f"old_{k:02}.so"
        path.write_bytes(b"")
        os.utime(path, (k, k))
    monkeypatch.setattr(compiled, "_MAX_CACHED", 10)
    compiled._trim(str(folder))
    assert sorted(p.name for p in folder.iterdir()) == [f"old_{k:02}.so" for k in range(7, 12)]


@pytest.mark.parametrize("layout", ["contiguous", "computed", "permuted"])
@lazy_only
def test_log_softmax_is_one_compiled_row_kernel_with_the_unfused_bits(compile_small, layout):
    """x - logsumexp(x): the row kernel's logsumexp is the unfused kernel's steps with
    ember's exp and log, bit for bit; rows of ±inf, NaN, a large shift and ±0."""
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((300, 700)) * 8).astype(np.float32)
    x[0] = -np.inf
    x[1, 3] = np.inf
    x[2, 4] = np.nan
    x[3] += np.float32(1e4)
    x[4] = -0.0
    x[5, ::3] = 0.0
    source = np.ascontiguousarray(x.T) if layout == "permuted" else x

    def build(t):
        if layout == "permuted":
            t = t.permute(1, 0)
        elif layout == "computed":
            t = t * 1.0
        return t - t.logsumexp(dim=-1, keepdim=True)

    fused_run, plain = _both_ways(build, source)
    # A permuted input's rows are not NumPy's summation order: that group keeps NumPy.
    assert (("rows", x.size) in compile_small) == (layout != "permuted")
    assert_same_bits({"log_softmax": fused_run}, {"log_softmax": plain})
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        exact = x - np.log(np.exp(x.astype(np.float64)).sum(-1, keepdims=True))
    finite = np.isfinite(exact)
    np.testing.assert_allclose(fused_run[finite], exact[finite], rtol=1e-6, atol=2e-6)
    np.testing.assert_array_equal(np.isnan(fused_run), np.isnan(exact))
