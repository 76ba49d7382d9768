"""Several contiguous buffers copied by one kernel launch (a replay's held outputs).

A replay of an ``em.graphed`` step first moves the outputs an earlier replay handed out
to buffers of their own; an encoder layer's step hands out a dozen gradients. One
``cudaMemcpyAsync`` each is a dozen launches on the host and as many small copies, with
gaps between them, on the GPU; here one launch copies them all, one row of blocks per
buffer (``blockIdx.y``), 16 bytes per thread where a buffer allows (a launch for those),
else 1 (another).

``source`` is pure Python, so the kernel can be compiled and checked without a GPU.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

# Buffers one launch takes: kernel parameters are 3 words a buffer (well within the
# 4 KiB CUDA allows); a replay with more copies launches again.
MAX_BUFFERS = 16
BLOCK = 256
# Blocks per buffer at most; each thread then loops (a guess: 4 per SM of a 132-SM GPU).
_MAX_BLOCKS = 528
_UNITS = {16: "uint4", 1: "unsigned char"}


def source(unit: int) -> tuple[str, str]:
    """(kernel name, CUDA C++) of the copy that moves ``unit`` bytes (16 or 1) at a time."""
    kind = _UNITS[unit]
    name = f"ember_copy_many_b{unit}"
    params = ", ".join(f"const {kind}* __restrict__ s{k}, {kind}* __restrict__ d{k}, "
                       f"unsigned long long n{k}" for k in range(MAX_BUFFERS))
    cases = "\n".join(f"    case {k}: src = s{k}; dst = d{k}; n = n{k}; break;"
                      for k in range(MAX_BUFFERS))
    code = f"""extern "C" __global__ void __launch_bounds__({BLOCK}) {name}({params}) {{
  const {kind}* src = nullptr;
  {kind}* dst = nullptr;
  unsigned long long n = 0;
  switch (blockIdx.y) {{
{cases}
  }}
  const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
       i < n; i += step) {{
    dst[i] = src[i];
  }}
}}
"""
    return name, code


def unit_of(destination: int, src: int, nbytes: int) -> int:
    """The widest unit a copy allows: 16 bytes when both addresses and the size are
    multiples of 16, else 1."""
    return 16 if destination % 16 == 0 and src % 16 == 0 and nbytes % 16 == 0 else 1


def launches(pairs: Sequence[tuple[int, int, int]]) -> list[tuple[int, int, int, list[int]]]:
    """The launches that copy ``pairs`` ((destination, source, bytes) each, none empty):
    (unit, blocks per buffer, buffers, kernel arguments) each; the buffers of one unit
    share launches, MAX_BUFFERS apiece; unused slots copy nothing."""
    by_unit: dict[int, list[tuple[int, int, int]]] = {}
    for pair in pairs:
        by_unit.setdefault(unit_of(*pair), []).append(pair)
    found = []
    for unit, group in sorted(by_unit.items(), reverse=True):
        for start in range(0, len(group), MAX_BUFFERS):
            chunk = group[start:start + MAX_BUFFERS]
            args: list[int] = []
            for destination, src, nbytes in chunk:
                args += [src, destination, nbytes // unit]
            args += [0, 0, 0] * (MAX_BUFFERS - len(chunk))
            most = max(nbytes for _, _, nbytes in chunk) // unit
            blocks = max(1, min(_MAX_BLOCKS, -(-most // BLOCK)))
            found.append((unit, blocks, len(chunk), args))
    return found


@functools.cache
def _kernel(unit: int) -> Any:
    import cupy

    name, code = source(unit)
    return cupy.RawKernel(code, name)


def copy_many(pairs: Sequence[tuple[Any, Any]]) -> None:
    """Copy each (destination, source) pair of contiguous CuPy arrays of equal size on the
    current stream, in as few launches as ``MAX_BUFFERS`` allows."""
    plain = [(d.data.ptr, s.data.ptr, s.nbytes) for d, s in pairs if s.nbytes]
    for unit, blocks, count, args in launches(plain):
        _kernel(unit)((blocks, count), (BLOCK,), tuple(np.uint64(a) for a in args))
