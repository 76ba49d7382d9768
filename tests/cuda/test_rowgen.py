"""Row kernels (a reduction with its prologue and epilogue, one block per row), checked
without a GPU: planning, input layouts, phases, names, cache keys and PTX for sm_90."""

from __future__ import annotations


import numpy as np
import pytest

from ember.ir import Call
from ember.kernels.cupy import rowgen
from tests.cuda.gpu import needs_nvcc, ptx_of
from tests.cuda.groups import ROW_SHAPE, SITE, layer_norm_calls, plan_rows, softmax_calls

KEPT = ROW_SHAPE[:-1] + (1,)


def _render(calls, shapes, dtype="float32", vector=4, block=256, arrays=None, warp_rows=False):
    dtypes = {i: dtype for i in shapes}
    group, program = plan_rows(calls, dtypes, shapes)
    arrays = arrays or {i: np.empty(shape, np.float32) for i, shape in shapes.items()}
    views = [arrays[i] for i in group.inputs]
    layout, *_ = rowgen.row_layout(group.shape, group.rows, group.members, program.steps,
                                   [(a.shape, a.strides, 4) for a in views],
                                   [True] * len(views), vector)
    full = tuple(m.shape == group.shape for m in group.members)
    source = rowgen.render(group.members, program.steps, program.materialize, full,
                           [dtype] * len(views), layout, vector, block, warp_rows)
    return group, layout, source


def test_softmax_is_one_row_kernel_with_two_reductions():
    group, layout, source = _render(softmax_calls(), {1: ROW_SHAPE})
    assert group.rows == 2 and [m.op for m in group.members] == \
        ["max", "alias", "sub", "exp", "sum", "div"]
    assert layout.kinds == ("contig_v",)
    assert source.name.startswith("ember_max_alias_sub_exp_sum_div_")
    # max in phase 0, sum of the exponentials in phase 1, the quotient stored in the last loop.
    assert source.code.count("block_reduce<nan_max>") == 1
    assert source.code.count("block_reduce<add_op>") == 1
    assert source.code.count("for (int c0 = threadIdx.x * 4;") == 3


def test_layer_norm_reads_weight_and_bias_as_columns_and_stores_per_row_values_once():
    shapes = {1: ROW_SHAPE, 2: ROW_SHAPE[-1:], 3: ROW_SHAPE[-1:]}
    group, layout, source = _render(layer_norm_calls(), shapes)
    assert group.rows == 2 and len(group.members) == 9
    assert layout.kinds == ("contig_v",) * 3  # w and b: contiguous columns, row stride 0
    assert "if (threadIdx.x == 0)" in source.code
    assert "rsqrt" not in source.name or source.name.startswith("ember_mean_sub_mul_mean")


def test_input_kinds_follow_strides():
    x = np.empty(ROW_SHAPE, np.float32)
    per_row = np.empty(KEPT, np.float32)
    transposed = np.empty(ROW_SHAPE[::-1], np.float32).transpose(2, 1, 0)
    inputs = [(a.shape, a.strides, 4) for a in (x, per_row, transposed, np.empty((), np.float32))]
    members = [Call("add", 20, (0, 1), ("float32",), ROW_SHAPE, "float32", SITE)]
    layout, (row_sizes, row_strides), col_sizes, col_strides = rowgen.row_layout(
        ROW_SHAPE, 2, members, [(0, (0, 1, 2, 3))], inputs, [True, True, False, True], 4)
    assert layout.kinds == ("contig_v", "row", "strided", "scalar")
    # The transposed input keeps the two row dims apart: rows walk it with strides (1, 8).
    assert row_sizes == (8, 16) and row_strides == [(2048, 128), (16, 1), (1, 8)]
    assert col_sizes == (128,) and col_strides == [(128,)]


def test_row_input_of_the_rows_shape_without_kept_dims_lines_up_with_leading_dims():
    # mean(x) over (8, 16) rows, then + t where t is (16,): t lies over S's dim 1.
    calls = [Call("mean", 10, (1,), ((2,), False), ROW_SHAPE[:2], "float32", SITE),
             Call("add", 11, (10, 2), ("float32",), ROW_SHAPE[:2], "float32", SITE)]
    group, layout, source = _render(calls, {1: ROW_SHAPE, 2: (16,)})
    assert layout.kinds == ("contig_v", "row")
    assert "out1[row]" in source.code


@pytest.mark.parametrize("op", ["var", "std", "logsumexp"])
def test_two_pass_reductions_take_two_loops(op):
    attrs = ((2,), True, 1) if op != "logsumexp" else ((2,), True)
    calls = [Call("mul", 10, (1,), ("float32", 2.0, False), ROW_SHAPE, "float32", SITE),
             Call(op, 11, (10,), attrs, KEPT, "float32", SITE)]
    _, _, source = _render(calls, {1: ROW_SHAPE})
    assert source.code.count("block_reduce<") == 2
    if op == "logsumexp":
        assert "isinf(" in source.code  # an infinite max shifts by 0
    else:
        assert "max(L - 1, 0)" in source.code


