"""Issue 22's concurrency figure: two models trained at once against one after the other.

The two models of ``examples/train_two_models_async.py`` (an MLP with 64 hidden units on
``cpu:0``, one with 512 on ``cpu:1``, the digits, 10 epochs each) trained as two trio
tasks at once, and the same two trainings one after the other, each in a fresh
interpreter. The samples alternate (once, one after the other, then the other way round)
so that load from other processes falls on both alike; each reports the wall time and the
process's CPU time (``time.process_time()``, every thread) of the training alone. The
figure is at-once ÷ one-after-the-other per pair, median (min).

``--against PATH`` runs the same pairs on another checkout of ember as well (the code
before a change), interleaved with this one's.

The second figure: softmax over the rows of 4096×4096 alone, then after the MLP and CNN
training rows of ``bench_runtime.py`` in the same process (ember and PyTorch, as that
benchmark runs them), ms per call, median (min), and the ratio of the medians.

Run: ``PYTHONPATH=. python benchmarks/bench_concurrency.py [--pairs N] [--against PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_TRAIN = """
import json, sys, time
sys.path.insert(0, {examples!r})
import ember as em
import train_two_models_async as example

async def one_after_the_other():
    results = {{}}
    await example.train_one("small MLP (64 hidden)", 64, em.cpu(0), results)
    await example.train_one("wide MLP (512 hidden)", 512, em.cpu(1), results)
    return results

em.manual_seed(0)
wall, cpu = time.perf_counter(), time.process_time()
results = em.run(example.main if {at_once!r} else one_after_the_other)
print(json.dumps({{"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu,
                  "accuracy": sorted(results.values())}}))
"""


def train_sample(tree: Path, at_once: bool) -> dict:
    """One training of both models in a fresh interpreter on ``tree``'s ember."""
    code = _TRAIN.format(examples=str(tree / "examples"), at_once=at_once)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(tree)), cwd=tree, timeout=600)
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def concurrency(trees: dict[str, Path], pairs: int) -> str:
    samples: dict[str, list[tuple[dict, dict]]] = {name: [] for name in trees}
    for i in range(pairs):
        for name, tree in trees.items():
            order = (True, False) if i % 2 else (False, True)
            run = {at_once: train_sample(tree, at_once) for at_once in order}
            samples[name].append((run[True], run[False]))
            print(f"  {name} pair {i + 1}: at once {run[True]['wall']:.2f} s wall "
                  f"{run[True]['cpu']:.2f} s CPU; one after the other {run[False]['wall']:.2f} "
                  f"s wall {run[False]['cpu']:.2f} s CPU", file=sys.stderr, flush=True)
    lines = ["| code | at once: wall s | CPU s | one after the other: wall s | CPU s | "
             "wall ratio | CPU ratio |", "|---|---|---|---|---|---|---|"]
    for name, pairs_ in samples.items():
        cells = []
        for side in (0, 1):
            for key in ("wall", "cpu"):
                cells.append(_span([p[side][key] for p in pairs_]))
        for key in ("wall", "cpu"):
            cells.append(_span([p[0][key] / p[1][key] for p in pairs_]))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


_SOFTMAX = """
import json, statistics, sys, time
sys.path.insert(0, {root!r})
from benchmarks import bench_runtime as runtime

def softmax_ms(sample, repeats):
    sample()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        sample()
        times.append((time.perf_counter() - start) * 1e3)
    return times

ember_softmax, _ = runtime.elementwise("softmax", 4096)
alone = softmax_ms(ember_softmax, {repeats})
for model in ("cnn", "mlp"):
    ember_steps, torch_steps = runtime.adam_steps(model, 5)
    for _ in range(8):
        ember_steps()
        torch_steps()
after = softmax_ms(ember_softmax, {repeats})
print(json.dumps({{"alone": alone, "after": after}}))
"""


def softmax_after_training(tree: Path, runs: int, repeats: int) -> str:
    alone, after = [], []
    for _ in range(runs):
        code = _SOFTMAX.format(root=str(tree), repeats=repeats)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=dict(os.environ, PYTHONPATH=str(tree)), cwd=tree,
                              timeout=600)
        if done.returncode:
            raise RuntimeError(done.stderr[-2000:])
        result = json.loads(done.stdout.strip().splitlines()[-1])
        alone += result["alone"]
        after += result["after"]
    ratio = statistics.median(after) / statistics.median(alone)
    return f"| {tree.name} | {_span(alone)} | {_span(after)} | {ratio:.2f} |"


def _span(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--against", type=Path, help="another ember checkout to compare")
    parser.add_argument("--skip-softmax", action="store_true")
    args = parser.parse_args()
    trees = {"this": ROOT}
    if args.against is not None:
        trees["against"] = args.against.resolve()
    started = time.perf_counter()
    print(f"### Two models at once against one after the other ({os.cpu_count()} cores, "
          f"{args.pairs} pairs)\n")
    print(concurrency(trees, args.pairs))
    if not args.skip_softmax:
        print("\n### Softmax 4096² alone and after the training rows, ms\n")
        print("| code | alone | after training | after ÷ alone |\n|---|---|---|---|")
        for tree in trees.values():
            print(softmax_after_training(tree, 2, 7))
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
