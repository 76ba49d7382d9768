"""A few training steps on wgpu:0 equal the same steps on the CPU (forward, backward,
cross-entropy, Adam and AdamW through the optimizer actor, in float32)."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn, optim

WGPU = em.available("wgpu")
pytestmark = pytest.mark.skipif(not WGPU, reason="no wgpu adapter (install a Vulkan driver, "
                                                 "e.g. mesa-vulkan-drivers)")


def _train(device: em.Device, make_optimizer, steps: int = 4) -> tuple[list[float], list]:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((32, 12)).astype(np.float32)
    y = rng.integers(0, 5, 32)
    model = nn.Sequential(nn.Linear(12, 16, device=device.autodiff()), nn.ReLU(),
                          nn.Linear(16, 5, device=device.autodiff()))
    # The same starting weights on both devices.
    model.load_state_dict({name: np.random.default_rng(7 + i).standard_normal(
        p.value.shape).astype(np.float32) * 0.3
        for i, (name, p) in enumerate(model.named_parameters())})
    optimizer = make_optimizer(model.parameters())
    inputs = em.tensor(x, device=device.autodiff())
    targets = em.tensor(y, device=device.autodiff())
    losses = []
    for _ in range(steps):
        loss = nn.F.cross_entropy(model(inputs), targets)
        optimizer.step(loss.backward())
        losses.append(loss.item())
    return losses, [p.value.numpy() for _, p in model.named_parameters()]


@pytest.mark.parametrize("make_optimizer", [lambda ps: optim.Adam(ps, lr=1e-2),
                                            lambda ps: optim.AdamW(ps, lr=1e-2),
                                            lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9)],
                         ids=["Adam", "AdamW", "SGD-momentum"])
def test_training_steps_match_the_cpu(make_optimizer) -> None:
    want_losses, want_params = _train(em.cpu(0), make_optimizer)
    got_losses, got_params = _train(WGPU[0], make_optimizer)
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-4)
    for got, want in zip(got_params, want_params):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5)
