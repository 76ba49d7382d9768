"""The CUDA backend on one GPU, side by side with CuPy written naively and PyTorch eager.

Workloads: burn's custom_gelu ([32, 512, 2048], ``x * 0.5 * (1 + erf(x / sqrt 2))``);
softmax and layer_norm on [32, 512, 4096] (ember's composites of primitives); a
matmul sweep (float32 strict, bfloat16); an MLP training step (784-4096-4096-10,
batch 4096, Adam; also as an ``em.graphed`` step with capturable Adam); a transformer
encoder layer forward + backward (d_model 768, 12 heads, feed-forward 3072, seq 256,
batch 8, no dropout; also as an ``em.graphed`` step, replayed as a CUDA graph, and as a
pure one, whose replays skip the Python); launch overhead (a 16-element op issued 2000
times; a step of 100 small matmuls, eager and replayed as a CUDA graph through
``em.graphed``); the Learner's data-parallel throughput on 1 and 2
GPUs (the MLP step's model and batch, gradients all-reduced over NCCL).

ember's times are wall-clock over ``repeats`` issues and one ``em.sync`` (what a
program sees: host issue time included); CuPy's and PyTorch's likewise, ending with a
device synchronize. Each figure is the median of 5 such runs after a warm-up.
``kernel_bandwidth`` times the generated kernel alone with CUDA events (replaying
ember's last launch) against torch's kernels, to compare kernel bandwidth; ``lone_ops``
likewise for an elementwise op with nothing to fuse with and for strided copies.
Run: ``PYTHONPATH=. python3 benchmarks/bench_cuda.py [section ...]`` on a machine with a GPU.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import ember as em
from benchmarks.paired import Row, markdown, measure
from ember.nn import functional as F

try:
    import cupy as cp
    import torch
    from cupyx.scipy import special as cp_special

    from ember.kernels.cupy import fused as ember_fused
except ImportError:  # no CUDA stack here: the script says so and exits (__main__)
    cp = torch = None

HAS_CUDA = cp is not None and torch.cuda.is_available() and bool(em.available("cuda"))
DEV = em.cuda(0) if HAS_CUDA else None
SQRT_2 = math.sqrt(2.0)


def take_option(args: list[str], name: str, default: str) -> tuple[str, list[str]]:
    """The value of ``name VALUE`` among a script's arguments (``default`` without it), and
    the other arguments."""
    if name not in args:
        return default, args
    at = args.index(name)
    return args[at + 1], args[:at] + args[at + 2:]


def take_precision(args: list[str]) -> list[str]:
    """Sets ember's float32 matmul precision from ``--precision NAME`` among a script's
    arguments; returns the others."""
    precision, rest = take_option(args, "--precision", em.get_float32_matmul_precision())
    em.set_float32_matmul_precision(precision)
    return rest


def timed(issue, sync, repeats: int, runs: int = 5) -> float:
    """Median seconds per ``issue()`` over ``runs`` runs of ``repeats`` issues + one sync.

    Every result is kept until the sync: ember never computes a result whose handle
    died unread, so dropping them would time nothing.
    """
    issue()
    sync()
    samples = []
    for _ in range(runs):
        kept = []
        start = time.perf_counter()
        for _ in range(repeats):
            kept.append(issue())
        sync()
        samples.append((time.perf_counter() - start) / repeats)
        del kept
    return statistics.median(samples)


def em_sync() -> None:
    em.sync(DEV)


def time_calls(owner: Any, name: str, spent: dict, counts: dict, label: str | None = None,
               clock: Callable[[], float] = time.thread_time) -> None:
    """Wrap ``owner.name`` (a class's method, static or not, or an instance's attribute) so
    each call adds its ``clock`` time to ``spent[label]`` and 1 to ``counts[label]``
    (label: ``name``); the probes' instrument."""
    label = label or name
    static = isinstance(getattr(owner, "__dict__", {}).get(name), staticmethod)
    original = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = clock()
        try:
            return original(*args, **kwargs)
        finally:
            spent[label] += clock() - start
            counts[label] += 1

    setattr(owner, name, staticmethod(timed) if static else timed)


