"""``optim.GradScaler``: the scale schedule against torch's over a scripted run, skipped
steps leaving parameters and optimizer state as they were, unscaling, misuse."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn, optim

F = nn.F


def _model(seed: int = 0) -> tuple[nn.Module, em.Device]:
    em.manual_seed(seed)
    device = em.cpu().autodiff()
    return nn.Sequential(nn.Linear(5, 4, device=device), nn.Tanh(),
                         nn.Linear(4, 2, device=device)), device


def _loss(model: nn.Module, device: em.Device, poison: float = 1.0) -> em.Tensor:
    """An MSE loss; ``poison`` multiplies the input (inf or nan makes the gradients so)."""
    x = em.tensor(np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5), device=device)
    return F.mse_loss(model(x * poison), em.ones(3, 2, device=device))


def _values(model: nn.Module, opt: optim.Optimizer) -> list[np.ndarray]:
    state = [np.array(v.numpy()) for entry in opt.state_dict()["params"]
             for v in entry["state"].values() if isinstance(v, em.Tensor)]
    return [np.array(p.value.numpy()) for p in model.parameters()] + state


# The scripted run: True where a step's gradients overflow.
SCRIPT = [False, False, False, True, False, False, False, False, True, True, False, False,
          False, False, False, False, False]


def test_scale_schedule_and_skips_match_torch():
    torch = pytest.importorskip("torch")
    ours = optim.GradScaler(init_scale=1024.0, growth_factor=2.0, backoff_factor=0.5,
                            growth_interval=3)
    theirs = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_factor=2.0,
                                  backoff_factor=0.5, growth_interval=3)
    model, device = _model()
    opt = optim.SGD(model.parameters(), lr=0.1)
    tparam = torch.nn.Parameter(torch.ones(3))
    topt = torch.optim.SGD([tparam], lr=0.1)
    scales, tscales, stepped, tstepped = [], [], [], []
    for overflow in SCRIPT:
        grads = ours.scale(_loss(model, device, float("inf") if overflow else 1.0)).backward()
        stepped.append(ours.step(opt, grads))
        ours.update()
        scales.append(ours.get_scale())

        topt.zero_grad()
        theirs.scale((tparam * (float("inf") if overflow else 1.0)).sum()).backward()
        before = tparam.detach().clone()
        theirs.step(topt)
        tstepped.append(not torch.equal(before, tparam.detach()))
        theirs.update()
        tscales.append(theirs.get_scale())
    assert scales == tscales
    assert stepped == tstepped == [not o for o in SCRIPT]
    assert ours.state_dict() == theirs.state_dict()
    assert ours.skipped_steps == sum(SCRIPT)


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_a_skipped_step_leaves_parameters_and_adam_state_unchanged(bad):
    model, device = _model()
    opt = optim.Adam(model.parameters(), lr=0.01)
    scaler = optim.GradScaler(init_scale=256.0)
    assert scaler.step(opt, scaler.scale(_loss(model, device)).backward())  # state exists
    scaler.update()
    before = _values(model, opt)
    steps = opt.statistics().steps
    assert not scaler.step(opt, scaler.scale(_loss(model, device, bad)).backward())
    scaler.update()
    after = _values(model, opt)
    assert len(before) == len(after) == 4 + 8  # 4 params, Adam's 2 moments each
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)
    assert opt.statistics().steps == steps and scaler.get_scale() == 128.0
    # A good step after it updates everything again.
    assert scaler.step(opt, scaler.scale(_loss(model, device)).backward())
    assert any(not np.array_equal(a, b) for a, b in zip(after, _values(model, opt)))


def test_scaled_steps_equal_unscaled_ones():
    """Scaling by a power of two and unscaling is exact: the same parameters as without a
    scaler (Adam, three steps)."""
    plain, device = _model(3)
    scaled, _ = _model(3)
    opt_plain = optim.Adam(plain.parameters(), lr=0.01)
    opt_scaled = optim.Adam(scaled.parameters(), lr=0.01)
    scaler = optim.GradScaler(init_scale=2.0 ** 10)
    for _ in range(3):
        opt_plain.step(_loss(plain, device).backward())
        scaler.step(opt_scaled, scaler.scale(_loss(scaled, device)).backward())
        scaler.update()
    for a, b in zip(plain.parameters(), scaled.parameters()):
        np.testing.assert_allclose(a.value.numpy(), b.value.numpy(), rtol=1e-6, atol=1e-7)


def test_unscale_then_clip_then_step():
    model, device = _model()
    opt = optim.SGD(model.parameters(), lr=0.1)
    scaler = optim.GradScaler(init_scale=512.0)
    reference = _loss(model, device).backward()
    expected = [np.array(g.numpy()) for g in reference.tensors()]
    grads = scaler.scale(_loss(model, device)).backward()
    scaler.unscale_(opt, grads)
    for g, e in zip(grads.tensors(), expected):
        np.testing.assert_allclose(g.numpy(), e, rtol=1e-6, atol=1e-8)
    with pytest.raises(em.EmberError, match="already called unscale_"):
        scaler.unscale_(opt, grads)
    optim.clip_grad_norm(grads, 1e-3)
    with pytest.raises(em.EmberError, match="not the ones unscale_ unscaled"):
        scaler.step(opt, reference)
    assert scaler.step(opt, grads)
    with pytest.raises(em.EmberError, match="already called for this optimizer"):
        scaler.step(opt, grads)
    scaler.update()
    with pytest.raises(em.EmberError, match="no step"):
        scaler.update()


def test_disabled_scaler_passes_through_and_state_round_trips():
    model, device = _model()
    opt = optim.SGD(model.parameters(), lr=0.1)
    off = optim.GradScaler(enabled=False)
    loss = _loss(model, device)
    assert off.scale(loss) is loss and off.get_scale() == 1.0 and off.state_dict() == {}
    assert off.step(opt, loss.backward()) and opt.statistics().steps == 1
    off.update()
    on = optim.GradScaler(init_scale=8.0, growth_interval=5)
    on.update(new_scale=32.0)
    restored = optim.GradScaler()
    restored.load_state_dict(on.state_dict())
    assert restored.get_scale() == 32.0 and restored.state_dict() == on.state_dict()
    scaled = on.scale([loss, (loss, loss)])
    assert isinstance(scaled, list) and isinstance(scaled[1], tuple)
    np.testing.assert_allclose(scaled[1][0].numpy(), 32.0 * loss.numpy())
    with pytest.raises(ValueError, match="empty"):
        restored.load_state_dict({})


@pytest.mark.parametrize("kwargs", [{"growth_factor": 1.0}, {"backoff_factor": 1.5},
                                    {"growth_interval": 0}, {"growth_interval": 2.5}])
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError, match="GradScaler"):
        optim.GradScaler(**kwargs)


def test_float16_autocast_training_with_the_scaler_learns():
    model, device = _model(1)
    opt = optim.Adam(model.parameters(), lr=0.05)
    scaler = optim.GradScaler()
    losses = []
    for _ in range(30):
        with em.autocast(dtype=em.float16):
            loss = _loss(model, device)
        losses.append(loss.item())
        scaler.step(opt, scaler.scale(loss).backward())
        scaler.update()
    assert losses[-1] < 0.05 * losses[0]
    assert all(p.value.dtype is em.float32 for p in model.parameters())
