"""Row groups on the CPU: reductions with their prologue and epilogue, and views as index
maps. Values are checked against NumPy; fused-against-unfused bits are checked by the
random graphs of test_fusion.py, which draw reductions and views too."""

from __future__ import annotations

import os

import numpy as np
import pytest

import ember as em
from ember.kernels.fusion.planner import Call, Drop, FusionPlanner
from ember.kernels.numpy import fused
from ember.kernels.numpy.pool import BufferPool
from tests.fusion.batching import fresh_device, one_batch, step_counts
from tests.fusion.composites import layer_norm, numpy_layer_norm, numpy_softmax, softmax
from tests.runtime_mode import lazy_only

pytestmark = pytest.mark.skipif(os.environ.get("EMBER_FUSION", "1") in ("", "0"),
                                reason="EMBER_FUSION=0: fusion is off in this process")

# Rows of 700 floats: 93 rows per 64K-element block, so the last block is partial.
SHAPE = (6, 50, 700)


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(SHAPE, dtype=np.float32) * 3,
            rng.standard_normal(SHAPE[-1], dtype=np.float32),
            rng.standard_normal(SHAPE[-1], dtype=np.float32))


@lazy_only
def test_softmax_is_one_group_and_matches_numpy() -> None:
    device = fresh_device()
    x_np, _, _ = _data()
    x = em.tensor(x_np, device=device)
    counts = step_counts(device, lambda: softmax(x))
    assert counts == {"groups": 1, "ops_fused": 6, "kernels_launched": 1}  # max alias sub exp sum div
    np.testing.assert_allclose(softmax(x).numpy(), numpy_softmax(x_np), rtol=1e-6, atol=1e-7)


@lazy_only
def test_layer_norm_is_one_group_and_matches_numpy() -> None:
    device = fresh_device()
    x_np, w_np, b_np = _data(1)
    x, w, b = (em.tensor(a, device=device) for a in (x_np, w_np, b_np))
    counts = step_counts(device, lambda: layer_norm(x, w, b))
    assert counts == {"groups": 1, "ops_fused": 9, "kernels_launched": 1}
    np.testing.assert_allclose(layer_norm(x, w, b).numpy(), numpy_layer_norm(x_np, w_np, b_np),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "var", "std", "logsumexp", "prod"])
@lazy_only
def test_each_reduction_joins_with_prologue_and_epilogue(name: str) -> None:
    device = fresh_device()
    x_np, w_np, _ = _data(2)
    x_np = x_np[:, :, :64] / 3  # prod of 64 values of about 1 stays finite
    x, w = em.tensor(x_np, device=device), em.tensor(w_np[:64], device=device)

    def block():
        reduced = getattr((x * w).tanh(), name)(dim=(1, 2), keepdim=True)
        return (x - reduced) * 2.0

    counts = step_counts(device, block)
    assert counts == {"groups": 1, "ops_fused": 5, "kernels_launched": 1}
    h = np.tanh(x_np * w_np[:64])
    numpy_name = {"logsumexp": None}.get(name, name)
    reduced = (np.log(np.exp(h).sum((1, 2), keepdims=True)) if numpy_name is None else
               getattr(h, numpy_name)((1, 2), keepdims=True, **({"ddof": 1} if name in ("var", "std") else {})))
    np.testing.assert_allclose(block().numpy(), (x_np - reduced) * 2, rtol=2e-5, atol=2e-5)


@lazy_only
def test_a_reduction_without_keepdim_joins_through_a_reshape_and_an_expand() -> None:
    device = fresh_device()
    x_np, _, _ = _data(3)
    x = em.tensor(x_np, device=device)

    def block():
        row_sums = (x * x).sum(dim=-1)  # (6, 50)
        return (x / row_sums.reshape(6, 50, 1).sqrt().expand(*SHAPE)).abs()

    counts = step_counts(device, block)
    assert counts == {"groups": 1, "ops_fused": 7, "kernels_launched": 1}
    want = np.abs(x_np / np.sqrt((x_np * x_np).sum(-1, keepdims=True)))
    np.testing.assert_allclose(block().numpy(), want, rtol=1e-6)


