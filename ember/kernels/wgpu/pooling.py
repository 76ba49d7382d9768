"""WebGPU kernels of 2-D pooling: max (values, indices, gradient), average and adaptive average.

Every kernel is one invocation per output element over (planes, rows, cols),
planes being every leading dim (batch and channels) flattened. Forward
kernels loop over their window; backward kernels are gathers, not scatters:
each input cell sums the gradient of the windows that cover it, so there are
no atomics and the result is deterministic.

Max pooling picks the cell PyTorch's CPU kernel picks (the first maximum;
with NaNs, the last NaN: its loop keeps ``value > best || isnan(value)``).
Padding cells never win. Its gradient reads the chosen cells from an
indices pass (``max_pool2d_indices``' kernel) and sends each output's
gradient to its cell.

Average pooling divides each window's sum by PyTorch's count
(``count_include_pad`` counts padding, never the cells a ceil_mode window runs
past it) or by ``divisor_override``. Adaptive windows are ``[floor(i·S/O),
ceil((i+1)·S/O))``. float16 computes in f32 and rounds once.

Attributes, as ``ember/ops/conv.py`` builds them: max pooling ``(kernel,
stride, padding, dilation, ceil_mode)``; average pooling ``(kernel, stride,
padding, ceil_mode, count_include_pad, divisor_override)``; adaptive none.
The output's spatial size is always the message's.
"""

from __future__ import annotations

from ember.kernels.wgpu import codegen
from ember.kernels.wgpu.scalar_ops import HELPERS
from ember.kernels.wgpu.strided import contiguous
from ember.kernels.wgpu.table import WgpuArray, kernel

# Params of every pooling kernel; the body sees them by name, `f` (its element) and the
# input through `xv(at)` (register values; f32 for the floats).
_PARAMS = ("count h w oh ow kh kw sh sw ph pw dh dw x0 g0 divisor include").split()
_READ_PARAMS = "".join(f"    let {name} = pi({i}u);\n" for i, name in enumerate(_PARAMS))
_OUTPUT_CELL = """
    let ox = f % ow;
    let oy = (f / ow) % oh;
    let plane = f / (ow * oh);
"""
_INPUT_CELL = """
    let x = f % w;
    let y = (f / w) % h;
    let plane = f / (w * h);
"""

# The window's chosen cell as `pick` (flat in the plane); its value as `best`.
_ARGMAX = _OUTPUT_CELL + """
    let y_first = oy * sh - ph;
    let x_first = ox * sw - pw;
    var pick = max(y_first, 0) * w + max(x_first, 0);
    var best = xv(plane * h * w + pick);
    var seen = false;
    for (var i = 0; i < kh; i++) {
        let y = y_first + i * dh;
        if (y < 0 || y >= h) { continue; }
        for (var j = 0; j < kw; j++) {
            let x = x_first + j * dw;
            if (x < 0 || x >= w) { continue; }
            let value = xv(plane * h * w + y * w + x);
            if (!seen || value > best || isnan_f(value)) {
                best = value;
                pick = y * w + x;
                seen = true;
            }
        }
    }
"""

# Sums the gradient (in `gv`) of every window whose chosen cell (in `cell`) is this one.
_MAX_BACKWARD = _INPUT_CELL + """
    var acc = 0.0;
    for (var i = kh - 1; i >= 0; i--) {
        let ty = y + ph - i * dh;
        if (ty < 0 || ty % sh != 0 || ty / sh >= oh) { continue; }
        for (var j = kw - 1; j >= 0; j--) {
            let tx = x + pw - j * dw;
            if (tx < 0 || tx % sw != 0 || tx / sw >= ow) { continue; }
            let at = (plane * oh + ty / sh) * ow + tx / sw;
            if (cell(at) == y * w + x) { acc += gv(at); }
        }
    }
"""

# PyTorch's divisor of window (oy, ox): the padded window clipped at the padding's far
# edge, and to the input too unless padding counts.
_DIVISOR = """
fn window_divisor(oy: i32, ox: i32) -> f32 {
    if (pi(15u) != 0) { return f32(pi(15u)); }
    var y_start = oy * pi(7u) - pi(9u);
    var x_start = ox * pi(8u) - pi(10u);
    var y_end = min(y_start + pi(5u), pi(1u) + pi(9u));
    var x_end = min(x_start + pi(6u), pi(2u) + pi(10u));
    if (pi(16u) == 0) {
        y_start = max(y_start, 0);
        x_start = max(x_start, 0);
        y_end = min(y_end, pi(1u));
        x_end = min(x_end, pi(2u));
    }
    return f32((y_end - y_start) * (x_end - x_start));
}
"""