def in_flight(step: Callable[[], Any], rounds: int, per_round: int,
              clock: Callable[[], float] = time.thread_time) -> tuple[float, float]:
    """Issue ``per_round`` steps (their results kept) and sync, ``rounds`` times: (wall
    seconds, seconds of ``clock`` spent issuing), the probes' measure of a step."""
    issuing = 0.0
    start = time.perf_counter()
    for _ in range(rounds):
        t = clock()
        kept = [step() for _ in range(per_round)]
        issuing += clock() - t
        em_sync()
        del kept
    return time.perf_counter() - start, issuing


def cp_sync() -> None:
    cp.cuda.Device().synchronize()


def torch_sync() -> None:
    torch.cuda.synchronize()


def row(name: str, bytes_moved: float | None, times: dict[str, float]) -> None:
    cells = []
    for who, t in times.items():
        rate = f", {bytes_moved / t / 1e9:,.0f} GB/s" if bytes_moved else ""
        cells.append(f"{who} {t * 1e3:.3f} ms{rate}")
    print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


def elementwise() -> None:
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((32, 512, 2048), dtype=np.float32)
    x_em = em.from_numpy(x_np, device=DEV)
    x_cp = cp.asarray(x_np)
    x_t = torch.from_numpy(x_np).cuda()

    def em_gelu():
        return x_em * 0.5 * (1.0 + (x_em / SQRT_2).erf())

    def cp_gelu():
        return x_cp * 0.5 * (1.0 + cp_special.erf(x_cp / SQRT_2))

    def torch_gelu():
        return x_t * 0.5 * (1.0 + torch.erf(x_t / SQRT_2))

    bytes_moved = 2 * x_np.nbytes
    row("custom_gelu [32,512,2048] f32", bytes_moved,
        {"ember": timed(em_gelu, em_sync, 20), "cupy naive": timed(cp_gelu, cp_sync, 20),
         "torch eager": timed(torch_gelu, torch_sync, 20)})

    x_np = rng.standard_normal((32, 512, 4096), dtype=np.float32)
    x_em = em.from_numpy(x_np, device=DEV)
    x_cp = cp.asarray(x_np)
    x_t = torch.from_numpy(x_np).cuda()
    w_np = rng.standard_normal(4096, dtype=np.float32)
    w_em, w_t = em.from_numpy(w_np, device=DEV), torch.from_numpy(w_np).cuda()
    w_cp = cp.asarray(w_np)

    def cp_softmax():
        e = cp.exp(x_cp - x_cp.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    row("softmax [32,512,4096] f32", 2 * x_np.nbytes,
        {"ember": timed(lambda: F.softmax(x_em, -1), em_sync, 10),
         "cupy naive": timed(cp_softmax, cp_sync, 10),
         "torch eager": timed(lambda: torch.softmax(x_t, -1), torch_sync, 10)})

    def cp_layer_norm():
        mean = x_cp.mean(axis=-1, keepdims=True)
        var = ((x_cp - mean) ** 2).mean(axis=-1, keepdims=True)
        return (x_cp - mean) / cp.sqrt(var + 1e-5) * w_cp + w_cp

    row("layer_norm [32,512,4096] f32", 2 * x_np.nbytes,
        {"ember": timed(lambda: F.layer_norm(x_em, 4096, w_em, w_em),
                        em_sync, 10),
         "cupy naive": timed(cp_layer_norm, cp_sync, 10),
         "torch eager": timed(lambda: torch.nn.functional.layer_norm(x_t, (4096,), w_t, w_t),
                              torch_sync, 10)})


def lone_ops() -> None:
    """Kernel time (CUDA events) of an add with nothing to fuse with (float32 and bfloat16,
    64M elements) and of an encoder's heads made contiguous ((8, 12, 256, 64) views of a
    (8, 256, 2304) projection, as gemm.py and a reshape copy them): ember's generated
    kernels against CuPy's and torch's."""
    from ember.kernels.cupy import strided_copy

    rng = np.random.default_rng(0)
    for dtype, torch_dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        a_np, b_np = (rng.standard_normal((8192, 8192), dtype=np.float32) for _ in range(2))
        a_em, b_em = (em.from_numpy(x, device=DEV).astype(dtype) for x in (a_np, b_np))
        a_t, b_t = (torch.from_numpy(x).cuda().to(torch_dtype) for x in (a_np, b_np))
        a_cp, b_cp = cp.from_dlpack(a_t), cp.from_dlpack(b_t)
        _, times = last_kernel_seconds(lambda: a_em + b_em)
        times["cupy"] = event_seconds(lambda: a_cp + b_cp)
        times["torch eager"] = torch_event_seconds(lambda: a_t + b_t)
        row(f"lone add [8192,8192] {dtype}, kernels only", 3 * a_t.numel() * a_t.element_size(),
            times)
    qkv_t = torch.from_numpy(rng.standard_normal((8, 256, 3 * 768), dtype=np.float32)).cuda()
    heads_t = qkv_t[..., :768].reshape(8, 256, 12, 64).transpose(1, 2)
    heads_cp = cp.from_dlpack(qkv_t)[..., :768].reshape(8, 256, 12, 64).swapaxes(1, 2)
    row("heads made contiguous (8,12,256,64) f32, kernels only", 2 * heads_t.numel() * 4,
        {"ember": event_seconds(lambda: strided_copy.contiguous(heads_cp)),
         "cupy": event_seconds(lambda: cp.ascontiguousarray(heads_cp)),
         "torch eager": torch_event_seconds(lambda: heads_t.contiguous())})


class _LastLaunch:
    """Wraps ember's generated kernels to keep the last launch (kernel, grid, block, args),
    so its kernel alone can be timed again with CUDA events."""

    last: tuple | None = None

    def __init__(self, kernel) -> None:
        self.kernel = kernel

    def __call__(self, grid, block, args) -> None:
        _LastLaunch.last = (self.kernel, grid, block, args)
        self.kernel(grid, block, args)


def _record_launches() -> None:
    original = ember_fused.FusedKernels._kernel

    def kernel(self, key, render):
        compiled, source = original(self, key, render)
        return _LastLaunch(compiled), source

    ember_fused.FusedKernels._kernel = kernel


def event_seconds(issue, repeats: int = 20) -> float:
    """Seconds per ``issue()`` between CUDA events on the current stream (kernel time)."""
    issue()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(repeats):
        issue()
    end.record()
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) / 1e3 / repeats


