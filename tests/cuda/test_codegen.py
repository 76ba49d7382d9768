"""Generated CUDA kernels, checked without a GPU: rendering, names, cache keys, scalar
arguments, and (where nvcc is installed) that the source compiles to PTX for sm_90."""

from __future__ import annotations


import pytest

from ember.ir import Call, Drop
from ember.kernels.cupy import codegen
from ember.kernels.fusion import cexpr
from ember.kernels.fusion.planner import FusionPlanner
from tests.cuda.gpu import needs_nvcc, ptx_of
from tests.cuda.groups import SITE, gelu_tanh_chain, plan

F32 = {1: "float32", 2: "float32", 3: "float32"}


def _render(calls, dtypes, kinds, vector=4, narrow=True, unroll=1):
    group, program = plan(calls, dtypes)
    layout = codegen.Layout(kinds, 2 if "strided" in kinds else 0, narrow)
    return group, program, codegen.render(group, program, [dtypes[i] for i in group.inputs],
                                          layout, vector, 256, unroll)


def _mask_chain(dtype="float32"):
    """m = x * 2 > 0.1 and where(m, x, 0.5): a bool and a float output from input 1."""
    shape = (64, 128)
    return [
        Call("mul", 10, (1,), (dtype, 2.0, False), shape, dtype, SITE),
        Call("gt", 11, (10,), (dtype, 0.1, False), shape, "bool", SITE),
        Call("where", 12, (11, 1), (None, 0.5), shape, dtype, SITE),
    ]


def test_kernel_is_named_after_its_source_ops():
    _, _, source = _render(gelu_tanh_chain(), F32, ("full", "full", "full"))
    assert source.name.startswith("ember_mul_add_gelu_tanh_mul_")
    assert f"void __launch_bounds__(256)\n{source.name}(" in source.code


def test_vectorized_kernel_loads_and_stores_whole_vectors():
    _, _, source = _render(gelu_tanh_chain(), F32, ("full", "full", "full"))
    assert "a0[t] = reinterpret_cast<const Vec<float, 4>*>(in0)[j];" in source.code
    assert "*(reinterpret_cast<Vec<float, 4>*>(out3) + j) = o3;" in source.code
    _, _, scalar = _render(gelu_tanh_chain(), F32, ("full", "full", "full"), vector=1)
    assert "Vec<" not in scalar.code.split("extern")[1]


def test_unrolled_kernel_loads_every_tile_before_computing_any():
    _, _, source = _render(gelu_tanh_chain(), F32, ("full", "strided", "scalar"), unroll=4)
    code = source.code.split("extern")[1]
    loads = code.index("if (j < chunks) a0[t] = reinterpret_cast<const Vec<float, 4>*>(in0)[j];")
    assert "Vec<float, 4> a0[4];" in code and "in1[" not in code[:loads]
    assert loads < code.index("if (j >= chunks) break;") < code.index("float v0 = a0[t].v[e];")
    assert "blockIdx.x * 1024 + threadIdx.x; base < chunks; base += step * 4)" in code
    assert "long long j = base + t * 256;" in code
    assert "*(reinterpret_cast<Vec<float, 4>*>(out3) + j) = o3;" in code
    # The elements past the last whole vector: the scalar loop, as without unrolling.
    assert "for (long long i = chunks * 4 + tid; i < n; i += step) {" in code
    plain = _render(gelu_tanh_chain(), F32, ("full", "strided", "scalar"))[2].code
    assert plain.split("for (long long i = chunks")[1] == code.split(
        "for (long long i = chunks")[1]


def test_unroll_needs_vector_loads_and_is_in_the_name_and_key():
    with pytest.raises(ValueError, match="unroll 2 needs vector loads"):
        _render(gelu_tanh_chain(), F32, ("full",) * 3, vector=1, unroll=2)
    names = {_render(gelu_tanh_chain(), F32, ("full",) * 3, unroll=u)[2].name
             for u in (1, 2, 4)}
    assert len(names) == 3


def test_broadcast_input_uses_index_math_and_scalar_input_loads_once():
    _, _, source = _render(gelu_tanh_chain(), F32, ("full", "strided", "scalar"))
    assert "offset1 += c * stride1_1;" in source.code
    assert "const float r2 = in2[0];" in source.code
    _, _, wide = _render(gelu_tanh_chain(), F32, ("full", "strided", "scalar"), narrow=False)
    assert "long long offset1 = 0;" in wide.code and "int offset1 = 0;" in source.code


def test_cache_key_ignores_sizes_and_scalar_values_but_not_structure():
    def key(calls, kinds=("full", "full", "full")):
        group, program = plan(calls, F32)
        return codegen.structure_key(group, program, ["float32"] * 3,
                                     codegen.Layout(kinds, 0), 4, 256)

    assert key(gelu_tanh_chain(scale=0.5)) == key(gelu_tanh_chain(scale=3.0))
    assert key(gelu_tanh_chain()) != key(gelu_tanh_chain(dtype="float16"))
    assert key(gelu_tanh_chain()) != key(gelu_tanh_chain(), ("full", "scalar", "full"))


