"""``em.autocast``: the dtype each op runs in (torch's op lists), values against torch's
autocast on the CPU, gradients reaching float32 parameters, and the block's scope
(nesting, decorator, device_type, threads, trio tasks, backward walks)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import trio

import ember as em
from ember import mixed_precision, nn
from ember.autodiff import engine

F = nn.F
torch = pytest.importorskip("torch")
TF = torch.nn.functional

LOW = [(em.bfloat16, torch.bfloat16), (em.float16, torch.float16)]
# A few float32 roundings of a product of 8-32 terms, relative to its largest term.
TOLERANCE = {em.bfloat16: 2e-2, em.float16: 3e-3}


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _close(actual: em.Tensor, expected: torch.Tensor, dtype: em.DType) -> None:
    assert actual.dtype.name == str(expected.dtype)[6:]
    got = actual.numpy().astype(np.float64)
    want = expected.detach().double().numpy()
    scale = max(float(np.abs(want).max()), 1.0)
    np.testing.assert_allclose(got, want, rtol=0, atol=TOLERANCE[dtype] * scale)


# ----- what runs in which dtype ------------------------------------------------------------


def _ops_by_list(x: em.Tensor, w: em.Tensor) -> dict[str, tuple[em.Tensor, str]]:
    """op → (its output under autocast, the list torch's CUDA op reference puts it in)."""
    y = F.linear(x, w)
    target = em.tensor([0, 1, 2, 0])
    image = em.randn(2, 3, 6, 6)
    q = em.randn(1, 2, 4, 8)
    return {
        "linear": (y, "low"),
        "matmul": (x @ x.T, "low"),
        "conv1d": (F.conv1d(em.randn(2, 3, 9), em.randn(4, 3, 3)), "low"),
        "conv2d": (F.conv2d(image, em.randn(4, 3, 3, 3), em.randn(4)), "low"),
        "conv_transpose2d": (F.conv_transpose2d(image, em.randn(3, 2, 3, 3)), "low"),
        "scaled_dot_product_attention": (F.scaled_dot_product_attention(q, q, q), "low"),
        "softmax": (F.softmax(y, dim=-1), "float32"),
        "log_softmax": (F.log_softmax(y, dim=-1), "float32"),
        "cross_entropy": (F.cross_entropy(y, target), "float32"),
        "mse_loss": (F.mse_loss(y, em.zeros(4, 3)), "float32"),
        "layer_norm": (F.layer_norm(y, (3,)), "float32"),
        "group_norm": (F.group_norm(em.randn(2, 4, 3).to(em.bfloat16), 2), "float32"),
        "exp": (y.exp(), "float32"),
        "log": (y.abs().log(), "float32"),
        "pow": (y ** 2, "float32"),
        "sum": (y.sum(), "float32"),
        "cumsum": (y.cumsum(0), "float32"),
        "cumprod": (y.cumprod(0), "float32"),
        "tan": (y.tan(), "float32"),
        "sinh": (y.sinh(), "float32"),
        "conv3d": (F.conv3d(em.randn(1, 2, 4, 4, 4), em.randn(3, 2, 2, 2, 2)), "low"),
        "relu": (y.relu(), "input"),
        "mean": (y.mean(), "input"),
        "add": (y + x[:, :3], "widest"),
        "cat": (em.cat([y, x[:, :3]]), "widest"),
    }


@pytest.mark.parametrize("dtype", [em.bfloat16, em.float16])
def test_each_op_runs_in_the_dtype_of_its_list(dtype):
    x, w = em.randn(4, 8), em.randn(3, 8)
    with em.autocast(dtype=dtype):
        outputs = _ops_by_list(x, w)
    expected = {"low": dtype, "float32": em.float32, "input": dtype, "widest": em.float32}
    wrong = {op: out.dtype.name for op, (out, kind) in outputs.items()
             if out.dtype is not expected[kind]}
    assert not wrong, wrong
    for op, (out, _) in outputs.items():
        assert np.isfinite(out.numpy().astype(np.float64)).all(), op


def test_outside_a_block_nothing_is_cast():
    x, w = em.randn(4, 8), em.randn(3, 8)
    outputs = _ops_by_list(x, w)
    assert outputs.pop("group_norm")[0].dtype is em.bfloat16  # its input's dtype
    assert {out.dtype for out, _ in outputs.values()} == {em.float32}
    assert not em.is_autocast_enabled() and em.get_autocast_dtype() is None


def test_float64_and_integer_tensors_are_never_cast():
    with em.autocast():
        assert (em.randn(3, 4).double() @ em.randn(4, 2).double()).dtype is em.float64
        assert (em.arange(6).reshape(2, 3) @ em.arange(6).reshape(3, 2)).dtype is em.int64
        assert em.randn(3).double().exp().dtype is em.float64


# ----- values against torch's CPU autocast -------------------------------------------------


@pytest.mark.parametrize("dtype,torch_dtype", LOW)
def test_linear_matmul_and_conv_match_torch_cpu_autocast(dtype, torch_dtype):
    rng = _rng(1)
    x_np = rng.standard_normal((6, 32)).astype(np.float32)
    w_np = rng.standard_normal((16, 32)).astype(np.float32)
    b_np = rng.standard_normal(16).astype(np.float32)
    img_np = rng.standard_normal((2, 3, 9, 9)).astype(np.float32)
    k_np = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    seq_np = rng.standard_normal((2, 3, 11)).astype(np.float32)
    k1_np = rng.standard_normal((4, 3, 3)).astype(np.float32)
    a3_np = rng.standard_normal((3, 5, 32)).astype(np.float32)
    x, w, b, img, k = map(em.tensor, (x_np, w_np, b_np, img_np, k_np))
    tx, tw, tb, timg, tk = map(torch.tensor, (x_np, w_np, b_np, img_np, k_np))
    with em.autocast(dtype=dtype):
        ours = [F.linear(x, w, b), x @ w.T, em.tensor(a3_np) @ x.T, F.conv2d(img, k, padding=1),
                F.conv1d(em.tensor(seq_np), em.tensor(k1_np), stride=2)]
    with torch.autocast("cpu", dtype=torch_dtype):
        theirs = [TF.linear(tx, tw, tb), tx @ tw.T, torch.tensor(a3_np) @ tx.T,
                  TF.conv2d(timg, tk, padding=1),
                  TF.conv1d(torch.tensor(seq_np), torch.tensor(k1_np), stride=2)]
    for a, t in zip(ours, theirs):
        _close(a, t, dtype)


@pytest.mark.parametrize("dtype,torch_dtype", LOW)
def test_softmax_and_losses_match_torch_in_float32(dtype, torch_dtype):
    """cross_entropy and mse_loss are on torch's CPU float32 list too; softmax and
    log_softmax are on its CUDA list only (ember follows that list on every device): the
    reference casts the low-precision logits to float32 itself, as autocast on CUDA does."""
    rng = _rng(2)
    x_np = rng.standard_normal((8, 16)).astype(np.float32)
    w_np = rng.standard_normal((10, 16)).astype(np.float32)
    t_np = rng.integers(0, 10, 8)
    x, w, target = em.tensor(x_np), em.tensor(w_np), em.tensor(t_np)
    tx, tw, ttarget = torch.tensor(x_np), torch.tensor(w_np), torch.tensor(t_np)
    with em.autocast(dtype=dtype):
        logits = F.linear(x, w)
        ours = [F.cross_entropy(logits, target), F.mse_loss(logits, em.zeros(8, 10)),
                F.softmax(logits, dim=1), F.log_softmax(logits, dim=0)]
    with torch.autocast("cpu", dtype=torch_dtype):
        tlogits = TF.linear(tx, tw)
        theirs = [TF.cross_entropy(tlogits, ttarget), TF.mse_loss(tlogits, torch.zeros(8, 10)),
                  TF.softmax(tlogits.float(), dim=1), TF.log_softmax(tlogits.float(), dim=0)]
    for a, t in zip(ours, theirs):
        assert a.dtype is em.float32
        _close(a, t, dtype)
    # The logits themselves: the same bf16 / fp16 values as torch's.
    _close(logits, tlogits, dtype)


@pytest.mark.parametrize("dtype,torch_dtype", LOW)
def test_gradients_reach_float32_parameters_as_float32(dtype, torch_dtype):
    rng = _rng(3)
    x_np = rng.standard_normal((8, 12)).astype(np.float32)
    t_np = rng.integers(0, 4, 8)
    em.manual_seed(0)
    device = em.cpu().autodiff()
    model = nn.Sequential(nn.Linear(12, 16, device=device), nn.ReLU(),
                          nn.Linear(16, 4, device=device))
    reference = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 4))
    with torch.no_grad():
        for mine, theirs in zip([model[0], model[2]], [reference[0], reference[2]]):
            theirs.weight.copy_(torch.tensor(mine.weight.value.numpy()))
            theirs.bias.copy_(torch.tensor(mine.bias.value.numpy()))
    with em.autocast(dtype=dtype):
        loss = F.cross_entropy(model(em.tensor(x_np, device=device)),
                               em.tensor(t_np, device=device))
    grads = loss.backward()
    with torch.autocast("cpu", dtype=torch_dtype):
        tloss = TF.cross_entropy(reference(torch.tensor(x_np)), torch.tensor(t_np))
    tloss.backward()
    _close(loss, tloss, dtype)
    for mine, theirs in zip([model[0], model[2]], [reference[0], reference[2]]):
        for slot, tslot in ((mine.weight, theirs.weight), (mine.bias, theirs.bias)):
            g = slot.value.grad(grads)
            assert slot.value.dtype is em.float32 and g.dtype is em.float32
            _close(g, tslot.grad, dtype)


