"""Second-wave ops (issue 24): rearrangements, composites, einsum, advanced indexing, linalg.

Forward against NumPy in float32 and float64 with empty and size-1 dims; gradients (float64)
against finite differences and torch.
"""

from __future__ import annotations

import math

import numpy as np

import ember as em
from tests.ops.grad_harness import GradCase
from tests.ops.harness import Case
from tests.ops.harness import array as _array


def array(shape, dtype="float32", **kwargs) -> np.ndarray:
    return np.asarray(_array(shape, dtype, **kwargs))


def _spd(n: int, batch: tuple = (), dtype="float64", salt: int = 0) -> np.ndarray:
    a = np.random.default_rng(500 + salt).standard_normal(batch + (n, n))
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n)).astype(dtype)


def _trunc_div(a, b):
    return np.trunc(a / b)


def _cases() -> list[Case]:
    cases = []
    for dt in ("float32", "float64"):
        for shape in [(3, 4), (1, 5), (2, 0, 3), (2, 3, 4)]:
            x = array(shape, dt)
            s = str(shape)
            cases += [
                Case(f"flip/{s}/{dt}", lambda t: t.flip((0, -1)), lambda a: np.flip(a, (0, -1)), [x]),
                Case(f"roll/{s}/{dt}", lambda t: t.roll((2, -1), (0, -1)),
                     lambda a: np.roll(a, (2, -1), (0, -1)), [x]),
                Case(f"roll_flat/{s}/{dt}", lambda t: t.roll(3), lambda a: np.roll(a, 3), [x]),
                Case(f"tril/{s}/{dt}", lambda t: t.tril(), np.tril, [x]),
                Case(f"triu_k/{s}/{dt}", lambda t: t.triu(1), lambda a: np.triu(a, 1), [x]),
                Case(f"tril_neg/{s}/{dt}", lambda t: em.tril(t, -1), lambda a: np.tril(a, -1), [x]),
                Case(f"diagonal/{s}/{dt}", lambda t: t.diagonal(1, -2, -1),
                     lambda a: np.diagonal(a, 1, -2, -1), [x]),
                Case(f"clone/{s}/{dt}", lambda t: t.clone(), np.copy, [x], exact=True),
                Case(f"norm/{s}/{dt}", lambda t: t.norm(), lambda a: np.linalg.norm(a.ravel()), [x]),
                Case(f"norm_dim/{s}/{dt}", lambda t: t.norm(1, dim=-1, keepdim=True),
                     lambda a: np.abs(a).sum(-1, keepdims=True), [x]),
                Case(f"square/{s}/{dt}", em.square, np.square, [x]),
                Case(f"trunc/{s}/{dt}", em.trunc, np.trunc, [x]),
                Case(f"tan/{s}/{dt}", em.tan, np.tan, [x]),
                Case(f"log2/{s}/{dt}", lambda t: em.log2(t.abs() + 0.5),
                     lambda a: np.log2(np.abs(a) + a.dtype.type(0.5)), [x]),
                Case(f"log10/{s}/{dt}", lambda t: em.log10(t.abs() + 0.5),
                     lambda a: np.log10(np.abs(a) + a.dtype.type(0.5)), [x]),
                Case(f"exp2/{s}/{dt}", em.exp2, np.exp2, [x]),
                Case(f"expm1/{s}/{dt}", em.expm1, np.expm1, [x]),
                Case(f"isfinite/{s}/{dt}", em.isfinite, np.isfinite, [x]),
                Case(f"repeat_interleave/{s}/{dt}", lambda t: t.repeat_interleave(2, 0),
                     lambda a: np.repeat(a, 2, 0), [x]),
            ]
        cases += [
            Case(f"expm1/tiny/{dt}", em.expm1, np.expm1, [np.array([1e-7, -3e-9, 0.0, 40.0], dt)],
                 rtol=1e-6 if dt == "float32" else 1e-13),
            Case(f"fmod/{dt}", em.fmod, np.fmod, [array((3, 4), dt, low=-9, high=9),
                                                  array((4,), dt, low=1, high=3, salt=1)]),
            Case(f"fmod_neg_divisor/{dt}", lambda t: em.fmod(t, -1.5),
                 lambda a: np.fmod(a, a.dtype.type(-1.5)), [array((7,), dt, low=-5, high=5)]),
            Case(f"div_trunc/{dt}", lambda a, b: em.div(a, b, rounding_mode="trunc"), _trunc_div,
                 [array((5,), dt, low=-9, high=9), array((5,), dt, low=1, high=3, salt=1)]),
            Case(f"lerp/{dt}", lambda a, b: em.lerp(a, b, 0.25),
                 lambda a, b: a + a.dtype.type(0.25) * (b - a), [array((2, 3), dt), array((3,), dt, salt=1)]),
            Case(f"isclose/{dt}", lambda a, b: em.isclose(a, b, rtol=0.1, atol=0.0),
                 lambda a, b: np.isclose(a, b, rtol=0.1, atol=0.0),
                 [array((6,), dt), array((6,), dt) * np.asarray(1.05, dt)]),
            Case(f"diag_vector/{dt}", lambda v: em.diag(v, 1), lambda v: np.diag(v, 1), [array((4,), dt)]),
            Case(f"diag_vector_neg/{dt}", lambda v: v.diag(-2), lambda v: np.diag(v, -2), [array((3,), dt)]),
            Case(f"diag_matrix/{dt}", em.diag, np.diag, [array((3, 5), dt)]),
            Case(f"diag_empty/{dt}", em.diag, np.diag, [array((0,), dt)]),
            Case(f"std_mean/{dt}", lambda t: em.std_mean(t, 1),
                 lambda a: (a.std(1, ddof=1), a.mean(1)), [array((3, 4), dt)]),
            Case(f"var_mean/{dt}", lambda t: em.var_mean(t, correction=0),
                 lambda a: (a.var(), a.mean()), [array((3, 4), dt)]),
            Case(f"norm_inf/{dt}", lambda t: t.norm(math.inf, 0), lambda a: np.abs(a).max(0),
                 [array((3, 4), dt)]),
            Case(f"norm_p3/{dt}", lambda t: t.norm(3), lambda a: (np.abs(a) ** 3).sum() ** (1 / 3),
                 [array((3, 4), dt)]),
            Case(f"einsum/matmul/{dt}", lambda a, b: em.einsum("bij,bjk->bik", a, b),
                 lambda a, b: np.einsum("bij,bjk->bik", a, b), [array((2, 3, 4), dt), array((2, 4, 5), dt)]),
            Case(f"einsum/three/{dt}", lambda a, b, c: em.einsum("ij,jk,k->i", a, b, c),
                 lambda a, b, c: np.einsum("ij,jk,k->i", a, b, c),
                 [array((3, 4), dt), array((4, 5), dt, salt=1), array((5,), dt, salt=2)]),
            Case(f"einsum/trace/{dt}", lambda a: em.einsum("ii", a), lambda a: np.einsum("ii", a),
                 [array((4, 4), dt)]),
            Case(f"einsum/outer_ellipsis/{dt}", lambda a, b: em.einsum("...i,...j->...ij", a, b),
                 lambda a, b: np.einsum("...i,...j->...ij", a, b), [array((2, 3), dt), array((2, 4), dt)]),
            Case(f"einsum/implicit/{dt}", lambda a, b: em.einsum("ij,jk", a, b),
                 lambda a, b: np.einsum("ij,jk", a, b), [array((3, 0), dt), array((0, 2), dt)]),
            Case(f"linalg/inv/{dt}", em.linalg.inv, np.linalg.inv, [_spd(3, (2,), dt)], rtol=1e-4),
            Case(f"linalg/det/{dt}", em.linalg.det, np.linalg.det, [array((2, 3, 3), dt)], rtol=1e-4),
            Case(f"linalg/det_empty/{dt}", em.linalg.det, np.linalg.det, [array((0, 2, 2), dt)]),
            Case(f"linalg/solve/{dt}", em.linalg.solve, np.linalg.solve,
                 [_spd(3, (2,), dt), array((2, 3, 2), dt)], rtol=1e-4, atol=1e-5),
            Case(f"linalg/solve_vector/{dt}", em.linalg.solve,
                 lambda a, b: np.linalg.solve(a, b[:, None])[:, 0], [_spd(4, (), dt), array((4,), dt)],
                 rtol=1e-4, atol=1e-5),
            Case(f"linalg/cholesky/{dt}", em.linalg.cholesky, np.linalg.cholesky, [_spd(4, (2,), dt)],
                 rtol=1e-4),
            Case(f"linalg/eigvalsh/{dt}", em.linalg.eigvalsh, np.linalg.eigvalsh, [_spd(4, (), dt)],
                 rtol=1e-4),
            Case(f"linalg/svdvals/{dt}", em.linalg.svdvals, lambda a: np.linalg.svd(a, compute_uv=False),
                 [array((2, 5, 3), dt)], rtol=1e-4, atol=1e-5),
            Case(f"linalg/qr_product/{dt}", lambda a: (lambda q, r: q @ r)(*em.linalg.qr(a)),
                 lambda a: a, [array((5, 3), dt)], rtol=1e-4, atol=1e-5),
            Case(f"linalg/norm_fro/{dt}", lambda a: em.linalg.norm(a, "fro"),
                 lambda a: np.linalg.norm(a, "fro"), [array((3, 4), dt)]),
            Case(f"linalg/norm_nuc/{dt}", lambda a: em.linalg.norm(a, "nuc"),
                 lambda a: np.linalg.norm(a, "nuc"), [array((3, 4), dt)], rtol=1e-4),
            Case(f"linalg/norm_1/{dt}", lambda a: em.linalg.norm(a, 1),
                 lambda a: np.linalg.norm(a, 1), [array((3, 4), dt)]),
            Case(f"advanced/two/{dt}", lambda x, i, j: x[i, j], lambda x, i, j: x[i, j],
                 [array((3, 4, 2), dt), np.array([[0, 2], [1, -1]]), np.array([3, -4])], exact=True),
            Case(f"advanced/separated/{dt}", lambda x, i, j: x[i, :, j], lambda x, i, j: x[i, :, j],
                 [array((3, 4, 2), dt), np.array([0, 2, 1]), np.array([1])], exact=True),
            Case(f"advanced/after_slice/{dt}", lambda x, i, j: x[1:, i, j], lambda x, i, j: x[1:, i, j],
                 [array((3, 4, 2), dt), np.array([[0], [3]]), np.array([1, 0])], exact=True),
            Case(f"advanced/int_and_tensors/{dt}", lambda x, i, j: x[i, 1, :, j],
                 lambda x, i, j: x[i, 1, :, j], [array((2, 3, 4, 5), dt), np.array([1, 0]),
                                                 np.array([4, 2])], exact=True),
            Case(f"advanced/empty/{dt}", lambda x, i, j: x[i, j], lambda x, i, j: x[i, j],
                 [array((3, 4), dt), np.zeros(0, np.int64), np.zeros(0, np.int64)], exact=True),
        ]
    cases += [
        Case("div_trunc/int64", lambda a, b: em.div(a, b, rounding_mode="trunc"),
             lambda a, b: (np.trunc(a / b)).astype(np.int64),
             [np.array([7, -7, 7, -7, 6], np.int64), np.array([2, 2, -2, -2, -3], np.int64)]),
        Case("fmod/int64", em.fmod, np.fmod, [np.array([7, -7, 7, -7, 0]), np.array([3, 3, -3, -3, 5])]),
        Case("logical/and_or_xor_not", lambda a, b: (em.logical_and(a, b), em.logical_or(a, b),
                                                     em.logical_xor(a, b), em.logical_not(a)),
             lambda a, b: (np.logical_and(a, b), np.logical_or(a, b), np.logical_xor(a, b),
                           np.logical_not(a)),
             [np.array([0.0, 1.5, -2.0, 0.0], np.float32), np.array([0, 0, 3, 4])]),
        Case("isfinite/special", em.isfinite, np.isfinite,
             [np.array([np.inf, -np.inf, np.nan, 1.0], np.float32)]),
        Case("sum/dtype", lambda t: em.sum(t, 0, dtype=em.float64),
             lambda a: a.sum(0, dtype=np.float64), [array((4, 3), "int32", low=-5, high=5)]),
        Case("meshgrid/ij", lambda a, b: em.meshgrid(a, b, indexing="ij"),
             lambda a, b: tuple(np.meshgrid(a, b, indexing="ij")), [array((3,)), array((2,))]),
        Case("meshgrid/xy", lambda a, b, c: em.meshgrid(a, b, c, indexing="xy"),
             lambda a, b, c: tuple(np.meshgrid(a, b, c, indexing="xy")),
             [array((3,)), array((2,)), array((4,))]),
        Case("softmax/method", lambda t: t.softmax(1),
             lambda a: np.exp(a) / np.exp(a).sum(1, keepdims=True), [array((3, 4))]),
        Case("log_softmax/method", lambda t: t.log_softmax(-1),
             lambda a: a - np.log(np.exp(a).sum(-1, keepdims=True)), [array((3, 4))]),
        Case("clip/alias", lambda t: t.clip(-1, 0.5), lambda a: np.clip(a, -1, 0.5), [array((5,))]),
    ]
    return cases


