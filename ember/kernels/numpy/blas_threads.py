"""How many threads NumPy's BLAS uses for one of ember's products.

OpenBLAS (NumPy's wheels ship it) splits a product between as many threads as the
machine has cores, and after each split its threads spin for a while before they
sleep. Two CPU devices multiplying at once would each split over every core. ``matmul``
lowers OpenBLAS's thread count to the device's ``cores.share()`` (the cores divided
between the CPU devices at work) around one call, through OpenBLAS's own setter, and
puts the program's count back when the last such call ends, so NumPy code outside
ember keeps the count its program chose. A device alone keeps the program's count:
lowering it for small products too would save OpenBLAS's spinning, but a split product
after a lowered one waits for OpenBLAS to wake its threads again, which cost a small
CNN's training step more than the split saved (bench_concurrency, BENCHMARKS.md).

OpenBLAS's count is one number for the process (its ``_local`` setter is no more local
in pthreads builds), so concurrent calls share it: each sets what it needs as it
starts, the last to end restores. Where NumPy's BLAS is not an OpenBLAS found in the
process's mappings (Accelerate on macOS, MKL), calls run as they are.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

import numpy as np

from ember.kernels.numpy import cores

# OpenBLAS splits nothing at or below this many multiply-adds (its SMP threshold,
# 65536 x GEMM_MULTITHREAD_THRESHOLD 4): no count to set for those.
_SINGLE_BELOW = 1 << 18
# (setter, getter) names by build: NumPy's scipy-openblas wheels (64-bit integers, then
# 32), a plain OpenBLAS.
_SYMBOLS = (("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
            ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
            ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
            ("openblas_set_num_threads", "openblas_get_num_threads"))


class _OpenBlas:
    def __init__(self, path: str, setter: Any, getter: Any) -> None:
        self.path = path
        self.set = setter
        self.get = getter


def _mapped_openblas() -> list[str]:
    """Paths of the OpenBLAS libraries this process has loaded, NumPy's own first."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split(None, 5)[-1].strip() for line in maps if "openblas" in line}
    except OSError:  # not Linux
        return []
    numpy_dir = os.path.dirname(os.path.dirname(os.path.abspath(np.__file__)))
    libs = [p for p in paths if "openblas" in os.path.basename(p).lower() and ".so" in p]
    # NumPy's wheels keep theirs in site-packages/numpy.libs; SciPy's, another OpenBLAS,
    # in scipy.libs.
    return sorted(libs, key=lambda p: (not p.startswith(os.path.join(numpy_dir, "numpy")), p))


def _find() -> _OpenBlas | None:
    for path in _mapped_openblas():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for set_name, get_name in _SYMBOLS:
            setter, getter = getattr(lib, set_name, None), getattr(lib, get_name, None)
            if setter is not None and getter is not None:
                setter.argtypes, setter.restype = [ctypes.c_int], None
                getter.argtypes, getter.restype = [], ctypes.c_int
                return _OpenBlas(path, setter, getter)
    return None


_blas: _OpenBlas | None | bool = False  # False: not looked for yet
_lock = threading.Lock()
_holders = 0  # calls running with a count of ember's
_program_count = 0  # the count to put back when the last ends


def _library() -> _OpenBlas | None:
    global _blas
    if _blas is False:
        _blas = _find()
    return _blas


def _forget_holders() -> None:
    """A forked child runs none of its parent's calls."""
    global _holders
    _holders = 0


os.register_at_fork(after_in_child=_forget_holders)


def status() -> str:
    """Which BLAS ember sets thread counts of, or why none."""
    blas = _library()
    return f"OpenBLAS at {blas.path}" if blas is not None else "none found (counts left as they are)"


def matmul(xp: Any, a: Any, b: Any, out: Any = None) -> Any:
    """``xp.matmul(a, b, out=out)``; for NumPy, with BLAS on at most the device's
    ``cores.share()`` threads."""
    if xp is not np:
        return xp.matmul(a, b, out=out)
    size = product_size(a.shape, b.shape)
    blas = _library() if size > _SINGLE_BELOW else None
    if blas is None or not _lower(blas, cores.share()):
        return np.matmul(a, b, out=out)
    try:
        return np.matmul(a, b, out=out)
    finally:
        _restore(blas)


def _lower(blas: _OpenBlas, threads: int) -> bool:
    """Set BLAS's count to ``threads`` for a call about to run, unless no other call
    holds a count and the program's is no more than that; whether the call now holds
    one (and must ``_restore``)."""
    global _holders, _program_count
    with _lock:
        if _holders == 0:
            program = blas.get()
            if threads >= program:
                return False
            _program_count = program
        _holders += 1
        blas.set(min(threads, _program_count))
        return True


def _restore(blas: _OpenBlas) -> None:
    """The end of a call that held a count: the last one puts the program's back."""
    global _holders
    with _lock:
        _holders -= 1
        if _holders == 0:
            blas.set(_program_count)


def product_size(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> int:
    """Multiply-adds of one 2-D product of ``a @ b`` (a stacked product runs them one
    after another)."""
    m = a_shape[-2] if len(a_shape) > 1 else 1
    n = b_shape[-1] if len(b_shape) > 1 else 1
    return m * a_shape[-1] * n if a_shape else 0
