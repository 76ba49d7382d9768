"""Runs every benchmark and prints Markdown for BENCHMARKS.md: `make bench`."""

from __future__ import annotations

import datetime
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import bench_autodiff, bench_large, bench_overhead  # noqa: E402
from benchmarks import bench_optim  # noqa: E402
from benchmarks import bench_conv  # noqa: E402
from benchmarks import bench_fusion  # noqa: E402
from benchmarks import bench_runtime  # noqa: E402
from benchmarks.common import machine, torch  # noqa: E402


def main() -> None:
    print(f"## {datetime.date.today().isoformat()} — {machine()}")
    print(f"NumPy {__import__('numpy').__version__}"
          + (f", PyTorch {torch.__version__}" if torch is not None else ", PyTorch not installed")
          + "; command: `make bench`\n")
    print(bench_runtime.run())
    print(bench_overhead.run())
    print(bench_large.run())
    print(bench_conv.run())
    print(bench_autodiff.run())
    print(bench_optim.run())
    print(bench_fusion.run())


if __name__ == "__main__":
    main()
