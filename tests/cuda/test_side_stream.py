"""Products side by side in a capture (kernels/cupy/side_stream.py). On the CPU: which
stream each op runs on, which waits order the streams, dropped values held while the
other stream may read them, against fake streams and buffers. On a GPU: a captured encoder step runs
products on the second stream and replays the eager step's values."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import ember as em
from ember.kernels.cupy import side_stream
from ember.kernels.cupy.side_stream import MAIN, SIDE, TwoStreams, seconds
from tests.cuda.gpu import needs_gpu


class FakeStreams:
    """Records the stream work a TwoStreams asks for; ``current`` says where a launch runs."""

    def __init__(self) -> None:
        self.waits: list[tuple[int, tuple]] = []  # (waiting stream, event)
        self.current = MAIN
        self.recorded = 0

    def record(self, stream: int) -> tuple:
        self.recorded += 1
        return ("event", stream, self.recorded)

    def wait(self, stream: int, event: tuple) -> None:
        self.waits.append((stream, event))

    @contextlib.contextmanager
    def on(self, stream: int):
        self.current = stream
        try:
            yield
        finally:
            self.current = MAIN


class Buffer:
    """A fake array: the allocation it lives in, its shape and bytes (float32)."""

    made = 0

    def __init__(self, *shape: int, base: Buffer | None = None) -> None:
        Buffer.made += 1
        self.key = base.key if base is not None else Buffer.made
        self.shape = shape
        self.nbytes = 4 * int(np.prod(shape))


class Capture:
    """A TwoStreams over fake streams, with each op's stream recorded by name."""

    def __init__(self) -> None:
        self.streams = FakeStreams()
        self.placement = TwoStreams(self.streams, lambda b: b.key)
        self.ran: dict[str, int] = {}

    def op(self, name: str, op: str, inputs: list, out: Buffer) -> Buffer:
        def launch():
            self.ran[name] = self.streams.current
            return out
        assert self.placement.run(op, inputs, launch, shape=out.shape) is out
        return out

    def side_by_side(self, x: Buffer) -> tuple[Buffer, Buffer]:
        """Two independent products of ``x``: "p" on the main stream, "q" on the side."""
        p = self.op("p", "matmul", [x, x], Buffer(*x.shape))
        q = self.op("q", "matmul", [x, x], Buffer(*x.shape))
        assert (self.ran["p"], self.ran["q"]) == (MAIN, SIDE)
        return p, q


def test_the_estimate_weighs_products_by_multiply_adds() -> None:
    a, b = Buffer(2048, 768), Buffer(768, 3072)
    assert seconds("matmul", [a, b], (2048, 3072)) > 20 * seconds("add", [a, a])
    launch = side_stream._KERNEL_S  # one launch either way
    flops = side_stream._FLOPS_PER_S
    # Rows flattened, the weight read transposed ((8, 256, 3072) @ (768, 3072)ᵀ).
    assert seconds("matmul", [Buffer(8, 256, 3072), Buffer(768, 3072)], (8, 256, 768)) \
        - launch == pytest.approx(2 * 2048 * 3072 * 768 / flops)
    # A weight gradient Gᵀ X: G (2048, 768) read transposed.
    assert seconds("matmul", [Buffer(2048, 768), Buffer(2048, 3072)], (768, 3072)) \
        - launch == pytest.approx(2 * 768 * 2048 * 3072 / flops)
    batched = seconds("matmul", [Buffer(96, 256, 64), Buffer(96, 64, 256)], (96, 256, 256))
    single = seconds("matmul", [Buffer(256, 64), Buffer(64, 256)], (256, 256))
    assert batched - launch == pytest.approx((single - launch) * 96)
    assert seconds("matmul", [Buffer(768), Buffer(768, 10)], (10,)) - launch == \
        pytest.approx(2 * 768 * 10 / flops)


def test_a_linears_input_and_weight_gradients_run_side_by_side() -> None:
    """dX = G W goes to the main stream, dW = Gᵀ X to the side one, which waits only for
    the op that made G, not for dX."""
    c = Capture()
    x, w = Buffer(2048, 768), Buffer(768, 768)
    g = c.op("g", "add", [x, x], Buffer(2048, 768))
    dx = c.op("dx", "matmul", [g, w], Buffer(2048, 768))
    dw = c.op("dw", "matmul", [Buffer(768, 2048, base=g), x], Buffer(768, 768))
    assert c.ran == {"g": MAIN, "dx": MAIN, "dw": SIDE}
    g_event = ("event", MAIN, 2)  # recorded after g (the capture's start is event 1)
    assert c.streams.waits == [(SIDE, g_event)]
    # The next op reads both: the main stream waits for the side stream's dW point.
    c.op("both", "add", [dx, dw], Buffer(768, 768))
    assert c.ran["both"] == MAIN
    assert c.streams.waits[-1][0] == MAIN and c.streams.waits[-1][1][1] == SIDE
    assert c.placement.side_ops == 1


