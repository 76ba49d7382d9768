"""NCCL all-reduce bandwidth: ember's cross-process path against ``torch.distributed``.

One process per GPU (no Ray: this script starts them and hands each the NCCL unique id
itself). Each rank joins an ember ``dist.NcclCommunicator`` and a torch process group
(backend nccl, rendezvous on tcp://127.0.0.1 only), then, for float32 buffers of 1 MiB
.. 256 MiB, times back-to-back all-reduces through each, interleaved and repeated:
ember's ``collective_world_all_reduce`` op queued on the device actor's stream, and
``torch.distributed.all_reduce``. Reported per size: time per all-reduce (min and median
of the repeats) and bus bandwidth, nccl-tests' ``busbw = bytes / time * 2 (n - 1) / n``.
With one GPU the world is one rank: busbw is 0 by definition and the times are the
floor (a copy and the launch path); algbw (bytes / time) is printed instead.

    PYTHONPATH=. python benchmarks/bench_nccl.py [--world N] [--repeats R]
"""

from __future__ import annotations

import argparse
import os
import queue
import socket
import statistics
import time
import traceback
from collections.abc import Callable
from typing import Any

# NVLink multicast (NVLS) can put a shared host's GPUs out of service: never turn it on.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

SIZES = [1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]
# Seconds a rank may take, all sizes together, before the run is called hung (a guess:
# generous for 256 MiB on PCIe).
_RANK_TIMEOUT_S = 300.0


def spawn_ranks(target: Callable[..., Any], world: int, *args: Any,
                timeout_s: float = _RANK_TIMEOUT_S) -> list[Any]:
    """Run ``target(rank, world, uid, *args)`` in ``world`` fresh processes, rank ``k`` on
    GPU ``k``, all joining one NCCL unique id made here; returns each rank's result.

    Raises:
        RuntimeError: a rank raised (its traceback in the message) or did not finish.
    """
    import multiprocessing as mp

    from ember import distributed as dist

    uid = dist.nccl_unique_id()
    context = mp.get_context("spawn")
    results = context.Queue()
    procs = [context.Process(target=_rank_main, args=(target, rank, world, uid, args, results))
             for rank in range(world)]
    for p in procs:
        p.start()
    found: dict[int, Any] = {}
    try:
        deadline = time.monotonic() + timeout_s
        while len(found) < world:
            try:
                rank, ok, value = results.get(timeout=max(deadline - time.monotonic(), 0.1))
            except queue.Empty:
                raise RuntimeError(f"ranks {sorted(set(range(world)) - set(found))} did not "
                                   f"finish within {timeout_s:g} s") from None
            if not ok:
                raise RuntimeError(f"rank {rank} failed:\n{value}")
            found[rank] = value
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return [found[k] for k in range(world)]


def _rank_main(target: Callable[..., Any], rank: int, world: int, uid: bytes, args: tuple,
               results: Any) -> None:
    try:
        results.put((rank, True, target(rank, world, uid, *args)))
    except BaseException:
        results.put((rank, False, traceback.format_exc()))


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for torch's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _iterations(nbytes: int) -> int:
    # Enough back-to-back calls that launch cost and timer noise stay small beside the
    # transfer (a guess: ~1 GiB moved per timing, between 5 and 200 calls).
    return max(5, min(200, (1 << 30) // nbytes))


def _measure(rank: int, world: int, uid: bytes, sizes: list[int],
             repeats: int, port: int) -> dict[int, tuple[list[float], list[float]]]:
    import torch
    import torch.distributed as td

    import ember as em
    from ember import distributed as dist

    device = em.cuda(rank)
    comm = dist.NcclCommunicator(world, uid, rank, device)
    torch.cuda.set_device(rank)
    td.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", world_size=world,
                          rank=rank)
    try:
        flag = em.zeros(1, device=device)

        def ember_time(x: Any, iters: int) -> float:
            comm.all_reduce((flag,))[0].numpy()  # every rank at the start line
            started = time.perf_counter()
            for _ in range(iters):
                comm.all_reduce((x,))
            em.sync(device)
            return (time.perf_counter() - started) / iters

        def torch_time(t: Any, iters: int) -> float:
            td.barrier()
            torch.cuda.synchronize()
            started = time.perf_counter()
            for _ in range(iters):
                td.all_reduce(t)
            torch.cuda.synchronize()
            return (time.perf_counter() - started) / iters

        found = {}
        for nbytes in sizes:
            n, iters = nbytes // 4, _iterations(nbytes)
            x = em.zeros(n, device=device)
            t = torch.zeros(n, device=f"cuda:{rank}")
            ember_time(x, 2)
            torch_time(t, 2)  # warm-up: NCCL connects lazily, on the first call
            mine, theirs = [], []
            for _ in range(repeats):
                mine.append(ember_time(x, iters))
                theirs.append(torch_time(t, iters))
            found[nbytes] = (mine, theirs)
            del x, t
        return found
    finally:
        td.destroy_process_group()
        comm.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", type=int, default=None,
                        help="ranks (GPUs) to use; default every visible GPU")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import cupy

    world = args.world or cupy.cuda.runtime.getDeviceCount()
    results = spawn_ranks(_measure, world, SIZES, args.repeats, free_port())[0]
    factor = 2 * (world - 1) / world
    label = "busbw" if world > 1 else "algbw"
    print(f"NCCL all-reduce, float32, world {world}, {args.repeats} repeats "
          f"(min / median); ratio = ember time / torch time")
    print(f"{'size':>8} {'ember us':>17} {'torch us':>17} {'ember ' + label:>13} "
          f"{'torch ' + label:>13} {'ratio':>13}")
    for nbytes, (mine, theirs) in results.items():
        ratios = [a / b for a, b in zip(mine, theirs)]

        def bw(seconds: float) -> float:
            return nbytes / seconds * (factor if world > 1 else 1.0) / 1e9

        us = [(min(t) * 1e6, statistics.median(t) * 1e6) for t in (mine, theirs)]
        print(f"{nbytes >> 20:>5} MiB {us[0][0]:>8.1f} / {us[0][1]:<7.1f}"
              f" {us[1][0]:>8.1f} / {us[1][1]:<7.1f}"
              f" {bw(min(mine)):>8.1f} GB/s {bw(min(theirs)):>8.1f} GB/s"
              f" {min(ratios):>5.2f} / {statistics.median(ratios):<5.2f}")


if __name__ == "__main__":
    main()
