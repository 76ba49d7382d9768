"""Conv and pooling layers against torch.nn: same state dicts, outputs and gradients.

Each check copies a torch layer's weights into the ember layer (through
``load_state_dict``), runs both on the same input and compares the output
and the gradients of a random projection of it with respect to the input,
the weight and the bias, in float32 (and float64 where noted).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import ember as em
from ember import nn

torch = pytest.importorskip("torch")

# torch notes that padding="same" with an even kernel copies the input; not news here.
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same':UserWarning")


def _copy(torch_layer, ember_layer) -> None:
    ember_layer.load_state_dict({k: v.detach().numpy() for k, v in
                                 torch_layer.state_dict().items()})


def _close(got: np.ndarray, want: np.ndarray, dtype: str, what: str) -> None:
    # float32 sums over batch and positions: compare to the magnitude of the result.
    rtol = 1e-10 if dtype == "float64" else 1e-4
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale, err_msg=what)


def check_layer(torch_layer, ember_layer, x_np: np.ndarray, device: em.Device,
                *forward_args) -> None:
    """Layout, forward and every gradient of ``ember_layer`` equal ``torch_layer``'s."""
    dtype = str(x_np.dtype)
    assert list(ember_layer.state_dict()) == list(torch_layer.state_dict())
    assert [n for n, _ in ember_layer.named_parameters()] == \
        [n for n, _ in torch_layer.named_parameters()]
    assert ember_layer.num_params() == sum(p.numel() for p in torch_layer.parameters())
    _copy(torch_layer, ember_layer)

    x = em.tensor(x_np, device=device).require_grad()
    y = ember_layer(x, *forward_args)
    xt = torch.tensor(x_np, requires_grad=True)
    yt = torch_layer(xt, *forward_args)
    assert y.shape == tuple(yt.shape)
    _close(y.numpy(), yt.detach().numpy(), dtype, "forward")

    cot = np.random.default_rng(1).standard_normal(y.shape).astype(x_np.dtype)
    grads = y.backward(em.tensor(cot, device=device))
    params = dict(ember_layer.named_parameters())
    torch_params = dict(torch_layer.named_parameters())
    leaves = [xt] + list(torch_params.values())
    expected = torch.autograd.grad(yt, leaves, torch.tensor(cot))
    _close(x.grad(grads).numpy(), expected[0].numpy(), dtype, "input gradient")
    for (name, p), want in zip(params.items(), expected[1:]):
        _close(p.grad(grads).numpy(), want.numpy(), dtype, f"{name} gradient")