def test_scalars_travel_as_arguments_in_render_order():
    calls = [
        Call("mul", 10, (1,), ("float16", 0.1, True), (8,), "float16", SITE),
        Call("gt", 11, (10,), ("float16", 0.1, False), (8,), "bool", SITE),
        Call("where", 12, (11, 1), (None, 2.5), (8,), "float16", SITE),
        Call("clamp", 13, (12,), (-1.0, None), (8,), "float16", SITE),
    ]
    group, program, source = _render(calls, {1: "float16"}, ("full",))
    assert cexpr.scalar_arguments(group.members, program.steps) == [
        ("float32", 0.1), ("float16", 0.1), ("float16", 2.5), ("float32", -1.0)]
    assert "float s3" in source.code and "float s4" not in source.code
    # A comparison's scalar is rounded to its float16 compute dtype, arithmetic's is not.
    assert cexpr.scalar_value("float16", 0.1) != cexpr.scalar_value("float32", 0.1)


def test_low_precision_members_round_to_their_dtype():
    _, _, source = _render(gelu_tanh_chain(dtype="bfloat16"),
                           {1: "bfloat16", 2: "bfloat16", 3: "bfloat16"},
                           ("full", "full", "full"))
    assert "bf16_round((v0 * v1))" in source.code
    assert "o3.v[e] = bf16_store(v6);" in source.code


def test_integer_and_python_rounding_ops_are_left_unfused():
    def dtype_of(i):
        return "float32"

    assert not codegen.fusible(Call("add", 5, (1, 2), ("int64",), (4,), "int64", SITE), dtype_of)
    assert not codegen.fusible(Call("floordiv", 5, (1, 2), ("float32",), (4,), "float32", SITE),
                               dtype_of)
    assert not codegen.fusible(Call("round", 5, (1,), (2,), (4,), "float32", SITE), dtype_of)
    assert codegen.fusible(Call("round", 5, (1,), (), (4,), "float32", SITE), dtype_of)


def test_coalesce_merges_dims_every_input_walks_as_one():
    # (8, 16, 32) with a (16, 32) broadcast input: the last two dims merge.
    assert cexpr.coalesce((8, 16, 32), [(0, 32, 1)]) == ((8, 512), [(0, 1)])
    # A (8, 1, 32) input cannot merge across the broadcast middle dim.
    assert cexpr.coalesce((8, 16, 32), [(32, 0, 1)]) == ((8, 16, 32), [(32, 0, 1)])
    assert cexpr.broadcast_strides((8, 16, 32), (16, 1), (4, 4), 4) == (0, 1, 0)


def _ptx(tmp_path, source):
    return ptx_of(tmp_path, source.code, source.name)


@needs_nvcc
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("kinds", [("full", "full", "full"), ("full", "strided", "scalar")])
def test_source_compiles_to_ptx_for_hopper(tmp_path, dtype, kinds):
    dtypes = {1: dtype, 2: dtype, 3: dtype}
    _ptx(tmp_path, _render(gelu_tanh_chain(dtype=dtype), dtypes, kinds)[2])


@needs_nvcc
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("vector, unroll", [(4, 2), (4, 4), (4, 8), (8, 2)])
def test_unrolled_sources_compile_with_every_load_a_vector(tmp_path, dtype, vector, unroll):
    # Outputs of float32, float16 / bfloat16 and bool: vectors of 4 to 32 bytes.
    _, _, source = _render(_mask_chain(dtype), {1: dtype}, ("full",), vector=vector,
                           unroll=unroll)
    ptx = _ptx(tmp_path, source)
    wide = {"float32": 4, "float16": 2, "bfloat16": 2}[dtype] * vector
    loads = [line for line in ptx.splitlines() if "ld.global.nc.v" in line]
    # Every tile's vector, 16 bytes per instruction at most (the compiler may also
    # duplicate the loop's body).
    assert len(loads) >= unroll * max(1, wide // 16)


def test_group_structure_leaves_out_scalar_values_and_stored_members():
    """Groups that differ only in a scalar's value (an optimizer's per-step factor) or in
    which members they store share one structure; another op or wiring does not."""
    def structure(scale: float, drop_first: bool = False, op: str = "gelu_tanh") -> tuple:
        calls = gelu_tanh_chain(scale=scale)
        calls[2] = Call(op, 12, (11,), (), calls[2].shape, "float32", SITE)
        if drop_first:  # the handle of the first member died: it need not be stored
            calls.append(Drop(10))
        planner = FusionPlanner(codegen.fusible, 32)
        group = planner.plan(calls, F32.get)[0]
        return codegen.group_structure(group)

    assert structure(0.5) == structure(2.0)
    kept, dropped = (FusionPlanner(codegen.fusible, 32).plan(gelu_tanh_chain() + extra, F32.get)[0]
                     for extra in ([], [Drop(10)]))
    assert kept.key != dropped.key  # the planner's keys differ: the first is not stored
    assert structure(0.5) == structure(0.5, drop_first=True)
    assert structure(0.5) != structure(0.5, op="sigmoid")


@needs_nvcc
def test_bfloat16_stores_round_in_one_instruction_on_hopper(tmp_path):
    """From sm_80 on, bf16_store is cvt.rn.bf16.f32 (round to nearest even, NaN quiet);
    the integer rounding steps remain for older GPUs only."""
    ptx = _ptx(tmp_path, _render(gelu_tanh_chain(dtype="bfloat16"), {i: "bfloat16" for i in
                                                                     (1, 2, 3)},
                                 ("full", "full", "full"))[2])
    assert "cvt.rn.bf16.f32" in ptx
    assert "32767" not in ptx  # the integer path's rounding bias, 0x7fff
