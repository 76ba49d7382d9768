"""Fused groups on the CPU as compiled C: one pass over memory, every core.

The blocked NumPy executor calls one NumPy kernel per member per chunk; for
custom_gelu that is ~30 passes over each chunk, erf alone ~25 (bench_fusion). Runs
of members with an exact C rendering (``csource``) are instead rendered to C as one
``Piece``, compiled once with the system's C compiler, cached in memory and on disk
under ``$XDG_CACHE_HOME/ember/cpu`` (keyed by the source, the compiler, its flags, the
CPU and ember's version), and called through ctypes, which lets go of the GIL. An
elementwise group that is one piece runs in one call, its range split between the
cores; otherwise the pieces run chunk by chunk between the other members' NumPy
kernels (sin, max, reductions ...), the chunks shared between the cores.

The unfused kernels of ``float32_math``'s ops (exp, log, tanh, sigmoid ...) run its
compiled loops too (``apply_math``), whether or not groups compile, so results do not
depend on fusion settings.

Where no C compiler is found, or one fails, groups keep the NumPy executor;
``status()`` says why. ``EMBER_CPU_COMPILE=0`` turns the path off for fused groups.
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

from ember._version import __version__
from ember.kernels.cache import cache_dir
from ember.kernels.fusion import cexpr
from ember.kernels.numpy import cores, crows, csource, float32_math

# A group of fewer elements keeps the NumPy executor: a first run pays a compile
# (~0.1-0.3 s), worth it for the large tensors a training loop repeats.
MIN_ELEMENTS = 1 << 16
# Compiled libraries kept on disk at most (~17 KB each).
_MAX_CACHED = 2048
# Layouts (shapes and strides) a piece remembers; past this it forgets them all (the
# compiled functions stay cached by source).
_MAX_LAYOUTS = 256
# Elements per thread at least: below this a thread's hand-over costs more than it saves.
_PER_THREAD = 1 << 15
_FUNCTION = ctypes.CFUNCTYPE(None, ctypes.c_longlong, ctypes.c_longlong,
                             ctypes.POINTER(ctypes.c_longlong),
                             ctypes.POINTER(ctypes.c_longlong),
                             ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_float))
# A row group's function: the same, and a scratch row buffer pointer.
_ROW_FUNCTION = ctypes.CFUNCTYPE(None, ctypes.c_longlong, ctypes.c_longlong,
                                 ctypes.POINTER(ctypes.c_longlong),
                                 ctypes.POINTER(ctypes.c_longlong),
                                 ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_float),
                                 ctypes.c_void_p)
# ``float32_math``'s array functions: (begin, end, x, out).
_ARRAY_FUNCTION = ctypes.CFUNCTYPE(None, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_void_p,
                                   ctypes.c_void_p)


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

    def function(self, source: Any, prototype: Any = None) -> Any:
        """``source``'s function (``source.name`` in ``source.code``) as ``prototype``
        (default: the elementwise signature), None if it could not be built."""
        digest = hashlib.sha256(source.code.encode()).hexdigest()
        found = self._functions.get(digest, False)
        if found is not False:
            return found
        with self._lock:
            if digest not in self._functions:
                self._functions[digest] = self._load(source, digest, prototype or _FUNCTION)
            return self._functions[digest]

    def _load(self, source: Any, digest: str, prototype: Any) -> Any:
        if self.error is not None:
            return None
        key = hashlib.sha256(f"{digest}{self.signature()}".encode()).hexdigest()[:24]
        path = os.path.join(cache_dir("cpu"), f"{source.name}_{key}.so")
        try:
            if not os.path.exists(path):
                self._compile(source.code, path)
            library = ctypes.CDLL(path)
        except (OSError, subprocess.SubprocessError) as exc:
            self.error = f"C compiler {self.compiler} failed: {exc}"
            return None
        self._libraries.append(library)
        return prototype((source.name, library))

    def signature(self) -> str:
        """What a compiled file depends on besides its source."""
        if self._signature is None:
            version = subprocess.run([self.compiler, "--version"], check=False, capture_output=True,
                                     text=True, timeout=30).stdout.splitlines()[:1]
            self._signature = "|".join([*version, *csource.FLAGS, platform.machine(),
                                        _cpu_flags(), __version__])
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
        _trim(os.path.dirname(path))


def _trim(folder: str) -> None:
    """Keep the folder of compiled libraries bounded: past ``_MAX_CACHED`` files, the
    least recently written half goes (random test graphs alone make thousands)."""
    try:
        entries = [e for e in os.scandir(folder) if e.name.endswith(".so")]
        if len(entries) <= _MAX_CACHED:
            return
        entries.sort(key=lambda e: e.stat().st_mtime)
        for entry in entries[:len(entries) - _MAX_CACHED // 2]:
            os.unlink(entry.path)
    except OSError:
        pass  # another process trimmed it first


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


def _forget_threads() -> None:
    """A forked child has none of the pool's threads (work sent to it would wait forever)."""
    global _threads
    _threads = None