def _input(shape: tuple[int, ...], dtype=np.float32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.fixture(params=[None, "balanced"], ids=["plain", "balanced"])
def device(request) -> em.Device:
    return em.cpu(0).autodiff(checkpointing=request.param)


# (layer name, constructor args, kwargs, input shape)
CONV_CONFIGS = [
    ("Conv2d", (3, 8, 3), {}, (2, 3, 8, 8)),
    ("Conv2d", (3, 5, 3), {"padding": 1}, (1, 3, 7, 9)),                      # batch 1, odd
    ("Conv2d", (4, 6, (3, 2)), {"stride": 2, "padding": (1, 0)}, (3, 4, 9, 7)),
    ("Conv2d", (4, 4, 3), {"dilation": 2, "padding": 2, "bias": False}, (2, 4, 9, 8)),
    ("Conv2d", (4, 6, 3), {"groups": 2, "stride": (2, 1)}, (2, 4, 7, 7)),
    ("Conv2d", (6, 6, 3), {"groups": 6, "padding": 1}, (2, 6, 5, 6)),          # depthwise
    ("Conv2d", (3, 6, 5), {"groups": 3, "stride": 2, "padding": 2}, (1, 3, 11, 11)),  # ×2
    ("Conv2d", (3, 4, 4), {"padding": "same"}, (2, 3, 6, 7)),
    ("Conv2d", (5, 7, 1), {}, (2, 5, 3, 4)),                                   # 1x1
    ("Conv2d", (3, 4, 3), {"stride": 2}, (3, 9, 9)),                           # unbatched
    ("Conv1d", (3, 6, 3), {}, (2, 3, 11)),
    ("Conv1d", (4, 6, 5), {"stride": 2, "padding": 2, "dilation": 2, "groups": 2}, (1, 4, 17)),
    ("Conv1d", (4, 4, 3), {"groups": 4, "padding": "same", "bias": False}, (2, 4, 9)),
    ("ConvTranspose2d", (3, 5, 3), {}, (2, 3, 5, 4)),
    ("ConvTranspose2d", (4, 2, 4), {"stride": 2, "padding": 1}, (1, 4, 5, 5)),
    ("ConvTranspose2d", (4, 6, 3), {"stride": 2, "padding": 1, "output_padding": 1,
                                    "groups": 2}, (2, 4, 4, 5)),
    ("ConvTranspose2d", (2, 3, (2, 3)), {"dilation": (2, 1), "stride": (1, 3),
                                         "bias": False}, (2, 2, 3, 3)),
    ("ConvTranspose2d", (3, 3, 3), {"groups": 3, "stride": 2}, (3, 4, 4)),     # depthwise
    ("ConvTranspose1d", (3, 4, 3), {"stride": 3, "padding": 1, "output_padding": 2},
     (2, 3, 6)),
]


@pytest.mark.parametrize("name, args, kwargs, shape", CONV_CONFIGS,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CONV_CONFIGS)])
def test_conv_layers_match_torch(name, args, kwargs, shape, device) -> None:
    torch.manual_seed(0)
    torch_layer = getattr(torch.nn, name)(*args, **kwargs)
    ember_layer = getattr(nn, name)(*args, **kwargs, device=device)
    check_layer(torch_layer, ember_layer, _input(shape), device)


@pytest.mark.parametrize("name, args, kwargs, shape", [CONV_CONFIGS[i] for i in (2, 5, 15)])
def test_conv_layers_match_torch_in_float64(name, args, kwargs, shape, device) -> None:
    torch.manual_seed(0)
    torch_layer = getattr(torch.nn, name)(*args, **kwargs).double()
    ember_layer = getattr(nn, name)(*args, **kwargs, device=device, dtype=em.float64)
    check_layer(torch_layer, ember_layer, _input(shape, np.float64), device)


def test_conv_transpose_output_size_picks_the_output_padding(device) -> None:
    torch.manual_seed(0)
    torch_layer = torch.nn.ConvTranspose2d(3, 2, 3, stride=3, padding=1)
    ember_layer = nn.ConvTranspose2d(3, 2, 3, stride=3, padding=1, device=device)
    check_layer(torch_layer, ember_layer, _input((2, 3, 4, 4)), device, (12, 11))


POOL_CONFIGS = [
    ("MaxPool2d", (2,), {}, (2, 3, 8, 8)),
    ("MaxPool2d", (3,), {"stride": 2, "padding": 1}, (1, 2, 9, 7)),
    ("MaxPool2d", ((3, 2),), {"stride": 1, "dilation": (2, 1), "ceil_mode": True},
     (2, 2, 7, 6)),
    ("MaxPool2d", (3,), {"stride": 2, "ceil_mode": True, "padding": 1}, (3, 8, 8)),
    ("AvgPool2d", (2,), {}, (2, 3, 8, 8)),
    ("AvgPool2d", (3,), {"stride": 2, "padding": 1, "count_include_pad": False},
     (1, 2, 9, 7)),
    ("AvgPool2d", (3,), {"stride": 2, "padding": 1, "ceil_mode": True}, (2, 2, 8, 7)),
    ("AvgPool2d", ((2, 3),), {"stride": 1, "divisor_override": 4}, (3, 5, 5)),
    ("AdaptiveAvgPool2d", (1,), {}, (2, 3, 7, 5)),
    ("AdaptiveAvgPool2d", ((3, 4),), {}, (2, 3, 7, 9)),
    ("AdaptiveAvgPool2d", ((5, None),), {}, (2, 3, 3, 4)),
]


