"""A training run in its own process, for the resume tests: ``python -m tests.train.resume_run
MODE DIR SEED [FROM] [INTERRUPT_AT]``.

MODE is ``fresh`` (train from scratch, every epoch checkpoint kept) or ``resume`` (resume
from FROM, a folder or a checkpoint file, and train on). SEED is the loader's seed or
``none``. The final weights go to DIR/final.npz. With INTERRUPT_AT the process sends
itself SIGINT (Ctrl-C) when its dataset has served that many items; a slow dataset
(``EMBER_TEST_SLOW_ITEMS=1``) gives a parent time to SIGKILL it mid-epoch.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

import ember as em
from ember import nn, optim, train

EPOCHS = 4


class Blobs:
    """A map-style dataset of three Gaussian blobs (items one by one, like a user's)."""

    def __init__(self, interrupt_at: int | None = None) -> None:
        rng = np.random.default_rng(0)
        centers = rng.normal(0, 3, (3, 4))
        self.y = rng.integers(0, 3, 200)
        self.x = (centers[self.y] + rng.normal(0, 1.0, (200, 4))).astype(np.float32)
        self.served = 0
        self.interrupt_at = interrupt_at
        self.slow = os.environ.get("EMBER_TEST_SLOW_ITEMS") == "1"

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        self.served += 1
        if self.served == self.interrupt_at:
            os.kill(os.getpid(), signal.SIGINT)
        if self.slow:
            time.sleep(0.002)
        return self.x[i], self.y[i]


def learner(directory: str) -> train.Learner:
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3))
    opt = optim.Adam(model.parameters(), lr=0.02)
    scheduler = optim.lr_scheduler.StepLR(opt, step_size=7, gamma=0.8)
    return train.Learner(model, opt, nn.F.cross_entropy, devices=em.cpu(), progress=False,
                         checkpoint_dir=directory, keep_checkpoints=100, scheduler=scheduler,
                         scheduler_interval="step")


def main(mode: str, directory: str, seed: str, source: str | None = None,
         interrupt_at: str | None = None) -> None:
    loader_seed = None if seed == "none" else int(seed)
    if loader_seed is not None:
        em.manual_seed(loader_seed)
    run = learner(directory)
    if mode == "resume":
        em.manual_seed(12345)  # a resumed run must restore the random state itself
        run.resume(source)
    loader = train.DataLoader(Blobs(None if interrupt_at is None else int(interrupt_at)),
                              batch_size=8, shuffle=True, seed=loader_seed)
    run.fit_sync(loader, epochs=EPOCHS)
    np.savez(os.path.join(directory, "final.npz"),
             **{k: np.asarray(v) for k, v in run.model.state_dict().items()})


if __name__ == "__main__":
    main(*sys.argv[1:])