@lazy_only
def test_views_of_inputs_are_index_maps_inside_the_group() -> None:
    device = fresh_device()
    x_np, w_np, b_np = _data(4)
    x = em.tensor(x_np, device=device)
    w = em.tensor(w_np.reshape(7, 100), device=device)
    t = em.tensor(np.ascontiguousarray(x_np.transpose(2, 1, 0)), device=device)

    def block():
        scaled = x * w.reshape(700) + t.permute(2, 1, 0)
        return scaled.tanh() * 0.5

    counts = step_counts(device, block)
    assert counts == {"groups": 1, "ops_fused": 6, "kernels_launched": 1}
    np.testing.assert_allclose(block().numpy(), np.tanh(x_np * w_np + x_np) * 0.5, rtol=1e-6)


@lazy_only
def test_a_reduction_over_leading_dims_closes_the_group() -> None:
    device = fresh_device()
    x_np, _, _ = _data(5)
    x = em.tensor(x_np, device=device)

    def block():
        return (x - x.exp().sum(dim=0, keepdim=True)).tanh()

    counts = step_counts(device, block)
    # exp alone (the sum of every row reads it whole), the sum alone, sub + tanh.
    assert counts == {"groups": 1, "ops_fused": 2, "kernels_launched": 3}
    np.testing.assert_allclose(block().numpy(), np.tanh(x_np - np.exp(x_np).sum(0, keepdims=True)),
                               rtol=1e-5)


@lazy_only
def test_rows_longer_than_a_block_still_run_whole() -> None:
    device = fresh_device()
    x_np = np.random.default_rng(6).standard_normal((3, 100_003), dtype=np.float32)
    x = em.tensor(x_np, device=device)
    counts = step_counts(device, lambda: softmax(x))
    assert counts["groups"] == 1
    np.testing.assert_allclose(softmax(x).numpy(), numpy_softmax(x_np), rtol=1e-5, atol=1e-9)


@lazy_only
def test_softmax_never_materializes_its_exponentials() -> None:
    device = fresh_device()
    x = em.tensor(np.zeros((64, 16_384), np.float32), device=device)  # 4 MB
    em.sync(device)
    before = em.stats(device).as_dict()["peak_bytes_held"]
    with one_batch(device):
        y = softmax(x)
    y.numpy()
    grown = em.stats(device).as_dict()["peak_bytes_held"] - before
    assert grown <= 4 * 2**20 + 1024, grown  # the result; exp's 4 MB never exists


# ----- the planner alone: its closing rules --------------------------------------------------

def _call(op: str, out: int, inputs: tuple[int, ...], shape: tuple[int, ...],
          attrs: tuple = ()) -> Call:
    return Call(op, out, inputs, attrs, shape, "float32", ("test", 0))


def _plan(batch: list, shapes: dict[int, tuple[int, ...]]) -> list:
    planner = FusionPlanner(fused.fusible, 16, reductions=True, views=True)
    return planner.plan(batch, lambda i: "float32" if i in shapes else None, shapes.get)


def test_planner_row_group_structure() -> None:
    s, rows = (4, 8, 16), (4, 8, 1)
    batch = [_call("exp", 2, (1,), s), _call("sum", 3, (2,), rows, ((2,), True)),
             _call("div", 4, (2, 3), s), Drop(2), Drop(3)]
    (group, *drops) = _plan(batch, {1: s})
    assert group.rows == 2 and group.shape == s and group.prologue == 0
    assert [m.op for m in group.members] == ["exp", "sum", "div"]
    assert group.outputs == (4,) and [type(d) for d in drops] == [Drop, Drop]