def torch_event_seconds(issue, repeats: int = 20) -> float:
    issue()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        issue()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / repeats


def last_kernel_seconds(em_fn: Callable[[], Any]) -> tuple[tuple | None, dict[str, float]]:
    """Run ``em_fn()`` to its end, then time the last generated kernel it launched alone
    (CUDA events): (that launch or None, {"ember kernel": seconds} or {})."""
    _LastLaunch.last = None
    y = em_fn()
    em_sync()
    launch = _LastLaunch.last
    del y
    if launch is None:
        return None, {}
    kernel, grid, block, args = launch
    return launch, {"ember kernel": event_seconds(lambda: kernel(grid, block, args))}


def kernel_bandwidth() -> None:
    """Kernel time alone (CUDA events) of ember's generated kernel against torch's."""
    rng = np.random.default_rng(1)
    for shape in ((32, 512, 2048), (64, 1024, 4096)):
        x_np = rng.standard_normal(shape, dtype=np.float32)
        x_em = em.from_numpy(x_np, device=DEV)
        x_t = torch.from_numpy(x_np).cuda()
        cases = [
            ("custom_gelu", lambda: x_em * 0.5 * (1.0 + (x_em / SQRT_2).erf()),
             lambda: x_t * 0.5 * (1.0 + torch.erf(x_t / SQRT_2)), None),
            ("softmax", lambda: F.softmax(x_em, -1), lambda: torch.softmax(x_t, -1), None),
            ("layer_norm", lambda: F.layer_norm(x_em, shape[-1]),
             lambda: torch.nn.functional.layer_norm(x_t, shape[-1:]), None),
        ]
        for name, em_fn, torch_fn, _ in cases:
            launch, times = last_kernel_seconds(em_fn)
            times["torch eager"] = torch_event_seconds(torch_fn)
            chosen = f" (grid {launch[1][0]}, block {launch[2][0]})" if launch else ""
            row(f"{name} {list(shape)} f32, kernels only{chosen}", 2 * x_np.nbytes, times)
        del x_em, x_t


