"""Sliding-window loops as compiled C: im2col, col2im, max pooling and its gradient.

A convolution's column matrix built from a strided NumPy view costs a copy of a
6-D transposed array, and its transpose (col2im) and the max pool's gradient
loop over kernel offsets in Python with a pass over memory each. Here each of
these is one C loop over the (sample, channel) planes, split between the cores;
padding is a bounds test, not a padded copy. The functions are compiled by
``compiled``'s compiler (cached in memory and on disk) per element type: float32
and float64 for the convolutions, those and int32 / int64 for pooling; small
pooling windows (the usual 2×2 and 3×3) also per geometry, as constants.

``run_*`` return False (having written nothing) where the C path does not apply:
no C compiler, ``EMBER_CPU_COMPILE=0``, an element type without a rendering, or
arrays that are not NumPy's (a GPU backend shares the NumPy kernels). The caller
then keeps its NumPy code.

Geometry, one ``long long`` array per call: planes' channel count ``C``; the image
``H, W``; the output (window positions) ``OH, OW``; kernel ``KH, KW``; stride,
padding (before the first cell) and dilation per dim; then where the columns of
sample ``n``, channel ``c``, kernel offset ``k`` begin in the column matrix:
``n·SN + c·SC + k·SK`` (each is ``OH·OW`` contiguous values).
"""

from __future__ import annotations

import ctypes
import math
import os

import numpy as np

from ember.kernels.numpy import compiled, cores

_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double",
          np.dtype(np.int32): "int32_t", np.dtype(np.int64): "int64_t"}
_LOWEST = {"float": "-INFINITY", "double": "-INFINITY", "int32_t": "INT32_MIN",
           "int64_t": "INT64_MIN"}
_FUNCTION = ctypes.CFUNCTYPE(None, ctypes.c_longlong, ctypes.c_longlong,
                             ctypes.POINTER(ctypes.c_longlong), ctypes.c_void_p,
                             ctypes.c_void_p, ctypes.c_void_p)
# Values a thread handles at least: below this a hand-over costs more than it saves (a
# guess, as compiled.py's).
_PER_THREAD = 1 << 15

_HEADER = """#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
/* Output cells [lo, hi) whose input column o*SW - PW + kw*DW falls in [0, W). */
static inline void span(long long kw, long long W, long long OW, long long SW, long long PW,
                        long long DW, long long *lo, long long *hi) {
  long long first = kw * DW - PW;  /* input column of output cell 0 */
  *lo = first >= 0 ? 0 : (-first + SW - 1) / SW;
  *hi = first >= W ? 0 : (W - first + SW - 1) / SW;
  if (*hi > OW) *hi = OW;
  if (*lo > *hi) *lo = *hi;
}
"""

# im2col: every window cell of planes [begin, end) into its column row (zeros outside).
_IM2COL = """
void NAME(long long begin, long long end, const long long *d, const void *xv, void *colsv,
          const void *unused) {
  GEOMETRY
  const T *x = (const T *)xv;
  T *cols = (T *)colsv;
  for (long long plane = begin; plane < end; ++plane) {
    const long long n = plane / C, c = plane % C;
    const T *src = x + plane * H * W;
    for (long long kh = 0; kh < KH; ++kh) {
      for (long long kw = 0; kw < KW; ++kw) {
        T *dst = cols + n * SN + c * SC + (kh * KW + kw) * SK;
        long long lo, hi;
        span(kw, W, OW, SW, PW, DW, &lo, &hi);
        const long long shift = kw * DW - PW;
        for (long long oh = 0; oh < OH; ++oh) {
          T *row = dst + oh * OW;
          const long long ih = oh * SH - PH + kh * DH;
          if (ih < 0 || ih >= H) {
            memset(row, 0, OW * sizeof(T));
            continue;
          }
          const T *line = src + ih * W + shift;
          for (long long o = 0; o < lo; ++o) row[o] = 0;
          if (SW == 1) {
            memcpy(row + lo, line + lo, (hi - lo) * sizeof(T));
          } else {
            for (long long o = lo; o < hi; ++o) row[o] = line[o * SW];
          }
          for (long long o = hi; o < OW; ++o) row[o] = 0;
        }
      }
    }
  }
}
"""

