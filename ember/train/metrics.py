"""Metrics: accumulated over an epoch from values already read from the device.

A ``Metric`` sees host NumPy arrays (the metrics task reads each step's
outputs in one batched wait), so metrics never stall the step task.
"""

from __future__ import annotations

import numpy as np


class Metric:
    """Base class: ``update(output, target)`` per batch, ``compute()`` per epoch, ``reset()``."""

    name: str = "metric"

    def update(self, output: np.ndarray, target: np.ndarray) -> None:
        raise NotImplementedError

    def compute(self) -> float:
        raise NotImplementedError

    def reset(self) -> None:
        raise NotImplementedError


class _Fraction(Metric):
    """A fraction of rows that count as hits: subclasses say which rows do."""

    def __init__(self) -> None:
        self.reset()

    def hits(self, output: np.ndarray, target: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def update(self, output: np.ndarray, target: np.ndarray) -> None:
        self.correct += int(self.hits(output, target).sum())
        self.total += int(target.size)

    def compute(self) -> float:
        return self.correct / self.total if self.total else float("nan")

    def reset(self) -> None:
        self.correct = 0
        self.total = 0


class Accuracy(_Fraction):
    """The fraction of rows whose argmax equals the class-index target (or, for one
    output per row, whose output > 0.5 matches a 0/1 target)."""

    name = "accuracy"

    def hits(self, output: np.ndarray, target: np.ndarray) -> np.ndarray:
        predicted = output.argmax(axis=-1) if output.ndim == target.ndim + 1 else output > 0.5
        return predicted == target


class TopKAccuracy(_Fraction):
    """The fraction of rows whose target is among the ``k`` largest outputs."""

    def __init__(self, k: int = 5) -> None:
        self.k = k
        self.name = f"top{k}_accuracy"
        super().__init__()

    def hits(self, output: np.ndarray, target: np.ndarray) -> np.ndarray:
        top = np.argpartition(-output, min(self.k, output.shape[-1]) - 1, axis=-1)[..., :self.k]
        return (top == target[..., None]).any(axis=-1)


class Mean(Metric):
    """The item-weighted mean of a per-batch value (the loss)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.reset()

    def add(self, value: float, count: int) -> None:
        self.sum += float(value) * count
        self.count += count

    def update(self, output: np.ndarray, target: np.ndarray) -> None:
        raise TypeError(f"{self.name} is fed by the Learner, not by update()")

    def compute(self) -> float:
        return self.sum / self.count if self.count else float("nan")

    def reset(self) -> None:
        self.sum = 0.0
        self.count = 0


BUILTIN = {"accuracy": Accuracy}


def make(spec: str | Metric) -> Metric | str:
    """A metric instance for a name ("accuracy", "top5_accuracy"); "loss", "lr" and
    "samples_per_second" stay names: the Learner computes them itself."""
    if isinstance(spec, Metric):
        return spec
    if spec in ("loss", "lr", "samples_per_second"):
        return spec
    if spec in BUILTIN:
        return BUILTIN[spec]()
    if spec.startswith("top") and spec.endswith("_accuracy") and spec[3:-9].isdigit():
        return TopKAccuracy(int(spec[3:-9]))
    raise ValueError(f"unknown metric {spec!r}; use 'loss', 'accuracy', 'topK_accuracy', 'lr', "
                     f"'samples_per_second' or a train.Metric instance")
