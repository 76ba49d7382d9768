"""``Learner(precision=)``: the digits model trains to fp32's accuracy in bf16 and fp16,
parameters stay float32, and fp16's GradScaler is checkpointed and resumed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import ember as em
from ember import nn, optim, train

pytest.importorskip("sklearn")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from train_digits import load_data, make_model  # noqa: E402

EPOCHS = 4


def _fit(precision: str, checkpoint_dir: Path | None = None) -> tuple[train.Learner, float]:
    em.manual_seed(0)
    (x_train, y_train), (x_test, y_test) = load_data()
    device = em.cpu()
    train_loader = train.DataLoader((x_train, y_train), batch_size=64, shuffle=True, seed=0,
                                    device=device)
    test_loader = train.DataLoader((x_test, y_test), batch_size=256, device=device)
    model = make_model(device.autodiff())
    learner = train.Learner(model, optim.Adam(model.parameters(), lr=3e-3), nn.F.cross_entropy,
                            metrics=("loss", "accuracy"), progress=False, precision=precision,
                            checkpoint_dir=checkpoint_dir)
    history = learner.fit_sync(train_loader, test_loader, epochs=EPOCHS)
    return learner, history.valid["accuracy"][-1]


@pytest.fixture(scope="module")
def fp32_accuracy() -> float:
    return _fit("fp32")[1]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_trains_digits_to_fp32_accuracy(precision, fp32_accuracy, tmp_path):
    learner, accuracy = _fit(precision, tmp_path / "ckpt")
    assert fp32_accuracy > 0.93
    assert accuracy > fp32_accuracy - 0.03, (accuracy, fp32_accuracy)
    assert all(p.value.dtype is em.float32 for p in learner.model.parameters())
    saved = em.load(tmp_path / "ckpt" / f"epoch-{EPOCHS:04d}.ember")
    if precision == "fp16":
        assert learner.scaler.get_scale() >= 2.0 ** 10
        assert saved["scaler"]["scale"] == learner.scaler.get_scale()
        resumed = train.Learner(learner.model, learner.optimizer, nn.F.cross_entropy,
                                progress=False, precision="fp16").resume(tmp_path / "ckpt")
        assert resumed.scaler.state_dict() == learner.scaler.state_dict()
    else:
        assert learner.scaler is None and saved["scaler"] is None


def test_an_unknown_precision_is_refused():
    model = make_model(em.cpu().autodiff())
    with pytest.raises(ValueError, match="precision must be 'fp32', 'bf16' or 'fp16'"):
        train.Learner(model, optim.SGD(model.parameters(), lr=0.1), nn.F.cross_entropy,
                      precision="bf32")
