"""The examples of issue 26, run on small sizes: each checks its own numbers."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

import char_transformer  # noqa: E402
import cnn_digits  # noqa: E402
import related_articles  # noqa: E402
import serve_async  # noqa: E402
import tiny_autodiff as tiny  # noqa: E402
from train_digits import load_data  # noqa: E402


# ----- tiny_autodiff ----------------------------------------------------------------------

@pytest.mark.parametrize("sizes,batch", [((64, 32, 10), 16), ((64, 7, 10), 1),
                                         ((64, 24, 12, 10), 5)])
@pytest.mark.parametrize("checkpointing", [None, "balanced"])
def test_tiny_autodiff_gives_embers_gradients(sizes, batch, checkpointing):
    (x, y), _ = load_data()
    rows = np.random.default_rng(3).choice(len(x), batch, replace=False)
    weights = tiny.init_mlp(sizes, seed=1)
    loss, ours = tiny.gradients(weights, x[rows], y[rows])
    ember_loss, theirs = tiny.ember_gradients(weights, x[rows], y[rows], checkpointing)
    assert loss == pytest.approx(ember_loss, rel=1e-5)
    assert set(ours) == set(theirs) == set(weights)
    for name in weights:
        assert ours[name].shape == weights[name].shape
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-4, atol=1e-6, err_msg=name)
    assert any(np.abs(g).max() > 1e-3 for g in ours.values())  # not all zeros


def test_tiny_autodiff_matches_finite_differences():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4))
    b = rng.standard_normal((4,))  # broadcast over rows
    c = rng.standard_normal((3, 4))  # a constant: no gradient

    def f(a_data: np.ndarray, b_data: np.ndarray) -> tuple[tiny.Var, tiny.Var, tiny.Var]:
        va, vb = tiny.Var(a_data, requires_grad=True), tiny.Var(b_data, requires_grad=True)
        h = tiny.relu(va * vb + va)   # va used twice: its gradients add up
        logits = h @ tiny.transpose(tiny.Var(c))
        return tiny.cross_entropy(logits, np.array([0, 2, 1])), va, vb

    loss, va, vb = f(a, b)
    grads = tiny.backward(loss)
    eps = 1e-6
    for which, value, grad in ((0, a, grads[id(va)]), (1, b, grads[id(vb)])):
        numeric = np.zeros_like(value)
        for i in np.ndindex(value.shape):
            up, down = value.copy(), value.copy()
            up[i] += eps
            down[i] -= eps
            args_up = (up, b) if which == 0 else (a, up)
            args_down = (down, b) if which == 0 else (a, down)
            plus = float(f(*args_up)[0].data)
            tiny.TAPE.nodes.clear()
            minus = float(f(*args_down)[0].data)
            tiny.TAPE.nodes.clear()
            numeric[i] = (plus - minus) / (2 * eps)
        np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-7)


def test_tiny_autodiff_refuses_a_non_scalar_and_leaves_constants_off_the_tape():
    tiny.TAPE.nodes.clear()
    constant = tiny.Var(np.ones((2, 2))) * tiny.Var(np.ones((2, 2)))
    assert constant.node is None and not tiny.TAPE.nodes
    with pytest.raises(ValueError, match=r"needs a scalar, got shape \(2, 2\)"):
        tiny.backward(tiny.Var(np.ones((2, 2)), requires_grad=True) * constant)
    tiny.TAPE.nodes.clear()


def test_tiny_autodiff_trains_digits():
    _, accuracy = tiny.train(epochs=5, log=False)
    assert accuracy > 0.9


# ----- the other examples -----------------------------------------------------------------

def test_cnn_digits_resumes_from_the_saved_epoch(tmp_path, capsys):
    history = cnn_digits.main(epochs=2, out_dir=tmp_path, limit=320)
    out = capsys.readouterr().out
    assert "resumed at epoch 1 (step 5) with 1 epochs of history" in out
    assert "resumed weights equal the first run's: True" in out
    assert len(history.train["loss"]) == len(history.valid["accuracy"]) == 2
    assert history.train["loss"][1] < history.train["loss"][0]
    saved = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert saved == ["epoch-0001.ember", "epoch-0002.ember"]


def test_char_transformer_loss_falls_and_it_samples(capsys):
    result = char_transformer.main(steps=24, layers=1, width=32, heads=2, block=24,
                                   batch_size=16, max_chars=60_000, sample_length=30,
                                   log_every=8)
    out = capsys.readouterr().out
    assert "step    24" in out and "sample:" in out
    assert np.log(95) - 0.5 < result["first"] < np.log(95) + 0.7  # about a uniform guess
    assert result["last"] < result["first"] - 0.8
    assert np.isfinite(result["valid"]) and result["valid"] < result["first"]
    text = result["sample"]
    assert text.startswith("def ") and len(text) == 4 + 30
    assert all(" " <= c <= "~" or c == "\n" for c in text)


def test_char_transformer_corpus_is_the_standard_library():
    corpus = char_transformer.load_corpus(20_000)
    assert len(corpus.text) == len(corpus.ids) == 20_000
    assert corpus.decode(corpus.ids[:200].tolist()) == corpus.text[:200]
    assert "import" in corpus.text and corpus.ids.dtype == np.int64


def test_serve_async_answers_every_request_the_same_way(capsys):
    reports = serve_async.main(requests=120, clients=12, device="cpu:1", train_steps=60)
    out = capsys.readouterr().out
    assert [r.mode for r in reports] == ["sequential", "concurrent", "batched"]
    assert "p50" in out and "p99" in out and "requests/s" in out and "on cpu:1" in out
    for report in reports:
        assert len(report.latencies) == 120 and (report.latencies > 0).all()
        assert report.correct == reports[0].correct  # the same model, the same answers
    assert reports[0].correct / 120 > 0.7
    forwards = int(out.split("the batcher ran ")[1].split()[0])
    assert 1 <= forwards < 120


@pytest.mark.parametrize("rows,k", [(2, 1), (7, 3), (50, 5), (64, 63)])
def test_related_ember_matches_numpy(rows, k):
    import ember as em

    vectors = np.random.default_rng(rows).standard_normal((rows, 6)).astype(np.float32)
    values, indices = related_articles.related_ember(em.tensor(vectors, device="cpu:1"), k)
    expect_values, expect_indices = related_articles.related_numpy(vectors, k)
    assert values.shape == indices.shape == (rows, k)
    np.testing.assert_allclose(values.numpy(), expect_values, atol=1e-5)
    np.testing.assert_array_equal(indices.numpy(), expect_indices)
    assert not (indices.numpy() == np.arange(rows)[:, None]).any()  # never itself


def test_related_articles_groups_topics(capsys):
    result = related_articles.main(steps=120, repeats=2, bench_rows=128)
    out = capsys.readouterr().out
    assert "astronomy-eclipses" in out and "ratio ember/NumPy" in out
    # 4 of the other 29 articles share a topic: chance is 14%.
    assert result["tfidf"] > 0.5 and result["learned"] > 0.4


def test_related_articles_tfidf():
    tfidf = related_articles.TfIdf(["the moon orbits", "moon and sun", "sun sets"])
    assert list(tfidf.vocab) == ["moon", "sun"]  # in two documents or more; stop words out
    rows = tfidf(["moon moon sun", "nothing known", ""])
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), [1, 0, 0], atol=1e-6)
    assert rows[0, 0] == pytest.approx(2 * rows[0, 1])  # equal idf: twice the count
