"""Fused elementwise groups on the CPU as compiled C: one pass over memory, every core.

The blocked NumPy executor still calls one NumPy kernel per member per chunk; for
custom_gelu that is ~30 passes over each chunk, erf alone ~25 (bench_fusion). A
group whose members all have an exact C rendering (``csource``) is instead rendered
to C, compiled once with the system's C compiler, cached in memory and on disk under
``$XDG_CACHE_HOME/ember/cpu`` (keyed by the source, the compiler, its flags, the CPU
and ember's version), and called through ctypes, which lets go of the GIL: the
group's range is split between the cores.

Where no C compiler is found, or one fails, groups keep the NumPy executor;
``status()`` says why. ``EMBER_CPU_COMPILE=0`` turns the path off.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

import ember
from ember.kernels.cache import cache_dir
from ember.kernels.cupy import codegen
from ember.kernels.numpy import csource

# A group of fewer elements keeps the NumPy executor: a first run pays a compile
# (~0.1-0.3 s), worth it for the large tensors a training loop repeats.
MIN_ELEMENTS = 1 << 16
# Elements per thread at least: below this a thread's hand-over costs more than it saves.
_PER_THREAD = 1 << 15
_FUNCTION = ctypes.CFUNCTYPE(None, ctypes.c_longlong, ctypes.c_longlong,
                             ctypes.POINTER(ctypes.c_longlong),
                             ctypes.POINTER(ctypes.c_longlong),
                             ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_float))


class _Compiler:
    """Compiles sources once per process and once per machine; never raises."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._functions: dict[str, Any] = {}  # source digest → function, or None if it failed
        self._libraries: list[ctypes.CDLL] = []  # kept so their code stays mapped
        self.compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
        self.error: str | None = None if self.compiler else "no C compiler (cc, gcc) on PATH"
        self._signature: str | None = None
        self.compiled = 0  # sources compiled in this process (not found on disk)

    def function(self, source: csource.Source) -> Any:
        digest = hashlib.sha256(source.code.encode()).hexdigest()
        found = self._functions.get(digest, False)
        if found is not False:
            return found
        with self._lock:
            if digest not in self._functions:
                self._functions[digest] = self._load(source, digest)
            return self._functions[digest]

    def _load(self, source: csource.Source, digest: str) -> Any:
        if self.error is not None:
            return None
        key = hashlib.sha256(f"{digest}{self.signature()}".encode()).hexdigest()[:24]
        path = os.path.join(cache_dir("cpu"), f"{source.name}_{key}.so")
        if not os.path.exists(path):
            try:
                self._compile(source.code, path)
            except (OSError, subprocess.SubprocessError) as exc:
                self.error = f"C compiler {self.compiler} failed: {exc}"
                return None
        library = ctypes.CDLL(path)
        self._libraries.append(library)
        return _FUNCTION((source.name, library))

    def signature(self) -> str:
        """What a compiled file depends on besides its source."""
        if self._signature is None:
            version = subprocess.run([self.compiler, "--version"], check=False, capture_output=True,
                                     text=True, timeout=30).stdout.splitlines()[:1]
            self._signature = "|".join([*version, *csource.FLAGS, platform.machine(),
                                        _cpu_flags(), ember.__version__])
        return self._signature

    def _compile(self, code: str, path: str) -> None:
        """Compile into a temporary file beside ``path``, then rename: a reader never sees
        a half-written library, and two processes compiling the same source both win."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with tempfile.TemporaryDirectory(dir=os.path.dirname(path)) as work:
            c_file = os.path.join(work, "kernel.c")
            with open(c_file, "w") as f:
                f.write(code)
            built = os.path.join(work, "kernel.so")
            result = subprocess.run([self.compiler, *csource.FLAGS, c_file, "-o", built],
                                    check=False, capture_output=True, text=True, timeout=120)
            if result.returncode != 0:
                raise subprocess.SubprocessError(result.stderr.strip()[-2000:])
            os.replace(built, path)
        self.compiled += 1


def _cpu_flags() -> str:
    """The CPU's feature flags (``-march=native`` code runs only where they all are)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return hashlib.sha256(line.encode()).hexdigest()[:16]
    except OSError:
        pass
    return platform.processor()


