"""Small models and data shared by the distributed tests (importable by Ray workers)."""

import os
import signal

import numpy as np

from ember import nn, optim


def model_fn(device):
    return nn.Sequential(nn.Linear(8, 16, device=device), nn.ReLU(),
                         nn.Linear(16, 3, device=device))


def adam_fn(params):
    return optim.Adam(params, lr=1e-2)


def data(n=96, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 8)).astype(np.float32)
    return x, rng.integers(0, 3, n).astype(np.int64)


class DieOnce:
    """A loss that kills its worker process at its ``at``-th call, once over the run: the
    first worker to create the marker file dies, and the file outlives the restart."""

    def __init__(self, marker, at):
        self.marker, self.at, self.calls = str(marker), at, 0

    def __call__(self, out, target):
        self.calls += 1
        if self.calls == self.at:
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        return nn.F.cross_entropy(out, target)


def bad_loss(out, target):
    raise ValueError("bad target in the loss")  # the line the test looks for


class BuildsOnlyOnDriver:
    """A ``model_fn`` that fails in every process but the driver's."""

    def __init__(self):
        self.driver = os.getpid()

    def __call__(self, device):
        if os.getpid() != self.driver:
            raise KeyError("no such layer")  # the worker's line
        return model_fn(device)