def test_planner_moves_input_views_to_the_prologue_and_closes_on_other_rows() -> None:
    s = (4, 8, 16)
    batch = [_call("mul", 2, (1, 1), s), _call("reshape", 3, (9,), (16,)),
             _call("add", 4, (2, 3), s), Drop(2), Drop(3),
             _call("sum", 5, (4,), (4, 1, 1), ((1, 2), True)),  # sets the rows: (4,)
             _call("sum", 6, (4,), (4, 8, 1), ((2,), True))]  # other rows: closes
    first, *drops, second = _plan(batch, {1: s, 9: (4, 4)})
    assert [m.op for m in first.members] == ["reshape", "mul", "add", "sum"]
    assert first.prologue == 1 and first.rows == 1 and first.inputs == (1, 9)
    assert first.outputs == (4, 5)  # the add is read by the unfused sum after the group
    assert type(second) is Call and second.out == 6 and len(drops) == 2


def test_planner_names_dead_inputs_as_donors() -> None:
    s = (4, 8)
    batch = [_call("exp", 3, (1,), s), _call("add", 4, (3, 2), s), Drop(1), Drop(2), Drop(3),
             _call("neg", 5, (2,), s)]  # 2 is read after the group (past the matmul)
    group = _plan([*batch[:5], _call("matmul", 6, (2, 2), (4, 4)), batch[5]],
                  {1: s, 2: s})[0]
    assert group.inputs == (1, 2) and group.donors == (1,)


def test_planner_runs_a_large_lone_elementwise_op_as_a_group_where_asked() -> None:
    big, small = (64, 32), (4, 8)
    planner = FusionPlanner(fused.fusible, 16, reductions=True, views=True, single_from=2048)
    shapes = {1: big, 2: small}

    def plan(batch):
        return planner.plan(batch, lambda i: "float32" if i in shapes else None, shapes.get)

    (group,) = plan([_call("exp", 3, (1,), big)])
    assert [m.op for m in group.members] == ["exp"] and group.outputs == (3,)
    first, matmul, second = plan([_call("neg", 3, (1,), big), _call("matmul", 4, (1, 1), big),
                                  _call("tanh", 5, (4,), big)])  # split by the matmul
    assert [type(m).__name__ for m in (first, matmul, second)] == ["FusedGroup", "Call",
                                                                   "FusedGroup"]
    for plain in ([_call("exp", 3, (2,), small)],  # below the bound
                  [_call("alias", 3, (1,), big)],  # an alias stays a view
                  [_call("sum", 3, (1,), (64, 1), ((1,), True))]):  # a reduction alone
        assert plan(plain) == plain
    default = FusionPlanner(fused.fusible, 16, reductions=True, views=True)
    lone = [_call("exp", 3, (1,), big)]
    assert default.plan(lone, lambda i: "float32", shapes.get) == lone


# ----- dying inputs hold outputs ---------------------------------------------------------------

def _run_and_read(device: em.Device, data: np.ndarray, build,
                  keep_read: bool = False) -> tuple[bool, dict]:
    """Run ``build(x)`` on ``data`` uploaded as x, x's handle dying after it, in one batch;
    returns whether its result ``y`` took x's buffer, and every result read (with
    ``keep_read``, x's data as read before the batch, held by the caller throughout)."""
    x = em.tensor(data, device=device)
    read = x.numpy()  # the read's view dies with x's handle, unless kept
    address = read.ctypes.data
    if not keep_read:
        del read
    with one_batch(device):
        results = build(x)
        del x
    values = {k: v.numpy() for k, v in results.items()}
    if keep_read:
        values["read"] = read
    return values["y"].ctypes.data == address, values


@lazy_only
def test_a_dying_input_holds_the_output_in_place() -> None:
    device = fresh_device()
    data = np.random.default_rng(7).standard_normal((512, 1024), dtype=np.float32)

    def build(x):
        return {"y": (x * 2.0 + 1.0).tanh()}

    donated, values = _run_and_read(device, data, build)
    assert donated
    np.testing.assert_allclose(values["y"], np.tanh(data * 2 + 1), rtol=1e-6)


@pytest.mark.parametrize("case", ["view alive", "reader holds x", "read after",
                                  "read by a later member", "integer"])