def test_a_warp_per_row_reduces_by_shuffles_without_barriers():
    _, _, source = _render(softmax_calls(), {1: ROW_SHAPE}, warp_rows=True)
    code = source.code
    body = code[code.index(source.name):]
    assert body.count("warp_reduce<nan_max>") == 1 and body.count("warp_reduce<add_op>") == 1
    assert "block_reduce<" not in body and "__syncthreads" not in body
    assert "shared[" not in body
    # Each warp walks its own rows and its lanes the columns.
    assert "row = blockIdx.x * warps + (threadIdx.x >> 5)" in body
    assert body.count("for (int c0 = lane * 4; c0 < L; c0 += 32 * 4)") == 3
    _, _, block = _render(softmax_calls(), {1: ROW_SHAPE})
    assert block.name != source.name  # the two kernels are cached apart


def test_row_variants_give_short_rows_a_warp_and_tune_both_kinds_up_to_a_length():
    # 128 columns: one float4 per lane; a warp per row is the default, untuned.
    assert rowgen.variants(128, 4, False) == [(256, True)]
    assert rowgen.variants(128, 4, True) == [(256, True), (128, True)]
    # attention's 256 columns: a block of 64 by default; both kinds tried.
    assert rowgen.variants(256, 4, False) == [(64, False)]
    assert rowgen.variants(256, 4, True) == [(64, False), (32, False), (128, False),
                                             (256, True), (128, True)]
    # Past 8 vectors per lane, blocks only.
    assert all(not warp for _, warp in rowgen.variants(4096, 4, True))
    assert rowgen.variants(1025, 1, True)[0] == (1024, False)


def test_cache_key_ignores_sizes_but_not_the_layout():
    calls = softmax_calls()
    dtypes = {1: "float32"}
    group, program = plan_rows(calls, dtypes, {1: ROW_SHAPE})
    full = tuple(m.shape == group.shape for m in group.members)
    key = rowgen.structure_key(group.members, program.steps, program.materialize, full,
                               ["float32"], rowgen.RowLayout(("contig_v",), 1, 0), 4, 256)
    other = rowgen.structure_key(group.members, program.steps, program.materialize, full,
                                 ["float32"], rowgen.RowLayout(("contig",), 1, 0), 4, 256)
    assert key != other
    assert "8" not in repr(key[1])  # member shapes (sizes) are not in the key


@needs_nvcc
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("which", ["softmax", "layer_norm", "strided"])
def test_row_source_compiles_to_ptx_for_hopper(tmp_path, dtype, which):
    if which == "softmax":
        _, _, source = _render(softmax_calls(dtype), {1: ROW_SHAPE}, dtype)
    elif which == "layer_norm":
        shapes = {1: ROW_SHAPE, 2: ROW_SHAPE[-1:], 3: ROW_SHAPE[-1:]}
        _, _, source = _render(layer_norm_calls(dtype), shapes, dtype)
    else:
        arrays = {1: np.empty(ROW_SHAPE[::-1], np.float32).transpose(2, 1, 0)}
        _, _, source = _render(softmax_calls(dtype), {1: ROW_SHAPE}, dtype, vector=1,
                               arrays=arrays)
    ptx_of(tmp_path, source.code, source.name)


@needs_nvcc
@pytest.mark.parametrize("which", ["softmax", "layer_norm"])
def test_a_warp_per_row_compiles_to_ptx_for_hopper(tmp_path, which):
    if which == "softmax":
        _, _, source = _render(softmax_calls(), {1: ROW_SHAPE}, warp_rows=True)
    else:
        shapes = {1: ROW_SHAPE, 2: ROW_SHAPE[-1:], 3: ROW_SHAPE[-1:]}
        _, _, source = _render(layer_norm_calls(), shapes, warp_rows=True)
        assert "if (lane == 0)" in source.code
    ptx = ptx_of(tmp_path, source.code, source.name)
    assert "bar.sync" not in ptx and "shfl.sync.bfly" in ptx


@needs_nvcc
def test_an_input_read_only_through_a_prologue_view_is_left_unread(tmp_path):
    """cross_entropy's loss: picked (N, 1) squeezed by a reshape in the group's prologue;
    the kernel reads the view, not picked itself (it refused the group as \"read at two
    alignments\", and every MLP step ran it unfused)."""
    rows = 64
    calls = [Call("reshape", 10, (1,), ((rows,),), (rows,), "float32", SITE),
             Call("sub", 11, (2, 10), ("float32",), (rows,), "float32", SITE),
             Call("sum", 12, (11,), ((0,), False), (), "float32", SITE)]
    group, program = plan_rows(calls, {1: "float32", 2: "float32"}, {1: (rows, 1), 2: (rows,)})
    p = group.prologue
    assert p == 1 and group.rows == 0
    # As fused.py runs it: the prologue's view joins the inputs, the kernel takes the rest.
    members = group.members[p:]
    steps = tuple((j - p, args) for j, args in program.steps[p:])
    arrays = [np.empty((rows, 1), np.float32), np.empty((rows,), np.float32),
              np.empty((rows,), np.float32)]
    assert len(group.inputs) + p == len(arrays)
    layout, *_ = rowgen.row_layout(group.shape, group.rows, members, steps,
                                   [(a.shape, a.strides, 4) for a in arrays], [True] * 3, 4)
    assert layout.kinds[0] == "unused"
    source = rowgen.render(members, steps, program.materialize[p:],
                           tuple(m.shape == group.shape for m in members), ["float32"] * 3,
                           layout, 4, 256)
    assert "in0[" not in source.code
    ptx_of(tmp_path, source.code, source.name)
