"""Convolution and pooling cases: conv1d / conv2d, their transposes, max / avg / adaptive pooling.

The NumPy references are written from the definitions, one output (or input)
position at a time, so they share nothing with the im2col kernels they
check. float16 and bfloat16 are referenced in float32 rounded once, which is
what PyTorch's CPU kernels compute. Gradient cases are small float64
problems with torch twins; max-pool ties (ill-defined for finite
differences) are checked against torch in ``tests/nn/test_conv_layers.py``.
"""

from __future__ import annotations

import itertools

import numpy as np

from ember.nn import functional as F
from tests.ops.grad_harness import GradCase
from tests.ops.harness import FLOAT_DTYPES, Case
from tests.ops.harness import array as _array


def array(shape: tuple[int, ...], dtype: str = "float32", salt: int = 0, **kwargs) -> np.ndarray:
    return np.asarray(_array(shape, dtype, salt=salt, **kwargs))


def _n(value, n: int) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * n


def _compute(x: np.ndarray) -> np.dtype:
    return np.dtype(np.float64) if x.dtype == np.float64 else np.dtype(np.float32)


# ----- references ---------------------------------------------------------------------------

def ref_conv(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    """Cross-correlation from its definition, output position by output position."""
    spatial = w.ndim - 2
    unbatched = x.ndim == spatial + 1
    compute = _compute(x)
    xc = (x[None] if unbatched else x).astype(compute)
    wc = w.astype(compute)
    k = w.shape[2:]
    s, d = _n(stride, spatial), _n(dilation, spatial)
    if padding == "same":
        total = [di * (ki - 1) for ki, di in zip(k, d)]
        pads = [(t // 2, t - t // 2) for t in total]
    elif padding == "valid":
        pads = [(0, 0)] * spatial
    else:
        pads = [(p, p) for p in _n(padding, spatial)]
    xp = np.pad(xc, [(0, 0), (0, 0)] + pads)
    out_sizes = [(xp.shape[2 + i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(spatial)]
    n, c = xc.shape[:2]
    o = w.shape[0]
    cg, og = c // groups, o // groups
    out = np.zeros((n, o, *out_sizes), compute)
    for pos in itertools.product(*(range(m) for m in out_sizes)):
        index = (slice(None), slice(None)) + tuple(
            pos[i] * s[i] + np.arange(k[i]).reshape((-1,) + (1,) * (spatial - 1 - i)) * d[i]
            for i in range(spatial))
        window = xp[index]  # (N, C, *k)
        for g in range(groups):
            part = window[:, g * cg:(g + 1) * cg].reshape(n, cg * int(np.prod(k)))
            out[(slice(None), slice(g * og, (g + 1) * og)) + pos] = (
                part @ wc[g * og:(g + 1) * og].reshape(og, -1).T)
    if b is not None:
        out += b.astype(compute).reshape((1, -1) + (1,) * spatial)
    out = out[0] if unbatched else out
    return out.astype(x.dtype)


def ref_conv_transpose(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1,
                       dilation=1):
    """Each input cell scatters ``x · weight`` to the cells its kernel reaches; then crop."""
    spatial = w.ndim - 2
    unbatched = x.ndim == spatial + 1
    compute = _compute(x)
    xc = (x[None] if unbatched else x).astype(compute)
    wc = w.astype(compute)
    k = w.shape[2:]
    s, p, d = _n(stride, spatial), _n(padding, spatial), _n(dilation, spatial)
    e = _n(output_padding, spatial)
    n, c = xc.shape[:2]
    cg, og = c // groups, w.shape[1]
    in_sizes = xc.shape[2:]
    full = [(in_sizes[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1 + e[i] for i in range(spatial)]
    acc = np.zeros((n, og * groups, *full), compute)
    for pos in itertools.product(*(range(m) for m in in_sizes)):
        for off in itertools.product(*(range(m) for m in k)):
            cell = tuple(pos[i] * s[i] + off[i] * d[i] for i in range(spatial))
            for g in range(groups):
                value = xc[(slice(None), slice(g * cg, (g + 1) * cg)) + pos]  # (N, cg)
                acc[(slice(None), slice(g * og, (g + 1) * og)) + cell] += (
                    value @ wc[(slice(g * cg, (g + 1) * cg), slice(None)) + off])
    crop = (slice(None), slice(None)) + tuple(
        slice(p[i], full[i] - p[i]) for i in range(spatial))
    out = acc[crop]
    if b is not None:
        out = out + b.astype(compute).reshape((1, -1) + (1,) * spatial)
    out = out[0] if unbatched else out
    return out.astype(x.dtype)


def _pool_sizes(size, k, s, p, d, ceil_mode):
    n = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (n - 1) * s >= size + p:
        n -= 1
    return n


def ref_max_pool(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                 indices=False):
    """The max (and PyTorch's flat index of the first max) of every window's in-bounds cells."""
    unbatched = x.ndim == 3
    xb = x[None] if unbatched else x
    k = _n(kernel_size, 2)
    s = k if stride is None else _n(stride, 2)
    p, d = _n(padding, 2), _n(dilation, 2)
    h, w = xb.shape[2:]
    oh, ow = (_pool_sizes(m, k[i], s[i], p[i], d[i], ceil_mode) for i, m in enumerate((h, w)))
    values = np.zeros(xb.shape[:2] + (oh, ow), x.dtype)
    where = np.zeros(xb.shape[:2] + (oh, ow), np.int64)
    for i, j in itertools.product(range(oh), range(ow)):
        rows = [r for r in i * s[0] - p[0] + np.arange(k[0]) * d[0] if 0 <= r < h]
        cols = [c for c in j * s[1] - p[1] + np.arange(k[1]) * d[1] if 0 <= c < w]
        cells = xb[:, :, rows][:, :, :, cols].reshape(xb.shape[:2] + (len(rows) * len(cols),))
        first = np.argmax(cells, axis=-1)
        values[:, :, i, j] = np.take_along_axis(cells, first[..., None], -1)[..., 0]
        flat = np.array([r * w + c for r in rows for c in cols])
        where[:, :, i, j] = flat[first]
    result = where if indices else values
    return result[0] if unbatched else result


def ref_avg_pool(x, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):
    """PyTorch's CPU definition: padding counts up to the padded edge, never past it."""
    unbatched = x.ndim == 3
    compute = _compute(x)
    xb = (x[None] if unbatched else x).astype(compute)
    k = _n(kernel_size, 2)
    s = k if stride is None else _n(stride, 2)
    p = _n(padding, 2)
    h, w = xb.shape[2:]
    oh, ow = (_pool_sizes(m, k[i], s[i], p[i], 1, ceil_mode) for i, m in enumerate((h, w)))
    out = np.zeros(xb.shape[:2] + (oh, ow), compute)
    for i, j in itertools.product(range(oh), range(ow)):
        h0, w0 = i * s[0] - p[0], j * s[1] - p[1]
        h1, w1 = min(h0 + k[0], h + p[0]), min(w0 + k[1], w + p[1])
        size = (h1 - h0) * (w1 - w0)
        h0, w0, h1, w1 = max(h0, 0), max(w0, 0), min(h1, h), min(w1, w)
        total = xb[:, :, h0:h1, w0:w1].sum(axis=(2, 3))
        divisor = (divisor_override if divisor_override is not None
                   else size if count_include_pad else (h1 - h0) * (w1 - w0))
        out[:, :, i, j] = total / divisor
    out = out[0] if unbatched else out
    return out.astype(x.dtype)


def ref_adaptive_avg_pool(x, output_size):
    unbatched = x.ndim == 3
    compute = _compute(x)
    xb = (x[None] if unbatched else x).astype(compute)
    h, w = xb.shape[2:]
    oh, ow = (m if o is None else o for m, o in zip((h, w), _n(output_size, 2)))
    out = np.zeros(xb.shape[:2] + (oh, ow), compute)
    for i, j in itertools.product(range(oh), range(ow)):
        h0, h1 = (i * h) // oh, -(-((i + 1) * h) // oh)
        w0, w1 = (j * w) // ow, -(-((j + 1) * w) // ow)
        out[:, :, i, j] = xb[:, :, h0:h1, w0:w1].mean(axis=(2, 3))
    out = out[0] if unbatched else out
    return out.astype(x.dtype)


# ----- forward cases ------------------------------------------------------------------------

# (label, input shape, weight shape, bias, kwargs)
CONV2D = [
    ("basic", (2, 3, 5, 6), (4, 3, 3, 3), True, {}),
    ("stride2-pad1", (2, 3, 7, 6), (5, 3, 3, 3), False, {"stride": 2, "padding": 1}),
    ("mixed-args", (1, 2, 9, 7), (3, 2, 3, 2), True,
     {"stride": (1, 2), "padding": (2, 0), "dilation": (2, 1)}),
    ("groups2", (2, 4, 5, 5), (6, 2, 3, 3), True, {"groups": 2, "padding": 1}),
    ("depthwise", (1, 4, 6, 5), (4, 1, 3, 3), True, {"groups": 4, "padding": 1}),
    ("depthwise-multiplier", (2, 3, 5, 5), (6, 1, 2, 2), False, {"groups": 3, "stride": 2}),
    ("same-even-kernel", (2, 3, 5, 6), (2, 3, 2, 4), True, {"padding": "same"}),
    ("same-dilated", (1, 2, 6, 6), (2, 2, 3, 3), False, {"padding": "same", "dilation": 2}),
    ("valid", (1, 2, 4, 4), (2, 2, 3, 3), False, {"padding": "valid"}),
    ("1x1", (2, 5, 3, 3), (4, 5, 1, 1), True, {}),
    ("kernel=input", (2, 3, 3, 3), (2, 3, 3, 3), True, {}),
    ("unbatched", (3, 5, 6), (4, 3, 3, 3), True, {"stride": 2}),
    ("empty-batch", (0, 3, 5, 5), (2, 3, 3, 3), True, {}),
    ("ragged-stride", (1, 2, 8, 9), (2, 2, 3, 3), True, {"stride": 3, "padding": 1}),
]

CONV1D = [
    ("basic", (2, 3, 9), (4, 3, 3), True, {}),
    ("all-args", (2, 4, 11), (6, 2, 3), True,
     {"stride": 2, "padding": 2, "dilation": 2, "groups": 2}),
    ("same", (1, 2, 7), (3, 2, 4), False, {"padding": "same"}),
    ("unbatched", (3, 8), (2, 3, 2), True, {"stride": (2,)}),
]

CONV_TRANSPOSE2D = [
    ("basic", (2, 3, 4, 5), (3, 2, 3, 3), True, {}),
    ("stride2-pad1-outpad1", (2, 3, 4, 4), (3, 4, 3, 3), True,
     {"stride": 2, "padding": 1, "output_padding": 1}),
    ("groups-dilation", (1, 4, 3, 4), (4, 3, 2, 3), True,
     {"groups": 2, "dilation": (2, 1), "stride": (1, 3), "padding": (1, 0)}),
    ("outpad-below-dilation", (1, 2, 3, 3), (2, 2, 3, 3), False,
     {"dilation": 2, "output_padding": 1}),
    ("4x4-stride2", (2, 2, 3, 3), (2, 3, 4, 4), True, {"stride": 2, "padding": 1}),
    ("unbatched", (3, 4, 3), (3, 2, 2, 2), True, {"stride": 2}),
]

CONV_TRANSPOSE1D = [
    ("basic", (2, 3, 5), (3, 2, 3), True, {}),
    ("all-args", (1, 4, 6), (4, 1, 3), True,
     {"stride": 3, "padding": 1, "output_padding": 2, "groups": 2, "dilation": 1}),
]

MAX_POOL = [
    ("k2", (2, 3, 6, 7), {"kernel_size": 2}),
    ("k3-s2-p1", (2, 2, 7, 8), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ("ceil", (1, 2, 7, 6), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
    ("ceil-pad", (1, 2, 6, 6), {"kernel_size": 2, "stride": 2, "padding": 1, "ceil_mode": True}),
    ("dilated", (2, 2, 9, 8), {"kernel_size": (3, 2), "stride": 1, "padding": (1, 1),
                               "dilation": (2, 3)}),
    ("rect-stride", (1, 3, 5, 9), {"kernel_size": (2, 3), "stride": (1, 2)}),
    ("unbatched", (3, 6, 6), {"kernel_size": 2}),
    ("empty-batch", (0, 2, 4, 4), {"kernel_size": 2}),
]

AVG_POOL = [
    ("k2", (2, 3, 6, 7), {"kernel_size": 2}),
    ("k3-s2-p1", (2, 2, 7, 8), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ("exclude-pad", (2, 2, 7, 8), {"kernel_size": 3, "stride": 2, "padding": 1,
                                   "count_include_pad": False}),
    ("ceil", (1, 2, 7, 6), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    ("ceil-exclude", (1, 2, 7, 6), {"kernel_size": 3, "stride": 2, "padding": 1,
                                    "ceil_mode": True, "count_include_pad": False}),
    ("divisor", (1, 2, 5, 5), {"kernel_size": (3, 2), "stride": 1, "padding": 1,
                               "divisor_override": 5}),
    ("unbatched", (3, 6, 6), {"kernel_size": 2}),
    ("empty-batch", (0, 2, 4, 4), {"kernel_size": 3, "padding": 1, "stride": 2}),
]

ADAPTIVE = [
    ("global", (2, 3, 5, 7), 1),
    ("divisible", (2, 3, 6, 8), (3, 4)),
    ("uneven", (1, 2, 7, 8), (3, 5)),
    ("keep-width", (1, 2, 7, 5), (4, None)),
    ("upsample", (1, 2, 3, 4), (5, 7)),
    ("unbatched", (3, 5, 5), 2),
    ("empty-batch", (0, 2, 4, 4), 3),
    ("empty-output", (1, 2, 4, 4), (0, 2)),
]


def _conv_case(family: str, fn, ref, label, x_shape, w_shape, bias, kwargs, dtype, salt):
    inputs = [array(x_shape, dtype, salt), array(w_shape, dtype, salt + 1)]
    if bias:
        channels = w_shape[1] * kwargs.get("groups", 1) if "transpose" in family else w_shape[0]
        inputs.append(array((channels,), dtype, salt + 2))
    # Sums of a few dozen products of values in [-2, 2]: float32's error is an ulp of the
    # largest partial sum, not of a (maybe tiny) result.
    atol = {"float32": 1e-5}.get(dtype)
    return Case(f"{family}/{label}/{dtype}", lambda *t: fn(*t, **kwargs),
                lambda *a: ref(*a, **kwargs), inputs, atol=atol)


def _cases() -> list[Case]:
    cases = []
    families = [("conv2d", F.conv2d, ref_conv, CONV2D), ("conv1d", F.conv1d, ref_conv, CONV1D),
                ("conv_transpose2d", F.conv_transpose2d, ref_conv_transpose, CONV_TRANSPOSE2D),
                ("conv_transpose1d", F.conv_transpose1d, ref_conv_transpose, CONV_TRANSPOSE1D)]
    for dtype in FLOAT_DTYPES:
        for family, fn, ref, table in families:
            for salt, (label, x_shape, w_shape, bias, kwargs) in enumerate(table):
                cases.append(_conv_case(family, fn, ref, label, x_shape, w_shape, bias, kwargs,
                                        dtype, 10 * salt))
        for salt, (label, shape, kwargs) in enumerate(MAX_POOL):
            cases.append(Case(f"max_pool2d/{label}/{dtype}",
                              lambda x, kw=kwargs: F.max_pool2d(x, **kw),
                              lambda x, kw=kwargs: ref_max_pool(x, **kw),
                              [array(shape, dtype, salt)], exact=True))
        for salt, (label, shape, kwargs) in enumerate(AVG_POOL):
            cases.append(Case(f"avg_pool2d/{label}/{dtype}",
                              lambda x, kw=kwargs: F.avg_pool2d(x, **kw),
                              lambda x, kw=kwargs: ref_avg_pool(x, **kw),
                              [array(shape, dtype, salt)]))
        for salt, (label, shape, size) in enumerate(ADAPTIVE):
            cases.append(Case(f"adaptive_avg_pool2d/{label}/{dtype}",
                              lambda x, s=size: F.adaptive_avg_pool2d(x, s),
                              lambda x, s=size: ref_adaptive_avg_pool(x, s),
                              [array(shape, dtype, salt)]))
    for dtype in ("int32", "int64"):
        for label, shape, kwargs in MAX_POOL[:3]:
            cases.append(Case(f"max_pool2d/{label}/{dtype}",
                              lambda x, kw=kwargs: F.max_pool2d(x, **kw),
                              lambda x, kw=kwargs: ref_max_pool(x, **kw),
                              [array(shape, dtype, low=-50, high=50)]))
    for label, shape, kwargs in MAX_POOL[:2]:
        cases.append(Case(f"max_pool2d/indices/{label}/bfloat16",
                          lambda x, kw=kwargs: F.max_pool2d(x, return_indices=True, **kw)[1],
                          lambda x, kw=kwargs: ref_max_pool(x, indices=True, **kw),
                          [array(shape, "bfloat16", 7)]))
    for label, shape, kwargs in MAX_POOL:
        cases.append(Case(f"max_pool2d/indices/{label}",
                          lambda x, kw=kwargs: F.max_pool2d(x, return_indices=True, **kw),
                          lambda x, kw=kwargs: (ref_max_pool(x, **kw),
                                                ref_max_pool(x, indices=True, **kw)),
                          [array(shape, "float32", 7)], dtype=("float32", "int64")))
    # Ties: the first max of the window wins (values in {0, 1}, many equal).
    ties = np.asarray(array((2, 2, 6, 6), "int64", 3, low=0, high=1)).astype(np.float32)
    cases.append(Case("max_pool2d/indices/ties",
                      lambda x: F.max_pool2d(x, 3, 1, 1, return_indices=True),
                      lambda x: (ref_max_pool(x, 3, 1, 1), ref_max_pool(x, 3, 1, 1, indices=True)),
                      [ties], dtype=("float32", "int64")))
    return cases


CASES = _cases()


def ref_adaptive_max_pool(x, output_size, indices=False):
    """The max over PyTorch's adaptive windows, cell by cell; or the flat index of the
    first max of each window (row-major)."""
    spatial = x.shape[-2:]
    out = tuple(s if o is None else o for o, s in zip(_n(output_size, 2), spatial))
    values = np.zeros(x.shape[:-2] + out, x.dtype)
    where = np.zeros(x.shape[:-2] + out, np.int64)
    for i, j in itertools.product(range(out[0]), range(out[1])):
        r0, r1 = i * spatial[0] // out[0], -(-(i + 1) * spatial[0] // out[0])
        c0, c1 = j * spatial[1] // out[1], -(-(j + 1) * spatial[1] // out[1])
        window = x[..., r0:r1, c0:c1].reshape(*x.shape[:-2], -1)
        values[..., i, j] = window.max(axis=-1)
        k = window.argmax(axis=-1)
        where[..., i, j] = (r0 + k // (c1 - c0)) * spatial[1] + c0 + k % (c1 - c0)
    return where if indices else values


def _adaptive_max_cases() -> list[Case]:
    cases = []
    table = [("global", (2, 3, 5, 4), 1), ("tiled", (1, 2, 6, 4), (3, 2)),
             ("uneven", (2, 2, 7, 5), (3, 2)), ("keep-width", (3, 7, 5), (4, None)),
             ("upsample", (1, 1, 3, 2), (4, 3))]
    for dtype in FLOAT_DTYPES:
        for salt, (label, shape, size) in enumerate(table):
            cases.append(Case(f"adaptive_max_pool2d/{label}/{dtype}",
                              lambda x, s=size: F.adaptive_max_pool2d(x, s),
                              lambda x, s=size: ref_adaptive_max_pool(x, s),
                              [array(shape, dtype, salt)], exact=True))
    for salt, (label, shape, size) in enumerate(table):
        cases.append(Case(f"adaptive_max_pool2d/indices/{label}",
                          lambda x, s=size: F.adaptive_max_pool2d(x, s, return_indices=True)[1],
                          lambda x, s=size: ref_adaptive_max_pool(x, s, indices=True),
                          [array(shape, "float32", salt)], exact=True))
    return cases


CASES += _adaptive_max_cases()


# ----- gradient cases -----------------------------------------------------------------------

def _torch_call(family: str, *tensors, **kwargs):
    import warnings

    import torch.nn.functional as TF

    with warnings.catch_warnings():  # torch notes that padding="same" copies the input
        warnings.simplefilter("ignore", UserWarning)
        return getattr(TF, family)(*tensors, **kwargs)


def _grad_conv(family: str, label: str, x_shape, w_shape, bias: bool, kwargs, wrt=None):
    salt = len(GRAD_CASES)
    inputs = [array(x_shape, "float64", 100 + salt), array(w_shape, "float64", 200 + salt)]
    if bias:
        channels = w_shape[1] * kwargs.get("groups", 1) if "transpose" in family else w_shape[0]
        inputs.append(array((channels,), "float64", 300 + salt))
    GRAD_CASES.append(GradCase(
        f"{family}/{label}", lambda *t: getattr(F, family)(*t, **kwargs), inputs, wrt=wrt,
        torch_fn=lambda *t: _torch_call(family, *t, **kwargs)))


def _grad_pool(family: str, label: str, shape, kwargs):
    salt = len(GRAD_CASES)
    # Distinct values (a shuffled ramp): no two cells of a window tie within the FD step.
    x = np.random.default_rng(salt).permutation(np.prod(shape)).reshape(shape) / np.prod(shape)
    x = (x * 4 - 2).astype(np.float64)
    GRAD_CASES.append(GradCase(
        f"{family}/{label}", lambda t: getattr(F, family)(t, **kwargs), [x],
        torch_fn=lambda t: _torch_call(family, t, **kwargs)))


GRAD_CASES: list[GradCase] = []

for _label, _x, _w, _b, _kw in [
    ("basic", (2, 3, 5, 4), (2, 3, 3, 3), True, {}),
    ("stride2-pad1", (1, 2, 6, 5), (3, 2, 3, 3), True, {"stride": 2, "padding": 1}),
    ("dilation-groups", (1, 4, 6, 6), (4, 2, 2, 3), True,
     {"dilation": (2, 1), "groups": 2, "padding": (1, 2), "stride": (1, 2)}),
    ("depthwise", (2, 3, 4, 4), (3, 1, 3, 3), False, {"groups": 3, "padding": 1}),
    ("same-even", (1, 2, 4, 5), (2, 2, 2, 2), True, {"padding": "same"}),
    ("ragged-stride", (1, 2, 7, 6), (2, 2, 2, 3), False, {"stride": 3}),
    ("unbatched", (2, 5, 4), (3, 2, 3, 2), True, {"stride": 2, "padding": 1}),
]:
    _grad_conv("conv2d", _label, _x, _w, _b, _kw)
_grad_conv("conv2d", "weight-only", (1, 2, 5, 5), (2, 2, 3, 3), True, {"padding": 1}, wrt=[1, 2])
_grad_conv("conv2d", "input-only", (1, 2, 5, 5), (2, 2, 3, 3), False, {"stride": 2}, wrt=[0])
_grad_conv("conv2d", "empty-batch", (0, 2, 4, 4), (3, 2, 2, 2), True, {})

for _label, _x, _w, _b, _kw in [
    ("basic", (2, 3, 7), (2, 3, 3), True, {}),
    ("all-args", (1, 4, 9), (4, 2, 2), True,
     {"stride": 2, "padding": 1, "dilation": 3, "groups": 2}),
    ("unbatched-same", (2, 6), (3, 2, 3), False, {"padding": "same"}),
]:
    _grad_conv("conv1d", _label, _x, _w, _b, _kw)

for _label, _x, _w, _b, _kw in [
    ("basic", (2, 2, 3, 3), (2, 3, 2, 2), True, {}),
    ("stride2-pad1-outpad1", (1, 2, 3, 3), (2, 2, 3, 3), True,
     {"stride": 2, "padding": 1, "output_padding": 1}),
    ("groups-dilation", (1, 4, 3, 2), (4, 1, 2, 3), True,
     {"groups": 2, "dilation": 2, "padding": (0, 1), "stride": (2, 1)}),
    ("outpad-below-dilation", (1, 2, 3, 3), (2, 2, 2, 2), False,
     {"dilation": 2, "output_padding": 1}),
    ("unbatched", (2, 3, 2), (2, 2, 3, 2), True, {"stride": (1, 2)}),
]:
    _grad_conv("conv_transpose2d", _label, _x, _w, _b, _kw)
_grad_conv("conv_transpose1d", "all-args", (2, 2, 4), (2, 2, 3), True,
           {"stride": 2, "padding": 1, "output_padding": 1})

for _label, _shape, _kw in [
    ("k2", (2, 2, 4, 5), {"kernel_size": 2}),
    ("k3-s2-p1", (1, 2, 6, 5), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ("overlap-dilated-ceil", (1, 2, 7, 7), {"kernel_size": 2, "stride": 1, "dilation": 2,
                                            "padding": 1, "ceil_mode": True}),
    ("unbatched", (2, 5, 4), {"kernel_size": (2, 3), "stride": (1, 2)}),
    ("empty-batch", (0, 2, 4, 4), {"kernel_size": 2}),
]:
    _grad_pool("max_pool2d", _label, _shape, _kw)

for _label, _shape, _kw in [
    ("k2", (2, 2, 4, 5), {"kernel_size": 2}),
    ("k3-s2-p1", (1, 2, 6, 5), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ("ceil-exclude", (1, 2, 7, 6), {"kernel_size": 3, "stride": 2, "padding": 1,
                                    "ceil_mode": True, "count_include_pad": False}),
    ("overlap-divisor", (1, 1, 5, 5), {"kernel_size": 3, "stride": 1, "divisor_override": 4}),
]:
    _grad_pool("avg_pool2d", _label, _shape, _kw)

for _label, _shape, _size in [("global", (2, 2, 3, 4), 1), ("uneven", (1, 2, 7, 5), (3, 2)),
                              ("upsample", (1, 1, 3, 2), (4, 3))]:
    _grad_pool("adaptive_avg_pool2d", _label, _shape, {"output_size": _size})

for _label, _shape, _kw in [
    ("k2", (2, 2, 6), {"kernel_size": 2}),
    ("k3-s2-p1-dilated", (1, 2, 9), {"kernel_size": 3, "stride": 2, "padding": 1,
                                     "dilation": 2}),
    ("unbatched-ceil", (2, 7), {"kernel_size": 2, "ceil_mode": True}),
]:
    _grad_pool("max_pool1d", _label, _shape, _kw)
    _grad_pool("avg_pool1d", _label, _shape, {k: v for k, v in _kw.items() if k != "dilation"})

for _label, _shape, _size in [("global", (2, 2, 5), 1), ("uneven", (1, 2, 7), 3),
                              ("upsample", (1, 1, 3), 4)]:
    _grad_pool("adaptive_avg_pool1d", _label, _shape, {"output_size": _size})
    _grad_pool("adaptive_max_pool1d", _label, _shape, {"output_size": _size})

for _label, _shape, _size in [("global", (2, 2, 3, 4), 1), ("tiled", (1, 2, 6, 4), (3, 2)),
                              ("uneven", (1, 2, 7, 5), (3, 2)), ("upsample", (1, 1, 3, 2), (4, 3)),
                              ("unbatched", (2, 5, 5), (2, None))]:
    _grad_pool("adaptive_max_pool2d", _label, _shape, {"output_size": _size})