os.register_at_fork(after_in_child=_forget_threads)


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


def _enabled() -> bool:
    return os.environ.get("EMBER_CPU_COMPILE", "1") not in ("", "0") and not compiler().error


def math_function(op: str) -> Any:
    """The compiled loop of ``float32_math``'s ``op`` (compiled on first use), None where
    no compiler works. Once it exists, ``float32_math.READY`` names ``op``: fused groups
    compile the op only then, so they and the unfused kernel compute it alike."""
    function = _math_functions.get(op)
    if function is None and compiler().compiler is not None:
        function = compiler().function(float32_math.array_source(op), _ARRAY_FUNCTION)
        if function is not None:
            _math_functions[op] = function
            float32_math.READY.add(op)
    return function


_math_functions: dict[str, Any] = {}


def apply_math(op: str, x: np.ndarray, out: np.ndarray) -> bool:
    """``out[...] = op(x)`` with ember's own float32 ``op`` (``float32_math``), split
    between the cores; False (nothing written) where it does not compile. ``x`` and
    ``out``: float32 arrays of one shape."""
    function = math_function(op)
    if function is None:
        return False
    x = np.ascontiguousarray(x)
    dest = out if out.flags.c_contiguous else np.empty(out.shape, np.float32)
    total = x.size
    parts = min(cores.share(), max(1, total // _PER_THREAD))
    bounds = _bounds(total, parts)
    source, target = x.ctypes.data, dest.ctypes.data
    in_parallel([lambda p=p: function(bounds[p], bounds[p + 1], source, target)
                 for p in range(parts)])
    if dest is not out:
        np.copyto(out, dest)
    return True


def _prepare_math(members: tuple) -> None:
    """Compile the array functions of ``members``' ``float32_math`` ops (and of those
    their reductions compute with), so a plan made now may compile them."""
    for m in members:
        for op in crows.MATH.get(m.op, (m.op,)):
            if op in float32_math.OPS and op not in float32_math.READY:
                math_function(op)


class Piece:
    """Consecutive members of a group that compile to one C function (a piece of its
    program), rendered and compiled once per layout of what it reads.

    ``reads``: the group's slots it reads from outside; ``stores``: its members whose
    values leave it (read by later members, or materialized), in order; ``indices``:
    all its members.
    """

    __slots__ = ("indices", "reads", "stores", "_steps", "_dtypes", "_layouts")

    def __init__(self, steps: tuple, n_inputs: int, reads: list[int], stores: list[int],
                 read_dtypes: list[str]) -> None:
        self.indices = [j for j, _ in steps]
        self.reads = reads
        self.stores = stores
        # The program's slots (external inputs, then one per member) renumbered: what
        # the piece reads first, then its own members.
        local = {slot: k for k, slot in enumerate(reads)}
        local.update((n_inputs + j, len(reads) + p) for p, (j, _) in enumerate(steps))
        self._steps = tuple((j, tuple(local[a] for a in args)) for j, args in steps)
        self._dtypes = read_dtypes
        self._layouts: dict[tuple, tuple] = {}

    def run(self, members: tuple, reads: list[np.ndarray], stores: list[np.ndarray],
            split: bool = False) -> bool:
        """Evaluate into ``stores`` (arrays of the output shape); False if it did not compile.
        ``members``: the group's members now (scalar values change between runs)."""
        shape = stores[0].shape
        key = (shape, *[(a.shape, a.strides) for a in reads])
        layout = self._layouts.get(key)
        if layout is None:
            if len(self._layouts) >= _MAX_LAYOUTS:  # shapes that keep changing: start over
                self._layouts.clear()
            layout = self._layouts[key] = self._compile(members, shape, reads, stores)
        function, sizes, strides = layout
        if function is None:
            return False
        total = math.prod(shape)
        parts = min(cores.share(), max(1, total // _PER_THREAD)) if split else 1
        _call(function, total, parts, sizes, strides, _pointers([*reads, *stores]),
              _scalar_values(members, self._steps))
        return True

    def _compile(self, members: tuple, shape: tuple[int, ...], reads: list[np.ndarray],
                 stores: list[np.ndarray]) -> tuple:
        strides = [cexpr.broadcast_strides(shape, a.shape, a.strides, a.itemsize)
                   for a in reads]
        sizes, walked = cexpr.coalesce(shape, [*strides, _contiguous_strides(shape)])
        rank = max(len(sizes), 1)
        walked = [w or (0,) for w in walked[:len(reads)]]
        inner = [{1: "contiguous", 0: "broadcast"}.get(w[-1], "strided") for w in walked]
        source = csource.render(members, self._steps, self._dtypes, self.stores, rank, inner)
        sizes = sizes or (1,)
        flat = [s for w in walked for s in w]
        return (compiler().function(source), (ctypes.c_longlong * rank)(*sizes),
                (ctypes.c_longlong * max(len(flat), 1))(*flat))


def plan(group: Any, program: Any, inputs: list, full: list) -> list | None:
    """The ``group``'s members after its prologue as a list of member indices and
    ``Piece``s, or None where nothing compiles (too small, no compiler, no run of two
    exact members of one shape). A row group's reductions and views stay NumPy calls.
    ``inputs``: the external inputs, then the prologue's views; ``full[j]``: member j's
    output buffer, or None."""
    if math.prod(group.shape) < MIN_ELEMENTS or not _enabled():
        return None
    members, prologue = group.members, group.prologue
    key = _structure(group, program, inputs, full)
    found = _plans.get(key, False)
    if found is False:
        _prepare_math(members)
        dtypes = [a.dtype.name for a in inputs] + [m.dtype for m in members[prologue:]]
        found = _plan(group, program, full, dtypes)
        if len(_plans) < _MAX_PLANS:
            _plans[key] = found
    return found


# Plans by group structure, and row groups' compiled layouts by structure and the inputs'
# shapes and strides (None: the group does not compile).
_plans: dict[tuple, list | None] = {}
_row_layouts: dict[tuple, tuple | None] = {}
_MAX_PLANS = 4096


def _plan(group: Any, program: Any, full: list, dtypes: list[str]) -> list | None:
    members, prologue = group.members, group.prologue
    n_inputs = len(group.inputs)
    dtype_of = dict(zip(group.inputs, dtypes))
    dtype_of.update((m.out, m.dtype) for m in members)
    steps = program.steps[prologue:]
    last_reader = {}
    for j, args in steps:
        for a in args:
            last_reader[a] = j
    items: list = []
    run: list = []
    for step in [*steps, None]:
        # A piece's members share one shape (a row group's full rows, or its reduced ones).
        if (step is not None and csource.compilable(members[step[0]], dtype_of.get)
                and (not run or members[step[0]].shape == members[run[0][0]].shape)):
            run.append(step)
            continue
        if len(run) >= 2:
            items.append(_piece(run, n_inputs, full, last_reader, dtypes))
        else:
            items += [j for j, _ in run]
        run = []
        if step is not None and csource.compilable(members[step[0]], dtype_of.get):
            run.append(step)  # it starts the next piece (it closed this one by its shape)
        elif step is not None:
            items.append(step[0])
    return items if any(type(item) is Piece for item in items) else None


def _piece(steps: list, n_inputs: int, full: list, last_reader: dict,
           dtypes: list[str]) -> Piece:
    inside = {n_inputs + j for j, _ in steps}
    last = steps[-1][0]
    reads = sorted({a for _, args in steps for a in args if a not in inside})
    stores = [j for j, _ in steps
              if full[j] is not None or last_reader.get(n_inputs + j, -1) > last]
    return Piece(tuple(steps), n_inputs, reads, stores, [dtypes[a] for a in reads])


def run_whole(items: list, group: Any, inputs: list, full: list) -> bool:
    """Evaluate an elementwise group that is one piece in one call over every core; False
    if it is not one piece or did not compile (then nothing was written)."""
    if group.rows is not None or len(items) != 1 or not items[0].stores:
        return False
    piece = items[0]
    return piece.run(group.members, [inputs[a] for a in piece.reads],
                     [full[j] for j in piece.stores], split=True)


def run_rows(group: Any, program: Any, inputs: list, full: list) -> bool:
    """Evaluate row ``group`` whole as compiled C (``crows``) into ``full``, its rows
    split between the cores; False (nothing written) where it does not compile."""
    if math.prod(group.shape) < max(MIN_ELEMENTS, 1) or not _enabled():
        return False  # (nothing to compute, or too little to pay for a compile)
    key = (_structure(group, program, inputs, full),
           tuple((a.shape, a.strides) for a in inputs))
    layout = _row_layouts.get(key, False)
    if layout is False:
        _prepare_math(group.members)
        layout = _row_layout(group, program, inputs, full)
        if len(_row_layouts) < _MAX_PLANS:
            _row_layouts[key] = layout
    if layout is None:
        return False
    function, size, stride, read, stores, buffers = layout
    steps = program.steps[group.prologue:]
    data = _pointers([*[inputs[k] for k in read], *[full[j] for j in stores]])
    values = _scalar_values(group.members, steps)
    rows, count = math.prod(group.shape[:group.rows]), math.prod(group.shape[group.rows:])
    parts = min(cores.share(), max(1, rows * count // _PER_THREAD), rows)
    scratch = np.empty((parts, max(buffers, 1) * count), np.float32)
    bounds = _bounds(rows, parts)
    in_parallel([lambda p=p: function(bounds[p], bounds[p + 1], size, stride, data, values,
                                      scratch[p].ctypes.data)
                 for p in range(parts)])
    return True


def _row_layout(group: Any, program: Any, inputs: list, full: list) -> tuple | None:
    """(function, size, stride, read input slots, stored members, row buffers) of row
    ``group`` over inputs laid out as these, or None where it does not compile."""
    shape, r = group.shape, group.rows
    members, prologue, n_inputs = group.members, group.prologue, len(group.inputs)
    slot_dtypes = [a.dtype.name for a in inputs] + [m.dtype for m in members[prologue:]]
    dtype_of = dict(zip(group.inputs, slot_dtypes))
    dtype_of.update((m.out, m.dtype) for m in members)
    member_kinds = crows.kinds(members, prologue, shape, dtype_of.get)
    if member_kinds is None:
        return None
    steps = program.steps[prologue:]
    read = sorted({a for _, args in steps for a in args if a < len(inputs)})
    rows_shape, row_shape = shape[:r], shape[r:]
    outer, walks = [], {}
    for k in read:
        a = inputs[k]
        strides = cexpr.broadcast_strides(shape, a.shape, a.strides, a.itemsize)
        sizes, (along,) = cexpr.coalesce(row_shape, [strides[r:]]) if row_shape else ((), [()])
        if len(sizes) > 1:
            return None  # a row this input walks in several strides
        step = along[0] if along else 0
        walks[k] = "broadcast" if step == 0 else "contiguous" if step == 1 else "strided"
        outer.append((strides[:r], step))
    sizes, walked = cexpr.coalesce(
        rows_shape, [o for o, _ in outer] + [_contiguous_strides(rows_shape)]) \
        if rows_shape else ((), [() for _ in range(len(outer) + 1)])
    stores = [j for j in range(prologue, len(members)) if full[j] is not None]
    count = math.prod(row_shape)
    source = crows.render(members, steps, slot_dtypes, member_kinds, n_inputs, walks,
                          stores, count, len(sizes))
    function = compiler().function(source, _ROW_FUNCTION) if source is not None else None
    if function is None:
        return None
    flat = [x for w, (_, step) in zip(walked, outer) for x in (*w, step)]
    return (function, (ctypes.c_longlong * (len(sizes) + 1))(*sizes, count),
            (ctypes.c_longlong * max(len(flat), 1))(*flat), read, stores, source.buffers)


def _call(function: Any, total: int, parts: int, *args: Any) -> None:
    """``function`` over [0, total), split into ``parts`` ranges run on as many threads."""
    bounds = _bounds(total, parts)
    in_parallel([lambda p=p: function(bounds[p], bounds[p + 1], *args) for p in range(parts)])


def _bounds(total: int, parts: int) -> list[int]:
    """Where ``parts`` near-equal ranges of [0, total) begin, then ``total``."""
    return [total * p // parts for p in range(parts + 1)]


def _structure(group: Any, program: Any, inputs: list, full: list) -> tuple:
    """What a group's compiled code depends on besides the inputs' layouts: its members
    (scalar values left out: they are read at each run), wiring, which members it
    stores, and the inputs' dtypes (as NumPy dtypes: naming them costs more than the
    rest of the key)."""
    return (tuple((m.op, m.dtype, cexpr.attr_shape(m)) for m in group.members),
            program.steps, group.prologue, tuple(f is None for f in full),
            tuple(a.dtype for a in inputs))


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a C-contiguous array of ``shape``."""
    return tuple(int(s) for s in np.cumprod((1, *shape[:0:-1]))[::-1]) if shape else ()


def _scalar_values(members: tuple, steps: tuple) -> Any:
    """The scalar arguments of ``steps``' members now, as the C functions take them."""
    scalars = cexpr.scalar_arguments(members, steps)
    return (ctypes.c_float * max(len(scalars), 1))(
        *[float(cexpr.scalar_value(dtype, v)) for dtype, v in scalars])


def _pointers(arrays: list[np.ndarray]) -> Any:
    return (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])


def in_parallel(tasks: list) -> None:
    """Run ``tasks`` (callables that let go of the GIL for most of their time: compiled
    code, large NumPy calls), the first on this thread, the rest on a shared pool."""
    if len(tasks) == 1:
        tasks[0]()
        return
    global _threads
    if _threads is None:
        _threads = ThreadPoolExecutor(max_workers=max(cores.count() - 1, 1),
                                      thread_name_prefix="ember-cpu-kernel")
    others = [_threads.submit(task) for task in tasks[1:]]
    tasks[0]()
    for other in others:
        other.result()
