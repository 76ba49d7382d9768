"""The module system: registration, walking, moving, state dicts, repr."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn


class Block(nn.Module):
    def __init__(self, device=None):
        super().__init__()
        self.fc = nn.Linear(4, 3, device=device)
        self.scale = nn.Param(em.ones(3, device=device))
        self.stats = nn.Buffer(em.zeros(3, device=device))

    def forward(self, x):
        return self.fc(x) * self.scale.value + self.stats.value


class Model(nn.Module):
    def __init__(self, device=None):
        super().__init__()
        self.first = Block(device)
        self.layers = [nn.Linear(3, 3, device=device), nn.Linear(3, 2, device=device)]
        self.heads = {"a": nn.Linear(2, 1, device=device)}
        self.note = "not a parameter"

    def forward(self, x):
        x = self.first(x)
        for layer in self.layers:
            x = layer(x).relu()
        return self.heads["a"](x)


def test_parameters_in_definition_order_with_dotted_names():
    m = Model()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["first.fc.weight", "first.fc.bias", "first.scale", "layers.0.weight",
                     "layers.0.bias", "layers.1.weight", "layers.1.bias", "heads.a.weight",
                     "heads.a.bias"]
    assert [n for n, _ in m.named_buffers()] == ["first.stats"]
    assert m.num_params() == 4 * 3 + 3 + 3 + 9 + 3 + 6 + 2 + 2 + 1
    assert len(list(m.modules())) == 6


def test_num_params_matches_torch():
    torch = pytest.importorskip("torch")
    ours = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    theirs = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(),
                                 torch.nn.Linear(128, 10))
    assert ours.num_params() == sum(p.numel() for p in theirs.parameters())
    assert list(ours.state_dict()) == list(theirs.state_dict())


def test_state_dict_round_trip_and_strict_checks():
    a, b = Model(), Model()
    state = a.state_dict()
    assert all(isinstance(v, np.ndarray) for v in state.values())
    b.load_state_dict(state)
    x = em.randn((5, 4))
    np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())
    with pytest.raises(KeyError, match="first.scale"):
        b.load_state_dict({k: v for k, v in state.items() if k != "first.scale"})
    with pytest.raises(KeyError, match="extra"):
        b.load_state_dict({**state, "extra": np.zeros(1)})
    bad = dict(state, **{"layers.0.weight": np.zeros((2, 2), np.float32)})
    with pytest.raises(em.ShapeError, match="layers.0.weight"):
        b.load_state_dict(bad)
    bad = dict(state, **{"first.scale": np.ones(3, np.float64)})
    with pytest.raises(em.DTypeError, match="first.scale"):
        b.load_state_dict(bad)
    b.load_state_dict({"first.scale": np.full(3, 2.0, np.float32)}, strict=False)
    np.testing.assert_array_equal(b.first.scale.value.numpy(), np.full(3, 2.0))


def test_failed_load_changes_nothing():
    m = Model()
    before = m.state_dict()
    bad = dict(before, **{"heads.a.bias": np.zeros(5, np.float32)})
    with pytest.raises(em.ShapeError):
        m.load_state_dict(bad)
    after = m.state_dict()
    for k in before:
        np.testing.assert_array_equal(before[k], after[k])


def test_to_moves_and_tracks_on_autodiff_devices():
    m = Model()
    ids = [p.id for p in m.parameters()]
    assert m.to(em.cpu(1)) is m
    assert all(p.device == em.cpu(1) for _, p in m.named_slots())
    m.to(em.cpu(1).autodiff())
    assert all(p.value.is_tracked for p in m.parameters())
    assert not m.first.stats.value.is_tracked  # buffers are not trained
    assert [p.id for p in m.parameters()] == ids


def test_modules_on_autodiff_devices_have_tracked_leaves():
    d = em.cpu().autodiff()
    m = nn.Linear(3, 2, device=d)
    x = em.randn((4, 3), device=d)
    loss = (m(x) * m(x)).sum()
    grads = loss.backward()
    assert m.weight.grad(grads).shape == (2, 3) and m.bias.grad(grads).shape == (2,)


def test_train_eval_flags_reach_every_module():
    m = Model()
    assert m.eval() is m and not any(x.training for x in m.modules())
    m.train()
    assert all(x.training for x in m.modules())


def test_repr_shows_the_tree():
    text = repr(Model())
    assert "(first): Block(" in text and "(fc): Linear(in_features=4, out_features=3" in text
    assert "(layers.1): Linear(in_features=3, out_features=2" in text


def test_param_ids_are_unique_and_params_need_tensors():
    ids = {p.id for p in Model().parameters()} | {p.id for p in Model().parameters()}
    assert len(ids) == 18
    with pytest.raises(TypeError):
        nn.Param(np.zeros(3))


def test_super_init_is_required():
    class Broken(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(1, 1)

    with pytest.raises(RuntimeError, match="super"):
        Broken()


def test_sequential_indexing_and_forward():
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    assert len(seq) == 3 and isinstance(seq[1], nn.ReLU)
    assert seq(em.ones((4, 2))).shape == (4, 1)
    with pytest.raises(TypeError):
        nn.Sequential(nn.Linear(1, 1), "relu")