def test_no_donation_where_the_input_is_still_needed(case: str) -> None:
    device = fresh_device()
    rng = np.random.default_rng(8)
    data = (rng.integers(-9, 9, (512, 1024)).astype(np.int32) if case == "integer"
            else rng.standard_normal((512, 1024), dtype=np.float32))
    square = em.tensor(np.eye(1024, dtype=data.dtype), device=device)

    def build(x):
        doubled = x * 2
        if case == "read by a later member":
            return {"y": doubled, "z": doubled * 3 + x}
        out = {"y": doubled + 1}
        if case == "view alive":
            out["view"] = x.reshape(1024, 512)
        if case == "read after":
            out["later"] = x @ square  # a matmul: outside the group
        return out

    donated, values = _run_and_read(device, data, build, keep_read=case == "reader holds x")
    assert not donated
    if case == "view alive":
        np.testing.assert_array_equal(values["view"], data.reshape(1024, 512))
    if case == "reader holds x":
        np.testing.assert_array_equal(values["read"], data)
    if case == "read after":
        np.testing.assert_array_equal(values["later"], data)
    if case == "read by a later member":
        np.testing.assert_array_equal(values["z"], data * 6 + data)
        np.testing.assert_array_equal(values["y"], data * 2)
    else:
        np.testing.assert_array_equal(values["y"], data * 2 + 1)


def test_a_kept_detach_inside_a_group_shares_its_source_buffer() -> None:
    device = fresh_device()
    data = np.random.default_rng(9).standard_normal((256, 512), dtype=np.float32)
    x = em.tensor(data, device=device)
    em.sync(device)
    with one_batch(device):
        h = (x * 2.0).tanh()
        held, detached_input = h.detach(), x.detach()
        y = held * 3.0 + detached_input
    np.testing.assert_allclose(y.numpy(), np.tanh(data.astype(np.float64) * 2) * 3 + data,
                               rtol=1e-6, atol=1e-6)
    assert held.numpy().ctypes.data == h.numpy().ctypes.data  # no copy of h
    assert detached_input.numpy().ctypes.data == x.numpy().ctypes.data


def test_a_chain_shares_two_scratch_buffers_and_views_keep_theirs_alive() -> None:
    s = (4, 8)
    chain = [_call("exp", 2, (1,), s)] + [_call("neg", k + 1, (k,), s) for k in range(2, 21)]
    planner = FusionPlanner(fused.fusible, 16, reductions=True, views=True)
    group = planner.plan([*chain, *(Drop(k) for k in range(2, 21))],
                         lambda i: "float32" if i == 1 else None, {1: s}.get)[0]
    program = planner.program(group)
    full = [None] * 19 + [np.empty(s, np.float32)]  # only the last member is kept
    pool = BufferPool()
    scratch = fused._Scratch(group, program, full, group.members, pool)
    assert len(scratch.buffers) == 2  # each member reads only the one before it
    # An alias keeps its source's buffer busy until the alias's last reader has run.
    batch = [_call("exp", 2, (1,), s), _call("alias", 3, (2,), s), _call("neg", 4, (1,), s),
             _call("add", 5, (3, 4), s), Drop(2), Drop(3), Drop(4)]
    group = planner.plan(batch, lambda i: "float32" if i == 1 else None, {1: s}.get)[0]
    scratch = fused._Scratch(group, planner.program(group), [None] * 3 + [np.empty(s)],
                             group.members, pool)
    assert scratch.assign[0] != scratch.assign[2]  # neg must not take exp's buffer