_AVG = _OUTPUT_CELL + """
    var acc = 0.0;
    for (var i = 0; i < kh; i++) {
        let y = oy * sh - ph + i;
        if (y < 0 || y >= h) { continue; }
        for (var j = 0; j < kw; j++) {
            let x = ox * sw - pw + j;
            if (x < 0 || x >= w) { continue; }
            acc += xv(plane * h * w + y * w + x);
        }
    }
    acc = acc / window_divisor(oy, ox);
"""

_AVG_BACKWARD = _INPUT_CELL + """
    var acc = 0.0;
    for (var i = 0; i < kh; i++) {
        let ty = y + ph - i;
        if (ty < 0 || ty % sh != 0 || ty / sh >= oh) { continue; }
        for (var j = 0; j < kw; j++) {
            let tx = x + pw - j;
            if (tx < 0 || tx % sw != 0 || tx / sw >= ow) { continue; }
            let oy = ty / sh;
            let ox = tx / sw;
            acc += xv((plane * oh + oy) * ow + ox) / window_divisor(oy, ox);
        }
    }
"""

# Adaptive window i along a dim of input size s and output size o: [i·s/o, ceil((i+1)·s/o)).
_BINS = """
fn bin_start(i: i32, s: i32, o: i32) -> i32 { return (i * s) / o; }
fn bin_end(i: i32, s: i32, o: i32) -> i32 { return ((i + 1) * s + o - 1) / o; }
"""

_ADAPTIVE = _OUTPUT_CELL + """
    let y_start = bin_start(oy, h, oh);
    let y_end = bin_end(oy, h, oh);
    let x_start = bin_start(ox, w, ow);
    let x_end = bin_end(ox, w, ow);
    var acc = 0.0;
    for (var y = y_start; y < y_end; y++) {
        for (var x = x_start; x < x_end; x++) { acc += xv(plane * h * w + y * w + x); }
    }
    acc = acc / f32((y_end - y_start) * (x_end - x_start));
"""

# The windows covering input cell y run from the one that starts at or before it (index
# floor(y·o/s), maybe one less where windows overlap) to the last that starts at or before it.
_ADAPTIVE_BACKWARD = _INPUT_CELL + """
    var acc = 0.0;
    for (var oy = max((y * oh) / h - 1, 0); oy < oh && bin_start(oy, h, oh) <= y; oy++) {
        let y_start = bin_start(oy, h, oh);
        let y_end = bin_end(oy, h, oh);
        if (y >= y_end) { continue; }
        for (var ox = max((x * ow) / w - 1, 0); ox < ow && bin_start(ox, w, ow) <= x; ox++) {
            let x_start = bin_start(ox, w, ow);
            let x_end = bin_end(ox, w, ow);
            if (x >= x_end) { continue; }
            acc += xv((plane * oh + oy) * ow + ox) / f32((y_end - y_start) * (x_end - x_start));
        }
    }
"""

_SOURCES: dict[tuple, str] = {}


def _source(body: str, result: str, out_dtype: str, in_dtype: str, second: str | None) -> str:
    """A pooling kernel: ``body`` leaves ``result`` (a register value of ``out_dtype``).

    ``second``: the dtype of a second input (the gradient of max pooling's backward, read
    with ``gv``), whose first input ``cell`` reads the chosen cells.
    """
    key = (body, result, out_dtype, in_dtype, second)
    found = _SOURCES.get(key)
    if found is not None:
        return found
    reads = [in_dtype] + ([second] if second else [])
    x0 = _PARAMS.index("x0")
    accessors = (f"fn xv(at: i32) -> {codegen.register_type(in_dtype)} "
                 f"{{ return {codegen.load('in0', f'u32(pi({x0}u) + at)', in_dtype)}; }}\n")
    if second:
        g0 = _PARAMS.index("g0")
        accessors += (f"fn cell(at: i32) -> i32 {{ return in0[u32(pi({x0}u) + at)]; }}\n"
                      f"fn gv(at: i32) -> f32 "
                      f"{{ return {codegen.load('in1', f'u32(pi({g0}u) + at)', second)}; }}\n")
    nan = (HELPERS["isnan_f"] + "\n" if codegen.kind(in_dtype) == "f"
           else f"fn isnan_f(v: {codegen.register_type(in_dtype)}) -> bool {{ return false; }}\n")
    found = _SOURCES[key] = (
        codegen.header([out_dtype, in_dtype] + ([second] if second else []))
        + codegen.bindings([out_dtype], reads, len(_PARAMS)) + accessors + nan + _DIVISOR
        + _BINS + codegen.ENTRY.format(size=64) + f"""
    let f = i32({codegen.LINEAR_INDEX.format(size=64)});
{_READ_PARAMS}    if (f >= count) {{ return; }}
{body}
    out0[u32(f)] = {codegen.store(result, out_dtype)};
}}
""")
    return found