# col2im: the transpose of im2col; each plane of [begin, end) is the sum of its columns.
_COL2IM = """
void NAME(long long begin, long long end, const long long *d, const void *colsv, void *xv,
          const void *unused) {
  GEOMETRY
  const T *cols = (const T *)colsv;
  T *x = (T *)xv;
  for (long long plane = begin; plane < end; ++plane) {
    const long long n = plane / C, c = plane % C;
    T *dst = x + plane * H * W;
    memset(dst, 0, H * W * sizeof(T));
    for (long long kh = 0; kh < KH; ++kh) {
      for (long long kw = 0; kw < KW; ++kw) {
        const T *src = cols + n * SN + c * SC + (kh * KW + kw) * SK;
        long long lo, hi;
        span(kw, W, OW, SW, PW, DW, &lo, &hi);
        const long long shift = kw * DW - PW;
        for (long long oh = 0; oh < OH; ++oh) {
          const long long ih = oh * SH - PH + kh * DH;
          if (ih < 0 || ih >= H) continue;
          const T *row = src + oh * OW;
          T *line = dst + ih * W + shift;
          if (SW == 1) {
            for (long long o = lo; o < hi; ++o) line[o] += row[o];
          } else {
            for (long long o = lo; o < hi; ++o) line[o * SW] += row[o];
          }
        }
      }
    }
  }
}
"""

# The max of one window and its chosen cell, as PyTorch's CPU kernel chooses it: the first
# cell inside the plane, then any greater value or any NaN (so the first max, or the last
# NaN). ``window_max`` tests every cell's bounds; ``plane_max`` calls it only for windows
# that reach past the plane and reads the others straight, their taps unrolled where
# the geometry is fixed at compile time. The choice is a select, not a branch (random
# data would mispredict one per cell).
_PLANE_MAX = """
static inline long long window_max(const T *src, long long ih0, long long iw0,
                                   const long long *d, T *value) {
  GEOMETRY
  long long h0 = ih0, w0 = iw0;
  while (h0 < 0) h0 += DH;
  while (w0 < 0) w0 += DW;
  long long at = h0 * W + w0;
  T best = LOWEST;
  for (long long kh = 0; kh < KH; ++kh) {
    const long long ih = ih0 + kh * DH;
    if (ih < 0 || ih >= H) continue;
    for (long long kw = 0; kw < KW; ++kw) {
      const long long iw = iw0 + kw * DW;
      if (iw < 0 || iw >= W) continue;
      const T v = src[ih * W + iw];
      const int take = (v > best) | (v != v);
      best = take ? v : best;
      at = take ? ih * W + iw : at;
    }
  }
  *value = best;
  return at;
}

static inline void plane_max(const T *src, const long long *d, T *values, int64_t *cells,
                             const int with_values, const int with_cells) {
  GEOMETRY
  /* Windows [inner_lo, inner_hi) of a row have every column inside the plane. */
  long long inner_lo = PW > 0 ? (PW + SW - 1) / SW : 0;
  long long inner_hi = W - (KW - 1) * DW + PW > 0 ? (W - (KW - 1) * DW + PW - 1) / SW + 1 : 0;
  if (inner_hi > OW) inner_hi = OW;
  if (inner_lo > inner_hi) inner_lo = inner_hi;
  for (long long oh = 0; oh < OH; ++oh) {
    const long long ih0 = oh * SH - PH;
    const int rows_inside = ih0 >= 0 && ih0 + (KH - 1) * DH < H;
    const long long lo = rows_inside ? inner_lo : OW, hi = rows_inside ? inner_hi : OW;
    T *row_values = values + oh * OW;
    int64_t *row_cells = cells + oh * OW;
    for (long long ow = 0; ow < OW; ++ow) {  /* windows reaching past the plane */
      if (ow == lo) ow = hi;
      if (ow == OW) break;
      T best;
      const long long at = window_max(src, ih0, ow * SW - PW, d, &best);
      if (with_values) row_values[ow] = best;
      if (with_cells) row_cells[ow] = at;
    }
    /* Inside: no bounds tests, a loop over the row's windows that vectorizes. */
    for (long long ow = lo; ow < hi; ++ow) {
      const long long first = ih0 * W + ow * SW - PW;
      T best = src[first];
      long long at = first;
      for (long long kh = 0; kh < KH; ++kh) {
        for (long long kw = 0; kw < KW; ++kw) {
          const long long cell = first + kh * DH * W + kw * DW;
          const T v = src[cell];
          const int take = (v > best) | (v != v);
          best = take ? v : best;
          at = take ? cell : at;
        }
      }
      if (with_values) row_values[ow] = best;
      if (with_cells) row_cells[ow] = at;
    }
  }
}
"""

