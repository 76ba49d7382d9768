"""Elementwise gradients where finite differences cannot decide: PyTorch's conventions.

At a kink, a jump or a bound a function has no derivative, and central
differences would split the difference; ember follows PyTorch there (relu and
abs give 0 at 0, clamp's bounds are inclusive, pow's special cases at 0).
Also: which ops cut the graph (detach, floordiv, comparisons, a move to an
untracked device) and which carry it (casts, a move to the autodiff twin).
"""

from __future__ import annotations

import numpy as np
import pytest

import ember as em

torch = pytest.importorskip("torch")

CHECKPOINTING = [None, "balanced"]


@pytest.fixture(params=CHECKPOINTING, ids=["plain", "balanced"])
def device(request) -> em.Device:
    return em.cpu(0).autodiff(checkpointing=request.param)


def ember_grads(fn, arrays, device) -> list:
    """Gradients of ``fn(*tensors).sum()`` for every input (None where none flowed)."""
    xs = [em.tensor(np.asarray(a, np.float64), device=device).require_grad() for a in arrays]
    grads = fn(*xs).sum().backward()
    return [None if x.grad(grads) is None else x.grad(grads).numpy() for x in xs]


def torch_grads(fn, arrays) -> list:
    xs = [torch.tensor(np.asarray(a, np.float64), requires_grad=True) for a in arrays]
    fn(*xs).sum().backward()
    return [x.grad.numpy() for x in xs]


def check(fn, *arrays, device, torch_fn=None) -> None:
    got = ember_grads(fn, arrays, device)
    want = torch_grads(torch_fn or fn, arrays)
    for g, w in zip(got, want):
        assert g is not None
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=0, equal_nan=True)


KINKS = np.array([-1.0, 0.0, -0.0, 1.0])


def test_relu_and_abs_have_no_gradient_at_zero(device) -> None:
    check(lambda x: x.relu(), KINKS, device=device)
    check(lambda x: abs(x), KINKS, device=device)
    assert ember_grads(lambda x: x.relu(), [KINKS], device)[0].tolist() == [0, 0, 0, 1]


def test_clamp_bounds_are_inclusive(device) -> None:
    x = np.array([-2.0, -1.0, 0.0, 1.5, 2.0])
    check(lambda x: x.clamp(-1.0, 1.5), x, device=device)
    check(lambda x: x.clamp(min=0.0), x, device=device)
    check(lambda x: x.clamp(max=-1.0), x, device=device)
    check(lambda x: x.clamp(1.0, -1.0), x, device=device)  # min > max: all max, no gradient
    assert ember_grads(lambda x: x.clamp(-1.0, 1.5), [x], device)[0].tolist() == [0, 1, 1, 1, 0]


def test_maximum_minimum_split_ties(device) -> None:
    a, b = np.array([1.0, 2.0, 3.0]), np.array([1.0, 3.0, 2.0])
    check(lambda a, b: a.maximum(b), a, b, device=device, torch_fn=torch.maximum)
    check(lambda a, b: a.minimum(b), a, b, device=device, torch_fn=torch.minimum)
    assert ember_grads(lambda a, b: a.maximum(b), [a, b], device)[0].tolist() == [0.5, 0, 1]


def test_pow_conventions_at_zero(device) -> None:
    x = np.array([0.0, 1.0, 2.0, -1.5])
    check(lambda x: x ** 2, x, device=device)
    check(lambda x: x ** 0, x, device=device)
    check(lambda x: x ** 1, x, device=device)
    check(lambda x: x.abs() ** 0.5, x, device=device)  # inf at 0
    check(lambda x: x.abs() ** -1.0, x, device=device)
    check(lambda y: 0.0 ** y, np.array([-1.0, 0.0, 0.5, 2.0]), device=device)
    check(lambda y: 2.0 ** y, np.array([-1.0, 0.0, 0.5, 2.0]), device=device)
    base = np.array([0.0, 0.0, 0.0, 0.0, 2.0, 3.0])
    exponent = np.array([0.0, 0.5, 2.0, -1.0, 0.0, -0.5])
    check(lambda a, b: a ** b, base, exponent, device=device)


def test_sqrt_and_log_at_zero(device) -> None:
    x = np.array([0.0, 1.0, 4.0])
    check(lambda x: x.sqrt(), x, device=device)
    check(lambda x: x.log(), x, device=device)
    check(lambda x: x.rsqrt(), x, device=device)


def test_step_functions_give_zero_gradients(device) -> None:
    x = np.array([-1.5, -0.5, 0.0, 0.5, 2.0])
    for fn in (lambda x: x.sign(), lambda x: x.floor(), lambda x: x.ceil(),
               lambda x: x.round(), lambda x: x.round(decimals=1)):
        check(fn, x, device=device)  # zeros, as a tensor (torch does not give None)


def test_remainder_gradient_to_the_divisor(device) -> None:
    a, b = np.array([5.5, -5.5, 5.5, -5.5]), np.array([2.0, 2.0, -2.0, -2.0])
    check(lambda a, b: a % b, a, b, device=device)
    # torch cannot differentiate scalar % tensor; ember does, as tensor % tensor.
    check(lambda b: 5.5 % b, b, device=device,
          torch_fn=lambda b: torch.tensor(5.5, dtype=b.dtype) % b)


def test_floordiv_and_comparisons_are_not_tracked(device) -> None:
    x = em.tensor([1.5, -2.5], device=device).require_grad()
    assert not (x // 2).is_tracked and not (2 // x).is_tracked
    assert not (x > 0).is_tracked and not x.isnan().is_tracked
    grads = ((x // 0.5) * x).sum().backward()  # the floor is a constant factor
    np.testing.assert_array_equal(x.grad(grads).numpy(), [3.0, -5.0])


def test_detach_cuts_the_graph(device) -> None:
    x = np.array([0.5, -1.0, 2.0])
    check(lambda x: x * x.detach(), x, device=device)
    t = em.tensor(x, device=device).require_grad()
    d = t.detach()
    assert not d.is_tracked and d.device == device
    assert d.numpy().tolist() == x.tolist()


def test_moves_between_autodiff_twins_keep_the_gradient(device) -> None:
    other = em.cpu(0).autodiff("balanced" if device.checkpointing is None else None)
    x = em.tensor([0.5, -1.0, 2.0], device=device).require_grad()
    y = x.to(other)
    assert y.is_tracked and y.device is other
    grads = (y * y).sum().backward()
    np.testing.assert_allclose(x.grad(grads).numpy(), [1.0, -2.0, 4.0])
    assert not x.to(device.inner).is_tracked  # off the autodiff device: a constant


def test_float_casts_carry_the_gradient_in_the_input_dtype(device) -> None:
    x = em.tensor([0.5, -1.25, 3.0], device=device).require_grad()  # float32
    grads = (x.double() * 3.0).sum().backward()
    g = x.grad(grads)
    assert g.dtype is em.float32 and g.device == device.inner
    assert g.numpy().tolist() == [3.0, 3.0, 3.0]
    assert not x.long().is_tracked and not x.bool().is_tracked