def test_chunk_buffers_come_from_the_pool_and_go_back_to_it() -> None:
    """A group's chunk buffers are the device pool's: a second run of the same group
    takes the ones the first gave back (no fresh allocation, no page faults)."""
    s = (64, 1024)  # 64K elements: one chunk of 256 KB per buffer, which the pool keeps
    chain = [_call("exp", 2, (1,), s)] + [_call("neg", k + 1, (k,), s) for k in range(2, 6)]
    planner = FusionPlanner(fused.fusible, 16, reductions=True, views=True)
    group = planner.plan([*chain, *(Drop(k) for k in range(2, 6))],
                         lambda i: "float32" if i == 1 else None, {1: s}.get)[0]
    program = planner.program(group)
    full = [None] * 4 + [np.empty(s, np.float32)]
    pool = BufferPool()
    first = fused._Scratch(group, program, full, group.members, pool)
    held = {id(a) for a in first.buffers}
    first.release(pool)
    assert pool.statistics()["buffers_pooled"] == 2
    second = fused._Scratch(group, program, full, group.members, pool)
    assert {id(a) for a in second.buffers} == held
    assert pool.statistics()["buffers_pooled"] == 0


def test_tiny_tensors_run_unfused_and_a_batch_of_them_is_not_planned() -> None:
    device = fresh_device()
    x = em.tensor(np.ones(100, np.float32), device=device)
    counts = step_counts(device, lambda: ((x * 2.0 + 1.0).tanh() - x).exp())
    assert counts == {"groups": 0, "ops_fused": 0, "kernels_launched": 5}
    s = (4, 8)
    planner = FusionPlanner(fused.fusible, 16, min_elements=fused.MIN_FUSED_ELEMENTS)
    batch = [_call("exp", 2, (1,), s), _call("neg", 3, (2,), s)]
    assert planner.plan(batch, lambda i: "float32", {1: s}.get) is batch


@lazy_only
def test_scratch_buffers_are_shared_only_between_values_of_one_shape(no_fused_failures):
    """One unblocked row group holds a (2048,) value and the 0-d sum, whose shapes end
    alike; a buffer of one must never serve the other (the group raised and ran unfused
    before; the random graphs found more such pairs, e.g. (3, 1) and (1, 1))."""
    device = fresh_device()
    x_np = np.random.default_rng(9).standard_normal(2048, dtype=np.float32)
    x = em.tensor(x_np, device=device)
    with one_batch(device):
        y = (x * 2.0 + 1.0).sum() * 3.0
    before = em.stats(device).groups
    expected = (x_np * np.float32(2.0) + np.float32(1.0)).sum() * np.float32(3.0)
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-6)
    assert em.stats(device).groups == before + 1


@lazy_only
def test_a_row_group_whose_input_is_read_only_through_a_view_runs_fused(no_fused_failures,
                                                                       monkeypatch):
    """The group reads x (700, 300) only as x.permute(1, 0), its prologue; the blocked
    executor took x itself for a row input of the wrong shape and the group ran unfused."""
    monkeypatch.setenv("EMBER_CPU_COMPILE", "0")
    device = fresh_device()
    x_np = np.random.default_rng(10).standard_normal((700, 300), dtype=np.float32)
    x = em.tensor(x_np, device=device)
    with one_batch(device):
        y = (x.permute(1, 0) * 2.0).sum(dim=-1, keepdim=True) * x.permute(1, 0)
    before = em.stats(device).groups
    expected = (x_np.T * np.float32(2.0)).sum(-1, keepdims=True) * x_np.T
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4, atol=1e-4)
    assert em.stats(device).groups == before + 1


def test_planner_keys_leave_scalar_values_out_but_not_the_ops_wiring_or_dims() -> None:
    s = (4, 8, 16)

    def key(scalar: float, dims: tuple[int, ...] = (2,), op: str = "mul") -> tuple:
        rows = tuple(1 if d in dims else n for d, n in enumerate(s))
        batch = [_call(op, 2, (1,), s, ("float32", scalar, False)),
                 _call("sum", 3, (2,), rows, (dims, True)), _call("div", 4, (2, 3), s)]
        (group,) = _plan(batch, {1: s})
        assert len(group.members) == 3
        return group.key

    # An optimizer's per-step scalar (Adam's bias corrections) keeps the structure.
    assert key(0.001) == key(0.0009995)
    assert key(0.001) != key(0.001, op="add")
    assert key(0.001) != key(0.001, dims=(1, 2))