# Max pooling of planes [begin, end): the values and / or the chosen cells' flat indices.
_MAX_POOL = """
void NAME(long long begin, long long end, const long long *d, const void *xv, void *valuesv,
          void *indicesv) {
  const long long H = d[1], W = d[2], OH = d[3], OW = d[4];
  const T *x = (const T *)xv;
  T *values = (T *)valuesv;
  int64_t *indices = (int64_t *)indicesv;
  for (long long plane = begin; plane < end; ++plane) {
    const T *src = x + plane * H * W;
    const long long out = plane * OH * OW;
    if (values && indices) plane_max(src, d, values + out, indices + out, 1, 1);
    else if (values) plane_max(src, d, values + out, NULL, 1, 0);
    else plane_max(src, d, NULL, indices + out, 0, 1);
  }
}
"""

# The max pool's gradient for planes [begin, end): each output's gradient added to its
# window's chosen cell (a window with no cell in the plane gives nothing).
_MAX_POOL_BACKWARD = """
void NAME(long long begin, long long end, const long long *d, const void *xv,
          const void *gradv, void *outv) {
  const long long H = d[1], W = d[2], OH = d[3], OW = d[4];
  const T *x = (const T *)xv;
  const T *grad = (const T *)gradv;
  T *out = (T *)outv;
  int64_t *cells = malloc((OH * OW > 0 ? OH * OW : 1) * sizeof(int64_t));
  for (long long plane = begin; plane < end; ++plane) {
    T *dst = out + plane * H * W;
    const T *g = grad + plane * OH * OW;
    plane_max(x + plane * H * W, d, NULL, cells, 0, 1);
    memset(dst, 0, H * W * sizeof(T));
    for (long long o = 0; o < OH * OW; ++o) {
      if (cells[o] >= 0 && cells[o] < H * W) dst[cells[o]] += g[o];
    }
  }
  free(cells);
}
"""

_BODIES = {"im2col": (_IM2COL,), "col2im": (_COL2IM,), "max_pool": (_PLANE_MAX, _MAX_POOL),
           "max_pool_backward": (_PLANE_MAX, _MAX_POOL_BACKWARD)}


class _Source:
    """What ``compiled.compiler().function`` builds: a C name and its whole text."""

    __slots__ = ("code", "name")

    def __init__(self, name: str, code: str) -> None:
        self.name = name
        self.code = code


_GEOMETRY = ("C", "H", "W", "OH", "OW", "KH", "KW", "SH", "SW", "PH", "PW", "DH", "DW", "SN",
             "SC", "SK")
_FIXABLE = ("KH", "KW", "SH", "SW", "DH", "DW")