def test_waits_are_only_for_points_not_waited_for_yet() -> None:
    c = Capture()
    a = Buffer(1024, 1024)
    p, q = c.side_by_side(a)  # the side one waits for the capture's start
    r = c.op("r", "matmul", [a, a], Buffer(1024, 1024))  # main again (it frees first)
    assert [c.ran[k] for k in "pqr"] == [MAIN, SIDE, MAIN]
    waits = len(c.streams.waits)
    c.op("u", "matmul", [a, a], Buffer(1024, 1024))  # side: the start waited for already
    assert c.ran["u"] == SIDE and len(c.streams.waits) == waits
    c.op("v", "neg", [q], Buffer(1024, 1024))  # main reads q: waits for side point 1
    c.op("w", "neg", [p], Buffer(1024, 1024))  # main's own: no wait
    assert len(c.streams.waits) == waits + 1
    c.op("z", "neg", [q], Buffer(1024, 1024))  # side point 1 waited for already
    assert len(c.streams.waits) == waits + 1
    del r


def test_a_product_reading_the_main_streams_last_output_follows_it() -> None:
    """A chain of dependent products: each starts when its input is ready, the same
    moment on either stream, and ties go to the main stream: no waits at all."""
    c = Capture()
    w = Buffer(512, 512)
    h = Buffer(512, 512)
    for k in range(4):
        h = c.op(f"h{k}", "matmul", [h, w], Buffer(512, 512))
    assert set(c.ran.values()) == {MAIN}
    assert c.streams.waits == []


def test_views_follow_their_input_and_other_ops_stay_on_the_main_stream() -> None:
    c = Capture()
    a = Buffer(1024, 1024)
    _, q = c.side_by_side(a)
    view = c.op("view", "reshape", [q], Buffer(1024 * 1024, base=q))
    assert c.ran["view"] == SIDE
    c.op("exp", "exp", [a], Buffer(1024, 1024))  # independent, not a product: main
    assert c.ran["exp"] == MAIN
    # A view is not a new buffer: reading it waits for the op that made its base.
    c.op("neg", "neg", [view], Buffer(1024 * 1024))
    assert c.streams.waits[-1] == (MAIN, ("event", SIDE, 3))  # after q (its own point 1)


def test_a_value_the_other_stream_read_is_held_until_its_own_stream_waited_past_it() -> None:
    """CuPy's pool hands a freed block only to the stream that allocated it: a block that
    the other stream still reads must not be freed until its stream has waited for that read."""
    c = Capture()
    placement = c.placement
    x = Buffer(1024, 1024)
    g = c.op("g", "add", [x, x], Buffer(1024, 1024))  # main's
    c.op("dx", "matmul", [g, x], Buffer(1024, 1024))
    dw = c.op("dw", "matmul", [g, g], Buffer(1024, 1024))  # side reads g
    assert c.ran["dw"] == SIDE
    placement.hold(x)  # read by the side stream? no (dx, on main, and g's op read it)
    assert placement._held == []
    placement.hold(g)
    assert [v for v, _, _ in placement._held] == [g]
    c.op("use", "neg", [dw], Buffer(1024, 1024))  # main waits for dw: past the read of g
    assert placement._held == []
    placement.join()


def test_a_side_made_value_the_main_stream_read_is_held_until_the_side_waits_past_it() -> None:
    c = Capture()
    placement = c.placement
    x, big = Buffer(1024, 1024), Buffer(4096, 4096)
    _, s = c.side_by_side(x)
    c.op("read", "neg", [s], Buffer(1024, 1024))  # main point 2 reads s
    m = c.op("m", "neg", [x], Buffer(1024, 1024))  # main point 3
    # A long product on the main stream (it reads the main stream's newest value: a tie,
    # which the main stream takes).
    made_big = c.op("made_big", "neg", [big], Buffer(4096, 4096))
    c.op("big", "matmul", [made_big, made_big], Buffer(4096, 4096))
    assert (c.ran["q"], c.ran["read"], c.ran["big"]) == (SIDE, MAIN, MAIN)
    placement.hold(s)
    assert [v for v, _, _ in placement._held] == [s]
    c.op("later", "matmul", [m, m], Buffer(1024, 1024))  # the side starts sooner: waits for m
    assert c.ran["later"] == SIDE
    assert c.streams.waits[-1] == (SIDE, ("event", MAIN, 5))  # m's point, past the read
    assert placement._held == []


