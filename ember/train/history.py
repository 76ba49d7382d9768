"""``History``: per-epoch metrics of training and validation, and a PNG of their curves."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class History:
    """Per-epoch metric values: ``history.train["loss"]`` is the list of epoch means.

    ``plot(path)`` writes a PNG with one panel per metric (train and valid curves).

    Example:
        >>> history = learner.fit_sync(train_loader, valid_loader, epochs=3)
        >>> history.valid["accuracy"][-1], history.epochs
        (0.97, 3)
        >>> history.plot("curves.png")
    """

    def __init__(self, train: dict[str, list[float]] | None = None,
                 valid: dict[str, list[float]] | None = None) -> None:
        self.train: dict[str, list[float]] = train or {}
        self.valid: dict[str, list[float]] = valid or {}

    def append(self, split: str, values: dict[str, float]) -> None:
        """Add one epoch's ``{metric name: value}`` to ``"train"`` or ``"valid"``."""
        target = self.train if split == "train" else self.valid
        for name, value in values.items():
            target.setdefault(name, []).append(float(value))

    @property
    def epochs(self) -> int:
        """The number of training epochs recorded."""
        return max((len(v) for v in self.train.values()), default=0)

    def state_dict(self) -> dict[str, Any]:
        """``{"train": ..., "valid": ...}`` as plain lists of floats (saved in checkpoints)."""
        return {"train": self.train, "valid": self.valid}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> History:
        """Rebuild a ``History`` from what ``state_dict`` returned."""
        return cls({k: list(v) for k, v in state["train"].items()},
                   {k: list(v) for k, v in state["valid"].items()})

    def plot(self, path: str | Path) -> None:
        """Write a PNG of every metric's curves (matplotlib, Agg backend: no display needed)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from ember.record_io import atomic_write_bytes

        names = list(dict.fromkeys([*self.train, *self.valid]))
        if not names:
            raise ValueError("History.plot: no metrics recorded yet")
        fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 3.5), squeeze=False)
        for ax, name in zip(axes[0], names):
            for split, values in (("train", self.train.get(name)), ("valid", self.valid.get(name))):
                if values:
                    ax.plot(range(1, len(values) + 1), values, marker="o", label=split)
            ax.set_title(name)
            ax.set_xlabel("epoch")
            ax.grid(alpha=0.3)
            ax.legend()
        fig.tight_layout()
        import io

        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=100)
        plt.close(fig)
        atomic_write_bytes(Path(path), buffer.getvalue())

    def __repr__(self) -> str:
        last = {k: round(v[-1], 4) for k, v in self.train.items() if v}
        return f"History(epochs={self.epochs}, last train={last})"