# ----- scope --------------------------------------------------------------------------------


def test_blocks_nest_and_enabled_false_switches_autocast_off():
    x = em.randn(2, 2)
    with em.autocast(dtype=em.bfloat16):
        assert (x @ x).dtype is em.bfloat16
        with em.autocast(dtype=em.float16):
            assert (x @ x).dtype is em.float16 and em.get_autocast_dtype() is em.float16
            with em.autocast(enabled=False):
                assert (x @ x).dtype is em.float32 and not em.is_autocast_enabled()
            assert (x @ x).dtype is em.float16
        assert (x @ x).dtype is em.bfloat16
    assert (x @ x).dtype is em.float32
    assert mixed_precision.entered == 0


def test_a_block_used_as_a_decorator_and_exited_by_an_exception():
    @em.autocast(dtype=em.float16)
    def product(a: em.Tensor) -> em.Tensor:
        return a @ a

    x = em.randn(3, 3)
    assert product(x).dtype is em.float16
    assert (x @ x).dtype is em.float32
    with pytest.raises(em.ShapeError):
        with em.autocast():
            x @ em.randn(4, 4)
    assert (x @ x).dtype is em.float32 and mixed_precision.entered == 0


def test_device_type_limits_the_block_to_that_kind_of_device():
    x = em.randn(2, 2)
    with em.autocast("cuda", dtype=em.bfloat16):
        assert (x @ x).dtype is em.float32  # a CPU tensor: untouched
    with em.autocast("cpu:0"):  # torch accepts an index; the default is bfloat16 there
        assert (x @ x).dtype is em.bfloat16
    assert em.autocast("cuda").dtype is em.float16


