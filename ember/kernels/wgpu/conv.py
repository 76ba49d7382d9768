"""WebGPU kernels of convolution: direct sums, one invocation per output element.

``conv1d`` / ``conv2d``, their transposes and ``conv_weight_grad`` (the
weight's gradient) each sum the products that reach one output cell; the
index arithmetic is the CPU backend's im2col / col2im written per cell, with
no column matrix in memory. 1-D runs as 2-D with a height of one. float16
sums in f32 and rounds once, as the CPU backend does; sums run in a fixed
order, so results are deterministic (and differ from BLAS's order only by
rounding).

Layouts are PyTorch's: inputs (N, C, *spatial) or unbatched (C, *spatial);
convolution weights (O, C / groups, *kernel); transposed-convolution
weights (C_in, C_out / groups, *kernel). Attributes, as ``ember/ops/conv.py``
builds them: ``(stride, padding, dilation, groups)`` with ``padding`` a
``(low, high)`` pair per spatial dim (the output size is the message's, so
only the low side matters here).
"""

from __future__ import annotations

from ember.kernels.wgpu import codegen
from ember.kernels.wgpu.strided import contiguous
from ember.kernels.wgpu.table import WgpuArray, kernel

# Params, shared by the three kernels: count, N, C_in, H, W, C_out, OH, OW, KH, KW,
# stride h/w, padding h/w (low side), dilation h/w, groups, x offset, w offset, b offset.
_PARAMS = ("count n c_in h w c_out oh ow kh kw sh sw ph pw dh dw groups x0 w0 b0").split()
_READ_PARAMS = "".join(f"    let {name} = pi({i}u);\n" for i, name in enumerate(_PARAMS))

# Each body sees the params by name and `f`, the invocation's element; it leaves the sum in
# `acc` and reads inputs through `xv(at)` / `wv(at)` (f32 values).
# The output cell (b, o, oy, ox) of element f, for the bodies that sum into one output cell.
_OUTPUT_CELL = """
    let ox = f % ow;
    let oy = (f / ow) % oh;
    let o = (f / (ow * oh)) % c_out;
    let b = f / (ow * oh * c_out);"""
_CONV = _OUTPUT_CELL + """
    let per_group = w_in;
    let g = o / (c_out / groups);
    for (var c = 0; c < per_group; c++) {
        for (var i = 0; i < kh; i++) {
            let y = oy * sh + i * dh - ph;
            if (y < 0 || y >= h) { continue; }
            for (var j = 0; j < kw; j++) {
                let x = ox * sw + j * dw - pw;
                if (x < 0 || x >= w) { continue; }
                acc += xv(((b * c_in + g * per_group + c) * h + y) * w + x)
                     * wv(((o * per_group + c) * kh + i) * kw + j);
            }
        }
    }
    let channel = o;
"""

# The transpose: input cell t reaches output cell t·s + i·d - p, so an output cell y
# gathers the t = (y + p - i·d) / s that divide exactly and fall inside the input.
_TRANSPOSE = _OUTPUT_CELL + """
    let out_per_group = w_in;
    let in_per_group = c_in / groups;
    let g = o / out_per_group;
    let co_local = o % out_per_group;
    for (var c = 0; c < in_per_group; c++) {
        let ci = g * in_per_group + c;
        for (var i = 0; i < kh; i++) {
            let ty = oy + ph - i * dh;
            if (ty < 0 || ty % sh != 0 || ty / sh >= h) { continue; }
            for (var j = 0; j < kw; j++) {
                let tx = ox + pw - j * dw;
                if (tx < 0 || tx % sw != 0 || tx / sw >= w) { continue; }
                acc += xv(((b * c_in + ci) * h + ty / sh) * w + tx / sw)
                     * wv(((ci * out_per_group + co_local) * kh + i) * kw + j);
            }
        }
    }
    let channel = o;
"""

# The weight's gradient: element (o, c, i, j) sums grad[b, o, y, x] · input[b, g·C/g + c,
# y·s + i·d - p, x·s + j·d - p] over the batch and every output cell. Here "w" binds the
# output's gradient, of spatial size (OH, OW) = the params' oh, ow.
_WEIGHT_GRAD = """
    let per_group = w_in;
    let j = f % kw;
    let i = (f / kw) % kh;
    let c = (f / (kw * kh)) % per_group;
    let o = f / (kw * kh * per_group);
    let g = o / (c_out / groups);
    for (var b = 0; b < n; b++) {
        for (var oy = 0; oy < oh; oy++) {
            let y = oy * sh + i * dh - ph;
            if (y < 0 || y >= h) { continue; }
            for (var ox = 0; ox < ow; ox++) {
                let x = ox * sw + j * dw - pw;
                if (x < 0 || x >= w) { continue; }
                acc += wv(((b * c_out + o) * oh + oy) * ow + ox)
                     * xv(((b * c_in + g * per_group + c) * h + y) * w + x);
            }
        }
    }
    let channel = 0;
"""