def render(kind: str, dtype: np.dtype, fixed: tuple[int, ...] | None = None) -> _Source:
    """The C source of ``kind`` (im2col, col2im, max_pool, max_pool_backward) on ``dtype``;
    ``fixed``: the kernel, stride and dilation (h, w each) as constants, else run-time."""
    c_type = _TYPES[np.dtype(dtype)]
    constants = dict(zip(_FIXABLE, fixed)) if fixed is not None else {}
    suffix = "_" + "_".join(map(str, fixed)) if fixed is not None else ""
    name = f"ember_{kind}_{np.dtype(dtype).name}{suffix}"
    values = ", ".join(f"{v} = {constants.get(v, f'd[{i}]')}" for i, v in enumerate(_GEOMETRY))
    geometry = (f"#define GEOMETRY const long long {values}; "
                + " ".join(f"(void){v};" for v in _GEOMETRY) + "\n")
    body = "".join(_BODIES[kind]).replace("NAME", name)
    code = f"#define T {c_type}\n#define LOWEST {_LOWEST[c_type]}\n{_HEADER}{geometry}{body}"
    return _Source(name, code)


_functions: dict[tuple, object] = {}


def _function(kind: str, dtype: np.dtype, fixed: tuple[int, ...] | None = None):
    """The compiled ``kind`` for ``dtype`` (and ``fixed``, see ``render``), or None where it
    cannot be had."""
    key = (kind, dtype, fixed)
    found = _functions.get(key, False)
    if found is False:
        found = None
        if dtype in _TYPES:
            found = compiled.compiler().function(render(kind, dtype, fixed), _FUNCTION)
        _functions[key] = found
    return found


def _fixed(kernel, stride, dilation) -> tuple[int, ...] | None:
    """The pooling geometry compiled as constants (its taps unrolled): small windows, the
    common case, a bounded number of variants; others read it at run time."""
    kernel, stride, dilation = (((1,) * (2 - len(v)) + tuple(v)) for v in
                                (kernel, stride, dilation))
    if max(kernel) <= 4 and max(stride) <= 4 and max(dilation) == 1:
        return (*kernel, *stride, *dilation)
    return None


def _usable(kind: str, inputs: tuple, outputs: tuple,
            fixed: tuple[int, ...] | None = None) -> tuple | None:
    """``kind``'s function and ``inputs`` made C-contiguous, where the arrays are NumPy's
    of one dtype with a C rendering and ``outputs`` (None entries skipped) are
    C-contiguous; else None."""
    if os.environ.get("EMBER_CPU_COMPILE", "1") in ("", "0"):
        return None
    dtype = inputs[0].dtype
    for a in (*inputs, *outputs):
        if a is not None and (type(a) is not np.ndarray or a.dtype != dtype):
            return None
    if any(a is not None and not a.flags.c_contiguous for a in outputs):
        return None
    function = _function(kind, dtype, fixed)
    if function is None:
        return None
    return function, [np.ascontiguousarray(a) for a in inputs]


def _geometry(channels: int, image, positions, kernel, stride, padding, dilation,
              column_strides=(0, 0, 0)):
    """The C functions' geometry array (1-D windows as 2-D ones of height 1)."""
    pad = lambda values, fill: (fill,) * (2 - len(values)) + tuple(values)  # noqa: E731
    values = (channels, *pad(image, 1), *pad(positions, 1), *pad(kernel, 1), *pad(stride, 1),
              *pad(padding, 0), *pad(dilation, 1), *column_strides)
    return (ctypes.c_longlong * len(values))(*values)


