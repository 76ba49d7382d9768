"""The rest of the everyday op surface (issue 24): inverse and hyperbolic trigonometry,
atan2, copysign, logaddexp, the running ops (cumprod, cummax, cummin, logcumsumexp),
scatter / scatter_reduce, unfold, and 3-D convolution and pooling.

Forward against NumPy (SciPy / torch's rules written out), float32 and float64, empty and
size-1 dims; gradients (float64) against finite differences and torch.
"""

from __future__ import annotations

import numpy as np

import ember as em
from tests.ops.grad_harness import GradCase
from tests.ops.harness import Case
from tests.ops.harness import array as _array

F = em.nn.functional


def array(shape, dtype="float32", **kwargs) -> np.ndarray:
    return np.asarray(_array(shape, dtype, **kwargs))


def _inside(shape, dtype, low, high, salt=0) -> np.ndarray:
    return np.random.default_rng(900 + salt).uniform(low, high, shape).astype(dtype)


def _running_extreme(a: np.ndarray, dim: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    """PyTorch's cummax / cummin: ties take the later index; NaN wins and carries on."""
    a = np.moveaxis(a.reshape(a.shape or (1,)), dim, -1)
    values, indices = np.empty_like(a), np.zeros(a.shape, np.int64)
    for pos in np.ndindex(a.shape[:-1]):
        best, at = None, 0
        for j, v in enumerate(a[pos]):
            if best is None or np.isnan(v) or (not np.isnan(best)
                                               and (v >= best if largest else v <= best)):
                best, at = v, j
            values[pos + (j,)], indices[pos + (j,)] = best, at
    return np.moveaxis(values, -1, dim), np.moveaxis(indices, -1, dim)


def _logcumsumexp(a: np.ndarray, dim: int) -> np.ndarray:
    return np.logaddexp.accumulate(a.astype(np.float64), axis=dim).astype(a.dtype)


def _scatter_reduce_ref(x, dim, index, src, reduce, include_self):
    out = x.astype(np.float64 if x.dtype.kind == "f" else x.dtype).copy()
    count = np.ones(x.shape, np.int64) if include_self else np.zeros(x.shape, np.int64)
    seen = np.zeros(x.shape, bool)
    for pos in np.ndindex(index.shape):
        target = list(pos)
        target[dim] = index[pos]
        target = tuple(target)
        value = src[pos]
        if not include_self and not seen[target]:
            out[target] = value
        elif reduce in ("sum", "mean"):
            out[target] += value
        elif reduce == "prod":
            out[target] *= value
        elif reduce == "amax":
            out[target] = max(out[target], value)
        else:
            out[target] = min(out[target], value)
        seen[target] = True
        count[target] += 1
    if reduce == "mean":
        safe = np.maximum(count, 1)
        out = out // safe if x.dtype.kind == "i" else out / safe
    return out.astype(x.dtype)


def _unfold_ref(a, dim, size, step):
    count = (a.shape[dim] - size) // step + 1
    windows = [np.take(a, range(i * step, i * step + size), axis=dim) for i in range(count)]
    return np.moveaxis(np.stack(windows, axis=dim), dim + 1, -1)


def _cases() -> list[Case]:
    cases = []
    for dt in ("float32", "float64"):
        for shape in [(3, 4), (1, 5), (2, 0, 3)]:
            s = str(shape)
            unit = _inside(shape, dt, -0.95, 0.95)
            wide = _inside(shape, dt, -4.0, 4.0, 1)
            above_one = _inside(shape, dt, 1.0, 9.0, 2)
            cases += [
                Case(f"asin/{s}/{dt}", em.asin, np.arcsin, [unit]),
                Case(f"acos/{s}/{dt}", lambda t: t.acos(), np.arccos, [unit]),
                Case(f"atan/{s}/{dt}", em.atan, np.arctan, [wide]),
                Case(f"sinh/{s}/{dt}", em.sinh, np.sinh, [wide]),
                Case(f"cosh/{s}/{dt}", lambda t: t.cosh(), np.cosh, [wide]),
                Case(f"asinh/{s}/{dt}", em.asinh, np.arcsinh, [wide]),
                Case(f"acosh/{s}/{dt}", em.acosh, np.arccosh, [above_one]),
                Case(f"atanh/{s}/{dt}", lambda t: t.atanh(), np.arctanh, [unit]),
                Case(f"atan2/{s}/{dt}", em.atan2, np.arctan2, [wide, unit]),
                Case(f"logaddexp/{s}/{dt}", em.logaddexp, np.logaddexp, [wide, unit]),
                Case(f"copysign/{s}/{dt}", em.copysign, np.copysign, [wide, unit]),
            ]
            for dim in (0, -1):
                cases += [
                    Case(f"cumprod/{s}/{dim}/{dt}", lambda t, d=dim: t.cumprod(d),
                         lambda a, d=dim: np.cumprod(a, d), [wide]),
                    Case(f"logcumsumexp/{s}/{dim}/{dt}", lambda t, d=dim: t.logcumsumexp(d),
                         lambda a, d=dim: _logcumsumexp(a, d), [wide]),
                    Case(f"cummax/{s}/{dim}/{dt}", lambda t, d=dim: t.cummax(d),
                         lambda a, d=dim: _running_extreme(a, d, True), [np.round(wide)]),
                    Case(f"cummin/{s}/{dim}/{dt}", lambda t, d=dim: em.cummin(t, d),
                         lambda a, d=dim: _running_extreme(a, d, False), [np.round(wide)]),
                ]
        special = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, np.inf, -np.inf, np.nan], dt)
        cases += [
            Case(f"asin/special/{dt}", em.asin, np.arcsin, [special]),
            Case(f"acos/special/{dt}", em.acos, np.arccos, [special]),
            Case(f"atanh/special/{dt}", em.atanh, np.arctanh, [special]),
            Case(f"acosh/special/{dt}", em.acosh, np.arccosh, [special]),
            Case(f"asinh/special/{dt}", em.asinh, np.arcsinh, [special]),
            Case(f"atan/special/{dt}", em.atan, np.arctan, [special]),
            Case(f"atan2/zeros/{dt}", em.atan2, np.arctan2,
                 [np.array([0.0, -0.0, 0.0, -0.0, 1.0, np.nan], dt),
                  np.array([0.0, 0.0, -0.0, -0.0, 0.0, 1.0], dt)]),
            Case(f"atan2/broadcast_scalar/{dt}", lambda a: em.atan2(a, 2.0),
                 lambda a: np.arctan2(a, a.dtype.type(2.0)), [array((2, 3), dt)]),
            Case(f"copysign/signed_zeros/{dt}", em.copysign, np.copysign,
                 [np.array([1.0, 2.0, -3.0, 0.0, np.inf], dt),
                  np.array([-0.0, 0.0, 1.0, -5.0, -1.0], dt)], exact=True),
            Case(f"copysign/scalar/{dt}", lambda a: em.copysign(a, -0.0),
                 lambda a: np.copysign(a, a.dtype.type(-0.0)), [array((4,), dt)]),
            Case(f"logaddexp/infinities/{dt}", em.logaddexp, np.logaddexp,
                 [np.array([-np.inf, np.inf, -np.inf, 1000.0], dt),
                  np.array([-np.inf, np.inf, 3.0, 1000.0], dt)]),
            Case(f"logcumsumexp/far_apart/{dt}", lambda t: t.logcumsumexp(0),
                 lambda a: _logcumsumexp(a, 0), [np.array([-1000.0, 0.0, -1e30, 50.0], dt)]),
            Case(f"cumprod/zeros/{dt}", lambda t: t.cumprod(1), lambda a: np.cumprod(a, 1),
                 [np.array([[2.0, 0.0, 3.0], [0.0, 0.0, 1.0]], dt)]),
            Case(f"cummax/nan/{dt}", lambda t: t.cummax(0),
                 lambda a: _running_extreme(a, 0, True),
                 [np.array([1.0, np.nan, 5.0, np.nan, 2.0], dt)]),
            Case(f"cummin/0d/{dt}", lambda t: t.cummin(0),
                 lambda a: (a, np.zeros((), np.int64)), [np.array(2.5, dt)]),
            Case(f"unfold/{dt}", lambda t: t.unfold(1, 3, 2), lambda a: _unfold_ref(a, 1, 3, 2),
                 [array((2, 7, 3), dt)], exact=True),
            Case(f"unfold/size1/{dt}", lambda t: t.unfold(-1, 1, 1),
                 lambda a: _unfold_ref(a, 1, 1, 1), [array((3, 4), dt)], exact=True),
            Case(f"unfold/empty/{dt}", lambda t: t.unfold(1, 0, 1),
                 lambda a: np.zeros((2, 1, 3, 0), a.dtype), [array((2, 0, 3), dt)], exact=True),
        ]
        idx = np.random.default_rng(3).integers(0, 3, (4, 5))
        for reduce in ("sum", "prod", "mean", "amax", "amin"):
            for include_self in (True, False):
                cases.append(Case(
                    f"scatter_reduce/{reduce}/{include_self}/{dt}",
                    lambda x, i, s, r=reduce, inc=include_self: x.scatter_reduce(
                        0, i, s, r, include_self=inc),
                    lambda x, i, s, r=reduce, inc=include_self: _scatter_reduce_ref(
                        x, 0, i, s, r, inc),
                    [array((3, 5), dt), idx, array((4, 6), dt, salt=1)]))
        perm = np.array([[2, 0, 1, 1, 0]])
        cases += [
            Case(f"scatter/src/{dt}", lambda x, i, s: x.scatter(0, i, s),
                 lambda x, i, s: _put(x, 0, i, s), [array((3, 5), dt), perm, array((2, 5), dt)],
                 exact=True),
            Case(f"scatter/value_dim1/{dt}", lambda x, i: em.scatter(x, 1, i, 4.5),
                 lambda x, i: _put(x, 1, i, np.full(i.shape, 4.5, x.dtype)),
                 [array((2, 4), dt), np.array([[3], [0]])], exact=True),
        ]
    ints = np.array([[3, -2, 5], [4, 0, -1]], np.int64)
    cases += [
        Case("cumprod/int_to_int64", lambda t: t.cumprod(1), lambda a: np.cumprod(a, 1),
             [ints.astype(np.int32)], dtype="int64", exact=True),
        Case("cumprod/dtype_arg", lambda t: t.cumprod(0, dtype=em.float64),
             lambda a: np.cumprod(a.astype(np.float64), 0), [ints]),
        Case("cumsum/dtype_arg", lambda t: t.cumsum(1, dtype=em.float64),
             lambda a: np.cumsum(a.astype(np.float64), 1), [ints]),
        Case("sort/stable_keyword", lambda t: t.sort(stable=True, descending=True)[1],
             lambda a: np.argsort(-a, kind="stable"), [np.array([2, 1, 2, 3, 1])], exact=True),
        Case("cummax/int_ties", lambda t: t.cummax(1),
             lambda a: _running_extreme(a, 1, True), [np.array([[1, 3, 3, 2, 3]])], exact=True),
        Case("scatter_reduce/int_mean_floors",
             lambda x, i, s: x.scatter_reduce(0, i, s, "mean", include_self=False),
             lambda x, i, s: _scatter_reduce_ref(x, 0, i, s, "mean", False),
             [np.array([7, 7, 7]), np.array([0, 0, 2, 2]), np.array([-3, 4, 5, 4])], exact=True),
        Case("scatter_reduce/int_amax", lambda x, i, s: x.scatter_reduce(0, i, s, "amax"),
             lambda x, i, s: _scatter_reduce_ref(x, 0, i, s, "amax", True),
             [np.array([7, -7, 0]), np.array([0, 1, 1]), np.array([3, -9, -8])], exact=True),
        Case("atan2/ints_to_float", em.atan2, lambda a, b: np.arctan2(a, b).astype(np.float32),
             [np.array([1, -2, 0]), np.array([3, 3, -1])]),
        Case("asin/int_to_float", em.asin, lambda a: np.arcsin(a).astype(np.float32),
             [np.array([0, 1, -1])]),
    ]
    x5 = array((2, 4, 5, 6, 5))
    cases += [
        Case("conv3d/groups_stride_pad", lambda x, w, b: F.conv3d(x, w, b, (2, 1, 1), 1, 1, 2),
             lambda x, w, b: _conv3d_ref(x, w, b, (2, 1, 1), 1, 2),
             [x5, array((6, 2, 2, 3, 2), salt=1), array((6,), salt=2)], rtol=1e-4, atol=1e-5),
        Case("conv3d/unbatched_same", lambda x, w: F.conv3d(x, w, padding="same"),
             lambda x, w: _conv3d_ref(x[None], w, None, (1, 1, 1), 1, 1)[0],
             [array((3, 4, 4, 4)), array((2, 3, 3, 3, 3), salt=1)], rtol=1e-4, atol=1e-5),
        Case("max_pool3d/pad_stride", lambda x: F.max_pool3d(x, 3, 2, 1),
             lambda x: _pool3d_ref(x, 3, 2, 1, np.max, -np.inf), [x5]),
        Case("avg_pool3d/kernel2", lambda x: F.avg_pool3d(x, 2),
             lambda x: _pool3d_ref(x, 2, 2, 0, np.mean, 0.0), [array((1, 2, 4, 6, 4))]),
    ]
    return cases