CASES = _cases()


# ----- gradients -----------------------------------------------------------------------------


def _f64(shape, salt=0):
    return np.random.default_rng(7000 + salt).standard_normal(shape)


def _sym(x):
    return x + x.mT


def _pd(x):
    return x @ x.mT + 3.0 * (x[..., :1, :1] * 0 + 1) * _eye_like(x)


def _eye_like(x):
    n = x.shape[-1]
    if isinstance(x, em.Tensor):
        return em.eye(n, dtype=x.dtype, device=x.device)
    import torch

    return torch.eye(n, dtype=x.dtype)


GRAD_CASES = [
    GradCase("flip", lambda x: x.flip((0, 1)), [_f64((3, 4))], torch_fn=lambda x: x.flip((0, 1))),
    GradCase("roll", lambda x: x.roll(1, 1), [_f64((3, 4))], torch_fn=lambda x: x.roll(1, 1)),
    GradCase("tril", lambda x: x.tril(-1), [_f64((2, 3, 4))], torch_fn=lambda x: x.tril(-1)),
    GradCase("triu", lambda x: x.triu(1), [_f64((3, 4))], torch_fn=lambda x: x.triu(1)),
    GradCase("diagonal", lambda x: x.diagonal(1, 0, 2), [_f64((3, 2, 4))],
             torch_fn=lambda x: x.diagonal(1, 0, 2)),
    GradCase("diag_vector", lambda v: v.diag(1), [_f64((3,))], torch_fn=lambda v: v.diag(1)),
    GradCase("clone", lambda x: x.clone() * 2, [_f64((3,))], torch_fn=lambda x: x.clone() * 2),
    GradCase("norm2", lambda x: x.norm(dim=1), [_f64((3, 4))], torch_fn=lambda x: x.norm(dim=1)),
    GradCase("norm1_keepdim", lambda x: x.norm(1, 0, True), [_f64((3, 4))],
             torch_fn=lambda x: x.norm(1, 0, True)),
    GradCase("expm1", em.expm1, [_f64((6,))], torch_fn=lambda x: x.expm1()),
    GradCase("tan", em.tan, [_f64((5,)) * 0.5], torch_fn=lambda x: x.tan()),
    GradCase("log2", lambda x: em.log2(x.abs()), [_f64((5,))], torch_fn=lambda x: x.abs().log2()),
    GradCase("lerp", lambda a, b: em.lerp(a, b, 0.3), [_f64((3,)), _f64((3,), 1)],
             torch_fn=lambda a, b: a.lerp(b, 0.3)),
    GradCase("einsum_batched", lambda a, b: em.einsum("bij,bjk->bki", a, b),
             [_f64((2, 3, 4)), _f64((2, 4, 2), 1)], torch_fn=lambda a, b: __import__("torch").einsum(
                 "bij,bjk->bki", a, b)),
    GradCase("einsum_trace_outer", lambda a, b: em.einsum("ii,j->j", a, b),
             [_f64((3, 3)), _f64((2,), 1)], torch_fn=lambda a, b: __import__("torch").einsum(
                 "ii,j->j", a, b)),
    GradCase("advanced_two", lambda x, i, j: x[i, :, j],
             [_f64((3, 2, 4)), np.array([0, 2, 0]), np.array([[1], [3]])],
             torch_fn=lambda x, i, j: x[i, :, j]),
    GradCase("linalg_inv", em.linalg.inv, [_f64((2, 3, 3)) + 3 * np.eye(3)],
             torch_fn=lambda a: __import__("torch").linalg.inv(a)),
    GradCase("linalg_det", em.linalg.det, [_f64((2, 3, 3))],
             torch_fn=lambda a: __import__("torch").linalg.det(a)),
    GradCase("linalg_solve", em.linalg.solve, [_f64((3, 3)) + 3 * np.eye(3), _f64((3, 2), 1)],
             torch_fn=lambda a, b: __import__("torch").linalg.solve(a, b)),
    GradCase("linalg_solve_vector", em.linalg.solve, [_f64((2, 3, 3)) + 3 * np.eye(3), _f64((3,), 1)],
             torch_fn=lambda a, b: __import__("torch").linalg.solve(a, b)),
    GradCase("linalg_cholesky", lambda x: em.linalg.cholesky(_pd(x)), [_f64((2, 3, 3))],
             torch_fn=lambda x: __import__("torch").linalg.cholesky(_pd(x))),
    GradCase("linalg_eigh", lambda x: (lambda w, v: w.reshape(2, 3, 1) * v.abs())(*em.linalg.eigh(_sym(x))),
             [_f64((2, 3, 3))],
             torch_fn=lambda x: (lambda w, v: w.reshape(2, 3, 1) * v.abs())(
                 *__import__("torch").linalg.eigh(_sym(x)))),
    GradCase("linalg_eigvalsh", lambda x: em.linalg.eigvalsh(_sym(x)), [_f64((3, 3))],
             torch_fn=lambda x: __import__("torch").linalg.eigvalsh(_sym(x))),
    GradCase("linalg_svdvals", em.linalg.svdvals, [_f64((4, 3))],
             torch_fn=lambda x: __import__("torch").linalg.svdvals(x)),
]
