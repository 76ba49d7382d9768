"""Products side by side in a capture (kernels/cupy/side_stream.py). On the CPU: which
stream each op runs on, where the forks and joins fall, dropped values held until the
join, against fake streams and byte ranges. On a GPU: a captured encoder step runs
products on the second stream and replays the eager step's values."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import ember as em
from ember.kernels.cupy.side_stream import SideBySide, overlaps
from tests.cuda.gpu import needs_gpu


class FakeStreams:
    """Records the stream work a SideBySide asks for; ``current`` says where a launch runs."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.current = "main"

    def fork(self) -> None:
        self.calls.append("fork")

    @contextlib.contextmanager
    def side(self, first: bool):
        self.calls.append("side-waits-fork" if first else "side")
        self.current = "side"
        try:
            yield
        finally:
            self.current = "main"

    def join(self) -> None:
        self.calls.append("join")


class Buffer:
    """A fake array: the byte range of its allocation."""

    def __init__(self, start: int, size: int = 100) -> None:
        self.span = (start, start + size)


def schedule():
    streams = FakeStreams()
    return streams, SideBySide(streams, lambda b: b.span)


def launch(streams: FakeStreams, ran: list, out: Buffer):
    def run():
        ran.append(streams.current)
        return out
    return run


def test_overlaps_is_half_open() -> None:
    assert overlaps([(0, 10)], [(5, 15)])
    assert not overlaps([(0, 10)], [(10, 20)])  # touching ranges share no byte
    assert not overlaps([], [(0, 10)])
    assert overlaps([(30, 40), (0, 1)], [(20, 31)])


def test_a_linears_backward_products_run_side_by_side() -> None:
    """dX = G W on the main stream; dW = Gᵀ X and db = 1 G read G, not dX: side stream,
    forked before dX. The next elementwise op joins first."""
    streams, side = schedule()
    ran: list[str] = []
    g, w, x = Buffer(0), Buffer(1000), Buffer(2000)
    dx, dw, db = Buffer(3000), Buffer(4000), Buffer(5000)
    assert side.run("matmul", [g, w], launch(streams, ran, dx)) is dx
    assert side.run("matmul", [g, x], launch(streams, ran, dw)) is dw
    assert side.run("sum", [g], launch(streams, ran, db)) is db
    side.run("add", [dx, x], launch(streams, ran, Buffer(6000)))
    assert ran == ["main", "side", "side", "main"]
    assert streams.calls == ["fork", "side-waits-fork", "side", "join"]
    assert side.side_ops == 2


def test_a_product_reading_the_forked_products_output_stays_on_the_main_stream() -> None:
    streams, side = schedule()
    ran: list[str] = []
    a, b, c = Buffer(0), Buffer(1000), Buffer(2000)
    first = Buffer(3000)
    side.run("matmul", [a, b], launch(streams, ran, first))
    side.run("matmul", [first, c], launch(streams, ran, Buffer(4000)))
    # A view of the output (same allocation, inner bytes) depends on it as much.
    side.run("matmul", [Buffer(4050, 10), c], launch(streams, ran, Buffer(5000)))
    assert ran == ["main", "main", "main"]
    assert streams.calls == ["fork", "fork", "fork"]  # nothing went to the side: no join
    assert side.side_ops == 0


def test_a_dependent_product_after_side_work_joins_then_forks_again() -> None:
    streams, side = schedule()
    ran: list[str] = []
    g, w, x = Buffer(0), Buffer(1000), Buffer(2000)
    dx = Buffer(3000)
    side.run("matmul", [g, w], launch(streams, ran, dx))
    side.run("matmul", [g, x], launch(streams, ran, Buffer(4000)))
    side.run("matmul", [dx, w], launch(streams, ran, Buffer(5000)))  # reads dx
    side.run("matmul", [g, g], launch(streams, ran, Buffer(6000)))
    assert ran == ["main", "side", "main", "side"]
    assert streams.calls == ["fork", "side-waits-fork", "join", "fork", "side-waits-fork"]
    side.join()
    side.join()  # a second join has nothing to wait for
    assert streams.calls[-1] == "join" and streams.calls.count("join") == 2


