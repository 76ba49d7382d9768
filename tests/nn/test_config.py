"""``em.Config``: JSON and TOML round trips, files, validation errors naming the field."""

from __future__ import annotations

import msgspec
import pytest

from ember import nn


class Optim(nn.Config):
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)


class Train(nn.Config):
    hidden: int
    name: str = "mlp"
    layers: list[int] = msgspec.field(default_factory=lambda: [64, 32])
    optim: Optim = msgspec.field(default_factory=Optim)


def test_json_and_toml_round_trips(tmp_path):
    config = Train(hidden=128, layers=[8, 4], optim=Optim(lr=0.5))
    assert Train.from_json(config.to_json()) == config
    assert Train.from_toml(config.to_toml()) == config
    for name in ("config.json", "config.toml"):
        config.save(tmp_path / name)
        assert Train.load(tmp_path / name) == config
    assert (tmp_path / "config.toml").read_text().count("hidden = 128") == 1


def test_validation_errors_name_the_field():
    with pytest.raises(ValueError, match="hidden"):
        Train.from_json('{"hidden": "many"}')
    with pytest.raises(ValueError, match="hidden"):
        Train.from_json("{}")
    with pytest.raises(ValueError, match="hiden"):
        Train.from_json('{"hidden": 1, "hiden": 2}')
    with pytest.raises(ValueError, match="lr"):
        Train.from_toml('hidden = 1\n[optim]\nlr = "fast"\n')
    with pytest.raises(ValueError, match="malformed"):
        Train.from_json("{not json")