@pytest.mark.parametrize("kwargs,error", [
    ({"dtype": em.float32}, em.DTypeError), ({"dtype": "int64"}, em.DTypeError),
    ({"device_type": "tpu"}, ValueError), ({"dtype": "nonsense"}, em.DTypeError)])
def test_bad_arguments_are_refused(kwargs, error):
    with pytest.raises(error, match="autocast|dtype"):
        em.autocast(**kwargs)


def test_the_setting_is_per_thread():
    seen = []
    entered, release = threading.Event(), threading.Event()

    def inside() -> None:
        with em.autocast():
            entered.set()
            release.wait(10)

    thread = threading.Thread(target=inside)
    thread.start()
    entered.wait(10)
    x = em.randn(2, 2)
    seen.append((x @ x).dtype)  # another thread's open block does not reach this one
    release.set()
    thread.join()
    assert seen == [em.float32]


def test_the_setting_is_per_trio_task():
    x = em.randn(2, 2)
    dtypes = {}

    async def in_block(inside_done: trio.Event, outside_done: trio.Event) -> None:
        with em.autocast(dtype=em.float16):
            inside_done.set()
            await outside_done.wait()  # the other task runs while this block is open
            dtypes["inside"] = (x @ x).dtype

    async def outside(inside_done: trio.Event, outside_done: trio.Event) -> None:
        await inside_done.wait()
        dtypes["outside"] = (x @ x).dtype
        outside_done.set()

    async def main() -> None:
        a, b = trio.Event(), trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(in_block, a, b)
            nursery.start_soon(outside, a, b)

    em.run(main)
    assert dtypes == {"inside": em.float16, "outside": em.float32}


