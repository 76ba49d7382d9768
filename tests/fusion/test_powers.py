"""``x ** n`` lowered in every generated kernel: the CPU's compiled C, CUDA C++ and WGSL
contain no pow for the lowered exponents, and fused results keep the unfused bits."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.ir import Call
from ember.kernels.cupy import codegen as cuda_codegen
from ember.kernels.fusion import powers
from ember.kernels.numpy import compiled, csource
from ember.kernels.wgpu import elementwise as wgsl
from tests.cuda.gpu import needs_nvcc, ptx_of
from tests.cuda.groups import SITE, plan
from tests.fusion.test_compiled import _both_ways, _special_operands, compile_small  # noqa: F401
from tests.fusion.test_fusion import assert_same_bits
from tests.runtime_mode import lazy_only

_SHAPE = (64, 128)


def _gelu_cube_calls(n: float = 3.0) -> list[Call]:
    """x * 0.5 * (1 + tanh(0.79788456 * (x + 0.044715 * x ** n))) from input 1."""
    f = "float32"
    return [
        Call("pow", 10, (1,), (f, n, False), _SHAPE, f, SITE),
        Call("mul", 11, (10,), (f, 0.044715, False), _SHAPE, f, SITE),
        Call("add", 12, (1, 11), (f,), _SHAPE, f, SITE),
        Call("mul", 13, (12,), (f, 0.79788456, False), _SHAPE, f, SITE),
        Call("tanh", 14, (13,), (), _SHAPE, f, SITE),
        Call("add", 15, (14,), (f, 1.0, False), _SHAPE, f, SITE),
        Call("mul", 16, (1,), (f, 0.5, False), _SHAPE, f, SITE),
        Call("mul", 17, (16, 15), (f,), _SHAPE, f, SITE),
    ]


@lazy_only
def test_x_cubed_compiles_to_c_without_pow(compile_small, monkeypatch):
    sources = []
    original = csource.render
    monkeypatch.setattr(compiled.csource, "render",
                        lambda *a: sources.append(original(*a)) or sources[-1])
    x_np = np.random.default_rng(0).standard_normal((64, 300), dtype=np.float32)
    x = em.tensor(x_np)
    y = (x * 0.5 * (1.0 + (0.79788456 * (x + 0.044715 * x ** 3)).tanh())).numpy()
    assert sources and compile_small
    body = "\n".join(s.code.split(f"void {s.name}(")[1] for s in sources)
    assert "pow" not in body
    assert "((v" in body and "* v" in body  # the cube as products
    wide = x_np.astype(np.float64)
    expected = wide * 0.5 * (1 + np.tanh(0.79788456 * (wide + 0.044715 * wide ** 3)))
    np.testing.assert_allclose(y, expected, rtol=2e-6, atol=2e-7)


@pytest.mark.parametrize("n", sorted(powers.LOWERED))
@lazy_only
def test_each_lowered_power_compiled_is_bitwise_the_unfused_kernel(compile_small, n):
    a, _ = _special_operands()
    with np.errstate(all="ignore"):
        fused, plain = _both_ways(lambda x: ((x * 1.0) ** n) * 1.0, a)
    assert compile_small, "the group did not compile"
    assert_same_bits({str(n): fused}, {str(n): plain})


def test_other_exponents_keep_their_scalar_argument_and_the_numpy_executor():
    call = Call("pow", 10, (1,), ("float32", 2.5, False), _SHAPE, "float32", SITE)
    assert powers.lowered_exponent(call) is None
    assert not csource.compilable(call, {1: "float32"}.get)
    lowered = Call("pow", 10, (1,), ("float32", 3.0, False), _SHAPE, "float32", SITE)
    assert csource.compilable(lowered, {1: "float32"}.get)
    # A bool exponent is not lowered, a scalar base (3 ** x) neither, nor an int output.
    for attrs, dtype in [(("float32", True, False), "float32"),
                         (("float32", 3.0, True), "float32"), (("int32", 3, False), "int32")]:
        other = Call("pow", 10, (1,), attrs, _SHAPE, dtype, SITE)
        assert powers.lowered_exponent(other) is None


def _cuda_source(n: float = 3.0):
    group, program = plan(_gelu_cube_calls(n), {1: "float32"})
    layout = cuda_codegen.Layout(("full",), 0, True)
    return cuda_codegen.render(group, program, ["float32"], layout, 4, 256, 1)


def test_cuda_source_of_x_cubed_has_no_pow_and_no_exponent_argument():
    source = _cuda_source()
    kernel = source.code.split("extern")[1].split("{", 1)[1]  # after the signature
    assert "pow" not in kernel
    assert "float v1 = ((v0 * v0) * v0);" in kernel
    # The other scalars are arguments; the exponent is code.
    assert [v for _, v in source.scalars] == [0.044715, 0.79788456, 1.0, 0.5]
    # Another exponent is another kernel; the same exponent with other scalars is not.
    assert _cuda_source(2.0).name != source.name


@needs_nvcc
def test_cuda_source_of_x_cubed_compiles_to_ptx_without_pow(tmp_path):
    source = _cuda_source()
    ptx = ptx_of(tmp_path, source.code, source.name)
    # powf brings its test of an integral exponent (a truncating conversion, cvt.rzi)
    # and twice the code into the PTX; the products and tanhf bring neither.
    with_pow = _cuda_source(2.5)
    pow_ptx = ptx_of(tmp_path, with_pow.code, with_pow.name)
    assert "cvt.rzi" in pow_ptx and "cvt.rzi" not in ptx
    assert ptx.count("\n") < 0.7 * pow_ptx.count("\n")


def test_wgsl_of_x_cubed_has_no_pow_and_no_param():
    call = Call("pow", 1, (0,), ("float32", 3.0, False), (4,), "float32", SITE)
    attrs, scalars = wgsl.split_scalars(call)
    assert scalars == [] and attrs == ("float32", 3.0, False)
    steps = ((call.op, attrs, call.dtype, (0,), ()),)
    source = wgsl.render(1, (("float32", "c"),), steps, (0,))
    assert "pow" not in source
    assert "let v0: f32 = (((x0) * (x0)) * (x0));" in source
    reciprocal = Call("pow", 1, (0,), ("float32", -0.5, False), (4,), "float32", SITE)
    steps = ((reciprocal.op, reciprocal.attrs, reciprocal.dtype, (0,), ()),)
    source = wgsl.render(1, (("float32", "c"),), steps, (0,))
    assert "pow" not in source and "(1.0 / sqrt((x0)))" in source
