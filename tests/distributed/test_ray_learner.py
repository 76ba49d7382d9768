"""Learner(cluster=...) on a local 2-worker Ray cluster against the one-process run."""

import numpy as np
import pytest

import ember as em
from ember import distributed as dist
from ember import nn, train
from tests.distributed.models import BuildsOnlyOnDriver, DieOnce, adam_fn, bad_loss, data, model_fn


def single_process(epochs, batch_size=32):
    em.manual_seed(0)
    model = model_fn(em.cpu(0).autodiff())
    learner = train.Learner(model, adam_fn(model.parameters()), nn.F.cross_entropy,
                            devices=[em.cpu(0), em.cpu(1)], metrics=("loss", "accuracy"),
                            progress=False)
    history = learner.fit_sync(train.DataLoader(data(), batch_size=batch_size, shuffle=True,
                                                seed=1), epochs=epochs)
    return model.state_dict(), history


def on_cluster(cluster, loss_fn, epochs, batch_size=32, **kwargs):
    em.manual_seed(0)
    learner = train.Learner(model_fn, adam_fn, loss_fn, cluster=cluster,
                            metrics=("loss", "accuracy"), progress=False, **kwargs)
    history = learner.fit_sync(train.DataLoader(data(), batch_size=batch_size, shuffle=True,
                                                seed=1), epochs=epochs)
    return learner, history


def assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_allclose(a[key], b[key], atol=1e-5, rtol=0)


@pytest.fixture(scope="module")
def cluster():
    with dist.RayCluster(2) as c:
        yield c


def test_two_workers_equal_one_process_two_devices(cluster, tmp_path):
    # 45 of 96 rows per batch on the last one: uneven shards, the odd row on rank 1.
    learner, history = on_cluster(cluster, nn.F.cross_entropy, epochs=2, batch_size=34,
                                  checkpoint_dir=tmp_path)
    weights, expected = single_process(epochs=2, batch_size=34)
    assert_same_weights(learner.model.state_dict(), weights)
    np.testing.assert_allclose(history.train["loss"], expected.train["loss"], rtol=1e-5)
    assert history.train["accuracy"] == expected.train["accuracy"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch-0001.ember", "epoch-0002.ember"]


def test_worker_error_reaches_fit_as_its_own_type(cluster):
    with pytest.raises(ValueError, match="bad target in the loss") as info:
        on_cluster(cluster, bad_loss, epochs=1)
    assert type(info.value) is ValueError
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "models.py" in notes and "the line the test looks for" in notes


def test_model_fn_error_reaches_fit(cluster):
    em.manual_seed(0)
    learner = train.Learner(BuildsOnlyOnDriver(), adam_fn, nn.F.cross_entropy,
                            cluster=cluster, progress=False)
    with pytest.raises(KeyError, match="no such layer") as info:
        learner.fit_sync(train.DataLoader(data(), batch_size=32), epochs=1)
    assert type(info.value) is KeyError
    assert "the worker's line" in "\n".join(info.value.__notes__)


def test_worker_death_is_survived_with_equal_weights(cluster, tmp_path):
    before = set(cluster.worker_pids())
    # The 5th loss call of a worker is in epoch 2 (3 batches an epoch).
    learner, history = on_cluster(cluster, DieOnce(tmp_path / "died", at=5), epochs=3)
    assert (tmp_path / "died").exists() and learner.recoveries == 1
    assert len(before & set(cluster.worker_pids())) == 1  # one worker is a new process
    weights, expected = single_process(epochs=3)
    assert_same_weights(learner.model.state_dict(), weights)
    np.testing.assert_allclose(history.train["loss"], expected.train["loss"], rtol=1e-5)
