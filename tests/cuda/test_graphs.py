"""``em.graphed``: step signatures, when a step is captured, replayed or refused, and the
copies that keep tensors immutable, on the CPU with a recording capturer (its "graph"
launches nothing, so a replay hands back what the capture computed: the tests replay
only steps whose inputs hold the same values); on a GPU, replays against eager bits."""

from __future__ import annotations

import contextlib
import itertools
import threading

import numpy as np
import pytest

import ember as em
from ember.actors.step_graphs import StepGraphs, signature
from ember.ir import Call, Drop
from tests.cuda import gpu
from tests.runtime_mode import lazy_only

_fresh = itertools.count(900)


class RecordingCapturer:
    """A capturer on NumPy arrays: capture runs the step as it is, launch does nothing."""

    def __init__(self, graph: object = "graph") -> None:
        self.graph = graph
        self.calls: list[str] = []

    @contextlib.contextmanager
    def memory(self):
        yield "pool"

    def begin(self) -> None:
        self.calls.append("begin")

    def end(self) -> object:
        self.calls.append("end")
        return self.graph

    def launch(self, graph: object) -> None:
        self.calls.append("launch")

    @staticmethod
    def copy(value: np.ndarray) -> np.ndarray:
        return value.copy()

    def copy_out(self, values: list[np.ndarray]) -> list[np.ndarray]:
        self.calls.extend(["copy_out"] * len(values))
        return [value.copy() for value in values]

    def copy_into(self, static: np.ndarray, value: np.ndarray) -> None:
        self.calls.append("copy_into")
        np.copyto(static, value)


def device_with(capturer: RecordingCapturer) -> em.Device:
    device = em.cpu(next(_fresh))
    device.actor.graphs = StepGraphs(capturer)
    return device


def _call(op: str, out: int, inputs: tuple[int, ...], attrs: tuple = (),
          shape: tuple[int, ...] = (4,)) -> Call:
    return Call(op, out, inputs, attrs, shape, "float32", ("t.py", 1))


def test_signature_renumbers_ids_and_keeps_sizes_dtypes_and_scalars() -> None:
    meta = {1: ((4,), "float32"), 2: ((4,), "float32"), 11: ((4,), "float32"),
            12: ((4,), "float32")}.get
    first = [_call("mul", 5, (1,), ("float32", 2.0, False)), _call("add", 6, (5, 2)),
             Drop(5), Drop(99)]
    second = [_call("mul", 15, (11,), ("float32", 2.0, False)), _call("add", 16, (15, 12)),
              Drop(15), Drop(98)]
    key, inputs, produced = signature(first, meta)
    assert (inputs, produced) == ([1, 2], [5, 6])
    assert signature(second, meta)[0] == key  # other ids, an unrelated drop: the same step
    rescaled = [_call("mul", 15, (11,), ("float32", 3.0, False)), *second[1:]]
    assert signature(rescaled, meta)[0] != key  # a scalar is baked into a graph
    wider = {11: ((8,), "float32"), 12: ((4,), "float32")}.get
    assert signature(second, wider)[0] != key
    assert signature(first, {1: ((4,), "float32")}.get) is None  # input 2 unknown (failed)


@lazy_only
def test_a_step_runs_then_is_captured_then_replays() -> None:
    capturer = RecordingCapturer()
    device = device_with(capturer)
    x = em.from_numpy(np.arange(6, dtype=np.float32), device=device)
    step = em.graphed(lambda: ((x * 2.0).exp().sum(), x + 1.0), device)
    expected = (float(np.exp(np.arange(6) * 2.0).sum()), np.arange(6) + 1.0)
    for call in range(4):
        total, shifted = step()
        assert total.item() == pytest.approx(expected[0], rel=1e-6)
        np.testing.assert_array_equal(shifted.numpy(), expected[1])
        stats = step.graph_stats()
        assert stats == {"captures": int(call >= 1), "replays": max(call - 1, 0),
                         "refusals": 0, "side_ops": 0}
    # Capture once (begin, end, launch); each replay launches; x is copied in once: the
    # same tensor id holds the same value, already in the graph's input buffer.
    assert capturer.calls[:3] == ["begin", "end", "launch"]
    assert capturer.calls[3:].count("launch") == 2
    assert capturer.calls[3:].count("copy_into") == 1


@lazy_only
def test_outputs_still_held_are_copied_out_before_a_replay() -> None:
    capturer = RecordingCapturer()
    device = device_with(capturer)
    x = em.from_numpy(np.ones(5, dtype=np.float32), device=device)
    step = em.graphed(lambda: x * 3.0, device)
    em.sync(device)
    held = em.stats(device).bytes_held
    kept = [step() for _ in range(4)]  # every result held: replays 1 and 2 copy out
    np.testing.assert_array_equal(np.stack([t.numpy() for t in kept]), np.full((4, 5), 3.0))
    assert capturer.calls.count("copy_out") == 2
    assert step.graph_stats()["replays"] == 2
    assert em.stats(device).bytes_held == held + 4 * 5 * 4
    del kept
    em.sync(device)
    assert em.stats(device).bytes_held == held  # copies and graph outputs counted once


