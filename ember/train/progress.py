"""The progress display: a tqdm bar per epoch (epoch, step, loss, samples/s, ETA).

tqdm is the well-kept tool for this; it is off with ``progress=False`` or when
stderr is not a terminal.
"""

from __future__ import annotations

import sys
from typing import Any


class Progress:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self._bar: Any = None

    def start_epoch(self, epoch: int, epochs: int, steps: int) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        self._bar = tqdm(total=steps, desc=f"epoch {epoch}/{epochs}", unit="step",
                         dynamic_ncols=True, leave=True)

    def step(self, loss: float, samples_per_second: float) -> None:
        if self._bar is not None:
            self._bar.set_postfix(loss=f"{loss:.4f}", samples_s=f"{samples_per_second:,.0f}",
                                  refresh=False)
            self._bar.update(1)

    def end_epoch(self, summary: dict[str, float]) -> None:
        if self._bar is not None:
            self._bar.set_postfix({k: f"{v:.4f}" for k, v in summary.items()}, refresh=True)
            self._bar.close()
            self._bar = None
