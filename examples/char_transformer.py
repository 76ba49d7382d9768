"""A character-level transformer trained on the Python standard library's own source.

The corpus ships with every Python: the ``.py`` files beside ``os.py``. Characters
are the tokens; a small decoder-only transformer (token and position embeddings,
pre-norm ``TransformerEncoderLayer``s run with a causal mask, a linear head)
learns to predict the next character. Training runs for a time budget (three
minutes by default), printing the loss as it goes and a held-out loss at the end,
then the model writes some Python of its own.

Run: ``python examples/char_transformer.py`` (``--seconds 60``, ``--device cuda:0``,
``--layers 4 --width 256`` on a GPU).
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import ember as em
from ember import nn, optim

UNKNOWN = "?"  # stands for every character outside printable ASCII


@dataclass
class Corpus:
    text: str
    vocab: list[str]
    ids: np.ndarray  # int64, one per character of text

    def decode(self, ids: list[int]) -> str:
        return "".join(self.vocab[i] for i in ids)


def load_corpus(max_chars: int = 2_000_000) -> Corpus:
    """The standard library's top-level ``.py`` files, in name order, up to ``max_chars``."""
    pieces, total = [], 0
    for path in sorted(Path(os.__file__).parent.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        pieces.append(text)
        total += len(text)
        if total >= max_chars:
            break
    text = "".join(c if (" " <= c <= "~" or c == "\n") else UNKNOWN
                   for c in "".join(pieces)[:max_chars])
    vocab = sorted(set(text))
    lookup = {c: i for i, c in enumerate(vocab)}
    return Corpus(text, vocab, np.array([lookup[c] for c in text], dtype=np.int64))


class CharTransformer(nn.Module):
    """(batch, length) character ids → (batch, length, vocab) next-character logits."""

    def __init__(self, vocab: int, block: int, width: int, heads: int, layers: int,
                 device: em.Device) -> None:
        super().__init__()
        self.block = block
        self.token = nn.Embedding(vocab, width, device=device)
        self.position = nn.Embedding(block, width, device=device)
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, activation="gelu",
                                       norm_first=True, device=device)
            for _ in range(layers)])
        self.norm = nn.LayerNorm(width, device=device)
        self.head = nn.Linear(width, vocab, device=device)

    def forward(self, ids: em.Tensor) -> em.Tensor:
        positions = em.arange(ids.shape[1], device=ids.device)
        x = self.token(ids) + self.position(positions)
        for layer in self.layers:
            x = layer(x, is_causal=True)
        return self.head(self.norm(x))


def batch(ids: np.ndarray, size: int, block: int, rng: np.random.Generator
          ) -> tuple[np.ndarray, np.ndarray]:
    """``size`` random windows of ``block`` characters and the characters that follow each."""
    starts = rng.integers(0, len(ids) - block - 1, size)
    windows = ids[starts[:, None] + np.arange(block + 1)]
    return windows[:, :-1], windows[:, 1:]


def loss_of(model: CharTransformer, x: np.ndarray, y: np.ndarray,
            device: em.Device) -> em.Tensor:
    logits = model(em.tensor(x, device=device))
    return nn.F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                              em.tensor(y.reshape(-1), device=device))


def sample(model: CharTransformer, corpus: Corpus, prompt: str, length: int,
           device: em.Device, temperature: float = 0.8, seed: int = 0) -> str:
    """Extend ``prompt`` by ``length`` characters, each drawn from the model's softmax."""
    rng = np.random.default_rng(seed)
    lookup = {c: i for i, c in enumerate(corpus.vocab)}
    ids = [lookup.get(c, lookup.get(UNKNOWN, 0)) for c in prompt]
    model.eval()
    with em.no_grad():
        for _ in range(length):
            context = em.tensor(np.array([ids[-model.block:]]), device=device)
            logits = model(context)[0, -1] / temperature
            probs = logits.softmax(-1).numpy().astype(np.float64)
            ids.append(int(rng.choice(len(probs), p=probs / probs.sum())))
    model.train()
    return corpus.decode(ids)


def main(seconds: float = 180.0, steps: int | None = None, device: str | None = None,
         layers: int = 2, width: int = 128, heads: int = 4, block: int = 64,
         batch_size: int = 32, lr: float = 3e-3, max_chars: int = 2_000_000,
         sample_length: int = 300, log_every: int = 50) -> dict[str, float]:
    """Train for ``seconds`` (or exactly ``steps`` steps), then sample.

    Returns the first step's loss, the mean loss of the last ``log_every`` steps, the
    held-out loss and the sample.
    """
    em.manual_seed(0)
    rng = np.random.default_rng(0)
    dev = em.device(device) if device else em.default_device()
    corpus = load_corpus(max_chars)
    cut = int(0.95 * len(corpus.ids))
    train_ids, valid_ids = corpus.ids[:cut], corpus.ids[cut:]
    model = CharTransformer(len(corpus.vocab), block, width, heads, layers, dev.autodiff())
    optimizer = optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    print(f"{len(corpus.text):,} characters of the standard library, {len(corpus.vocab)} "
          f"distinct; model of {model.num_params():,} parameters on {dev}")

    started = time.perf_counter()
    recent: list[em.Tensor] = []
    first = None
    step = 0
    while (step < steps) if steps is not None else (time.perf_counter() - started < seconds):
        x, y = batch(train_ids, batch_size, block, rng)
        loss = loss_of(model, x, y, dev.autodiff())
        optimizer.step(loss.backward())
        step += 1
        recent.append(loss)  # read in groups: a read per step would wait for every step
        if first is None:
            first = loss.item()
        if len(recent) == log_every:
            mean = float(np.mean([t.item() for t in recent]))
            recent = []
            print(f"step {step:5d}  loss {mean:.3f}  ({time.perf_counter() - started:.0f} s)")
    elapsed = time.perf_counter() - started
    last = float(np.mean([t.item() for t in recent])) if recent else mean

    model.eval()
    with em.no_grad():
        valid = float(np.mean([loss_of(model, *batch(valid_ids, batch_size, block, rng),
                                       dev).item() for _ in range(4)]))
    model.train()
    print(f"{step} steps in {elapsed:.0f} s ({step * batch_size * block / elapsed:,.0f} "
          f"characters/s): loss {first:.3f} → {last:.3f}, held-out {valid:.3f}")
    text = sample(model, corpus, "def ", sample_length, dev)
    print("sample:\n" + text)
    return {"first": first, "last": last, "valid": valid, "sample": text}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--device", default=None, help="e.g. cpu:0, cuda:0, wgpu:0")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--width", type=int, default=128)
    args = parser.parse_args()
    main(args.seconds, device=args.device, layers=args.layers, width=args.width)