@lazy_only
def test_a_step_that_replaces_its_input_copies_nothing_out() -> None:
    """A parameter update: the step reads the last replay's output and drops it. It is
    copied into the graph's input before the launch overwrites it, and never read again."""
    capturer = RecordingCapturer()
    device = device_with(capturer)
    state = [em.ones(4, device=device)]

    def update():
        state[0] = state[0] * 0.5 + 1.0

    step = em.graphed(update, device)
    for _ in range(6):
        step()
    em.sync(device)
    assert step.graph_stats()["replays"] == 4
    assert capturer.calls.count("copy_out") == 0
    assert capturer.calls.count("copy_into") == 4  # a new id every step


def test_other_shapes_or_scalars_are_other_steps() -> None:
    device = device_with(RecordingCapturer())
    for n, scale in ((3, 2.0), (4, 2.0), (3, 5.0), (4, 5.0)):
        x = em.from_numpy(np.ones(n, dtype=np.float32), device=device)
        y = em.graphed(lambda: x * scale, device)()
        np.testing.assert_array_equal(y.numpy(), np.full(n, scale))
    assert em.graphed(lambda: None, device).graph_stats()["captures"] == 0


@lazy_only
def test_a_refused_capture_runs_the_step_as_it_is_from_then_on() -> None:
    capturer = RecordingCapturer(graph=None)  # the backend ends every capture empty-handed
    device = device_with(capturer)
    x = em.from_numpy(np.arange(4, dtype=np.float32), device=device)
    step = em.graphed(lambda: (x + 1.0) * 2.0, device)
    for _ in range(4):
        np.testing.assert_array_equal(step().numpy(), (np.arange(4) + 1.0) * 2.0)
    assert step.graph_stats() == {"captures": 0, "replays": 0, "refusals": 1,
                                  "side_ops": 0}
    assert capturer.calls.count("begin") == 1


def test_a_read_inside_a_step_runs_it_at_once_uncaptured() -> None:
    capturer = RecordingCapturer()
    device = device_with(capturer)
    x = em.from_numpy(np.arange(4, dtype=np.float32), device=device)

    def step():
        y = x * 3.0
        return y + y.sum().item()  # would deadlock if the worker waited for the step's end

    for _ in range(3):
        np.testing.assert_array_equal(em.graphed(step, device)().numpy(),
                                      np.arange(4) * 3.0 + 18.0)
    assert capturer.calls == []


@lazy_only
def test_an_upload_inside_a_step_runs_ahead_of_it_as_an_input() -> None:
    """A value the step uploads (its own, or a loader thread's meanwhile) reads nothing:
    it runs before the step, which reads it as an input and still replays."""
    capturer = RecordingCapturer()
    device = device_with(capturer)
    x = em.from_numpy(np.arange(4, dtype=np.float32), device=device)
    uploaded = []

    def upload_from_another_thread() -> None:
        uploaded.append(em.from_numpy(np.ones(3, dtype=np.float32), device=device))

    def step():
        scale = em.from_numpy(np.full(4, 2.0, dtype=np.float32), device=device)
        loader = threading.Thread(target=upload_from_another_thread)
        loader.start()
        loader.join()
        return x * scale + 1.0

    graphed = em.graphed(step, device)
    for _ in range(4):
        np.testing.assert_array_equal(graphed().numpy(), np.arange(4) * 2.0 + 1.0)
    assert graphed.graph_stats()["replays"] == 2
    # Each replay copies in the new upload (x, the same id, stays in its buffer).
    assert capturer.calls[3:].count("copy_into") == 1 + 2
    np.testing.assert_array_equal(np.stack([u.numpy() for u in uploaded]), np.ones((4, 3)))


def test_graphed_on_a_device_without_graphs_just_calls() -> None:
    device = em.cpu(next(_fresh))
    x = em.from_numpy(np.arange(3, dtype=np.float32), device=device)
    step = em.graphed(lambda: x - 1.0, device)
    np.testing.assert_array_equal(step().numpy(), np.arange(3) - 1.0)
    assert step.graph_stats() == {"captures": 0, "replays": 0, "refusals": 0,
                                  "side_ops": 0}


