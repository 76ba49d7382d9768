"""Elementwise fusion on the CPU: same bits as unfused, fewer kernels, no dead intermediates.

Results are compared bitwise against the same program run in a process with
``EMBER_FUSION=0`` (``programs.UnfusedWorker``), so the comparison is really
fused against unfused, not against a NumPy re-implementation.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings

import ember as em
from ember.kernels.numpy.table import KERNELS
from tests.fusion import graphs, programs
from tests.fusion.batching import fresh_device, fresh_index, one_batch, step_counts
from tests.fusion.programs import MB4, UnfusedWorker
from tests.runtime_mode import lazy_only

pytestmark = pytest.mark.skipif(os.environ.get("EMBER_FUSION", "1") in ("", "0"),
                                reason="EMBER_FUSION=0: fusion is off in this process")

GRAPH_DEVICE = 59  # the hypothesis examples share one device (fused here, unfused there)


@pytest.fixture(scope="module")
def unfused():
    worker = UnfusedWorker()
    yield worker
    worker.close()


def assert_same_bits(fused: dict, unfused: dict, skip=("d_",)) -> None:
    """Equal keys, dtypes, shapes and values; NaN equals NaN, and zeros keep their sign.

    A NaN's own sign bit may differ (0 · inf gives NaN with the sign bit set in
    NumPy's vector loops and clear in its strided loops), so NaNs compare as NaNs.
    """
    names = sorted(k for k in fused if not k.startswith(skip))
    assert names == sorted(k for k in unfused if not k.startswith(skip))
    for name in names:
        a, b = fused[name], unfused[name]
        assert a.dtype == b.dtype and a.shape == b.shape, (name, a.dtype, b.dtype, a.shape, b.shape)
        np.testing.assert_array_equal(a, b, err_msg=name)
        if a.dtype.kind == "f":
            numbers = ~np.isnan(a)
            np.testing.assert_array_equal(np.signbit(a[numbers]), np.signbit(b[numbers]),
                                          err_msg=f"{name}: sign of zero")


def _arrays(seed: int = 0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((64, 256), dtype=np.float32),
            rng.standard_normal(256, dtype=np.float32),
            rng.standard_normal(256, dtype=np.float32))


# ----- fused and unfused agree bit for bit ----------------------------------------------

def compare_graph(unfused, graph: dict, device_index: int = GRAPH_DEVICE) -> dict:
    """Run ``graph`` fused here and unfused there; assert the same bits and the same
    failures. Returns the fused run's results."""
    fused = programs.run_program("graph", {"graph": graph, "device_index": device_index})
    reference = unfused.run("graph", graph=graph, device_index=device_index)
    assert reference["d_groups"] == 0 and reference["d_ops_fused"] == 0
    assert fused["d_ops_executed"] == reference["d_ops_executed"]
    # The same reads fail, naming the same op, line and cause (``v{k}_error`` entries).
    errors = sorted(k for k in reference if k.endswith("_error"))
    assert sorted(k for k in fused if k.endswith("_error")) == errors
    assert_same_bits(fused, reference)
    return fused


def check_graph(unfused, graph: dict, device_index: int = GRAPH_DEVICE) -> None:
    """``compare_graph`` inside a hypothesis test, which records what the example did."""
    fused = compare_graph(unfused, graph, device_index)
    event(f"groups: {min(int(fused['d_groups']), 3)}{'+' if fused['d_groups'] > 3 else ''}")
    if any(k.endswith("_error") for k in fused):
        event("a read failed")


_GRAPH_SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.data_too_large])


@settings(_GRAPH_SETTINGS, max_examples=200,
          suppress_health_check=[*_GRAPH_SETTINGS.suppress_health_check,
                                 HealthCheck.function_scoped_fixture])
@given(graph=graphs.graphs())
def test_random_graphs_match_unfused_bitwise(unfused, no_fused_failures, graph):
    check_graph(unfused, graph)


@settings(_GRAPH_SETTINGS, max_examples=60)
@given(graph=graphs.graphs(graphs.INTEGER))
@lazy_only
def test_random_integer_graphs_match_unfused_including_failures(unfused, graph):
    check_graph(unfused, graph)