def test_holding_past_the_limit_makes_both_streams_wait_for_each_other(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(side_stream, "HOLD_LIMIT", 6 * 1024 * 1024)
    c = Capture()
    x, big = Buffer(1024, 1024), Buffer(2048, 2048)
    for k in range(2):
        made = c.op(f"m{k}", "neg", [x], Buffer(1024, 1024))
        made_big = c.op(f"made_big{k}", "neg", [big], Buffer(2048, 2048))
        c.op(f"big{k}", "matmul", [made_big, made_big], Buffer(2048, 2048))  # main
        c.op(f"s{k}", "matmul", [made, made], Buffer(1024, 1024))
        assert c.ran[f"s{k}"] == SIDE
        c.placement.hold(made)  # 4 MiB each, read by the side stream
        assert len(c.placement._held) == 1 - k  # the second went past 6 MiB
    assert {stream for stream, _ in c.streams.waits[-2:]} == {MAIN, SIDE}


def test_join_waits_for_the_side_streams_last_point_once() -> None:
    c = Capture()
    x = Buffer(1024, 1024)
    c.side_by_side(x)
    c.placement.join()
    assert c.streams.waits[-1] == (MAIN, ("event", SIDE, 3))
    waits = len(c.streams.waits)
    c.placement.join()
    assert len(c.streams.waits) == waits
    # A capture whose side stream ran nothing never made it join: nothing to wait for.
    idle = Capture()
    idle.op("only", "matmul", [x, x], Buffer(1024, 1024))
    idle.placement.join()
    assert idle.streams.waits == []


def test_fused_groups_name_their_outputs() -> None:
    c = Capture()
    x = Buffer(1024, 1024)
    _, q = c.side_by_side(x)
    outs = [(7, Buffer(1024, 1024)), (8, Buffer(1024, 1024))]
    c.placement.run("fused", [q, x], lambda: outs, lambda values: [v for _, v in values])
    waits = len(c.streams.waits)
    c.op("after", "neg", [outs[1][1]], Buffer(1024, 1024))  # made on main: no wait
    assert len(c.streams.waits) == waits


@needs_gpu
def test_a_captured_encoder_step_runs_products_side_by_side_with_eager_values() -> None:
    from ember.kernels.cupy import graphs

    device = em.cuda(0).autodiff()
    em.manual_seed(5)
    layer = em.nn.TransformerEncoderLayer(64, 4, 96, dropout=0.0, device=device)
    x = em.from_numpy(np.random.default_rng(0).standard_normal((3, 24, 64), np.float32),
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
    """A product graph captured on two streams and on one: each replays its eager run."""
    from ember.kernels.cupy import graphs

    device = em.cuda(0).autodiff()
    rng = np.random.default_rng(1)
    w1 = em.from_numpy(rng.standard_normal((96, 80), np.float32), device=device).require_grad()
    w2 = em.from_numpy(rng.standard_normal((80, 48), np.float32), device=device).require_grad()
    for rows, side in ((32, True), (33, False)):  # other rows: another signature, captured anew
        monkeypatch.setattr(graphs, "SIDE_STREAM", side)
        x = em.from_numpy(rng.standard_normal((rows, 96), np.float32), device=device)

        def step():
            h = (x @ w1).relu() @ w2
            grads = (h * h).sum().backward()
            return [w1.grad(grads), w2.grad(grads)]

        graphed = em.graphed(step, device)
        eager, *replays = [[g.numpy() for g in graphed()] for _ in range(4)]
        assert (graphed.graph_stats()["side_ops"] > 0) == side
        for values in replays:
            for got, want in zip(values, eager, strict=True):
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@needs_gpu
def test_a_capture_refused_on_the_side_stream_leaves_both_streams_usable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A product on the side stream syncs its stream, which invalidates the capture: the
    step runs as it is, and a later step captures on two streams again."""
    import cupy

    from ember.kernels.cupy import table

    device = em.cuda(0)
    rng = np.random.default_rng(2)
    a_np, b_np = (0.1 * rng.standard_normal((64, 64), np.float32) for _ in range(2))
    a, b = (em.from_numpy(v, device=device) for v in (a_np, b_np))
    plain_matmul = table.KERNELS["matmul"]
    captured_products = [0]

    def syncing_matmul(msg, pool, x, y):
        stream = cupy.cuda.get_current_stream()
        if stream.is_capturing():
            captured_products[0] += 1
            if captured_products[0] == 2:  # the side stream's: refused while capturing
                stream.synchronize()
        return plain_matmul(msg, pool, x, y)

    monkeypatch.setitem(table.KERNELS, "matmul", syncing_matmul)
    refused = em.graphed(lambda: (a @ b) + (b @ a), device)
    before = refused.graph_stats()["refusals"]
    for _ in range(4):
        np.testing.assert_allclose(refused().numpy(), a_np @ b_np + b_np @ a_np, rtol=1e-5,
                                   atol=1e-4)
    assert refused.graph_stats()["refusals"] == before + 1
    assert captured_products[0] == 2
    monkeypatch.setitem(table.KERNELS, "matmul", plain_matmul)
    captured = em.graphed(lambda: ((a @ b) * (b.T @ a)).exp(), device)
    want = np.exp((a_np @ b_np) * (b_np.T @ a_np))
    for _ in range(4):
        np.testing.assert_allclose(captured().numpy(), want, rtol=1e-5, atol=1e-5)
    stats = captured.graph_stats()
    assert stats["side_ops"] > 0 and stats["refusals"] == before + 1