def matmul_sweep() -> None:
    for dtype in ("float32", "bfloat16"):
        for n in (1024, 2048, 4096, 8192):
            rng = np.random.default_rng(n)
            a_np, b_np = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
            a_em = em.from_numpy(a_np, device=DEV).astype(getattr(em, dtype))
            b_em = em.from_numpy(b_np, device=DEV).astype(getattr(em, dtype))
            cp_dtype = a_em.dtype.np
            a_cp, b_cp = cp.asarray(a_np).astype(cp_dtype), cp.asarray(b_np).astype(cp_dtype)
            t_dtype = getattr(torch, dtype)
            a_t, b_t = (torch.from_numpy(v).cuda().to(t_dtype) for v in (a_np, b_np))
            # Products enough for tens of ms of GPU time per run: with two, a run timed
            # the latency of issuing (the worker's linger, a sync) more than the products.
            repeats = min(500, max(10, int(4e12 // (2 * n ** 3))))
            times = {"ember": timed(lambda: a_em @ b_em, em_sync, repeats),
                     "cupy": timed(lambda: a_cp @ b_cp, cp_sync, repeats),
                     "torch": timed(lambda: a_t @ b_t, torch_sync, repeats)}
            flops = 2 * n ** 3
            cells = " | ".join(f"{k} {flops / v / 1e12:.1f} TFLOP/s" for k, v in times.items())
            print(f"| matmul {n}³ {dtype} | {cells} |", flush=True)


MLP_BATCH, MLP_SIZES = 4096, (784, 4096, 4096, 10)


def mlp_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.standard_normal((MLP_BATCH, MLP_SIZES[0]), dtype=np.float32),
            rng.integers(0, 10, MLP_BATCH))


def ember_mlp_step(x_np: np.ndarray, y_np: np.ndarray,
                   capturable: bool = False) -> Callable[[], Any]:
    """One Adam step of the MLP on ``DEV`` (also what profile_cuda.py profiles);
    ``capturable``: Adam's step count on the device, so ``em.graphed`` replays the step."""
    sizes = MLP_SIZES
    device = DEV.autodiff()
    model = em.nn.Sequential(em.nn.Linear(sizes[0], sizes[1], device=device), em.nn.ReLU(),
                             em.nn.Linear(sizes[1], sizes[2], device=device), em.nn.ReLU(),
                             em.nn.Linear(sizes[2], sizes[3], device=device))
    opt = em.optim.Adam(model.parameters(), lr=1e-3, capturable=capturable)
    x_em = em.from_numpy(x_np, device=device)
    y_em = em.from_numpy(y_np, device=device)

    def step():
        loss = F.cross_entropy(model(x_em), y_em)
        opt.step(loss.backward())
        return loss

    return step


def torch_mlp_step(x_np: np.ndarray, y_np: np.ndarray) -> Callable[[], Any]:
    """The same Adam step of the same MLP in PyTorch (also what gpu_time.py times)."""
    sizes = MLP_SIZES
    model = torch.nn.Sequential(torch.nn.Linear(sizes[0], sizes[1]), torch.nn.ReLU(),
                                torch.nn.Linear(sizes[1], sizes[2]), torch.nn.ReLU(),
                                torch.nn.Linear(sizes[2], sizes[3])).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x_t, y_t = torch.from_numpy(x_np).cuda(), torch.from_numpy(y_np).cuda()

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x_t), y_t)
        loss.backward()
        opt.step()
        return loss

    return step


