"""Sliding-window loops as compiled C: im2col, col2im, max pooling and its gradient.

A convolution's column matrix built from a strided NumPy view costs a copy of a
6-D transposed array, and its transpose (col2im) and the max pool's gradient
loop over kernel offsets in Python with a pass over memory each. Here each of
these is one C loop over the (sample, channel) planes, split between the cores;
padding is a bounds test, not a padded copy. The functions are compiled by
``compiled``'s compiler (cached in memory and on disk) per element type: float32
and float64 for the convolutions, those and int32 / int64 for pooling.

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

from ember.kernels.numpy import compiled

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
#define GEOMETRY \\
  const long long C = d[0], H = d[1], W = d[2], OH = d[3], OW = d[4], KH = d[5], \\
    KW = d[6], SH = d[7], SW = d[8], PH = d[9], PW = d[10], DH = d[11], DW = d[12], \\
    SN = d[13], SC = d[14], SK = d[15]; \\
  (void)C; (void)SN; (void)SC; (void)SK;
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

# Row ``oh`` of windows: each one's max into ``best`` and, where ``at`` is given, its
# chosen cell as PyTorch's CPU kernel chooses it: the first cell inside the plane, then
# any greater value or any NaN (so the first max, or the last NaN). The kernel offsets
# are the outer loop, in the window's row-major order, so that the loop over the row's
# windows has no branch and vectorizes (random data mispredicts a branch per cell).
_ROW_MAX = """
static inline void row_max(const T *src, long long oh, const long long *d, T *best,
                           long long *at) {
  GEOMETRY
  const long long ih0 = oh * SH - PH;
  long long h0 = ih0;
  while (h0 < 0) h0 += DH;
  for (long long o = 0; o < OW; ++o) best[o] = LOWEST;
  if (at) {
    for (long long o = 0; o < OW; ++o) {
      long long w0 = o * SW - PW;
      while (w0 < 0) w0 += DW;
      at[o] = h0 * W + w0;
    }
  }
  for (long long kh = 0; kh < KH; ++kh) {
    const long long ih = ih0 + kh * DH;
    if (ih < 0 || ih >= H) continue;
    for (long long kw = 0; kw < KW; ++kw) {
      long long lo, hi;
      span(kw, W, OW, SW, PW, DW, &lo, &hi);
      const long long first = ih * W + kw * DW - PW;
      const T *line = src + first;
      if (at) {
        for (long long o = lo; o < hi; ++o) {
          const T v = line[o * SW];
          const int take = (v > best[o]) | (v != v);
          best[o] = take ? v : best[o];
          at[o] = take ? first + o * SW : at[o];
        }
      } else {
        for (long long o = lo; o < hi; ++o) {
          const T v = line[o * SW];
          best[o] = ((v > best[o]) | (v != v)) ? v : best[o];
        }
      }
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
  T *best = malloc(OW * sizeof(T));
  long long *at = indices ? malloc(OW * sizeof(long long)) : NULL;
  for (long long plane = begin; plane < end; ++plane) {
    for (long long oh = 0; oh < OH; ++oh) {
      const long long row = (plane * OH + oh) * OW;
      row_max(x + plane * H * W, oh, d, best, at);
      if (values) memcpy(values + row, best, OW * sizeof(T));
      if (indices) for (long long o = 0; o < OW; ++o) indices[row + o] = at[o];
    }
  }
  free(best);
  free(at);
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
  T *best = malloc(OW * sizeof(T));
  long long *at = malloc(OW * sizeof(long long));
  for (long long plane = begin; plane < end; ++plane) {
    T *dst = out + plane * H * W;
    memset(dst, 0, H * W * sizeof(T));
    for (long long oh = 0; oh < OH; ++oh) {
      const T *g = grad + (plane * OH + oh) * OW;
      row_max(x + plane * H * W, oh, d, best, at);
      for (long long o = 0; o < OW; ++o) {
        if (at[o] >= 0 && at[o] < H * W) dst[at[o]] += g[o];
      }
    }
  }
  free(best);
  free(at);
}
"""

_BODIES = {"im2col": (_IM2COL,), "col2im": (_COL2IM,), "max_pool": (_ROW_MAX, _MAX_POOL),
           "max_pool_backward": (_ROW_MAX, _MAX_POOL_BACKWARD)}


class _Source:
    """What ``compiled.compiler().function`` builds: a C name and its whole text."""

    __slots__ = ("code", "name")

    def __init__(self, name: str, code: str) -> None:
        self.name = name
        self.code = code


def render(kind: str, dtype: np.dtype) -> _Source:
    """The C source of ``kind`` (im2col, col2im, max_pool, max_pool_backward) on ``dtype``."""
    c_type = _TYPES[np.dtype(dtype)]
    name = f"ember_{kind}_{np.dtype(dtype).name}"
    body = "".join(_BODIES[kind]).replace("NAME", name)
    code = (f"#define T {c_type}\n#define LOWEST {_LOWEST[c_type]}\n" + _HEADER + body)
    return _Source(name, code)


_functions: dict[tuple[str, np.dtype], object] = {}


def _function(kind: str, dtype: np.dtype):
    """The compiled ``kind`` for ``dtype``, or None where it cannot be had."""
    key = (kind, dtype)
    found = _functions.get(key, False)
    if found is False:
        found = None
        if dtype in _TYPES:
            found = compiled.compiler().function(render(kind, dtype), _FUNCTION)
        _functions[key] = found
    return found


def _usable(kind: str, inputs: tuple, outputs: tuple) -> tuple | None:
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
    function = _function(kind, dtype)
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
    parts = max(1, min(compiled.cores(), planes, planes * per_plane // _PER_THREAD))
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
    usable = _usable("max_pool", (x,), (values,))
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
    usable = _usable("max_pool_backward", (x, grad), (out,))
    if usable is None:
        return False
    function, (x, grad) = usable
    planes = math.prod(x.shape[:2])
    geometry = _geometry(0, x.shape[2:], grad.shape[2:], kernel, stride, padding, dilation)
    if planes:
        _split(function, planes, math.prod(grad.shape[2:]) * math.prod(kernel), geometry,
               x.ctypes.data, grad.ctypes.data, out.ctypes.data)
    return True