_SOURCES: dict[tuple, str] = {}


def _source(body: str, dtype: str, bias: bool) -> str:
    key = (body, dtype, bias)
    found = _SOURCES.get(key)
    if found is not None:
        return found
    reads = [dtype, dtype] + ([dtype] if bias else [])
    add_bias = f"acc += {codegen.load('in2', 'u32(b0 + channel)', dtype)};" if bias else ""
    found = _SOURCES[key] = (
        codegen.header([dtype]) + codegen.bindings([dtype], reads, len(_PARAMS) + 1)
        + "".join(f"fn {name}(at: i32) -> f32 {{ return "
                  f"{codegen.load(array, f'u32(pi({_PARAMS.index(offset)}u) + at)', dtype)}; }}\n"
                  for name, array, offset in (("xv", "in0", "x0"), ("wv", "in1", "w0")))
        + codegen.ENTRY.format(size=64) + f"""
    let f = i32({codegen.LINEAR_INDEX.format(size=64)});
{_READ_PARAMS}    let w_in = pi({len(_PARAMS)}u);
    if (f >= count) {{ return; }}
    var acc = 0.0;
{body}
    {add_bias}
    out0[u32(f)] = {codegen.store('acc', dtype)};
}}
""")
    return found


def _planes(shape: tuple[int, ...], spatial: int) -> tuple[int, int, int, int]:
    """(N, C, H, W) of a shape; unbatched is a batch of one, 1-D has a height of one."""
    batched = shape if len(shape) == spatial + 2 else (1,) + shape
    return batched[:2] + ((1,) if spatial == 1 else ()) + batched[2:]


def _dispatch(rt, msg, body: str, x: WgpuArray, other: WgpuArray, bias: WgpuArray | None,
              x_shape: tuple[int, ...], out_planes: tuple[int, int, int, int],
              kernel_shape: tuple[int, ...]) -> WgpuArray:
    """One invocation per output element; ``other`` is the weight (the output's gradient for
    ``conv_weight_grad``), ``out_planes`` its (N, C_out, OH, OW) and ``kernel_shape`` the
    weight's shape."""
    stride, padding, dilation, groups = msg.attrs
    spatial = len(kernel_shape) - 2
    out = rt.empty(msg.shape, msg.dtype)
    if out.size == 0:
        return out
    x, other = contiguous(rt, x), contiguous(rt, other)
    reads = [x, other]
    if bias is not None:
        bias = contiguous(rt, bias)
        reads.append(bias)
    lows = tuple(low for low, _ in padding)
    if spatial == 1:  # a height of one: kernel 1, stride 1, no padding, dilation 1
        stride, lows, dilation = (1, *stride), (0, *lows), (1, *dilation)
    kernel_hw = (1,) * (2 - spatial) + tuple(kernel_shape[2:])
    n, c_in, h, w = _planes(x_shape, spatial)
    _, c_out, oh, ow = out_planes
    params = [out.size, n, c_in, h, w, c_out, oh, ow, *kernel_hw, *stride, *lows, *dilation,
              groups, x.offset, other.offset, bias.offset if bias is not None else 0,
              kernel_shape[1]]
    rt.dispatch(_source(body, msg.dtype, bias is not None), [out], reads, params,
                rt.groups(out.size, 64))
    return out


@kernel("conv1d", "conv2d")
def _conv(msg, rt, x, w, b=None):
    planes = _planes(msg.shape, w.ndim - 2)
    return _dispatch(rt, msg, _CONV, x, w, b, x.shape, planes, w.shape)


@kernel("conv_transpose1d", "conv_transpose2d")
def _conv_transpose(msg, rt, x, w, b=None):
    planes = _planes(msg.shape, w.ndim - 2)
    return _dispatch(rt, msg, _TRANSPOSE, x, w, b, x.shape, planes, w.shape)


@kernel("conv_weight_grad")
def _conv_weight_grad(msg, rt, x, grad):
    planes = _planes(grad.shape, len(msg.shape) - 2)
    return _dispatch(rt, msg, _WEIGHT_GRAD, x, grad, None, x.shape, planes, msg.shape)