def test_only_products_go_to_the_side_stream_and_other_ops_close_the_fork() -> None:
    streams, side = schedule()
    ran: list[str] = []
    side.run("matmul", [Buffer(0), Buffer(1000)], launch(streams, ran, Buffer(2000)))
    side.run("exp", [Buffer(0)], launch(streams, ran, Buffer(3000)))  # independent, not a product
    side.run("matmul", [Buffer(0), Buffer(1000)], launch(streams, ran, Buffer(4000)))
    assert ran == ["main", "main", "main"]
    assert streams.calls == ["fork", "fork"]
    # Nothing forks before the first product, and a product after a non-product forks anew.
    streams, side = schedule()
    side.run("sum", [Buffer(0)], launch(streams, [], Buffer(100)))
    assert streams.calls == ["fork"]


def test_values_dropped_during_a_fork_are_held_until_the_join() -> None:
    """A side product issued after a drop must not be handed the memory of a value the
    forked main product still reads."""
    streams, side = schedule()
    ran: list[str] = []
    kept = Buffer(0)
    side.hold(Buffer(9000))  # no fork open: nothing held
    assert side._held == []
    side.run("matmul", [kept, Buffer(1000)], launch(streams, ran, Buffer(2000)))
    side.hold(kept)
    assert side._held == [kept]
    side.run("matmul", [Buffer(1000), Buffer(1000)], launch(streams, ran, Buffer(3000)))
    assert side._held == [kept]
    side.run("neg", [Buffer(3000)], launch(streams, ran, Buffer(4000)))
    assert side._held == []  # let go at the join
    assert streams.calls == ["fork", "side-waits-fork", "join"]


def test_multi_output_products_count_every_output_as_written() -> None:
    streams, side = schedule()
    ran: list[str] = []
    outs = (Buffer(1000), Buffer(2000))
    side.run("matmul", [Buffer(0)], lambda: (ran.append(streams.current), outs)[1])
    side.run("matmul", [Buffer(2000)], launch(streams, ran, Buffer(3000)))
    assert ran == ["main", "main"]


@needs_gpu
def test_a_captured_encoder_step_runs_products_side_by_side_with_eager_values() -> None:
    from ember.kernels.cupy import graphs

    device = em.cuda(0).autodiff()
    em.manual_seed(5)
    layer = em.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, device=device)
    x = em.from_numpy(np.random.default_rng(0).standard_normal((2, 16, 64), np.float32),
                      device=device)

    def step():
        grads = layer(x).sum().backward()
        return [p.grad(grads) for p in layer.parameters()]

    eager = [g.numpy() for g in step()]
    assert graphs.SIDE_STREAM
    graphed = em.graphed(step, device)
    results = [[g.numpy() for g in graphed()] for _ in range(4)]  # run, capture, replays
    stats = graphed.graph_stats()
    assert stats["side_ops"] > 0
    for values in results:
        for got, want in zip(values, eager, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@needs_gpu
def test_side_stream_replays_match_one_stream_replays(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same product graph captured on one stream and on two: the same values."""
    from ember.kernels.cupy import graphs

    device = em.cuda(0).autodiff()
    rng = np.random.default_rng(1)
    w1 = em.from_numpy(rng.standard_normal((96, 80), np.float32), device=device).require_grad()
    w2 = em.from_numpy(rng.standard_normal((80, 48), np.float32), device=device).require_grad()
    x = em.from_numpy(rng.standard_normal((32, 96), np.float32), device=device)

    def step():
        grads = ((x @ w1).relu() @ w2).square().sum().backward()
        return [w1.grad(grads), w2.grad(grads)]

    found = {}
    for side in (True, False):
        monkeypatch.setattr(graphs, "SIDE_STREAM", side)
        graphed = em.graphed(step, device)
        found[side] = [[g.numpy() for g in graphed()] for _ in range(4)][-1]
        assert (graphed.graph_stats()["side_ops"] > 0) == side
    for a, b in zip(found[True], found[False], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
