"""Metrics: accumulated over an epoch from values already read from the device.

A ``Metric`` sees host NumPy arrays (the metrics task reads each step's
outputs in one batched wait), so metrics never stall the step task.
"""

from __future__ import annotations

import numpy as np


class Metric:
    """Base class: ``update(output, target)`` per batch, ``compute()`` per epoch, ``reset()``.

    Subclass it for a metric of your own and pass an instance in ``Learner(metrics=...)``;
    it is computed on the training and the validation split.

    Example:
        >>> class MeanAbsError(train.Metric):
        ...     name = "mae"
        ...     def reset(self): self.total, self.count = 0.0, 0
        ...     def update(self, output, target):
        ...         self.total += float(np.abs(output - target).sum()); self.count += target.size
        ...     def compute(self): return self.total / max(self.count, 1)
        >>> learner = train.Learner(model, opt, F.mse_loss, metrics=("loss", MeanAbsError()))
    """

    name: str = "metric"

    def update(self, output: np.ndarray, target: np.ndarray) -> None:
        """Accumulate one batch: the model's ``output`` and the batch's ``target``, both NumPy
        arrays already read from the device (e.g. logits ``(N, C)`` and class indices ``(N,)``).
        """
        raise NotImplementedError

    def compute(self) -> float:
        """The metric's value over every batch since the last ``reset``, as a float."""
        raise NotImplementedError

    def reset(self) -> None:
        """Forget the accumulated batches (the Learner calls it at each epoch's start)."""
        raise NotImplementedError


class _Fraction(Metric):
    """A fraction of rows that count as hits: subclasses say which rows do."""

    def __init__(self) -> None:
        self.reset()

    def hits(self, output: np.ndarray, target: np.ndarray) -> np.ndarray:
        """A bool array, one entry per target row: whether that row counts as a hit."""
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
    output per row, whose output > 0.5 matches a 0/1 target).

    Example:
        >>> acc = train.Accuracy()
        >>> acc.update(np.array([[0.1, 0.9], [0.8, 0.2]]), np.array([1, 1]))
        >>> acc.compute()
        0.5
    """

    name = "accuracy"

    def hits(self, output: np.ndarray, target: np.ndarray) -> np.ndarray:
        predicted = output.argmax(axis=-1) if output.ndim == target.ndim + 1 else output > 0.5
        return predicted == target


class TopKAccuracy(_Fraction):
    """The fraction of rows whose target is among the ``k`` largest outputs (name
    ``"top{k}_accuracy"``).

    Example:
        >>> top2 = train.TopKAccuracy(k=2)
        >>> top2.update(np.array([[0.5, 0.3, 0.2]]), np.array([1]))
        >>> top2.compute()
        1.0
    """

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
