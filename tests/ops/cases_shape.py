"""Shape op cases: reshape and its relatives, permutations, expand, repeat, split, cat, stack.

References are NumPy written to PyTorch's semantics; every op runs on every
dtype, with size-0 and size-1 dims and negative dims.
"""

from __future__ import annotations

import math

import numpy as np

import ember as em
from tests.ops.grad_harness import GradCase
from tests.ops.harness import NP_DTYPES, Case
from tests.ops.harness import array as _array

DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "bool")


def array(shape: tuple[int, ...], dtype: str = "float32", **kwargs) -> np.ndarray:
    """The harness's array, always an ndarray (its 0-d bool comes back as a NumPy scalar)."""
    return np.asarray(_array(shape, dtype, **kwargs))


def _torch_chunk(a: np.ndarray, chunks: int, dim: int) -> list[np.ndarray]:
    """``torch.chunk``: pieces of ceil(n / chunks); fewer pieces when that divides unevenly."""
    n = a.shape[dim]
    if n == 0:
        return [a] * chunks
    return _torch_split(a, -(-n // chunks), dim)


def _torch_split(a: np.ndarray, size: int | list[int], dim: int) -> list[np.ndarray]:
    """``torch.split``: pieces of ``size`` (the last smaller), or of the listed sizes."""
    n = a.shape[dim]
    if isinstance(size, list):
        bounds = np.cumsum([0] + size)
    else:
        bounds = list(range(0, n, size)) + [n] if n else [0, 0]
    return [np.take(a, np.arange(lo, hi), axis=dim) for lo, hi in zip(bounds[:-1], bounds[1:])]


def _tile(a: np.ndarray, reps: tuple[int, ...]) -> np.ndarray:
    return np.tile(a.reshape((1,) * (len(reps) - a.ndim) + a.shape), reps)


# (shape, args of reshape, expected shape) — -1 inferred, size-0 and 0-d shapes.
_RESHAPES = [
    ((2, 3, 4), (4, -1), (4, 6)),
    ((3, 4), (12,), (12,)),
    ((), (1, 1), (1, 1)),
    ((1,), (), ()),
    ((0,), (0, 5), (0, 5)),
    ((2, 0, 3), (3, 0, 2), (3, 0, 2)),
    ((2, 0, 3), (-1, 3), (0, 3)),
    ((1, 3, 1), (-1,), (3,)),
]

# (shape, start, end)
_FLATTENS = [((2, 3, 4), 1, -1), ((2, 3, 4), 0, 1), ((2, 3, 4), -2, -1), ((), 0, -1),
             ((2, 0, 3), 0, -1), ((5,), 0, 0)]

# (shape, dim)
_SQUEEZES = [((1, 3, 1), None), ((1, 3, 1), 0), ((1, 3, 1), -1), ((1, 3, 1), (0, 2)),
             ((1, 3, 1), 1), ((), None), ((), 0), ((2, 0, 1), -1), ((1, 1), (-1, 0))]

_UNSQUEEZES = [((3, 4), 0), ((3, 4), -1), ((3, 4), 1), ((), 0), ((), -1), ((2, 0), 2)]

_PERMUTES = [((2, 3, 4), (2, 0, 1)), ((2, 3, 4), (-1, 0, 1)), ((2, 0, 3), (1, 2, 0)),
             ((5,), (0,)), ((), ())]

_TRANSPOSES = [((2, 3, 4), 0, -1), ((3, 4), 0, 1), ((1, 3, 1), -1, -3), ((5,), 0, 0), ((), 0, -1)]

# (shape, target, expected)
_EXPANDS = [((3, 1), (2, -1, 4), (2, 3, 4)), ((1,), (0,), (0,)), ((), (2, 3), (2, 3)),
            ((1, 3, 1), (2, 1, 3, 5), (2, 1, 3, 5)), ((2, 0), (3, 2, 0), (3, 2, 0)),
            ((4,), (-1,), (4,))]

_REPEATS = [((2, 3), (2, 1, 3)), ((3,), (0, 2)), ((), (2,)), ((2, 0, 3), (1, 2, 1)),
            ((1, 2), (3, 2)), ((), ())]

# (shape, chunks, dim)
_CHUNKS = [((5, 4), 3, 0), ((5, 4), 2, -1), ((6,), 4, 0), ((0, 3), 2, 0), ((2, 1), 3, 1),
           ((5,), 10, 0)]

# (shape, split size or sizes, dim)
_SPLITS = [((5, 4), 2, 0), ((5, 4), [1, 3], -1), ((0,), 2, 0), ((3, 6), [6], 1),
           ((3, 6), [0, 2, 0, 4], 1), ((4, 2), 4, 0), ((2, 0), 0, 1)]


def _movement_cases() -> list[Case]:
    cases = []
    for dtype in DTYPES:
        for i, (shape, args, expected) in enumerate(_RESHAPES):
            cases.append(Case(f"reshape/{i}/{dtype}", lambda x, a=args: x.reshape(*a),
                              lambda x, e=expected: x.reshape(e), [array(shape, dtype)],
                              exact=True))
        cases.append(Case(f"view/{dtype}", lambda x: x.view(-1, 2),
                          lambda x: x.reshape(-1, 2), [array((2, 3, 2), dtype)], exact=True))
        cases.append(Case(f"reshape/tuple_arg/{dtype}", lambda x: x.reshape((3, 2)),
                          lambda x: x.reshape(3, 2), [array((6,), dtype)], exact=True))
        for i, (shape, start, end) in enumerate(_FLATTENS):
            def ref(x, s=start, e=end):
                if x.ndim == 0:
                    return x.reshape(1)
                s, e = s % x.ndim, e % x.ndim
                return x.reshape(x.shape[:s] + (math.prod(x.shape[s:e + 1]),) + x.shape[e + 1:])
            cases.append(Case(f"flatten/{i}/{dtype}", lambda x, s=start, e=end: x.flatten(s, e),
                              ref, [array(shape, dtype)], exact=True))
        for i, (shape, dim) in enumerate(_SQUEEZES):
            def ref(x, d=dim):
                if d is None:
                    return np.squeeze(x)
                dims = tuple(k % max(x.ndim, 1) for k in ((d,) if isinstance(d, int) else d))
                return np.squeeze(x, tuple(k for k in dims if x.ndim and x.shape[k] == 1))
            cases.append(Case(f"squeeze/{i}/{dtype}", lambda x, d=dim: x.squeeze(d), ref,
                              [array(shape, dtype)], exact=True))
        for i, (shape, dim) in enumerate(_UNSQUEEZES):
            cases.append(Case(f"unsqueeze/{i}/{dtype}", lambda x, d=dim: x.unsqueeze(d),
                              lambda x, d=dim: np.expand_dims(x, d), [array(shape, dtype)],
                              exact=True))
        for i, (shape, dims) in enumerate(_PERMUTES):
            cases.append(Case(f"permute/{i}/{dtype}", lambda x, d=dims: x.permute(*d),
                              lambda x, d=dims: np.transpose(x, d), [array(shape, dtype)],
                              exact=True))
        cases.append(Case(f"permute/tuple_arg/{dtype}", lambda x: x.permute((1, 0)),
                          lambda x: x.T, [array((3, 2), dtype)], exact=True))
        for i, (shape, d0, d1) in enumerate(_TRANSPOSES):
            cases.append(Case(f"transpose/{i}/{dtype}", lambda x, a=d0, b=d1: x.transpose(a, b),
                              lambda x, a=d0, b=d1: np.swapaxes(x, a, b) if x.ndim else x,
                              [array(shape, dtype)], exact=True))
        for shape in [(3, 4), (5,), (), (0, 2)]:
            cases.append(Case(f"T/{shape}/{dtype}", lambda x: x.T, lambda x: x.T,
                              [array(shape, dtype)], exact=True))
        for i, (shape, target, expected) in enumerate(_EXPANDS):
            cases.append(Case(f"expand/{i}/{dtype}", lambda x, t=target: x.expand(*t),
                              lambda x, e=expected: np.broadcast_to(x, e), [array(shape, dtype)],
                              exact=True))
        for i, (shape, reps) in enumerate(_REPEATS):
            cases.append(Case(f"repeat/{i}/{dtype}", lambda x, r=reps: x.repeat(*r),
                              lambda x, r=reps: _tile(x, r), [array(shape, dtype)], exact=True))
        for i, (shape, chunks, dim) in enumerate(_CHUNKS):
            cases.append(Case(f"chunk/{i}/{dtype}", lambda x, c=chunks, d=dim: x.chunk(c, d),
                              lambda x, c=chunks, d=dim: _torch_chunk(x, c, d),
                              [array(shape, dtype)], exact=True))
        for i, (shape, size, dim) in enumerate(_SPLITS):
            cases.append(Case(f"split/{i}/{dtype}", lambda x, s=size, d=dim: x.split(s, d),
                              lambda x, s=size, d=dim: _torch_split(x, s, d),
                              [array(shape, dtype)], exact=True))
    return cases


def _cast_concat(dtype: str, dim: int, stack: bool = False):
    """A reference for cat/stack: every input converted to the promoted dtype first."""
    def ref(*arrays):
        arrays = [a.astype(NP_DTYPES[dtype]) for a in arrays if stack or a.shape != (0,)] or \
            [arrays[0].astype(NP_DTYPES[dtype])]
        return np.stack(arrays, dim) if stack else np.concatenate(arrays, dim)
    return ref


def _join_cases() -> list[Case]:
    cases = []
    for dtype in DTYPES:
        cases += [
            Case(f"cat/dim0/{dtype}", lambda a, b: em.cat([a, b]), _cast_concat(dtype, 0),
                 [array((2, 3), dtype), array((1, 3), dtype, salt=1)], exact=True),
            Case(f"cat/negative_dim/{dtype}", lambda a, b, c: em.cat((a, b, c), dim=-1),
                 _cast_concat(dtype, -1),
                 [array((2, 1), dtype), array((2, 0), dtype), array((2, 3), dtype, salt=1)],
                 exact=True),
            Case(f"cat/one/{dtype}", lambda a: em.cat([a], 1), _cast_concat(dtype, 1),
                 [array((2, 3, 4), dtype)], exact=True),
            Case(f"cat/empty_1d_skipped/{dtype}", lambda a, b: em.cat([a, b], 1),
                 _cast_concat(dtype, 1), [array((0,), dtype), array((2, 3), dtype)], exact=True),
            Case(f"cat/all_empty/{dtype}", lambda a, b: em.cat([a, b]), _cast_concat(dtype, 0),
                 [array((0,), dtype), array((0,), dtype)], exact=True),
            Case(f"stack/dim0/{dtype}", lambda a, b: em.stack([a, b]),
                 _cast_concat(dtype, 0, stack=True),
                 [array((2, 3), dtype), array((2, 3), dtype, salt=1)], exact=True),
            Case(f"stack/last/{dtype}", lambda a, b, c: em.stack([a, b, c], dim=-1),
                 _cast_concat(dtype, -1, stack=True),
                 [array((2, 0), dtype), array((2, 0), dtype), array((2, 0), dtype)], exact=True),
            Case(f"stack/0d/{dtype}", lambda a, b: em.stack([a, b]),
                 _cast_concat(dtype, 0, stack=True), [array((), dtype), array((), dtype, salt=1)],
                 exact=True),
        ]
    # Promotion across inputs, as torch.cat: kinds rise, float16 with bfloat16 is float32.
    for left, right, result in [("int32", "float16", "float16"), ("bool", "int32", "int32"),
                                ("float16", "bfloat16", "float32"), ("int32", "int64", "int64"),
                                ("float32", "float64", "float64"),
                                ("bool", "bfloat16", "bfloat16")]:
        cases.append(Case(f"cat/promote/{left}+{right}", lambda a, b: em.cat([a, b], -1),
                          _cast_concat(result, -1), [array((2, 2), left), array((2, 3), right)],
                          dtype=result))
        cases.append(Case(f"stack/promote/{left}+{right}", lambda a, b: em.stack([a, b], 1),
                          _cast_concat(result, 1, stack=True),
                          [array((2, 3), left), array((2, 3), right)], dtype=result))
    cases.append(Case("cat/empty_1d_promotes/float64+int32", lambda a, b: em.cat([a, b]),
                      _cast_concat("float64", 0),
                      [array((0,), "float64"), array((2, 3), "int32")], dtype="float64"))
    return cases


def _composition_cases() -> list[Case]:
    """Views chained into computing ops: a later op must read the view, not its base."""
    return [
        Case("compose/permute_then_add", lambda x: x.permute(1, 0) + 1.0, lambda x: x.T + 1.0,
             [array((3, 4))]),
        Case("compose/expand_then_reshape", lambda x: x.expand(2, 3).reshape(-1),
             lambda x: np.broadcast_to(x, (2, 3)).reshape(-1), [array((3,))], exact=True),
        Case("compose/split_then_cat", lambda x: em.cat(x.split(2, 1)[::-1], 1),
             lambda x: np.concatenate([x[:, 4:], x[:, 2:4], x[:, :2]], 1), [array((2, 5))],
             exact=True),
        Case("compose/transpose_then_flatten", lambda x: x.transpose(0, 2).flatten(),
             lambda x: np.swapaxes(x, 0, 2).reshape(-1), [array((2, 3, 4), "int64")]),
    ]


CASES = _movement_cases() + _join_cases() + _composition_cases()


# ----- gradients -------------------------------------------------------------------------------


def _f64(shape: tuple[int, ...], salt: int = 0) -> np.ndarray:
    """A small float64 input for gradient checks, the same in every process."""
    return np.random.default_rng(1000 + salt).standard_normal(shape)


def _torch():
    import torch

    return torch


def _grad_cases() -> list[GradCase]:
    G = GradCase
    return [
        # reshape and the ops that are reshapes
        G("reshape/infer", lambda x: x.reshape(4, -1), [_f64((2, 3, 4))],
          torch_fn=lambda x: x.reshape(4, -1)),
        G("reshape/to_0d", lambda x: x.reshape(()), [_f64((1,))], torch_fn=lambda x: x.reshape(())),
        G("reshape/from_0d", lambda x: x.reshape(1, 1), [_f64(())],
          torch_fn=lambda x: x.reshape(1, 1)),
        G("view/size1_dims", lambda x: x.view(3, 1, 2), [_f64((1, 6))],
          torch_fn=lambda x: x.view(3, 1, 2)),
        G("flatten/start1", lambda x: x.flatten(1), [_f64((2, 3, 2))],
          torch_fn=lambda x: x.flatten(1)),
        G("flatten/negative_dims", lambda x: x.flatten(-3, -2), [_f64((2, 3, 2))],
          torch_fn=lambda x: x.flatten(-3, -2)),
        G("flatten/0d", lambda x: x.flatten(), [_f64(())], torch_fn=lambda x: x.flatten()),
        G("squeeze/all", lambda x: x.squeeze(), [_f64((1, 3, 1, 2))],
          torch_fn=lambda x: x.squeeze()),
        G("squeeze/negative_dim", lambda x: x.squeeze(-1), [_f64((3, 1))],
          torch_fn=lambda x: x.squeeze(-1)),
        G("unsqueeze/negative_dim", lambda x: x.unsqueeze(-1), [_f64((2, 3))],
          torch_fn=lambda x: x.unsqueeze(-1)),
        # permutations
        G("permute/3d", lambda x: x.permute(2, 0, 1), [_f64((2, 3, 4))],
          torch_fn=lambda x: x.permute(2, 0, 1)),
        G("permute/negative_dims", lambda x: x.permute(-1, 0, -2), [_f64((2, 1, 3))],
          torch_fn=lambda x: x.permute(-1, 0, -2)),
        G("transpose/negative_dim", lambda x: x.transpose(0, -1), [_f64((2, 3, 4))],
          torch_fn=lambda x: x.transpose(0, -1)),
        G("T/2d", lambda x: x.T, [_f64((2, 3))], torch_fn=lambda x: x.T),
        G("T/then_scale", lambda x: x.T * x.T, [_f64((3, 2))], torch_fn=lambda x: x.T * x.T),
        # expand and repeat: gradients sum over the copies
        G("expand/new_and_size1_dims", lambda x: x.expand(2, -1, 4), [_f64((3, 1))],
          torch_fn=lambda x: x.expand(2, -1, 4)),
        G("expand/1d", lambda x: x.expand(4, 3), [_f64((3,))], torch_fn=lambda x: x.expand(4, 3)),
        G("expand/0d", lambda x: x.expand(2, 3), [_f64(())], torch_fn=lambda x: x.expand(2, 3)),
        G("expand/to_size0", lambda x: x.expand(0, 3), [_f64((1, 3))],
          torch_fn=lambda x: x.expand(0, 3)),
        G("repeat/tile", lambda x: x.repeat(2, 3), [_f64((2, 3))],
          torch_fn=lambda x: x.repeat(2, 3)),
        G("repeat/leading_dims", lambda x: x.repeat(2, 1, 2), [_f64((3,))],
          torch_fn=lambda x: x.repeat(2, 1, 2)),
        G("repeat/size1_dim", lambda x: x.repeat(1, 3), [_f64((2, 1))],
          torch_fn=lambda x: x.repeat(1, 3)),
        G("repeat/0d", lambda x: x.repeat(3), [_f64(())], torch_fn=lambda x: x.repeat(3)),
        G("repeat/zero_copies", lambda x: x.repeat(0, 1), [_f64((2, 2))],
          torch_fn=lambda x: x.repeat(0, 1)),
        # split and chunk: pieces that no gradient reaches give zeros
        G("split/one_piece_used", lambda x: x.split(2, 1)[1], [_f64((2, 5))],
          torch_fn=lambda x: x.split(2, 1)[1]),
        G("split/sizes_negative_dim", lambda x: _join_reversed(x.split([1, 3], -1)),
          [_f64((2, 4))], torch_fn=lambda x: _torch().cat(x.split([1, 3], -1)[::-1], -1)),
        G("split/piece_used_twice", lambda x: x.split(1)[0] * x.split(1)[0], [_f64((2, 3))],
          torch_fn=lambda x: x.split(1)[0] * x.split(1)[0]),
        G("split/pieces_combined", lambda x: _pieces_combined(x), [_f64((3, 2))],
          torch_fn=lambda x: _pieces_combined(x)),
        G("chunk/uneven", lambda x: x.chunk(3)[2], [_f64((5,))], torch_fn=lambda x: x.chunk(3)[2]),
        G("chunk/dim1_all", lambda x: em.cat(x.chunk(2, 1), 0), [_f64((2, 4))],
          torch_fn=lambda x: _torch().cat(x.chunk(2, 1), 0)),
        # cat and stack
        G("cat/negative_dim", lambda a, b: em.cat([a, b], -1), [_f64((2, 2)), _f64((2, 3), 1)],
          torch_fn=lambda a, b: _torch().cat([a, b], -1)),
        G("cat/three_dim0", lambda a, b, c: em.cat([a, b, c]),
          [_f64((1, 3)), _f64((2, 3), 1), _f64((1, 3), 2)],
          torch_fn=lambda a, b, c: _torch().cat([a, b, c])),
        G("cat/same_tensor_twice", lambda a: em.cat([a, a * 2.0], 0), [_f64((2, 2))],
          torch_fn=lambda a: _torch().cat([a, a * 2.0], 0)),
        G("cat/one_input", lambda a: em.cat([a], 1), [_f64((2, 3))],
          torch_fn=lambda a: _torch().cat([a], 1)),
        G("cat/constant_input", lambda a, b: em.cat([a, b], 0), [_f64((2, 2)), _f64((1, 2), 1)],
          wrt=[0], torch_fn=lambda a, b: _torch().cat([a, b], 0)),
        G("stack/dim1", lambda a, b: em.stack([a, b], 1), [_f64((2, 3)), _f64((2, 3), 1)],
          torch_fn=lambda a, b: _torch().stack([a, b], 1)),
        G("stack/negative_dim", lambda a, b, c: em.stack([a, b, c], -1),
          [_f64((2, 2)), _f64((2, 2), 1), _f64((2, 2), 2)],
          torch_fn=lambda a, b, c: _torch().stack([a, b, c], -1)),
        G("stack/0d", lambda a, b: em.stack([a, b]), [_f64(()), _f64((), 1)],
          torch_fn=lambda a, b: _torch().stack([a, b])),
        # chains of memory-bound ops (recomputed under "balanced" checkpointing)
        G("shape/chain", lambda x: x.permute(1, 0).reshape(2, 3).expand(2, 2, 3).repeat(1, 1, 2),
          [_f64((3, 2))],
          torch_fn=lambda x: x.permute(1, 0).reshape(2, 3).expand(2, 2, 3).repeat(1, 1, 2)),
        G("shape/chain_product", lambda x: _chain_product(x), [_f64((2, 3))],
          torch_fn=lambda x: _chain_product(x)),
    ]


def _join_reversed(pieces):
    return em.cat(list(pieces)[::-1], -1)


def _pieces_combined(x):
    """Pieces of one split feeding one product, so the split's node collects several gradients."""
    a, b, c = x.split(1, 0)
    return a * b + c * a


def _chain_product(x):
    """A tensor read by chains of views whose outputs multiply: rules read recomputed values."""
    y = x.T.reshape(-1)
    z = x.flatten().expand(2, 6)
    return z * y * x.reshape(6)


GRAD_CASES = _grad_cases()
