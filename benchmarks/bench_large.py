"""Large ops against NumPy direct: 1024² matmul and 16M-element elementwise, read back.

ember's figure includes submission, the worker hand-off and the (zero-copy)
read; NumPy's is the bare call. Target: within 5% of NumPy.
"""

from __future__ import annotations

import numpy as np

import ember as em
from benchmarks.common import median_seconds, ratio, table, torch


def _pair(shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.standard_normal(shape, dtype=np.float32),
            rng.standard_normal(shape, dtype=np.float32))


def run() -> str:
    rows = []
    cases = [
        ("matmul 1024×1024 @ 1024×1024", (1024, 1024), lambda x, y: x @ y, 9),
        ("add 16M float32", (16 << 20,), lambda x, y: x + y, 7),
        ("mul+tanh 16M float32", (16 << 20,), lambda x, y: (x * y).tanh(), 5),
    ]
    for name, shape, ember_fn, repeats in cases:
        x_np, y_np = _pair(shape)
        x, y = em.tensor(x_np), em.tensor(y_np)
        numpy_fn = {
            "matmul": lambda: x_np @ y_np,
            "add": lambda: x_np + y_np,
            "mul+tanh": lambda: np.tanh(x_np * y_np),
        }[name.split()[0]]
        ember_s = median_seconds(lambda: ember_fn(x, y).numpy(), repeats=repeats)
        numpy_s = median_seconds(numpy_fn, repeats=repeats)
        row = [name, f"{ember_s * 1e3:.2f}", f"{numpy_s * 1e3:.2f}", ratio(ember_s, numpy_s)]
        if torch is not None:
            xt, yt = torch.from_numpy(x_np), torch.from_numpy(y_np)
            torch_fn = {
                "matmul": lambda: xt @ yt,
                "add": lambda: xt + yt,
                "mul+tanh": lambda: torch.tanh(xt * yt),
            }[name.split()[0]]
            torch_s = median_seconds(torch_fn, repeats=repeats)
            row += [f"{torch_s * 1e3:.2f}", ratio(ember_s, torch_s)]
        rows.append(row)
    header = ["op", "ember ms", "NumPy ms", "ember/NumPy"]
    if torch is not None:
        header += ["PyTorch ms", "ember/PyTorch"]
    return table("Large ops on cpu:0 (median ms, read included)", header, rows)


if __name__ == "__main__":
    print(run())
