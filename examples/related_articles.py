"""Related articles: embed a small site's articles and list each one's nearest neighbours.

The feature the burn guide's chapter "On this site" weighs adding to its own
website, built with ember. The corpus is ``examples/data/articles/*.txt``:
thirty short articles in six topics (the part of the file name before the first
``-``), written for this example and free to reuse (CC0). Each article has a few
paragraphs.

1. **TF-IDF** (NumPy): a vocabulary of the words found in at least two paragraphs,
   each weighted by how rare it is across paragraphs.
2. **A learned projection** (ember): a linear map from TF-IDF space down to a
   few dimensions, trained so that one paragraph of an article predicts the words
   of another paragraph of the same article. Through the narrow projection, words
   that occur together must share directions, so two articles can come out
   related without sharing an exact word.
3. **Similarity** (ember ops on ``--device``): unit-normalize the article vectors,
   one matmul gives every cosine similarity, ``topk`` picks each article's nearest
   ones. The same computation in NumPy checks the result and is timed beside it.

Run: ``python examples/related_articles.py`` (``--device cuda:0``, ``--top 3``).
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import ember as em
from ember import nn, optim

ARTICLES = Path(__file__).resolve().parent / "data" / "articles"
STOP_WORDS = frozenset("""a an and are as at be by can for from has have in into is it its
more most much of on one or so than that the their them then there these they this those
to too was when where which while with without our your you we his her he she not no
all any each every""".split())


@dataclass
class Article:
    name: str
    topic: str
    paragraphs: list[str]

    @property
    def text(self) -> str:
        return "\n\n".join(self.paragraphs)


def load_articles(folder: Path = ARTICLES) -> list[Article]:
    articles = []
    for path in sorted(folder.glob("*.txt")):
        paragraphs = [p.strip() for p in path.read_text().split("\n\n") if p.strip()]
        articles.append(Article(path.stem, path.stem.split("-")[0], paragraphs))
    if not articles:
        raise SystemExit(f"related_articles: no .txt articles in {folder}")
    return articles


def words(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z]+", text.lower()) if len(w) > 2 and w not in STOP_WORDS]


class TfIdf:
    """Term frequency × inverse document frequency, rows scaled to unit length."""

    def __init__(self, documents: list[str], min_documents: int = 2) -> None:
        counts = Counter(w for doc in documents for w in set(words(doc)))
        self.vocab = {w: i for i, w in enumerate(sorted(w for w, n in counts.items()
                                                       if n >= min_documents))}
        df = np.array([counts[w] for w in self.vocab], dtype=np.float64)
        self.idf = np.log((1 + len(documents)) / (1 + df)) + 1  # smoothed, as scikit-learn's

    def __call__(self, texts: list[str]) -> np.ndarray:
        rows = np.zeros((len(texts), len(self.vocab)))
        for r, text in enumerate(texts):
            for w, n in Counter(words(text)).items():
                if w in self.vocab:
                    rows[r, self.vocab[w]] = n
        rows *= self.idf
        rows /= np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
        return rows.astype(np.float32)


def train_projection(tfidf: TfIdf, articles: list[Article], dim: int, steps: int,
                     device: em.Device) -> nn.Linear:
    """A (vocab → dim) linear map trained so that an article's paragraph predicts the
    words of its other paragraphs.

    Each step draws two different paragraphs of every article; the encoder maps the
    first's TF-IDF vector to ``dim`` numbers, a decoder maps those to a softmax over the
    vocabulary, and the loss is the cross-entropy against the second paragraph's word
    distribution. Through a narrow ``dim``, words that occur in the same articles must
    share directions: the encoder learns which vocabulary goes together.
    """
    rng = np.random.default_rng(0)
    paragraphs = [tfidf(a.paragraphs) for a in articles]
    em.manual_seed(0)
    tracked = device.autodiff()
    encoder = nn.Linear(len(tfidf.vocab), dim, bias=False, device=tracked)
    decoder = nn.Linear(dim, len(tfidf.vocab), device=tracked)
    optimizer = optim.Adam(list(encoder.parameters()) + list(decoder.parameters()), lr=1e-2)
    for _ in range(steps):
        pairs = [rng.choice(len(p), 2, replace=False) for p in paragraphs]
        source = np.stack([p[i] for p, (i, _) in zip(paragraphs, pairs)])
        target = np.stack([p[j] for p, (_, j) in zip(paragraphs, pairs)])
        target /= target.sum(axis=1, keepdims=True)
        log_probs = decoder(encoder(em.tensor(source, device=device))).log_softmax(1)
        loss = -(log_probs * em.tensor(target, device=device)).sum(1).mean()
        optimizer.step(loss.backward())
    print(f"projection {len(tfidf.vocab)} → {dim} trained for {steps} steps on {device}: "
          f"final loss {loss.item():.3f} (a uniform guess: {np.log(len(tfidf.vocab)):.3f})")
    return encoder


def related_ember(vectors: em.Tensor, k: int) -> tuple[em.Tensor, em.Tensor]:
    """Each row's ``k`` most cosine-similar other rows: (similarities, indices)."""
    unit = nn.F.normalize(vectors, dim=1)
    similarity = unit @ unit.T
    # An article is its own nearest neighbour: push the diagonal below any cosine.
    similarity = similarity - 3.0 * em.eye(len(vectors), device=vectors.device)
    return similarity.topk(k, dim=1)