@gpu.needs_gpu
def test_replayed_encoder_gradients_equal_eager_bits(cuda: em.Device) -> None:
    rng = np.random.default_rng(0)
    device = cuda.autodiff()
    layer = em.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, device=device)
    inputs = [em.from_numpy(rng.standard_normal((2, 16, 64), dtype=np.float32), device=device)
              for _ in range(2)]
    current = [inputs[0]]

    def grads():
        g = layer(current[0]).sum().backward()
        return [p.grad(g) for p in layer.parameters()]

    plain = [t.numpy() for t in grads()]
    step = em.graphed(grads, cuda)
    before = step.graph_stats()  # the device's counts: other tests' too
    eager = [t.numpy() for t in step()]  # a step's first call runs as it is
    for a, b in zip(eager, plain, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for _ in range(3):  # captured, then replayed twice
        for a, b in zip([t.numpy() for t in step()], eager, strict=True):
            np.testing.assert_array_equal(a, b)
    after = step.graph_stats()
    assert {k: after[k] - before[k] for k in ("captures", "replays", "refusals")} == {
        "captures": 1, "replays": 2, "refusals": 0}
    current[0] = inputs[1]  # other values, same shapes: a replay reads the new input
    replayed = [t.numpy() for t in step()]
    assert step.graph_stats()["replays"] == before["replays"] + 3
    for a, b in zip(replayed, [t.numpy() for t in grads()], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# ----- pure steps: replays that skip fn --------------------------------------------------


@lazy_only
def test_a_pure_step_replays_without_calling_fn() -> None:
    capturer = RecordingCapturer()
    device = device_with(capturer)
    w = em.from_numpy(np.arange(4, dtype=np.float32), device=device)
    calls = []

    def fn(x, scale):
        calls.append(scale)
        y = (x * w) * scale
        return {"y": y, "parts": (y.sum(), None, "tag")}

    step = em.graphed(fn, device, pure=True)
    x = em.ones(4, device=device)
    for k in range(5):
        out = step(x, 2.0)
        assert out["parts"][1:] == (None, "tag")
        np.testing.assert_array_equal(out["y"].numpy(), np.arange(4) * 2.0)
        assert out["parts"][0].item() == 12.0
    assert len(calls) == 2  # run, captured; then replays alone
    assert step.graph_stats() == {"captures": 1, "replays": 3, "refusals": 0,
                                  "side_ops": 0}
    step(x, 3.0)  # another scalar: another graph, fn runs
    step(em.ones((2, 4), device=device), 2.0)  # another shape too
    assert calls[2:] == [3.0, 2.0]
    with pytest.raises(TypeError, match="hashable"):
        step(x, [2.0])


@lazy_only
def test_a_pure_step_that_uploads_inside_keeps_calling_fn() -> None:
    """A value uploaded inside the step is new at every call: a replay would read the
    first one's (gone by then), so the step keeps running its function."""
    device = device_with(RecordingCapturer())
    calls = []

    def fn(x):
        calls.append(1)
        return x * em.from_numpy(np.full(4, 3.0, dtype=np.float32), device=device)

    step = em.graphed(fn, device, pure=True)
    x = em.ones(4, device=device)
    for _ in range(5):
        np.testing.assert_array_equal(step(x).numpy(), np.full(4, 3.0))
    assert len(calls) == 5 and step.graph_stats()["captures"] == 1


@lazy_only
def test_a_pure_replay_reads_its_new_arguments() -> None:
    capturer = RecordingCapturer()
    device = device_with(capturer)
    step = em.graphed(lambda x: x + 1.0, device, pure=True)
    first = em.ones(3, device=device)
    for _ in range(3):
        step(first).numpy()
    em.sync(device)
    copies = capturer.calls.count("copy_into")
    other = em.zeros(3, device=device)
    step(other).numpy()  # the recording graph recomputes nothing: count what reached it
    assert capturer.calls.count("copy_into") == copies + 1
    failed = em.arange(3, device=device)[em.tensor([0, 1, 7], device=device)].astype(em.float32)
    with pytest.raises(em.KernelError, match="index 7"):
        step(failed).numpy()  # an argument that failed fails the results


@lazy_only
def test_a_pure_step_called_with_one_tensor_twice_is_another_graph() -> None:
    """Captured as f(x, x), the graph has one input: f(x, y) must not replay it."""
    capturer = RecordingCapturer()
    device = device_with(capturer)
    calls = []

    def fn(a, b):
        calls.append(1)
        return a - b

    step = em.graphed(fn, device, pure=True)
    x, y = em.ones(3, device=device), em.zeros(3, device=device)
    for _ in range(3):
        np.testing.assert_array_equal(step(x, x).numpy(), [0.0] * 3)
    assert len(calls) == 2
    np.testing.assert_array_equal(step(x, y).numpy(), [1.0] * 3)
    assert len(calls) == 3


@lazy_only
def test_a_pure_step_under_another_matmul_precision_is_another_graph() -> None:
    """A replay skips fn: the precision its matmuls were issued at must select the graph."""
    capturer = RecordingCapturer()
    device = device_with(capturer)
    issued = []

    def fn(a):
        issued.append(em.get_float32_matmul_precision())
        return a @ a

    step = em.graphed(fn, device, pure=True)
    x = em.ones((2, 2), device=device)
    before = em.get_float32_matmul_precision()
    try:
        for name in ("highest", "highest", "highest", "medium", "medium", "medium"):
            em.set_float32_matmul_precision(name)
            np.testing.assert_array_equal(step(x).numpy(), [[2.0, 2.0]] * 2)
    finally:
        em.set_float32_matmul_precision(before)
    assert issued == ["highest", "highest", "medium", "medium"]  # run, capture; per precision
    assert step.graph_stats()["replays"] == 2


@lazy_only
def test_a_pure_replay_fails_when_a_tensor_it_read_is_gone() -> None:
    device = device_with(RecordingCapturer())
    held = [em.ones(3, device=device)]
    step = em.graphed(lambda x: x * held[0], device, pure=True)
    x = em.ones(3, device=device)
    for _ in range(3):
        step(x).numpy()
    held[0] = em.zeros(3, device=device)  # the old weight dies
    with pytest.raises(em.KernelError, match="pass every tensor that changes"):
        step(x).numpy()


@gpu.needs_gpu
def test_pure_replays_of_an_encoder_forward_equal_eager_bits(cuda: em.Device) -> None:
    rng = np.random.default_rng(1)
    layer = em.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, device=cuda)
    batches = [em.from_numpy(rng.standard_normal((2, 16, 64), dtype=np.float32), device=cuda)
               for _ in range(3)]
    calls = []

    def forward(x):
        calls.append(1)
        return layer(x).relu().sum(-1)

    step = em.graphed(forward, cuda, pure=True)
    eager = [layer(b).relu().sum(-1).numpy() for b in batches]
    for _ in range(3):
        for b, expected in zip(batches, eager):
            np.testing.assert_array_equal(step(b).numpy(), expected)
    assert len(calls) == 2
    assert step.graph_stats()["replays"] >= 6


@lazy_only
def test_a_pure_step_whose_signature_was_captured_before_replays_alone() -> None:
    """Another model's copy of a captured step (the same ops, shapes and scalars) reuses
    its graph, and as a pure step skips fn from its second call on."""
    device = device_with(RecordingCapturer())
    x = em.ones(3, device=device)
    w1, w2 = em.full(3, 2.0, device=device), em.full(3, 2.0, device=device)
    first = em.graphed(lambda: x * w1, device)
    for _ in range(3):
        first().numpy()
    calls = []

    def second():
        calls.append(1)
        return x * w2

    step = em.graphed(second, device, pure=True)
    for _ in range(4):
        np.testing.assert_array_equal(step().numpy(), [2.0] * 3)
    assert len(calls) == 1
    assert step.graph_stats()["captures"] == 1


@gpu.needs_gpu
def test_replayed_adam_training_steps_match_eager_ones(cuda: em.Device) -> None:
    """An MLP training step with cross_entropy (index checks on the device) and a
    capturable Adam replays as a CUDA graph and trains as the eager step does."""
    rng = np.random.default_rng(3)
    device = cuda.autodiff()
    x = em.from_numpy(rng.standard_normal((64, 16), dtype=np.float32), device=device)
    y = em.tensor(rng.integers(0, 4, 64), device=cuda)
    starts = [rng.standard_normal(shape, dtype=np.float32) * 0.3
              for shape in ((32, 16), (32,), (4, 32), (4,))]

    def trainer():
        model = em.nn.Sequential(em.nn.Linear(16, 32, device=device), em.nn.ReLU(),
                                 em.nn.Linear(32, 4, device=device))
        for param, start in zip(model.parameters(), starts, strict=True):
            param.value = em.from_numpy(start, device=device)
        opt = em.optim.Adam(model.parameters(), lr=1e-2, capturable=True)

        def step():
            loss = em.nn.functional.cross_entropy(model(x), y)
            opt.step(loss.backward())
            return loss

        return model, step

    eager_model, eager_step = trainer()
    graphed_model, plain_step = trainer()
    graphed = em.graphed(plain_step, cuda)
    before = graphed.graph_stats()
    for _ in range(6):
        eager_loss, graphed_loss = eager_step().item(), graphed().item()
        assert graphed_loss == pytest.approx(eager_loss, rel=1e-5)
    stats = graphed.graph_stats()
    assert stats["captures"] - before["captures"] == 1
    assert stats["replays"] - before["replays"] >= 3
    for a, b in zip(eager_model.parameters(), graphed_model.parameters(), strict=True):
        np.testing.assert_allclose(b.value.numpy(), a.value.numpy(), rtol=1e-5, atol=1e-6)