# Broadcasts (n,), (m, 1) and a 0-d tensor into (m, n) past one chunk, mixes float32 and
# float64, scalars on both sides, a clamp, a where and casts; some middle values are kept.
FIXED_GRAPH = {
    "seed": 17,
    "inputs": [[[700, 131], "float32", "plain"], [[131], "float32", "plain"],
               [[700, 1], "float64", "expanded"], [[], "float64", "plain"]],
    "nodes": [
        ["binary", "mul", 0, 1],                           # 4: group 1
        ["binary", "add", 4, {"s": 0.5}],                  # 5
        ["unary", "gelu", 5],                              # 6 (kept)
        ["binary", "sub", {"s": 1.0}, 6],                  # 7
        ["binary", "mul", 7, 3],                           # 8: a 0-d float64 keeps float32
        ["clamp", 8, {"s": -1.0}, {"s": 2.0}],             # 9
        ["unary", "tanh", 2],                              # 10: (700, 1): too small to fuse
        ["binary", "mul", 10, {"s": 2.0}],                 # 11
        ["binary", "add", 9, 11],                          # 12: float64 (700, 131), group 2
        ["where", "gt", 12, {"s": 0.0}, 12, {"s": -0.0}],  # 13: gt, where
        ["unary", "sqrt_abs", 13],                         # 14: abs, sqrt
        ["cast", 14, "float32"],                           # 15
        ["binary", "div", 15, 0],                          # 16
        ["unary", "sigmoid", 16],                          # 17
        ["binary", "maximum", 17, 1],                      # 18
    ],
    "outputs": [6, 12, 18],
}


@lazy_only
def test_a_broadcasting_mixed_dtype_graph_fuses_and_matches(unfused):
    fused = programs.run_program("graph", {"graph": FIXED_GRAPH, "device_index": fresh_index()})
    reference = unfused.run("graph", graph=FIXED_GRAPH, device_index=0)
    assert fused["d_groups"] == 2 and fused["d_ops_fused"] == 6 + 9
    assert fused["d_kernels_launched"] < reference["d_kernels_launched"]
    assert_same_bits(fused, reference)


# Found by the random graphs: v4 dies in group 2 and its buffer takes v8, which group 3
# reads; the pool must not take that buffer back when v4 is dropped, or a later
# allocation overwrites v8 before group 3 runs.
DONATED_GRAPH = {
    "seed": 65536, "inputs": [[[64, 300], "float32", "plain"]],
    "nodes": [["expand", 0, [64, 300]], ["unary", "neg", 0], ["unary", "neg", 0],
              ["unary", "neg", 0], ["expand", 2, [64, 300]], ["binary", "add", 0, 4],
              ["unary", "neg", 0], ["unary", "neg", 0], ["unary", "neg", 0],
              ["expand", 9, [64, 300]], ["unary", "gelu", 8], ["expand", 11, [64, 300]]],
    "outputs": [5, 12],
}


@lazy_only
def test_a_donated_buffer_stays_with_its_output(unfused):
    fused = programs.run_program("graph", {"graph": DONATED_GRAPH, "device_index": fresh_index()})
    reference = unfused.run("graph", graph=DONATED_GRAPH, device_index=0)
    assert fused["d_groups"] == 3
    assert_same_bits(fused, reference)


@pytest.mark.parametrize("dtype, checkpointing", [("float32", None), ("float64", None),
                                                   ("float32", "balanced")])
@lazy_only
def test_gradients_match_unfused_bitwise(unfused, dtype, checkpointing):
    args = {"device_index": fresh_index(), "dtype": dtype, "checkpointing": checkpointing}
    fused = programs.run_program("block_grads", args)
    reference = unfused.run("block_grads", **args)
    assert fused["d_groups"] > 5 and reference["d_groups"] == 0
    assert fused["d_kernels_launched"] < reference["d_kernels_launched"]
    assert_same_bits(fused, reference)


# ----- fusion happens -------------------------------------------------------------------

@lazy_only
def test_gelu_of_affine_is_one_group():
    device = fresh_device()
    x_np, w_np, b_np = _arrays()
    x, w, b = (em.tensor(a, device=device) for a in (x_np, w_np, b_np))
    counts = step_counts(device, lambda: (x * w + b).gelu())
    assert counts == {"groups": 1, "ops_fused": 3, "kernels_launched": 1}