def related_numpy(vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    similarity = unit @ unit.T - 3.0 * np.eye(len(vectors), dtype=vectors.dtype)
    top = np.argpartition(-similarity, k - 1, axis=1)[:, :k]
    values = np.take_along_axis(similarity, top, axis=1)
    order = np.argsort(-values, axis=1, kind="stable")
    return np.take_along_axis(values, order, axis=1), np.take_along_axis(top, order, axis=1)


def topic_agreement(articles: list[Article], indices: np.ndarray) -> float:
    """The share of listed neighbours that are in the article's own topic."""
    return float(np.mean([[articles[j].topic == a.topic for j in row]
                          for a, row in zip(articles, indices)]))


def time_both(vectors: np.ndarray, k: int, device: em.Device, repeats: int) -> tuple[float, ...]:
    """Run the ember and NumPy similarity side by side, interleaved; return the min and
    median of each one's seconds and of the ratio ember / NumPy (results read back)."""
    on_device = em.tensor(vectors, device=device)
    ember_s, numpy_s, ratios = [], [], []
    for _ in range(repeats):
        start = time.perf_counter()
        values, indices = related_ember(on_device, k)
        values.numpy(), indices.numpy()
        middle = time.perf_counter()
        related_numpy(vectors, k)
        end = time.perf_counter()
        ember_s.append(middle - start)
        numpy_s.append(end - middle)
        ratios.append(ember_s[-1] / numpy_s[-1])
    return (min(ember_s), statistics.median(ember_s), min(numpy_s), statistics.median(numpy_s),
            min(ratios), statistics.median(ratios))


def main(device: str | None = None, top: int = 3, dim: int = 16, steps: int = 300,
         repeats: int = 20, bench_rows: int = 2048) -> dict[str, float]:
    dev = em.device(device) if device else em.default_device()
    articles = load_articles()
    tfidf = TfIdf([p for a in articles for p in a.paragraphs])
    print(f"{len(articles)} articles, {sum(len(a.paragraphs) for a in articles)} paragraphs, "
          f"{len(tfidf.vocab)} TF-IDF terms")
    documents = tfidf([a.text for a in articles])
    projection = train_projection(tfidf, articles, dim, steps, dev)
    with em.no_grad():
        embedded = projection(em.tensor(documents, device=dev.autodiff())).detach().to(dev)

    values, indices = related_ember(embedded, top)
    values, indices = values.numpy(), indices.numpy()
    check_values, check_indices = related_numpy(embedded.numpy(), top)
    if not np.allclose(values, check_values, atol=1e-5):
        raise SystemExit("related_articles: ember's similarities differ from NumPy's")
    _, tfidf_indices = related_numpy(documents, top)
    width = max(len(a.name) for a in articles)
    print(f"\n{'article':<{width}}  most related (cosine similarity)")
    for article, row, sims in zip(articles, indices, values):
        listed = ", ".join(f"{articles[j].name} ({s:.2f})" for j, s in zip(row, sims))
        print(f"{article.name:<{width}}  {listed}")
    learned, raw = topic_agreement(articles, indices), topic_agreement(articles, tfidf_indices)
    print(f"\nneighbours in the same topic: {learned:.0%} with the learned projection, "
          f"{raw:.0%} with TF-IDF alone")

    rng = np.random.default_rng(0)
    print(f"\nsimilarity + top-{top} on {dev} against NumPy, {repeats} interleaved runs "
          f"(min / median):")
    for name, vectors in (("this corpus", embedded.numpy()),
                          (f"{bench_rows:,} random vectors",
                           rng.standard_normal((bench_rows, dim)).astype(np.float32))):
        e_min, e_med, n_min, n_med, r_min, r_med = time_both(vectors, top, dev, repeats)
        print(f"  {name:<22} ember {e_min * 1e3:8.3f} / {e_med * 1e3:8.3f} ms   "
              f"NumPy {n_min * 1e3:8.3f} / {n_med * 1e3:8.3f} ms   "
              f"ratio ember/NumPy {r_min:.2f} / {r_med:.2f}")
    return {"learned": learned, "tfidf": raw}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="e.g. cpu:0, cuda:0, wgpu:0")
    parser.add_argument("--top", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    main(args.device, args.top, steps=args.steps, repeats=args.repeats)
