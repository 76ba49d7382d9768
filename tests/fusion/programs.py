"""Programs the fusion tests run twice: here (fused) and in a process with ``EMBER_FUSION=0``.

Each program takes JSON-able arguments and returns ``{name: numpy array}``;
the tests compare the two runs bitwise. ``UnfusedWorker`` starts one process
(``python -m tests.fusion.programs``) for a whole test module and sends it
requests, so many hypothesis examples cost one interpreter start.

Protocol: a request is one JSON line ``{"program": name, "args": {...}}``; the
answer is an 8-byte little-endian length and an ``.npz`` holding the results
(or ``__error__``, a traceback).
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import numpy as np

import ember as em
from ember.kernels.numpy.table import KERNELS
from ember.nn import functional as F
from ember.ops._core import call
from tests.fusion import graphs
from tests.fusion.batching import one_batch

ROOT = Path(__file__).resolve().parents[2]
MB4 = 4 << 20  # one float32 tensor of 1M elements


def _injected_failure(msg, pool, x):
    raise ValueError("injected failure")


KERNELS.setdefault("test_fusion_fail", _injected_failure)


def failing(x: em.Tensor) -> em.Tensor:
    """An op whose kernel raises on the worker (not elementwise: never fused)."""
    return call("test_fusion_fail", (x,), x.shape, x.dtype)


def counters(device: em.Device) -> dict[str, int]:
    return em.stats(device).as_dict()


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, np.ndarray]:
    return {f"d_{k}": np.asarray(after[k] - before[k])
            for k in ("groups", "ops_fused", "kernels_launched", "ops_executed")}


# ----- the programs ----------------------------------------------------------------------

def graph(graph: dict, device_index: int) -> dict[str, np.ndarray]:
    """A random expression graph (see graphs.py), built in one batch; every kept value read
    (a failed read gives ``v{k}_error``)."""
    device = em.cpu(device_index)
    inputs = graphs.upload_inputs(graph, device)
    em.sync(device)
    before = counters(device)
    with one_batch(device):
        kept = graphs.build(graph, inputs)
    results = _read_all({f"v{k}": t for k, t in kept.items()})
    results.update(_delta(before, counters(device)))
    return results


def _read_all(tensors: dict[str, em.Tensor]) -> dict[str, np.ndarray]:
    """Each tensor's data, or ``{name}_error``: the failed op, its line and the cause's type."""
    results = {}
    for name, t in tensors.items():
        try:
            results[name] = t.numpy()
        except em.KernelError as exc:
            results[f"{name}_error"] = np.asarray(
                f"{exc.op} | {exc.site} | {type(exc.__cause__).__name__}")
    return results


def chain_peak(device_index: int, keep_all: bool, length: int = 20) -> dict[str, np.ndarray]:
    """A chain of ``length`` elementwise ops on 1M float32 elements; only the last is kept.

    ``keep_all``: every intermediate stays in a list until the chain is built (then the
    list dies), so unfused they all exist at once; fused, none should ever exist.
    """
    device = em.cpu(device_index)
    x = em.tensor(np.linspace(-3, 3, 1 << 20, dtype=np.float32), device=device)
    em.sync(device)
    before = counters(device)
    steps = (lambda t: t * 1.001, lambda t: t + 0.25, lambda t: t.tanh(),
             lambda t: t.sigmoid(), lambda t: t - 0.5)
    with one_batch(device):
        y, kept = x, []
        for i in range(length):
            y = steps[i % len(steps)](y)
            if keep_all:
                kept.append(y)
        del kept
    out = y.numpy()
    after = counters(device)
    return {"out": out, "growth": np.asarray(after["peak_bytes_held"] - before["peak_bytes_held"]),
            **_delta(before, after)}


def intermediates(device_index: int) -> dict[str, np.ndarray]:
    """Middle results of a fusible chain that are kept, read by a reduction, or dropped."""
    device = em.cpu(device_index)
    rng = np.random.default_rng(5)
    x = em.tensor(rng.standard_normal((300, 257), dtype=np.float32), device=device)
    w = em.tensor(rng.standard_normal(257, dtype=np.float32), device=device)
    em.sync(device)
    before = counters(device)
    with one_batch(device):
        a = x * 2.0
        kept = a.exp()  # alive: read after the group ran
        c = (kept + w).tanh()
        summed = c.sum(dim=1)  # a row reduction: joins the group; then c's handle dies
        d = c * 3.0 - a  # a: handle dies after this line, read inside the group only
        del a, c
        tail = d.sigmoid()
    results = {"tail": tail.numpy(), "summed": summed.numpy(), "d": d.numpy(),
               "kept": kept.numpy()}
    results.update(_delta(before, counters(device)))
    return results


def long_and_wide(device_index: int) -> dict[str, np.ndarray]:
    """A chain of 150 ops (longer than any one group may be) and a sum of 40 tensors
    (more inputs than one group may read): groups split, results do not change."""
    device = em.cpu(device_index)
    rng = np.random.default_rng(8)
    x = em.tensor(rng.standard_normal((130, 257), dtype=np.float32), device=device)
    terms = [em.tensor(rng.standard_normal(257 if i % 3 else (130, 257), dtype=np.float32),
                       device=device) for i in range(40)]
    em.sync(device)
    before = counters(device)
    steps = (lambda t: t * 1.01, lambda t: t.tanh(), lambda t: t + 0.1, lambda t: t.exp(),
             lambda t: t - 1.0)
    with one_batch(device):
        y = x
        for i in range(150):
            y = steps[i % len(steps)](y)
        total = terms[0]
        for t in terms[1:]:
            total = total * 0.5 + t
    results = {"chain": y.numpy(), "total": total.numpy()}
    results.update(_delta(before, counters(device)))
    return results


def block_grads(device_index: int, dtype: str,
                checkpointing: str | None = None) -> dict[str, np.ndarray]:
    """Gradients of an MLP-ish block: gelu, a layer norm from primitives, F.layer_norm,
    silu / sigmoid / tanh mixing, a clamp, a where and a softmax."""
    device = em.cpu(device_index).autodiff(checkpointing)
    rng = np.random.default_rng(11)

    def param(*shape: int, scale: float = 1.0) -> em.Tensor:
        data = (rng.standard_normal(shape) * scale).astype(dtype)
        return em.tensor(data, device=device).require_grad()

    x = em.tensor(rng.standard_normal((48, 96)).astype(dtype), device=device)
    w1, b1 = param(96, 160, scale=1 / math.sqrt(96)), param(160, scale=0.1)
    gamma, beta = param(160, scale=0.2), param(160, scale=0.1)
    w2, b2 = param(160, 96, scale=1 / math.sqrt(160)), param(96, scale=0.1)
    ln_w, ln_b = param(96, scale=0.5), param(96, scale=0.1)
    em.sync(device)
    before = counters(device)
    h = (x @ w1 + b1).gelu()
    mean = h.mean(dim=-1, keepdim=True)
    centered = h - mean
    var = (centered * centered).mean(dim=-1, keepdim=True)
    h = centered * (var + 1e-5).rsqrt() * (gamma + 1.0) + beta
    h = h.silu() * 0.5 + h.sigmoid() * h.tanh()
    z = h @ w2 + b2 + x
    z = F.layer_norm(z, 96, ln_w, ln_b)
    z = em.where(z > 0, z, z * 0.1).clamp(-2.5, 2.5)
    loss = (F.softmax(z, -1) * z).sum() + (z * z).mean() / 2
    grads = loss.backward()
    params = {"w1": w1, "b1": b1, "gamma": gamma, "beta": beta, "w2": w2, "b2": b2,
              "ln_w": ln_w, "ln_b": ln_b}
    results = {name: p.grad(grads).numpy() for name, p in params.items()}
    results["loss"] = loss.numpy()
    results.update(_delta(before, counters(device)))
    return results


def failures(device_index: int) -> dict[str, np.ndarray]:
    """Which tensors of a batch read fine and which raise (and naming what), around
    a failing op just before a group and an integer division by zero inside one."""
    device = em.cpu(device_index)
    rng = np.random.default_rng(3)
    x = em.tensor(rng.standard_normal((64, 256), dtype=np.float32), device=device)
    w = em.tensor(rng.standard_normal(256, dtype=np.float32), device=device)
    xi = em.tensor(rng.integers(-50, 50, (64, 256)), device=device)
    zi = em.tensor(rng.integers(0, 3, (64, 256)), device=device)  # zeros among the divisors
    em.sync(device)
    with one_batch(device):
        bad = failing(x)
        after_bad = (bad * w + 1.0).gelu()  # reads a failed input
        beside_bad = (x * w + 1.0).gelu()  # same shape, next in the stream, independent
        before_div = xi * 3 + 1
        quotient = before_div // zi  # fails: integer division by zero
        after_div = quotient * 2 + 1
        beside_div = xi - 7
        floats_after = (x * 0.5).exp()
    tensors = {"bad": bad, "after_bad": after_bad, "beside_bad": beside_bad,
               "before_div": before_div, "quotient": quotient, "after_div": after_div,
               "beside_div": beside_div, "floats_after": floats_after}
    return _read_all(tensors)


PROGRAMS = {f.__name__: f for f in (graph, chain_peak, intermediates, long_and_wide, block_grads,
                                    failures)}


def run_program(name: str, args: dict) -> dict[str, np.ndarray]:
    """The program's results; bfloat16 arrays (which .npz cannot carry) widened to float32,
    exactly, under ``{name}:bfloat16``."""
    results = {}
    for key, value in PROGRAMS[name](**args).items():
        value = np.asarray(value)
        if value.dtype == em.bfloat16.np:
            key, value = f"{key}:bfloat16", value.astype(np.float32)
        results[key] = value
    return results


# ----- the unfused process ---------------------------------------------------------------

def _encode(results: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **results)
    return buffer.getvalue()


def serve() -> None:
    """Answer requests from stdin until it closes (stdout carries answers only)."""
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, never into the answer stream
    for line in sys.stdin:
        request = json.loads(line)
        try:
            payload = _encode(run_program(request["program"], request["args"]))
        except Exception:
            payload = _encode({"__error__": np.asarray(traceback.format_exc())})
        answers.write(len(payload).to_bytes(8, "little") + payload)
        answers.flush()


class UnfusedWorker:
    """A process running ``serve()`` with ``EMBER_FUSION=0``."""

    def __init__(self) -> None:
        env = dict(os.environ, EMBER_FUSION="0")
        self.process = subprocess.Popen([sys.executable, "-m", "tests.fusion.programs"],
                                        cwd=ROOT, env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE)

    def run(self, program: str, **args: Any) -> dict[str, np.ndarray]:
        stdin, stdout = self.process.stdin, self.process.stdout
        stdin.write((json.dumps({"program": program, "args": args}) + "\n").encode())
        stdin.flush()
        header = stdout.read(8)
        if len(header) < 8:
            raise RuntimeError(f"the unfused worker died (exit {self.process.wait(5)})")
        with np.load(io.BytesIO(stdout.read(int.from_bytes(header, "little")))) as answer:
            results = {k: answer[k] for k in answer.files}
        if "__error__" in results:
            raise RuntimeError(f"{program} failed unfused:\n{results['__error__']}")
        return results

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(10)


if __name__ == "__main__":
    serve()