def mlp_step() -> None:
    x_np, y_np = mlp_data()
    em_step = ember_mlp_step(x_np, y_np)
    torch_step = torch_mlp_step(x_np, y_np)
    graphed = em.graphed(ember_mlp_step(x_np, y_np, capturable=True), DEV)
    row("MLP step 784-4096-4096-10, batch 4096, Adam, f32", None,
        {"ember": timed(em_step, em_sync, 10),
         "ember em.graphed (capturable Adam)": timed(graphed, em_sync, 10),
         "torch eager": timed(torch_step, torch_sync, 10)})
    print(f"# MLP em.graphed: {graphed.graph_stats()}", flush=True)


ENCODER = {"d_model": 768, "heads": 12, "ff": 3072, "seq": 256, "batch": 8}


def encoder_input() -> np.ndarray:
    e = ENCODER
    return np.random.default_rng(0).standard_normal((e["batch"], e["seq"], e["d_model"]),
                                                    dtype=np.float32)


def ember_encoder_step(x_np: np.ndarray) -> Callable[[], Any]:
    """The encoder layer's forward+backward on ``DEV``, returning the parameters'
    gradients (also what profile_cuda.py profiles)."""
    device = DEV.autodiff()
    layer = em.nn.TransformerEncoderLayer(ENCODER["d_model"], ENCODER["heads"], ENCODER["ff"],
                                          dropout=0.0, device=device)
    x_em = em.from_numpy(x_np, device=device)

    def step():
        grads = layer(x_em).sum().backward()
        return [p.grad(grads) for p in layer.parameters()]

    return step


def torch_encoder_step(x_np: np.ndarray) -> Callable[[], Any]:
    """The same layer's forward+backward in PyTorch (also what gpu_time.py times)."""
    layer = torch.nn.TransformerEncoderLayer(ENCODER["d_model"], ENCODER["heads"],
                                             ENCODER["ff"], dropout=0.0,
                                             batch_first=True).cuda()
    x_t = torch.from_numpy(x_np).cuda()

    def step():
        layer.zero_grad(set_to_none=True)
        layer(x_t).sum().backward()
        return [p.grad for p in layer.parameters()]

    return step


def encoder_layer() -> None:
    d_model, heads, ff, seq, batch = (ENCODER[k] for k in ("d_model", "heads", "ff", "seq",
                                                           "batch"))
    x_np = encoder_input()
    em_step = ember_encoder_step(x_np)
    torch_step = torch_encoder_step(x_np)
    graphed = em.graphed(em_step, DEV)
    # The step reads fixed weights and input and returns gradients: pure, so its replays
    # skip the Python (forward, autodiff, op submission) as well.
    pure = em.graphed(ember_encoder_step(x_np), DEV, pure=True)
    row(f"encoder layer fwd+bwd d{d_model} h{heads} ff{ff} seq{seq} batch{batch} f32", None,
        {"ember": timed(em_step, em_sync, 10), "ember em.graphed": timed(graphed, em_sync, 10),
         "ember em.graphed pure": timed(pure, em_sync, 10),
         "torch eager": timed(torch_step, torch_sync, 10)})
    print(f"# encoder em.graphed: {graphed.graph_stats()}", flush=True)


