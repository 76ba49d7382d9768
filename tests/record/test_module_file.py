"""Module.save / Module.load (ids kept, strict checks), and PyTorch weights through safetensors."""

from __future__ import annotations

import os

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.record import module_file, msgpack_file


class Net(nn.Module):
    """Parameters of two dtypes, a buffer, a list of sub-modules."""

    def __init__(self, hidden: int = 4, device=None) -> None:
        super().__init__()
        self.blocks = [nn.Linear(3, hidden, device=device), nn.Linear(hidden, 2, device=device)]
        self.scale = nn.Param(em.ones((2,), dtype=em.bfloat16, device=device))
        self.count = nn.Buffer(em.zeros((), dtype=em.int64, device=device))

    def forward(self, x):
        return self.blocks[1](self.blocks[0](x).relu())


def _ids(module: nn.Module) -> dict[str, str]:
    return {name: slot.id for name, slot in module.named_slots()}


def _values(module: nn.Module) -> dict[str, bytes]:
    return {k: (v.dtype, v.shape, v.tobytes()) for k, v in module.state_dict().items()}


def test_save_and_load_restore_values_and_ids(tmp_path, device):
    model = Net(device=device)
    model.count.value = em.tensor(7, device=device)
    path = tmp_path / "net.ember"
    model.save(path)

    other = Net(device=device)
    assert _ids(other) != _ids(model) and _values(other) != _values(model)
    assert other.load(path) is other
    assert _ids(other) == _ids(model) and _values(other) == _values(model)
    assert all(slot.device == device for _, slot in other.named_slots())
    x = em.randn((5, 3), device=device)
    assert np.array_equal(other(x).numpy(), model(x).numpy())

    again = Net(device=device).load(path)  # ids stable across repeated save / load
    again.save(path)
    assert _ids(Net().load(path)) == _ids(model)


def test_the_module_file_is_an_ember_file_em_load_reads(tmp_path):
    model = Net()
    model.save(tmp_path / "net.ember")
    root = em.load(tmp_path / "net.ember")
    assert root["format"] == "ember.module" and root["version"] == 1
    assert root["ids"] == _ids(model)
    assert list(root["state"]) == [name for name, _ in model.named_slots()]
    assert all(np.array_equal(root["state"][k], v) for k, v in model.state_dict().items())


def test_loading_into_a_different_module_raises_naming_the_key_and_changes_nothing(tmp_path):
    path = tmp_path / "net.ember"
    Net().save(path)
    for target, error, words in [
        (Net(hidden=5), em.ShapeError, "blocks.0.weight: shape \\(4, 3\\) does not match"),
        (nn.Sequential(nn.Linear(3, 4)), KeyError, "unexpected keys \\['blocks.0.weight'"),
    ]:
        ids, values = _ids(target), _values(target)
        with pytest.raises(error, match=words):
            target.load(path)
        assert _ids(target) == ids and _values(target) == values

    wrong_dtype = Net()
    wrong_dtype.scale = nn.Param(em.ones((2,)))
    with pytest.raises(em.DTypeError, match="scale: dtype bfloat16 does not match"):
        wrong_dtype.load(path)


def test_a_file_that_is_not_a_module_file_raises_record_error(tmp_path):
    path = tmp_path / "x.ember"
    good = msgpack_file.decode_root(msgpack_file.read_root(_saved(tmp_path)),
                                    tensors_as_numpy=True, device=None)
    for root, words in [
        ({"w": em.ones(2)}, "not a module file"),
        ([1, 2], "not a module file"),
        ({**good, "version": 9}, "module file version 9"),
        ({**good, "state": {"blocks.0.weight": 1.0}}, "'state' must map names to arrays"),
        ({**good, "ids": {}}, "'ids' must map every name"),
        ({**good, "ids": {k: "" for k in good["ids"]}}, "'ids' must map every name"),
    ]:
        em.save(root, path)
        with pytest.raises(em.RecordError, match=words):
            Net().load(path)
    path.write_bytes(_saved(tmp_path).read_bytes()[:-3])
    with pytest.raises(em.RecordError, match="truncated"):
        Net().load(path)


def _saved(tmp_path):
    path = tmp_path / "good.ember"
    Net().save(path)
    return path


def test_a_failing_save_leaves_the_old_file_intact(tmp_path, monkeypatch):
    path = tmp_path / "net.ember"
    Net().save(path)
    before = path.read_bytes()

    def broken_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError):
        Net().save(path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["net.ember"]
    assert module_file.FORMAT == "ember.module"


def test_pytorch_weights_load_through_safetensors_with_identical_outputs(tmp_path):
    torch = pytest.importorskip("torch")
    import safetensors.torch

    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 3))
    path = tmp_path / "torch.safetensors"
    safetensors.torch.save_file(reference.state_dict(), str(path))

    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    model.load_state_dict(em.load_safetensors(path, as_numpy=True))  # the key mapping: identity
    x = np.random.default_rng(0).standard_normal((8, 6)).astype(np.float32)
    with torch.no_grad():
        expected = reference(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(model(em.tensor(x)).numpy(), expected, rtol=1e-6, atol=1e-6)

    # ... and back: ember's weights load into PyTorch.
    em.save_safetensors(model.state_dict(), path)
    twin = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    twin.load_state_dict(safetensors.torch.load_file(str(path)))
    with torch.no_grad():
        assert torch.equal(twin(torch.from_numpy(x)), reference(torch.from_numpy(x)))