@pytest.mark.parametrize("on_caller_thread", [False, True])
def test_backward_keeps_the_forward_dtypes(monkeypatch, on_caller_thread):
    """A backward called inside the block (walked on the caller's thread, or the actor's)
    issues its ops in the dtypes the forward recorded: pow's input gradient is float32
    (pow ran in float32), the cast back to the bf16 value is recorded, and the leaf's
    gradient is float32."""
    monkeypatch.setattr(engine, "ACTORS", not on_caller_thread)
    device = em.cpu().autodiff()
    w = em.tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3),
                  device=device).require_grad()
    with em.autocast(dtype=em.bfloat16):
        h = w @ w.T  # bfloat16
        loss = (h ** 2).sum()  # pow and sum in float32
        grads = loss.backward()
    g = w.grad(grads)
    assert g.dtype is em.float32
    w_np = w.numpy().astype(np.float64)
    h_np = w_np @ w_np.T
    expected = 4 * h_np @ w_np  # d/dw sum((w wᵀ)²), symmetric
    np.testing.assert_allclose(g.numpy(), expected, atol=5e-2)


def test_a_parameter_used_twice_in_a_block_is_cast_once():
    device = em.cpu().autodiff()
    w = em.randn(4, 4, device=device).require_grad()
    x = em.randn(4, 4, device=device)
    with em.autocast():
        (first,) = mixed_precision.to_low(w)
        (again,) = mixed_precision.to_low(w)
        (computed,) = mixed_precision.to_low(x)
        assert first is again and computed is not mixed_precision.to_low(x)[0]
        with em.no_grad():  # an untracked cast is never cached
            assert mixed_precision.to_low(w)[0] is not first
        loss = (x @ w @ w).float().sum()
    grads = loss.backward()
    x_np, w_np = x.numpy().astype(np.float64), w.numpy().astype(np.float64)
    ones = np.ones((4, 4))
    expected = (x_np.T @ ones @ w_np.T) + (x_np @ w_np).T @ ones
    np.testing.assert_allclose(w.grad(grads).numpy(), expected, rtol=0.05,
                               atol=0.05 * np.abs(expected).max())
    with em.autocast():
        assert mixed_precision.to_low(w)[0] is not first  # a new block, a new cache


def test_a_training_loop_inside_one_block_keeps_no_old_parameters():
    device = em.cpu().autodiff()
    model = nn.Linear(4, 4, device=device)
    opt = em.optim.SGD(model.parameters(), lr=0.1)
    x = em.randn(2, 4, device=device)
    with em.autocast():
        for _ in range(5):
            loss = model(x).float().sum()
            opt.step(loss.backward())
            del loss
        em.sync()
        cache = mixed_precision._state.get().cache
        assert len(cache) <= 2 * 2  # this step's weight and bias, maybe the last step's
        out = model(x)
    expected = x.numpy() @ model.weight.value.numpy().T + model.bias.value.numpy()
    np.testing.assert_allclose(out.numpy().astype(np.float32), expected, rtol=0.05, atol=0.05)