_compiler: _Compiler | None = None
_threads: ThreadPoolExecutor | None = None


def compiler() -> _Compiler:
    global _compiler
    if _compiler is None:
        _compiler = _Compiler()
    return _compiler


def status() -> str:
    """Whether fused CPU groups compile, and if not, why."""
    if os.environ.get("EMBER_CPU_COMPILE", "1") in ("", "0"):
        return "off (EMBER_CPU_COMPILE=0)"
    error = compiler().error
    return f"off: {error}" if error else f"on ({compiler().compiler})"


def run(group: Any, program: Any, inputs: list, full: list) -> bool:
    """Evaluate elementwise ``group`` into ``full`` if it compiles; False leaves the work
    (and ``full`` untouched) to the NumPy executor. ``inputs``: the external inputs,
    then the prologue's views; ``full[j]``: member j's output buffer, or None."""
    shape = group.shape
    total = math.prod(shape)
    if total < MIN_ELEMENTS or os.environ.get("EMBER_CPU_COMPILE", "1") in ("", "0"):
        return False
    members, prologue = group.members, group.prologue
    slot_dtypes = [str(a.dtype) for a in inputs]
    dtype_of = {i: d for i, d in zip(group.inputs, slot_dtypes)}
    dtype_of.update((m.out, m.dtype) for m in members)
    if not all(csource.compilable(m, dtype_of.get) for m in members[prologue:]):
        return False
    steps = program.steps[prologue:]
    used = {a for _, args in steps for a in args if a < len(inputs)}
    stores = [j for j in range(prologue, len(members)) if full[j] is not None]
    strides = [codegen.broadcast_strides(shape, a.shape, a.strides, a.itemsize)
               if k in used else None for k, a in enumerate(inputs)]
    read = [k for k in range(len(inputs)) if k in used]
    contiguous = tuple(int(s) for s in np.cumprod((1, *shape[:0:-1]))[::-1]) if shape else ()
    sizes, walked = codegen.coalesce(shape, [strides[k] for k in read] + [contiguous])
    rank = max(len(sizes), 1)
    sizes = sizes or (1,)
    walked = [w or (0,) for w in walked[:len(read)]]
    inner = ["unused"] * len(inputs)
    for k, w in zip(read, walked):
        inner[k] = {1: "contiguous", 0: "broadcast"}.get(w[-1], "strided")
    source = csource.render(members, steps, slot_dtypes, stores, rank, inner)
    function = compiler().function(source)
    if function is None:
        return False
    _call(function, total, sizes, walked, [inputs[k] for k in read],
          [full[j] for j in stores], source.scalars)
    return True


def _call(function: Any, total: int, sizes: tuple[int, ...], strides: list[tuple[int, ...]],
          reads: list[np.ndarray], stores: list[np.ndarray], scalars: list) -> None:
    size = (ctypes.c_longlong * len(sizes))(*sizes)
    flat = [s for w in strides for s in w]
    stride = (ctypes.c_longlong * max(len(flat), 1))(*flat)
    data = (ctypes.c_void_p * max(len(reads) + len(stores), 1))(
        *[a.ctypes.data for a in reads], *[a.ctypes.data for a in stores])
    values = (ctypes.c_float * max(len(scalars), 1))(
        *[float(codegen.scalar_value(dtype, v)) for dtype, v in scalars])
    parts = min(os.cpu_count() or 1, max(1, total // _PER_THREAD))
    bounds = [total * p // parts for p in range(parts + 1)]
    if parts == 1:
        function(0, total, size, stride, data, values)
        return
    global _threads
    if _threads is None:
        _threads = ThreadPoolExecutor(max_workers=(os.cpu_count() or 2) - 1,
                                      thread_name_prefix="ember-cpu-kernel")
    others = [_threads.submit(function, bounds[p], bounds[p + 1], size, stride, data, values)
              for p in range(1, parts)]
    function(bounds[0], bounds[1], size, stride, data, values)
    for other in others:
        other.result()
