"""Flatten, Unflatten, Identity, ModuleList, ModuleDict: shapes, registration, and torch
state dicts loading unchanged."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn
from tests.nn.layer_check import assert_same_layout, check_pair, copy_state, randn

torch = pytest.importorskip("torch")


@pytest.mark.parametrize(("shape", "start", "end"), [((2, 3, 4, 5), 1, -1), ((2, 3, 4, 5), 0, 2),
                                                     ((0, 3, 4), 1, -1), ((1, 6), 1, -1),
                                                     ((2, 3, 4), -2, -1)])
def test_flatten_matches_torch(shape, start, end):
    check_pair(torch.nn.Flatten(start, end), lambda d, t: nn.Flatten(start, end),
               [randn(*shape)], grad=0 not in shape)


def test_unflatten_matches_torch_and_checks_sizes():
    check_pair(torch.nn.Unflatten(1, (2, 3, 4)), lambda d, t: nn.Unflatten(1, (2, 3, 4)),
               [randn(5, 24, 2)])
    check_pair(torch.nn.Unflatten(-1, (-1, 4)), lambda d, t: nn.Unflatten(-1, (-1, 4)),
               [randn(2, 12)])
    with pytest.raises(em.ShapeError, match="Unflatten"):
        nn.Unflatten(1, (5, 5))(em.zeros(2, 24))
    with pytest.raises(TypeError, match="Unflatten"):
        nn.Unflatten(1, 5)
    assert nn.Flatten()(em.zeros(32, 1, 5, 5)).shape == (32, 25)
    with pytest.raises(IndexError, match="flatten"):
        nn.Flatten(3)(em.zeros(2, 3))


def test_identity_returns_its_input():
    x = em.randn(3, 4)
    assert nn.Identity(54, unused="x")(x) is x
    assert nn.Identity().num_params() == 0


def _torch_stack():
    torch.manual_seed(0)

    class Stack(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)])
            self.heads = torch.nn.ModuleDict({"cls": torch.nn.Linear(4, 2),
                                              "box": torch.nn.Linear(4, 3)})

        def forward(self, x):
            for layer in self.layers:
                x = layer(x).tanh()
            return self.heads["cls"](x), self.heads["box"](x)
    return Stack()


class _EmberStack(nn.Module):
    def __init__(self, device=None, dtype=None):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4, device=device, dtype=dtype)
                                    for _ in range(3))
        self.heads = nn.ModuleDict({"cls": nn.Linear(4, 2, device=device, dtype=dtype),
                                    "box": nn.Linear(4, 3, device=device, dtype=dtype)})

    def forward(self, x):
        for layer in self.layers:
            x = layer(x).tanh()
        return self.heads["cls"](x), self.heads["box"](x)


def test_module_list_and_dict_load_torch_state_and_match():
    tm = _torch_stack()
    m = check_pair(tm, lambda d, t: _EmberStack(d, t), [randn(5, 4)])
    assert_same_layout(tm, m)
    assert m.heads.keys() == ["cls", "box"]
    with pytest.raises(KeyError, match="attribute"):  # as torch: a key may not hide a method
        m.heads["keys"] = nn.ReLU()


def test_module_list_behaves_as_a_list():
    a, b, c = nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 3)
    ml = nn.ModuleList([a, b])
    ml.append(c)
    assert len(ml) == 3 and ml[-1] is c and list(ml) == [a, b, c]
    assert [n for n, _ in ml.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert isinstance(ml[1:], nn.ModuleList) and list(ml[1:]) == [b, c]
    del ml[0]
    assert [n for n, _ in ml.named_parameters()] == ["1.weight", "1.bias"]  # renumbered
    ml.insert(0, a)
    assert list(ml) == [a, b, c]
    assert ml.pop(1) is b and list(ml) == [a, c]
    ml[1] = b
    assert list(ml) == [a, b]
    ml += [c]
    assert list(ml + nn.ModuleList([a])) == [a, b, c, a]
    with pytest.raises(IndexError, match="ModuleList"):
        ml[5]
    with pytest.raises(TypeError, match="ModuleList"):
        ml.append(3)
    empty = nn.ModuleList()
    assert len(empty) == 0 and empty.num_params() == 0
    ml.eval()
    assert not any(m.training for m in ml)


def test_module_dict_behaves_as_a_dict():
    a, b = nn.Linear(2, 2), nn.Linear(2, 1)
    md = nn.ModuleDict([("a", a), ("b", b)])
    assert md["b"] is b and "a" in md and len(md) == 2 and list(md) == ["a", "b"]
    assert md.items() == [("a", a), ("b", b)] and md.values() == [a, b]
    assert [n for n, _ in md.named_parameters()][:2] == ["a.weight", "a.bias"]
    assert md.pop("a") is a and md.keys() == ["b"]
    md.update({"c": a})
    del md["b"]
    assert md.keys() == ["c"]
    with pytest.raises(KeyError, match="ModuleDict"):
        md["x.y"] = a
    with pytest.raises(TypeError, match="ModuleDict"):
        md[3] = a
    with pytest.raises(TypeError, match="ModuleDict"):
        md["z"] = "not a module"
    md.clear()
    assert len(md) == 0


def test_containers_train_through_the_optimizer_path():
    d = em.cpu().autodiff()
    m = _EmberStack(d)
    tm = _torch_stack().double()
    m.to(em.float64)
    copy_state(tm, m)
    x = randn(3, 4)
    out = sum(o.sum() for o in m(em.tensor(x, device=d)))
    grads = out.backward()
    t_out = sum(o.sum() for o in tm(torch.tensor(x)))
    t_out.backward()
    for (name, p), (_, tp) in zip(m.named_parameters(), tm.named_parameters()):
        np.testing.assert_allclose(p.grad(grads).numpy(), tp.grad.numpy(), rtol=1e-10,
                                   err_msg=name)
