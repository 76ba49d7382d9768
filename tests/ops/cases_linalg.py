"""matmul cases: 1-D operands, batched with broadcast batch dims, size-0 dims, int and mixed dtypes.

float16 and bfloat16 are referenced in float32 rounded once, which is what
PyTorch's CPU kernels compute.
"""

from __future__ import annotations

import numpy as np

from tests.ops.grad_harness import GradCase
from tests.ops.harness import NP_DTYPES, Case
from tests.ops.harness import array as _array

# (lhs shape, rhs shape): every rule of torch.matmul's shapes.
SHAPES = [
    ((3, 4), (4, 5)),          # matrix @ matrix
    ((5,), (5,)),              # dot product -> 0-d
    ((5,), (5, 3)),            # vector @ matrix
    ((3, 5), (5,)),            # matrix @ vector
    ((2, 3, 4), (4,)),         # batch @ vector
    ((4,), (2, 4, 3)),         # vector @ batch
    ((2, 3, 4), (4, 5)),       # batch @ matrix
    ((2, 1, 3, 4), (5, 4, 2)), # broadcast batch dims
    ((0, 3), (3, 4)),          # empty rows
    ((3, 0), (0, 4)),          # empty inner dim: zeros
    ((2, 0, 3, 4), (4, 1)),    # empty batch
    ((1, 1), (1, 1)),
]

DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64")


def array(shape: tuple[int, ...], dtype: str = "float32", **kwargs) -> np.ndarray:
    """The harness's array, always an ndarray (its 0-d bool comes back as a NumPy scalar)."""
    return np.asarray(_array(shape, dtype, **kwargs))


def _reference(dtype: str):
    out = np.dtype(NP_DTYPES[dtype])
    compute = np.float32 if dtype in ("float16", "bfloat16") else out

    def ref(a, b):
        return np.asarray(np.matmul(a.astype(compute), b.astype(compute))).astype(out)
    return ref


def _cases() -> list[Case]:
    cases = []
    for dtype in DTYPES:
        for lhs, rhs in SHAPES:
            cases.append(Case(f"matmul/{lhs}@{rhs}/{dtype}", lambda a, b: a @ b, _reference(dtype),
                              [array(lhs, dtype), array(rhs, dtype, salt=1)]))
        cases.append(Case(f"matmul/method/{dtype}", lambda a, b: a.matmul(b), _reference(dtype),
                          [array((2, 3), dtype), array((3, 2), dtype, salt=1)]))
    for left, right, result in [("int32", "float32", "float32"), ("int32", "int64", "int64"),
                                ("float16", "bfloat16", "float32"),
                                ("float32", "float64", "float64"),
                                ("int64", "float16", "float16")]:
        cases.append(Case(f"matmul/promote/{left}@{right}", lambda a, b: a @ b, _reference(result),
                          [array((2, 3, 4), left), array((4, 2), right, salt=1)], dtype=result))
    # Larger sizes take NumPy's BLAS path; float32 sums of 256 terms need a looser tolerance.
    cases.append(Case("matmul/large/float32", lambda a, b: a @ b, _reference("float32"),
                      [array((64, 256)), array((256, 48), salt=1)], rtol=1e-4, atol=1e-4))
    cases.append(Case("matmul/transposed_view/float64", lambda a, b: a.T @ b.T,
                      lambda a, b: a.T @ b.T, [array((7, 5), "float64"), array((3, 7), "float64")]))
    return cases


CASES = _cases()


# ----- gradients -------------------------------------------------------------------------------


def _f64(shape: tuple[int, ...], salt: int = 0) -> np.ndarray:
    """A small float64 input for gradient checks, the same in every process."""
    return np.random.default_rng(3000 + salt).standard_normal(shape)


def _matmul(a, b):
    return a @ b


# (id, lhs shape, rhs shape): every shape rule of matmul; broadcast batch dims are summed back.
_GRAD_SHAPES = [
    ("2d", (2, 3), (3, 4)),
    ("vector_lhs", (3,), (3, 4)),
    ("vector_rhs", (2, 3), (3,)),
    ("dot", (4,), (4,)),
    ("batched", (2, 2, 3), (2, 3, 2)),
    ("batched_lhs_2d_rhs", (2, 2, 3), (3, 2)),
    ("2d_lhs_batched_rhs", (2, 3), (2, 3, 2)),
    ("broadcast_size1_batch", (1, 2, 3), (3, 3, 2)),
    ("broadcast_both_batches", (2, 1, 2, 3), (3, 3, 2)),
    ("vector_lhs_batched_rhs", (3,), (2, 3, 2)),
    ("batched_lhs_vector_rhs", (2, 2, 3), (3,)),
    ("size1_dims", (1, 3), (3, 1)),
]


def _grad_cases() -> list[GradCase]:
    cases = [GradCase(f"matmul/{name}", _matmul, [_f64(a), _f64(b, 1)], torch_fn=_matmul)
             for name, a, b in _GRAD_SHAPES]
    cases += [
        GradCase("matmul/same_operand", lambda x: x @ x.T, [_f64((2, 3))],
                 torch_fn=lambda x: x @ x.T),
        GradCase("matmul/constant_rhs", _matmul, [_f64((2, 3)), _f64((3, 2), 1)], wrt=[0],
                 torch_fn=_matmul),
        GradCase("matmul/constant_lhs", _matmul, [_f64((2, 2, 3)), _f64((3,), 1)], wrt=[1],
                 torch_fn=_matmul),
        # int @ float promotes in ember; PyTorch needs the cast written out.
        GradCase("matmul/int_lhs", _matmul,
                 [np.array([[1, -2, 0], [3, 1, 2]], np.int64), _f64((3, 2), 1)],
                 torch_fn=lambda a, b: a.double() @ b),
        # A product of views feeding a product: the views are recomputed under "balanced".
        GradCase("matmul/chain_through_views", lambda a, b, c: (a @ b.T) @ c.reshape(3),
                 [_f64((2, 3)), _f64((3, 3), 1), _f64((1, 3), 2)],
                 torch_fn=lambda a, b, c: (a @ b.T) @ c.reshape(3)),
    ]
    return cases


GRAD_CASES = _grad_cases()