@lazy_only
def test_a_chain_of_ten_is_one_group():
    device = fresh_device()
    x_np, w_np, b_np = _arrays(1)
    x, w, b = (em.tensor(a, device=device) for a in (x_np, w_np, b_np))

    def chain():
        y = x * 1.5
        y = y + 0.25
        y = y.tanh() * w
        y = y.exp() - 1.0
        y = abs(y).sqrt()
        y = y.maximum(b)
        return y.sigmoid()

    counts = step_counts(device, chain)
    assert counts == {"groups": 1, "ops_fused": 10, "kernels_launched": 1}
    y = chain().numpy()
    # In float64: exp(...) - 1 near 0 magnifies each float32 rounding (ember's exp and
    # NumPy's may differ by an ulp), hence the tolerance.
    x64, w64, b64 = (a.astype(np.float64) for a in (x_np, w_np, b_np))
    expected = np.exp(np.tanh(x64 * 1.5 + 0.25) * w64) - 1.0
    expected = 1 / (1 + np.exp(-np.maximum(np.sqrt(np.abs(expected)), b64)))
    np.testing.assert_allclose(y, expected, rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize("middle", ["matmul", "sum over rows"])
@lazy_only
def test_a_non_elementwise_op_splits_the_chain(middle):
    device = fresh_device()
    x_np, w_np, _ = _arrays(2)
    x, w = em.tensor(x_np, device=device), em.tensor(w_np, device=device)
    square = em.tensor(np.eye(256, dtype=np.float32) * 0.5, device=device)

    def split_chain():
        h = ((x * 2.0 + 1.0) * w).tanh().exp()
        # A sum over dim 0 reads every row: blocks of rows cannot hold it.
        h = h @ square if middle == "matmul" else h - h.sum(dim=0, keepdim=True)
        return ((h * 3.0 - 1.0) * w).sigmoid().relu()

    counts = step_counts(device, split_chain)
    fused_after = 5 if middle == "matmul" else 6  # sum: the sub joins the second group
    assert counts["groups"] == 2
    assert counts["ops_fused"] == 5 + fused_after
    assert counts["kernels_launched"] == 3


@lazy_only
def test_long_chains_and_wide_sums_split_into_groups_and_match(unfused):
    fused = programs.run_program("long_and_wide", {"device_index": fresh_index()})
    reference = unfused.run("long_and_wide", device_index=0)
    # 150 + 78 elementwise ops; a few stand alone where a group had to close.
    assert fused["d_groups"] >= 4 and fused["d_ops_fused"] >= 200
    assert fused["d_kernels_launched"] < reference["d_kernels_launched"] / 10
    assert_same_bits(fused, reference)


@lazy_only
def test_a_repeated_structure_hits_the_plan_cache():
    device = fresh_device()
    x_np, w_np, b_np = _arrays(3)
    x, w, b = (em.tensor(a, device=device) for a in (x_np, w_np, b_np))
    before = em.stats(device).plan_cache_hits
    for _ in range(4):
        step_counts(device, lambda: (x * w + b).gelu())
    assert em.stats(device).plan_cache_hits - before >= 3
    assert em.stats(device).groups == 4


# ----- liveness: what is materialized ---------------------------------------------------

@pytest.mark.parametrize("keep_all", [False, True], ids=["chain", "list-then-del"])
@lazy_only
def test_dropped_intermediates_are_never_materialized(unfused, keep_all):
    index = fresh_index()  # fresh in both processes: peak_bytes_held is a high-water mark
    fused = programs.run_program("chain_peak", {"device_index": index, "keep_all": keep_all})
    reference = unfused.run("chain_peak", device_index=index, keep_all=keep_all)
    assert fused["d_groups"] == 1 and fused["d_ops_fused"] == 20
    # Fused, only the kept result is ever stored: 4 MB (4 bytes more for one_batch's hold).
    assert fused["growth"] <= MB4 + 1024, fused["growth"] / MB4
    # Unfused, each op stores its result: two at a time, or all twenty until the list dies.
    assert reference["growth"] >= (19 * MB4 if keep_all else 2 * MB4), reference["growth"] / MB4
    assert_same_bits(fused, reference, skip=("d_", "growth"))


@lazy_only
def test_live_intermediates_are_materialized_and_correct(unfused):
    fused = programs.run_program("intermediates", {"device_index": fresh_index()})
    reference = unfused.run("intermediates", device_index=0)
    assert fused["d_groups"] == 1 and fused["d_ops_fused"] == 8
    assert_same_bits(fused, reference)
    # And against float64 NumPy: exp and tanh are ember's float32 ones, within an ulp.
    rng = np.random.default_rng(5)
    x = rng.standard_normal((300, 257), dtype=np.float32)
    w = rng.standard_normal(257, dtype=np.float32)
    kept = np.exp(x.astype(np.float64) * 2.0)
    np.testing.assert_allclose(fused["kept"], kept, rtol=1.2e-7)
    np.testing.assert_allclose(fused["d"], np.tanh(fused["kept"] + w.astype(np.float64)) * 3.0
                               - x * 2.0, rtol=1e-6, atol=1e-6)


@lazy_only
def test_a_kept_middle_value_is_materialized_once_and_read_later():
    device = fresh_device()
    x_np, w_np, b_np = _arrays(4)
    x, w, b = (em.tensor(a, device=device) for a in (x_np, w_np, b_np))
    em.sync(device)
    with one_batch(device):
        middle = x * w
        out = (middle + b).relu()
    np.testing.assert_array_equal(out.numpy(), np.maximum(x_np * w_np + b_np, 0))
    stats = em.stats(device)
    assert stats.groups == 1
    # Read after its group ran, from the buffer the group wrote.
    np.testing.assert_array_equal(middle.numpy(), x_np * w_np)


# ----- failures -------------------------------------------------------------------------

@lazy_only
def test_failures_reach_the_same_readers_as_unfused(unfused):
    fused = programs.run_program("failures", {"device_index": fresh_index()})
    reference = unfused.run("failures", device_index=0)
    failed = sorted(k for k in reference if k.endswith("_error"))
    assert failed == ["after_bad_error", "after_div_error", "bad_error", "quotient_error"]
    assert "test_fusion_fail" in str(reference["after_bad_error"])
    assert str(reference["quotient_error"]).startswith("floordiv")
    # The same tensors fail, naming the same op, line and cause; the others read the same.
    assert sorted(k for k in fused if k.endswith("_error")) == failed
    for name in failed:
        assert str(fused[name]) == str(reference[name])
    assert_same_bits(fused, reference)


@lazy_only
def test_a_member_failing_inside_a_group_names_its_op_and_line(monkeypatch):
    device = fresh_device()
    x_np, w_np, _ = _arrays(5)
    x, w = em.tensor(x_np, device=device), em.tensor(w_np, device=device)

    def broken_tanh(msg, pool, x):
        raise FloatingPointError("injected tanh failure")

    monkeypatch.setitem(KERNELS, "tanh", broken_tanh)
    em.sync(device)
    with one_batch(device):
        scaled = x * w
        squashed = scaled.tanh()  # the line the error names
        line = sys._getframe().f_lineno - 1
        out = (squashed + 1.0) * 0.5
        beside = x - 1.0
    with pytest.raises(em.KernelError) as info:
        out.numpy()
    assert info.value.op == "tanh" and info.value.site.endswith(f"test_fusion.py:{line}")
    assert isinstance(info.value.__cause__, FloatingPointError)
    with pytest.raises(em.KernelError, match="tanh"):
        squashed.numpy()
    # Members that do not depend on the failed one computed, as they would unfused.
    np.testing.assert_array_equal(scaled.numpy(), x_np * w_np)
    np.testing.assert_array_equal(beside.numpy(), x_np - np.float32(1.0))
    # The device carries on.
    monkeypatch.undo()
    np.testing.assert_allclose((x * 2.0).tanh().numpy(),
                               np.tanh(x_np.astype(np.float64) * 2.0), rtol=1.2e-7)


# ----- observability --------------------------------------------------------------------

@lazy_only
def test_trace_shows_one_group_event_with_its_members_and_sites():
    device = fresh_device()
    x_np, w_np, b_np = _arrays(6)
    x, w, b = (em.tensor(a, device=device) for a in (x_np, w_np, b_np))
    em.sync(device)
    with em.trace() as tr:
        with one_batch(device):
            first = sys._getframe().f_lineno + 1
            h = x * w
            h = h + b
            y = h.gelu()
        y.numpy()
    groups = [e for e in tr.events if e.kind == "group" and e.device == str(device)]
    assert [e.name for e in groups] == ["mul+add+gelu"]
    for line in (first, first + 1, first + 2):
        assert f"test_fusion.py:{line}" in groups[0].site
    # Fused members are not also recorded as ops of their own.
    ops = [e.name for e in tr.events if e.kind == "op" and e.device == str(device)]
    assert not {"mul", "add", "gelu"} & set(ops)
    assert groups[0].duration_ns > 0