def _dispatch(rt, shape: tuple[int, ...], dtype: str, source: str, inputs: list[WgpuArray],
              in_hw: tuple[int, int], out_hw: tuple[int, int], window: list[int],
              divisor: tuple[int, int] = (0, 0)) -> WgpuArray:
    """``window``: kh, kw, sh, sw, ph, pw, dh, dw."""
    out = rt.empty(shape, dtype)
    if out.size == 0:
        return out
    inputs = [contiguous(rt, x) for x in inputs]
    offsets = [x.offset for x in inputs] + [0]
    params = [out.size, *in_hw, *out_hw, *window, *offsets[:2], *divisor]
    rt.dispatch(source, [out], inputs, params, rt.groups(out.size, 64))
    return out


def _max_window(attrs: tuple) -> list[int]:
    kernel_size, stride, padding, dilation, _ = attrs
    return [*kernel_size, *stride, *padding, *dilation]


def _hw(shape: tuple[int, ...]) -> tuple[int, int]:
    return shape[-2], shape[-1]


@kernel("max_pool2d")
def _max_pool2d(msg, rt, x):
    source = _source(_ARGMAX, "best", msg.dtype, x.dtype, None)
    return _dispatch(rt, msg.shape, msg.dtype, source, [x], _hw(x.shape), _hw(msg.shape),
                     _max_window(msg.attrs))


def _indices(rt, x: WgpuArray, shape: tuple[int, ...], attrs: tuple) -> WgpuArray:
    """Per output, the flat index ``h · W + w`` of its window's chosen cell (int64)."""
    source = _source(_ARGMAX, "pick", "int64", x.dtype, None)
    return _dispatch(rt, shape, "int64", source, [x], _hw(x.shape), _hw(shape),
                     _max_window(attrs))


@kernel("max_pool2d_indices")
def _max_pool2d_indices(msg, rt, x):
    return _indices(rt, x, msg.shape, msg.attrs)


@kernel("max_pool2d_backward")
def _max_pool2d_backward(msg, rt, x, grad):
    cells = _indices(rt, x, grad.shape, msg.attrs)
    source = _source(_MAX_BACKWARD, "acc", msg.dtype, "int64", grad.dtype)
    return _dispatch(rt, msg.shape, msg.dtype, source, [cells, grad], _hw(msg.shape),
                     _hw(grad.shape), _max_window(msg.attrs))


def _avg_window(attrs: tuple) -> tuple[list[int], tuple[int, int]]:
    kernel_size, stride, padding, _, count_include_pad, divisor_override = attrs
    return ([*kernel_size, *stride, *padding, 1, 1],
            (divisor_override or 0, int(count_include_pad)))


def _sum_pool(msg, rt, body: str, x: WgpuArray, plane: tuple[int, ...],
              pooled: tuple[int, ...], window: list[int],
              divisor: tuple[int, int] = (0, 0)) -> WgpuArray:
    """An averaging kernel ``body`` (forward or backward) over ``x`` into ``msg``'s output:
    ``plane`` is the shape before pooling, ``pooled`` the shape after."""
    source = _source(body, "acc", msg.dtype, x.dtype, None)
    return _dispatch(rt, msg.shape, msg.dtype, source, [x], _hw(plane), _hw(pooled), window,
                     divisor)


@kernel("avg_pool2d")
def _avg_pool2d(msg, rt, x):
    return _sum_pool(msg, rt, _AVG, x, x.shape, msg.shape, *_avg_window(msg.attrs))


@kernel("avg_pool2d_backward")
def _avg_pool2d_backward(msg, rt, grad):
    return _sum_pool(msg, rt, _AVG_BACKWARD, grad, msg.shape, grad.shape,
                     *_avg_window(msg.attrs))


@kernel("adaptive_avg_pool2d")
def _adaptive_avg_pool2d(msg, rt, x):
    return _sum_pool(msg, rt, _ADAPTIVE, x, x.shape, msg.shape, [0] * 8)


@kernel("adaptive_avg_pool2d_backward")
def _adaptive_avg_pool2d_backward(msg, rt, grad):
    return _sum_pool(msg, rt, _ADAPTIVE_BACKWARD, grad, msg.shape, grad.shape, [0] * 8)

