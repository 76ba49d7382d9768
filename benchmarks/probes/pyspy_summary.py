"""Where a thread's samples go in a py-spy raw profile: inclusive and own share per function.

Record with ``py-spy record -r 2000 -f raw --threads -o OUT -- python3 SCRIPT`` (py-spy
keeps only samples of threads that run, so the shares are of CPU time, not waits), then
``python3 benchmarks/probes/pyspy_summary.py OUT [THREAD] [--top N] [--without TEXT]``;
``THREAD`` keeps samples whose stack names it (a thread's name or ident, or any function),
``--without`` drops those whose stack names ``TEXT`` (a warm-up's compiles, say).
"""

from __future__ import annotations

import collections
import re
import sys


def summarize(path: str, keep: str, top: int, without: str = "") -> None:
    own: collections.Counter = collections.Counter()
    inclusive: collections.Counter = collections.Counter()
    threads: collections.Counter = collections.Counter()
    total = 0
    with open(path) as f:
        for line in f:
            stack, count = line.rsplit(" ", 1)
            samples = int(count)
            frames = [re.sub(r":\d+\)", ")", frame) for frame in stack.split(";")]
            threads[frames[0]] += samples
            if keep and not any(keep in frame for frame in frames):
                continue
            if without and any(without in frame for frame in frames):
                continue
            total += samples
            own[frames[-1]] += samples
            for frame in set(frames):
                inclusive[frame] += samples
    print("samples by thread: " + "; ".join(f"{name} {n}" for name, n in threads.most_common(8)))
    print(f"kept {total} samples")
    for title, table in (("inclusive", inclusive), ("own", own)):
        print(f"\n| {title} % | own % | function |\n|---|---|---|")
        for frame, samples in table.most_common(top):
            print(f"| {100 * inclusive[frame] / total:.1f} | {100 * own[frame] / total:.1f} "
                  f"| {frame[:120]} |")


if __name__ == "__main__":
    args = sys.argv[1:]
    options = {"--top": "40", "--without": ""}
    for name in options:
        if name in args:
            i = args.index(name)
            options[name] = args[i + 1]
            del args[i:i + 2]
    summarize(args[0], args[1] if len(args) > 1 else "", int(options["--top"]),
              options["--without"])