@pytest.mark.parametrize("name, args, kwargs, shape", POOL_CONFIGS,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(POOL_CONFIGS)])
def test_pooling_layers_match_torch(name, args, kwargs, shape, device) -> None:
    torch_layer = getattr(torch.nn, name)(*args, **kwargs)
    ember_layer = getattr(nn, name)(*args, **kwargs)
    check_layer(torch_layer, ember_layer, _input(shape), device)


def test_max_pool_ties_go_to_the_first_max_and_nan_to_the_last_nan(device) -> None:
    x_np = np.random.default_rng(0).integers(0, 2, (2, 3, 7, 7)).astype(np.float32)
    x_np[0, 0, 1, 1:3] = np.nan
    x_np[1, 2, 4, 4] = np.nan
    for kwargs in ({"kernel_size": 2}, {"kernel_size": 3, "stride": 1, "padding": 1},
                   {"kernel_size": 3, "stride": 2, "dilation": 2, "ceil_mode": True}):
        x = em.tensor(x_np, device=device).require_grad()
        y, index = nn.F.max_pool2d(x, return_indices=True, **kwargs)
        xt = torch.tensor(x_np, requires_grad=True)
        yt, index_t = torch.nn.functional.max_pool2d(xt, return_indices=True, **kwargs)
        np.testing.assert_array_equal(y.numpy(), yt.detach().numpy())
        np.testing.assert_array_equal(index.numpy(), index_t.numpy())
        cot = np.random.default_rng(1).standard_normal(y.shape).astype(np.float32)
        got = x.grad(y.backward(em.tensor(cot, device=device))).numpy()
        (want,) = torch.autograd.grad(yt, [xt], torch.tensor(cot))
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, atol=1e-6, err_msg=str(kwargs))


def test_default_init_matches_torch_bounds() -> None:
    em.manual_seed(0)
    for layer, fan_in in [(nn.Conv2d(16, 32, 3), 16 * 9), (nn.Conv2d(16, 32, 3, groups=4), 4 * 9),
                          (nn.Conv1d(8, 64, 5), 8 * 5),
                          (nn.ConvTranspose2d(32, 16, 4, groups=2), 8 * 16)]:
        bound = 1.0 / math.sqrt(fan_in)  # kaiming_uniform(a=√5): gain·√(3/fan_in) = 1/√fan_in
        weight = layer.weight.value.numpy()
        bias = layer.bias.value.numpy()
        assert weight.dtype == np.float32 and bias.dtype == np.float32
        assert np.abs(weight).max() <= bound and np.abs(weight).max() > 0.95 * bound
        assert np.abs(weight.mean()) < 0.1 * bound
        assert np.abs(bias).max() <= bound
        assert abs(weight.std() - bound / math.sqrt(3)) < 0.1 * bound


def test_same_parameters_as_torch() -> None:
    for ember_layer, torch_layer in [
        (nn.Conv2d(3, 8, 3, bias=False), torch.nn.Conv2d(3, 8, 3, bias=False)),
        (nn.Conv2d(8, 8, 3, groups=8), torch.nn.Conv2d(8, 8, 3, groups=8)),
        (nn.ConvTranspose2d(8, 4, (3, 2), groups=2), torch.nn.ConvTranspose2d(8, 4, (3, 2),
                                                                             groups=2)),
        (nn.Conv1d(2, 6, 4), torch.nn.Conv1d(2, 6, 4)),
    ]:
        assert ember_layer.num_params() == sum(p.numel() for p in torch_layer.parameters())
        assert {k: v.shape for k, v in ember_layer.state_dict().items()} == \
            {k: tuple(v.shape) for k, v in torch_layer.state_dict().items()}
    assert nn.MaxPool2d(2).num_params() == 0 and nn.MaxPool2d(2).state_dict() == {}