def _put(x, dim, index, src):
    out = x.copy()
    for pos in np.ndindex(index.shape):
        target = list(pos)
        target[dim] = index[pos]
        out[tuple(target)] = src[pos]
    return out


def _conv3d_ref(x, w, b, stride, padding, groups):
    """Direct sums over the window, float64."""
    x = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(padding, padding)] * 3)
    n, c, d, h, wd = x.shape
    o, per, kd, kh, kw = w.shape
    outs = [(size - k) // s + 1 for size, k, s in zip((d, h, wd), (kd, kh, kw), stride)]
    out = np.zeros((n, o, *outs))
    per_out = o // groups
    for oc in range(o):
        g = oc // per_out
        for i, j, k in np.ndindex(*outs):
            a, bb, cc = i * stride[0], j * stride[1], k * stride[2]
            patch = x[:, g * per:(g + 1) * per, a:a + kd, bb:bb + kh, cc:cc + kw]
            out[:, oc, i, j, k] = (patch * w[oc]).sum(axis=(1, 2, 3, 4))
    if b is not None:
        out += b[None, :, None, None, None]
    return out.astype(np.float32)


def _pool3d_ref(x, k, s, p, reduce, fill):
    x = np.pad(x, [(0, 0), (0, 0)] + [(p, p)] * 3, constant_values=fill)
    outs = [(size - k) // s + 1 for size in x.shape[2:]]
    out = np.zeros(x.shape[:2] + tuple(outs), x.dtype)
    for i, j, l in np.ndindex(*outs):
        window = x[:, :, i * s:i * s + k, j * s:j * s + k, l * s:l * s + k]
        out[:, :, i, j, l] = reduce(window, axis=(2, 3, 4))
    return out


CASES = _cases()


# ----- gradients -----------------------------------------------------------------------------


def _f64(shape, salt=0, low=-2.0, high=2.0):
    return np.random.default_rng(8000 + salt).uniform(low, high, shape)


_IDX = np.random.default_rng(4).integers(0, 3, (4, 5))
_WITH_ZEROS = np.array([[2.0, 0.0, 3.0, 0.0, 5.0], [1.5, -2.0, 0.5, 3.0, -1.0]])

GRAD_CASES = [
    GradCase("asin", em.asin, [_f64((5,), low=-0.9, high=0.9)], torch_fn=lambda x: x.asin()),
    GradCase("acos", em.acos, [_f64((5,), low=-0.9, high=0.9)], torch_fn=lambda x: x.acos()),
    GradCase("atan", em.atan, [_f64((5,))], torch_fn=lambda x: x.atan()),
    GradCase("sinh", em.sinh, [_f64((5,))], torch_fn=lambda x: x.sinh()),
    GradCase("cosh", em.cosh, [_f64((5,))], torch_fn=lambda x: x.cosh()),
    GradCase("asinh", em.asinh, [_f64((5,))], torch_fn=lambda x: x.asinh()),
    GradCase("acosh", em.acosh, [_f64((5,), low=1.2, high=4.0)], torch_fn=lambda x: x.acosh()),
    GradCase("atanh", em.atanh, [_f64((5,), low=-0.9, high=0.9)], torch_fn=lambda x: x.atanh()),
    GradCase("atan2", em.atan2, [_f64((2, 3)), _f64((3,), 1)],
             torch_fn=lambda a, b: a.atan2(b)),
    GradCase("atan2_scalar_rhs", lambda a: em.atan2(a, 1.5), [_f64((4,))],
             torch_fn=lambda a: a.atan2(a.new_tensor(1.5))),
    GradCase("atan2_scalar_lhs", lambda b: (b * 0 + 1.5).atan2(b), [_f64((4,))],
             torch_fn=lambda b: (b * 0 + 1.5).atan2(b)),
    GradCase("copysign", em.copysign, [_f64((2, 3)), _f64((3,), 1)],
             torch_fn=lambda a, b: a.copysign(b)),
    GradCase("logaddexp", em.logaddexp, [_f64((2, 3)), _f64((3,), 1)],
             torch_fn=lambda a, b: a.logaddexp(b)),
    GradCase("cumprod", lambda x: x.cumprod(1), [_f64((3, 4))],
             torch_fn=lambda x: x.cumprod(1)),
    # Finite differences see the kinks at zeros too: one zero per line keeps them smooth.
    GradCase("cumprod_zeros", lambda x: x.cumprod(1), [_WITH_ZEROS[:, :3]],
             torch_fn=lambda x: x.cumprod(1)),
    GradCase("logcumsumexp", lambda x: x.logcumsumexp(0), [_f64((4, 3))],
             torch_fn=lambda x: x.logcumsumexp(0)),
    GradCase("cummax", lambda x: x.cummax(1)[0], [_f64((3, 5))],
             torch_fn=lambda x: x.cummax(1)[0]),
    GradCase("cummin", lambda x: em.cummin(x, 0)[0], [_f64((4, 2))],
             torch_fn=lambda x: x.cummin(0)[0]),
    GradCase("unfold", lambda x: x.unfold(1, 3, 2), [_f64((2, 7))],
             torch_fn=lambda x: x.unfold(1, 3, 2)),
    GradCase("scatter", lambda x, s, i: x.scatter(0, i, s),
             [_f64((3, 5)), _f64((1, 5), 1), np.array([[2, 0, 1, 1, 0]])],
             torch_fn=lambda x, s, i: x.scatter(0, i, s)),
    *[GradCase(f"scatter_reduce_{r}_{inc}",
               lambda x, s, i, r=r, inc=inc: x.scatter_reduce(0, i, s, r, include_self=inc),
               [_f64((3, 5)), _f64((4, 5), 1), _IDX],
               torch_fn=lambda x, s, i, r=r, inc=inc: x.scatter_reduce(0, i, s, r,
                                                                       include_self=inc))
      for r in ("sum", "prod", "mean", "amax", "amin") for inc in (True, False)],
    GradCase("conv3d", lambda x, w, b: F.conv3d(x, w, b, (2, 1, 1), 1, 1, 2),
             [_f64((1, 4, 4, 3, 3)), _f64((2, 2, 2, 2, 2), 1), _f64((2,), 2)],
             torch_fn=lambda x, w, b: __import__("torch").nn.functional.conv3d(
                 x, w, b, (2, 1, 1), 1, 1, 2)),
    GradCase("max_pool3d", lambda x: F.max_pool3d(x, 2, 1, 1), [_f64((1, 2, 3, 4, 3))],
             torch_fn=lambda x: __import__("torch").nn.functional.max_pool3d(x, 2, 1, 1)),
    GradCase("avg_pool3d", lambda x: F.avg_pool3d(x, 3, 2, 1, count_include_pad=False),
             [_f64((1, 2, 5, 4, 3))],
             torch_fn=lambda x: __import__("torch").nn.functional.avg_pool3d(
                 x, 3, 2, 1, count_include_pad=False)),
]