def matmul_precision() -> None:
    """The MLP step and the encoder layer at each float32 matmul precision of ember's,
    against torch at "highest" (its default) and at "high" (TF32 products on CUDA)."""
    x_np, y_np = mlp_data()
    e_np = encoder_input()
    for name in ("highest", "high"):
        torch.set_float32_matmul_precision(name)
        row(f"torch eager, float32 matmul precision {name!r}", None,
            {"MLP step": timed(torch_mlp_step(x_np, y_np), torch_sync, 10),
             "encoder layer": timed(torch_encoder_step(e_np), torch_sync, 10)})
    torch.set_float32_matmul_precision("highest")
    for name in ("highest", "high", "medium"):
        em.set_float32_matmul_precision(name)
        mlp_graphed = em.graphed(ember_mlp_step(x_np, y_np, capturable=True), DEV)
        encoder_pure = em.graphed(ember_encoder_step(e_np), DEV, pure=True)
        row(f"ember, float32 matmul precision {name!r}", None,
            {"MLP step": timed(ember_mlp_step(x_np, y_np), em_sync, 10),
             "MLP em.graphed": timed(mlp_graphed, em_sync, 10),
             "encoder layer": timed(ember_encoder_step(e_np), em_sync, 10),
             "encoder em.graphed pure": timed(encoder_pure, em_sync, 10)})
    em.set_float32_matmul_precision("highest")


def data_parallel() -> None:
    """Learner.fit throughput (samples/s of an epoch after a warm-up epoch), 1 vs 2 GPUs."""
    gpus = em.available("cuda")
    if len(gpus) < 2:
        print("| data parallel | skipped: one CUDA device |", flush=True)
        return
    batch, steps, sizes = 4096, 32, (784, 4096, 4096, 10)
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((batch * steps, sizes[0]), dtype=np.float32)
    y_np = rng.integers(0, 10, batch * steps)
    rates = {}
    for devices in (gpus[:1], gpus[:2]):
        model = em.nn.Sequential(em.nn.Linear(sizes[0], sizes[1]), em.nn.ReLU(),
                                 em.nn.Linear(sizes[1], sizes[2]), em.nn.ReLU(),
                                 em.nn.Linear(sizes[2], sizes[3]))
        learner = em.train.Learner(model, em.optim.Adam(model.parameters(), lr=1e-4),
                                   F.cross_entropy, devices=devices, progress=False)
        loader = em.train.DataLoader((x_np, y_np), batch_size=batch, prefetch=4)
        learner.fit_sync(loader, epochs=1)
        for d in devices:
            em.sync(d)
        start = time.perf_counter()
        learner.fit_sync(loader, epochs=2)
        for d in devices:
            em.sync(d)
        rates[len(devices)] = batch * steps / (time.perf_counter() - start)
    print(f"| Learner.fit MLP 784-4096-4096-10, batch {batch}, Adam, f32 | 1 GPU "
          f"{rates[1]:,.0f} samples/s | 2 GPUs {rates[2]:,.0f} samples/s "
          f"({rates[2] / rates[1]:.2f}x) |", flush=True)


def launch_overhead() -> None:
    x_em = em.zeros((16,), device=DEV)
    x_cp = cp.zeros((16,), cp.float32)
    x_t = torch.zeros(16, device="cuda")
    n = 2000
    times = {"ember (x + 1.0, unfused: each result read)":
             timed(lambda: (x_em + 1.0).sum(), em_sync, n),
             "cupy": timed(lambda: (x_cp + 1.0).sum(), cp_sync, n),
             "torch": timed(lambda: (x_t + 1.0).sum(), torch_sync, n)}
    print("| launch: (x + 1).sum() on 16 elements | "
          + " | ".join(f"{k} {v * 1e6:.1f} µs" for k, v in times.items()) + " |", flush=True)
    # A step of 100 dependent 16x16 matmuls (one cuBLAS kernel each, never fused): eager,
    # and replayed as a CUDA graph by em.graphed; per matmul.
    chain = 100
    w_em = em.from_numpy(np.eye(16, dtype=np.float32), device=DEV)

    def em_chain():
        y = w_em
        for _ in range(chain):
            y = y @ w_em
        return y

    graphed = em.graphed(em_chain, DEV)
    # The chain reads a fixed w only: pure, so replays skip the Python too and time the
    # graph's launch and kernels alone.
    pure = em.graphed(em_chain, DEV, pure=True)
    w_t = torch.eye(16, device="cuda")

    def torch_chain():
        y = w_t
        for _ in range(chain):
            y = y @ w_t
        return y

    times = {"ember eager": timed(em_chain, em_sync, 20),
             "ember em.graphed": timed(graphed, em_sync, 20),
             "ember em.graphed pure": timed(pure, em_sync, 20),
             "torch eager": timed(torch_chain, torch_sync, 20)}
    print(f"| launch: a step of {chain} matmuls 16x16, per matmul | "
          + " | ".join(f"{k} {v / chain * 1e6:.2f} µs" for k, v in times.items())
          + f" | {graphed.graph_stats()} |", flush=True)


