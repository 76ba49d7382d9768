"""Reduction and sorting gradients where finite differences are ill-defined: against torch only.

At ties max / min, sort and topk are not differentiable; both libraries pick
a subgradient, and ember picks PyTorch's: ``max`` / ``min`` split the gradient
evenly among the tied elements (``torch.amax`` / ``amin``, and the full
``torch.max()``; ``torch.max(x, dim)`` instead gives it all to the index it
returns, but ember's ``max(dim)`` returns values only), and sort / topk send
each value's gradient to the index their stable order assigns it. Constant
slices (std), all ``-inf`` slices (logsumexp), NaN and zero degrees of
freedom (var / std) are checked the same way. Each case runs without and with
"balanced" checkpointing.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import ember as em
from tests.ops.grad_harness import GradCase, ember_vjp, torch_vjp

torch = pytest.importorskip("torch")

TIES = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [-1.0, 0.5, -1.0, 0.5]])
TIES_3D = np.array([[[1.0, 2.0], [2.0, 0.0]], [[2.0, 2.0], [-1.0, 2.0]]])

CASES: list[GradCase] = []


def case(id: str, fn, torch_fn, *inputs) -> None:
    CASES.append(GradCase(id, fn, [np.asarray(v, np.float64) for v in inputs], torch_fn=torch_fn))


def _torch_dims(dim, ndim: int):
    return tuple(range(ndim)) if dim is None else dim


for _op in ("max", "min"):
    for _a, _dims in ((TIES, (None, 0, 1, -1, (0, 1))), (TIES_3D, (None, 0, 2, (0, 2), (1, 2)))):
        for _dim in _dims:
            for _keepdim in (False, True):
                case(f"{_op}/ties/{_a.shape}/dim={_dim}/keepdim={_keepdim}",
                     lambda x, op=_op, dim=_dim, keepdim=_keepdim:
                         getattr(x, op)(dim=dim, keepdim=keepdim),
                     lambda x, op=_op, dim=_dim, keepdim=_keepdim:
                         getattr(torch, "a" + op)(x, dim=_torch_dims(dim, x.ndim), keepdim=keepdim),
                     _a)
    # The full reduction matches torch.max() / torch.min() too (the even split).
    case(f"{_op}/ties/full-torch-{_op}", lambda x, op=_op: getattr(x, op)(),
         lambda x, op=_op: getattr(x, op)(), TIES)
    case(f"{_op}/ties/all-equal", lambda x, op=_op: getattr(x, op)(1),
         lambda x, op=_op: getattr(torch, "a" + op)(x, 1), np.full((2, 3), 0.5))
    case(f"{_op}/ties/0d", lambda x, op=_op: getattr(x, op)(),
         lambda x, op=_op: getattr(x, op)(), np.array(1.5))
    # NaN: the reduced value is NaN, no element equals it, the slice's gradient is NaN.
    case(f"{_op}/nan", lambda x, op=_op: getattr(x, op)(1),
         lambda x, op=_op: getattr(torch, "a" + op)(x, 1), [[1.0, math.nan, 2.0], [1.0, 3.0, 3.0]])

# Sort: tied values keep their original order (stable), in both directions.
for _dim in (0, 1, -1):
    for _descending in (False, True):
        case(f"sort/ties/dim={_dim}/descending={_descending}",
             lambda x, dim=_dim, d=_descending: x.sort(dim, d)[0],
             lambda x, dim=_dim, d=_descending:
                 torch.sort(x, dim=dim, descending=d, stable=True)[0],
             TIES)

# topk: ties inside and at the boundary of the k kept; the earliest index wins, which is
# torch's stable sort cut at k (torch.topk leaves the order of ties unspecified).
for _k in (1, 2, 3):
    for _largest in (True, False):
        case(f"topk/ties/k={_k}/largest={_largest}",
             lambda x, k=_k, largest=_largest: x.topk(k, 1, largest)[0],
             lambda x, k=_k, largest=_largest:
                 torch.sort(x, dim=1, descending=largest, stable=True)[0][:, :k],
             TIES)
case("topk/ties/dim=0", lambda x: x.topk(2, 0)[0],
     lambda x: torch.sort(x, dim=0, descending=True, stable=True)[0][:2], TIES)

# std of a constant slice: 0 (torch masks the 0 / 0); var's there is 0 too.
_CONSTANT = [[1.5, 1.5, 1.5], [0.5, -1.0, 2.0]]
for _op in ("std", "var"):
    for _dim in (1, None):
        case(f"{_op}/constant/dim={_dim}", lambda x, op=_op, dim=_dim: getattr(x, op)(dim),
             lambda x, op=_op, dim=_dim: getattr(torch, op)(x, dim=dim), _CONSTANT)
# Degrees of freedom <= 0 over the full reduction: inf times the gradient, nan at the mean.
for _op in ("var", "std"):
    for _correction in (3, 4):
        case(f"{_op}/no-dof/correction={_correction}",
             lambda x, op=_op, c=_correction: getattr(x, op)(correction=c),
             lambda x, op=_op, c=_correction: getattr(torch, op)(x, correction=c),
             [1.0, 2.0, 2.0])

# logsumexp: an all -inf slice (nan, as in torch), a +inf entry (nan for it, 0 for the rest).
case("logsumexp/infinite", lambda x: x.logsumexp(1), lambda x: torch.logsumexp(x, 1),
     [[-math.inf, -math.inf], [math.inf, 1.0], [0.0, -math.inf]])


@pytest.fixture(params=[None, "balanced"], ids=["plain", "balanced"])
def autodiff_device(request) -> em.Device:
    return em.cpu(0).autodiff(checkpointing=request.param)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_gradient_at_ties_matches_torch(case: GradCase, autodiff_device) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: "degrees of freedom is <= 0"
        _, cot, grads = ember_vjp(case, autodiff_device)
        expected = torch_vjp(case, cot)
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=case.id)


def test_max_with_dim_splits_ties_unlike_torch_max_dim() -> None:
    """The documented deviation: torch.max(x, dim).values gives a tie's gradient to one index."""
    x = em.tensor([[1.0, 3.0, 3.0]], device=em.cpu(0).autodiff()).require_grad()
    grads = x.max(1).sum().backward()
    assert x.grad(grads).tolist() == [[0.0, 0.5, 0.5]]
    t = torch.tensor([[1.0, 3.0, 3.0]], requires_grad=True)
    t.max(1).values.sum().backward()
    assert t.grad.sum().item() == 1.0 and sorted(t.grad.tolist()[0]) == [0.0, 0.0, 1.0]


def test_var_without_degrees_of_freedom_over_a_dim() -> None:
    """dim given, N - correction <= 0: inf (nan at the mean), where torch divides by N - c < 0."""
    x = em.tensor([[1.0, 2.0], [3.0, 3.0]], device=em.cpu(0).autodiff()).require_grad()
    grads = x.var(1, correction=3).sum().backward()
    got = x.grad(grads).numpy()
    assert np.isinf(got[0]).all() and np.isnan(got[1]).all()


def test_indices_carry_no_gradient() -> None:
    x = em.tensor([[3.0, 1.0, 2.0]], device=em.cpu(0).autodiff()).require_grad()
    values, indices = x.sort()
    assert values.is_tracked and not indices.is_tracked
    values, indices = x.topk(2)
    assert values.is_tracked and not indices.is_tracked
    for t in (x.argsort(), x.argmax(), x.argmin(1), x.any(), (x > 1).all()):
        assert not t.is_tracked