def _split(function, planes: int, per_plane: int, geometry, *pointers) -> None:
    """``function`` over planes [0, planes), split between the cores."""
    parts = max(1, min(cores.share(), planes, planes * per_plane // _PER_THREAD))
    bounds = [planes * p // parts for p in range(parts + 1)]
    compiled.in_parallel([lambda p=p: function(bounds[p], bounds[p + 1], geometry, *pointers)
                          for p in range(parts)])


def _column_strides(batch_major: bool, n: int, channels: int, taps: int,
                    positions: int) -> tuple[int, int, int]:
    """(SN, SC, SK): (N, C, taps, positions) batch-major, else (C, taps, N, positions)."""
    if batch_major:
        return channels * taps * positions, taps * positions, positions
    return positions, taps * n * positions, n * positions


def run_im2col(x: np.ndarray, cols: np.ndarray, out_spatial, kernel, stride, padding,
               dilation, batch_major: bool) -> bool:
    """Fill ``cols`` with the windows of ``x`` (N, C, *spatial), zero outside it:
    (N, C·taps, positions) if ``batch_major``, else (C·taps, N·positions). ``padding``:
    the cells before the first along each dim. False: nothing written."""
    usable = _usable("im2col", (x,), (cols,))
    if usable is None:
        return False
    function, (x,) = usable
    n, c = x.shape[:2]
    taps, positions = math.prod(kernel), math.prod(out_spatial)
    geometry = _geometry(c, x.shape[2:], out_spatial, kernel, stride, padding, dilation,
                         _column_strides(batch_major, n, c, taps, positions))
    if n * c:
        _split(function, n * c, taps * positions, geometry, x.ctypes.data, cols.ctypes.data,
               None)
    return True


def run_col2im(cols: np.ndarray, x: np.ndarray, out_spatial, kernel, stride, padding,
               dilation, batch_major: bool) -> bool:
    """Write into ``x`` (N, C, *spatial) the sum of each cell's entries in ``cols`` (laid
    out as ``run_im2col`` writes them; entries of cells outside ``x`` are dropped)."""
    usable = _usable("col2im", (cols,), (x,))
    if usable is None:
        return False
    function, (cols,) = usable
    n, c = x.shape[:2]
    taps, positions = math.prod(kernel), math.prod(out_spatial)
    geometry = _geometry(c, x.shape[2:], out_spatial, kernel, stride, padding, dilation,
                         _column_strides(batch_major, n, c, taps, positions))
    if n * c:
        _split(function, n * c, taps * positions, geometry, cols.ctypes.data, x.ctypes.data,
               None)
    return True


def run_max_pool(x: np.ndarray, values: np.ndarray | None, indices: np.ndarray | None,
                 kernel, stride, padding, dilation) -> bool:
    """Max-pool ``x`` (N, C, H, W) into ``values`` and / or ``indices`` (int64, the chosen
    cell's ``h·W + w``), both (N, C, OH, OW). False: nothing written."""
    target = values if values is not None else indices
    usable = _usable("max_pool", (x,), (values,), _fixed(kernel, stride, dilation))
    if usable is None or (indices is not None and not (
            type(indices) is np.ndarray and indices.dtype == np.int64
            and indices.flags.c_contiguous)):
        return False
    function, (x,) = usable
    planes = math.prod(x.shape[:2])
    geometry = _geometry(0, x.shape[2:], target.shape[2:], kernel, stride, padding, dilation)
    if planes:
        _split(function, planes, math.prod(target.shape[2:]) * math.prod(kernel), geometry,
               x.ctypes.data, None if values is None else values.ctypes.data,
               None if indices is None else indices.ctypes.data)
    return True


def run_max_pool_backward(x: np.ndarray, grad: np.ndarray, out: np.ndarray, kernel, stride,
                          padding, dilation) -> bool:
    """Write into ``out`` (like ``x``, N, C, H, W) the max pool's input gradient for the
    output gradient ``grad`` (N, C, OH, OW). False: nothing written."""
    usable = _usable("max_pool_backward", (x, grad), (out,), _fixed(kernel, stride, dilation))
    if usable is None:
        return False
    function, (x, grad) = usable
    planes = math.prod(x.shape[:2])
    geometry = _geometry(0, x.shape[2:], grad.shape[2:], kernel, stride, padding, dilation)
    if planes:
        _split(function, planes, math.prod(grad.shape[2:]) * math.prod(kernel), geometry,
               x.ctypes.data, grad.ctypes.data, out.ctypes.data)
    return True