def host_path() -> None:
    """Issue 21's GPU rows: reads, syncs and tiny ops against PyTorch, interleaved pairs
    (benchmarks/paired.py), each ember sample ending in a read or a sync as torch's does."""
    x_em, x_t = em.ones(16, device=DEV), torch.ones(16, device="cuda")
    b_em, b_t = em.full((16,), 0.5, device=DEV), torch.full((16,), 0.5, device="cuda")

    def repeated(fn: Callable[[], Any], n: int) -> Callable[[], None]:
        def sample() -> None:
            for _ in range(n):
                fn()
        return sample

    def chain(x: Any, b: Any, adds: int, read: Callable[[Any], Any]) -> Callable[[], None]:
        def sample() -> None:
            y = x
            for _ in range(adds):
                y = y + b
            read(y)
        return sample

    n, adds = 500, 1000
    rows = [
        Row("H200 read round trip `(x + 1).sum().item()`, float32[16]", "≤ 1.5", "µs", n,
            lambda: (repeated(lambda: (x_em + 1).sum().item(), n),
                     repeated(lambda: (x_t + 1).sum().item(), n)), 7, goal_ratio=1.5),
        Row("H200 idle `em.sync()` vs `torch.cuda.synchronize()`", "≤ 2.0", "µs", n,
            lambda: (repeated(em_sync, n), repeated(torch_sync, n)), 7, goal_ratio=2.0),
        Row("H200 `x + 1` then `.numpy()`, float32[16]", "≤ 1.5", "µs", n,
            lambda: (repeated(lambda: (x_em + 1).numpy(), n),
                     repeated(lambda: (x_t + 1).cpu().numpy(), n)), 7, goal_ratio=1.5),
        Row("H200 1000 chained tiny adds then one read, per add", "≤ 1.0", "µs", adds,
            lambda: (chain(x_em, b_em, adds, lambda y: y.numpy()),
                     chain(x_t, b_t, adds, lambda y: y.cpu().numpy())), 7, goal_ratio=1.0),
    ]
    print(markdown([measure(r) for r in rows]), flush=True)


if __name__ == "__main__":
    if not HAS_CUDA:
        print("# bench_cuda: skipped: no CUDA GPU here (it needs CuPy, PyTorch with CUDA and "
              "em.cuda(0))")
        sys.exit(0)
    print(f"# {torch.cuda.get_device_name()}, CuPy {cp.__version__}, torch {torch.__version__}")
    _record_launches()
    sections = {f.__name__: f for f in (kernel_bandwidth, elementwise, lone_ops, matmul_sweep,
                                        launch_overhead, mlp_step, encoder_layer,
                                        matmul_precision, data_parallel, host_path)}
    chosen = sys.argv[1:] or list(sections)
    for section in (sections[name] for name in chosen):
        try:
            section()
        except Exception as exc:  # one failing section must not hide the others' figures
            print(f"| {section.__name__} | failed: {type(exc).__name__}: {exc} |", flush=True)
    backend = DEV.actor.backend
    print(f"# generated kernels compiled {backend.fused.compiled}, launched "
          f"{backend.fused.launched}, last error {backend.fused.last_error!r}")
    print(f"# em.stats: {em.stats(DEV).as_dict()}")