@pytest.mark.parametrize("dtype, tolerance", [(em.float16, 2e-3), (em.bfloat16, 1.6e-2)])
def test_low_precision_layers_round_the_float32_result_once(dtype, tolerance) -> None:
    conv = nn.Conv2d(4, 6, 3, stride=2, padding=1)
    low = nn.Conv2d(4, 6, 3, stride=2, padding=1, dtype=dtype)
    low.load_state_dict({k: v.astype(dtype.np) for k, v in conv.state_dict().items()})
    x_np = _input((2, 4, 9, 9)).astype(dtype.np)
    y = low(em.tensor(x_np))
    assert y.dtype is dtype
    reference = conv.load_state_dict(
        {k: v.astype(np.float32) for k, v in low.state_dict().items()})(
        em.tensor(x_np.astype(np.float32))).numpy()
    np.testing.assert_allclose(y.numpy().astype(np.float32), reference, rtol=tolerance,
                               atol=tolerance)
    pooled = nn.MaxPool2d(2)(y)
    assert pooled.dtype is dtype
    np.testing.assert_array_equal(
        pooled.numpy().astype(np.float32),
        nn.MaxPool2d(2)(em.tensor(y.numpy().astype(np.float32))).numpy())


@pytest.mark.parametrize("dtype, tolerance", [(em.float16, 5e-3), (em.bfloat16, 4e-2)])
def test_low_precision_gradients_follow_float32(dtype, tolerance) -> None:
    """Every op of the family, forward and backward, in float16 / bfloat16 against float32."""
    device = em.cpu().autodiff()
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32)
              for s in ((2, 4, 9, 9), (6, 2, 3, 3), (6,), (6, 3, 3, 3))]

    def run(dt):
        x, w, b, w2 = (em.tensor(a.astype(dt.np), device=device).require_grad() for a in arrays)
        y = nn.F.conv2d(x, w, b, stride=2, padding=1, groups=2)
        y = nn.F.max_pool2d(nn.F.conv_transpose2d(y, w2, stride=2), 2)
        y = nn.F.adaptive_avg_pool2d(nn.F.avg_pool2d(y, 2, ceil_mode=True), (2, 3))
        assert y.dtype is dt
        grads = y.backward(em.ones(*y.shape, device=device, dtype=dt))
        return [t.grad(grads).numpy() for t in (x, w, b, w2)]

    for got, want in zip(run(dtype), run(em.float32)):
        assert got.dtype == dtype.np
        np.testing.assert_allclose(got.astype(np.float32), want, rtol=tolerance,
                                   atol=tolerance * max(1.0, float(np.abs(want).max())))


def _small_cnn(layers, **kw) -> dict:
    """conv → max-pool → strided conv → avg-pool → depthwise conv → global pool: ops of this
    family only, so the check needs no other op's gradient."""
    return {
        "conv1": layers.Conv2d(3, 8, 3, padding=1, **kw),
        "pool1": layers.MaxPool2d(2),
        "conv2": layers.Conv2d(8, 12, 3, stride=2, padding=1, **kw),
        "pool2": layers.AvgPool2d(3, stride=1, padding=1, count_include_pad=False),
        "conv3": layers.Conv2d(12, 12, 3, padding=1, groups=12, bias=False, **kw),
        "head": layers.AdaptiveAvgPool2d(1),
    }


class SmallCNN(nn.Module):
    def __init__(self, device=None) -> None:
        super().__init__()
        for name, layer in _small_cnn(nn, device=device).items():
            setattr(self, name, layer)

    def forward(self, x):
        for layer in self._children.values():
            x = layer(x)
        return x


class TorchSmallCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        for name, layer in _small_cnn(torch.nn).items():
            setattr(self, name, layer)

    def forward(self, x):
        for layer in self.children():
            x = layer(x)
        return x


def test_small_cnn_matches_torch(device) -> None:
    torch.manual_seed(0)
    check_layer(TorchSmallCNN(), SmallCNN(device=device), _input((4, 3, 16, 15)), device)
