"""Linear-algebra primitives: ``inv solve det cholesky qr svd eigh`` (``em.linalg``).

Each is one IR op with a NumPy kernel (LAPACK through ``numpy.linalg``) that the CUDA
table runs on CuPy (cuSOLVER); a backend that publishes its kernel table without them
(wgpu) refuses them at the call. Inputs are float32 or float64 matrices, batched over
leading dims. Backward rules are PyTorch's (its ``FunctionsManual.cpp``): inv, solve, det,
cholesky, eigh (values and vectors), svd (singular values only).
"""

from __future__ import annotations

from typing import Any

from ember import dtype as _dtype
from ember.ops.gradient_rules import differentiable
from ember.errors import DeviceError, DTypeError, EmberError, ShapeError
from ember.op_kinds import OTHER, declare
from ember.ops._core import broadcast_shapes, call, multi_call, same_device
from ember.ops.creation import eye, zeros
from ember.ops.rearrange import tril
from ember.ops.shape import expand, reshape, transpose
from ember.tensor import Tensor

declare(OTHER, "linalg_inv", "linalg_det", "linalg_solve", "linalg_cholesky", "linalg_qr",
        "linalg_svd", "linalg_eigh")

_FLOATS = (_dtype.float32, _dtype.float64)


def _matrix(op: str, a: Any, square: bool = True) -> None:
    if not isinstance(a, Tensor):
        raise TypeError(f"{op}: expected a tensor, got {type(a).__name__}")
    if a.dtype not in _FLOATS:
        raise DTypeError(f"{op}: needs a float32 or float64 tensor, got {a.dtype.name}; "
                         f"help: convert with .float() or .double()")
    if a.ndim < 2:
        raise ShapeError(f"{op}: needs a matrix or a batch of matrices, got shape {a.shape}")
    if square and a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"{op}: needs square matrices, got shape {a.shape}")
    kernels = getattr(a.device.actor.backend, "kernels", None)
    if kernels is not None and f"linalg_{op.rsplit('.', 1)[-1]}" not in kernels:
        raise DeviceError(f"{op}: no kernel on {a.device.inner}; help: move the tensor to "
                          f"em.cpu() for this op, e.g. {op}(a.to(em.cpu())).to(a.device)")


def _mT(x: Tensor) -> Tensor:
    return transpose(x, -1, -2)


def inv(a: Tensor) -> Tensor:
    """The inverse of each square matrix of ``a``.

    A singular matrix fails at the read (``KernelError``), as LAPACK finds out.

    Raises:
        ShapeError: not a (batch of) square matrices.
        DTypeError: not float32 / float64.
        DeviceError: a device without this kernel (wgpu).

    Example:
        >>> em.linalg.inv(em.tensor([[2.0, 0.0], [0.0, 4.0]])).tolist()
        [[0.5, 0.0], [0.0, 0.25]]
    """
    _matrix("linalg.inv", a)
    return call("linalg_inv", (a,), a.shape, a.dtype)


def det(a: Tensor) -> Tensor:
    """The determinant of each square matrix of ``a``; shape ``a.shape[:-2]``.

    Example:
        >>> em.linalg.det(em.tensor([[2.0, 1.0], [1.0, 3.0]])).item()
        5.0
    """
    _matrix("linalg.det", a)
    return call("linalg_det", (a,), a.shape[:-2], a.dtype)


def solve(a: Tensor, b: Tensor) -> Tensor:
    """``x`` with ``a @ x == b``, as ``torch.linalg.solve``: ``b`` of shape ``(*, n, k)``, or
    ``(*, n)`` (a vector per matrix) when it is 1-D or has one dim less than ``a``.

    Raises:
        ShapeError: ``a`` not square, or ``b``'s rows differ from ``a``'s, or batch dims
            that do not broadcast.

    Example:
        >>> a = em.tensor([[3.0, 1.0], [1.0, 2.0]])
        >>> em.linalg.solve(a, em.tensor([9.0, 8.0])).tolist()
        [2.0, 3.0]
    """
    _matrix("linalg.solve", a)
    if not isinstance(b, Tensor):
        raise TypeError(f"linalg.solve: expected b to be a tensor, got {type(b).__name__}")
    same_device("linalg.solve", (a, b))
    if b.dtype != a.dtype:
        raise DTypeError(f"linalg.solve: a and b need the same dtype, got {a.dtype.name} and "
                         f"{b.dtype.name}")
    vector = b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1])
    rhs = reshape(b, b.shape + (1,)) if vector else b
    if rhs.ndim < 2 or rhs.shape[-2] != a.shape[-1]:
        raise ShapeError(f"linalg.solve: b of shape {b.shape} does not match a of shape "
                         f"{a.shape} (b needs {a.shape[-1]} rows)")
    batch = broadcast_shapes("linalg.solve", a.shape[:-2], rhs.shape[:-2])
    if a.shape[:-2] != batch:
        a = expand(a, batch + a.shape[-2:])
    if rhs.shape[:-2] != batch:
        rhs = expand(rhs, batch + rhs.shape[-2:])
    x = call("linalg_solve", (a, rhs), rhs.shape, a.dtype)
    return reshape(x, x.shape[:-1]) if vector else x


def cholesky(a: Tensor, upper: bool = False) -> Tensor:
    """The lower Cholesky factor ``L`` of each symmetric positive-definite matrix
    (``a = L @ L.mT``; reads the lower triangle); ``upper=True`` gives ``L.mT``.

    A matrix that is not positive-definite fails at the read (``KernelError``).

    Example:
        >>> em.linalg.cholesky(em.tensor([[4.0, 2.0], [2.0, 2.0]])).tolist()
        [[2.0, 0.0], [1.0, 1.0]]
    """
    _matrix("linalg.cholesky", a)
    low = call("linalg_cholesky", (a,), a.shape, a.dtype)
    return _mT(low) if upper else low


def qr(a: Tensor, mode: str = "reduced") -> tuple[Tensor, Tensor]:
    """``(Q, R)`` with ``a = Q @ R``, Q's columns orthonormal and R upper triangular
    (``mode="reduced"``: Q is ``(*, m, k)``, R ``(*, k, n)``, ``k = min(m, n)``).

    It has no gradient rule (a tracked input raises at the call).

    Raises:
        ValueError: a mode other than "reduced".

    Example:
        >>> a = em.randn(5, 3)
        >>> q, r = em.linalg.qr(a)
        >>> q.shape, r.shape, (q @ r).allclose(a, atol=1e-5)
        ((5, 3), (3, 3), True)
    """
    _matrix("linalg.qr", a, square=False)
    if mode != "reduced":
        raise ValueError(f"linalg.qr: only mode='reduced' is supported, got {mode!r}")
    m, n = a.shape[-2:]
    k = min(m, n)
    batch = a.shape[:-2]
    q, r = multi_call("linalg_qr", (a,), (batch + (m, k), batch + (k, n)), (a.dtype, a.dtype))
    return q, r


def svd(a: Tensor, full_matrices: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """``(U, S, Vh)`` with ``a = U @ diag(S) @ Vh``, S descending, as ``torch.linalg.svd``.

    Gradients flow through ``S`` only (``em.linalg.svdvals``); a gradient reaching ``U`` or
    ``Vh`` raises in ``backward``.

    Example:
        >>> a = em.randn(4, 3)
        >>> u, s, vh = em.linalg.svd(a, full_matrices=False)
        >>> u.shape, s.shape, vh.shape, ((u * s) @ vh).allclose(a, atol=1e-5)
        ((4, 3), (3,), (3, 3), True)
    """
    _matrix("linalg.svd", a, square=False)
    m, n = a.shape[-2:]
    k = min(m, n)
    batch = a.shape[:-2]
    shapes = ((batch + (m, m if full_matrices else k)), batch + (k,),
              batch + (n if full_matrices else k, n))
    return multi_call("linalg_svd", (a,), shapes, (a.dtype,) * 3, (bool(full_matrices),))


def svdvals(a: Tensor) -> Tensor:
    """The singular values of each matrix, descending; shape ``(*, min(m, n))``.

    Example:
        >>> em.linalg.svdvals(em.tensor([[3.0, 0.0], [0.0, -4.0]])).tolist()
        [4.0, 3.0]
    """
    return svd(a, full_matrices=False)[1]


def eigh(a: Tensor, UPLO: str = "L") -> tuple[Tensor, Tensor]:  # noqa: N803  (torch's name)
    """``(eigenvalues ascending, eigenvectors as columns)`` of each symmetric matrix, reading
    its lower triangle, as ``torch.linalg.eigh``.

    Raises:
        ValueError: ``UPLO`` other than "L" or "U".

    Example:
        >>> values, vectors = em.linalg.eigh(em.tensor([[2.0, 0.0], [0.0, 1.0]]))
        >>> values.tolist()
        [1.0, 2.0]
    """
    _matrix("linalg.eigh", a)
    if UPLO not in ("L", "U"):
        raise ValueError(f"linalg.eigh: UPLO must be 'L' or 'U', got {UPLO!r}")
    if UPLO == "U":
        a = _mT(a)  # the upper triangle read as the lower one of the transpose
    return multi_call("linalg_eigh", (a,), (a.shape[:-1], a.shape), (a.dtype, a.dtype))


def eigvalsh(a: Tensor, UPLO: str = "L") -> Tensor:  # noqa: N803
    """The eigenvalues of each symmetric matrix, ascending.

    Example:
        >>> em.linalg.eigvalsh(em.tensor([[2.0, 1.0], [1.0, 2.0]])).tolist()
        [1.0, 3.0]
    """
    return eigh(a, UPLO)[0]


# ----- gradients -------------------------------------------------------------------------

@differentiable("linalg_inv", inputs=False, output=True, compute_bound=True)
def _inv_backward(ctx: Any, grad: Tensor) -> tuple:
    """``gA = -A⁻ᵀ g A⁻ᵀ``."""
    inverse_t = _mT(ctx.output)
    return (-(inverse_t @ grad @ inverse_t),)


@differentiable("linalg_det", inputs=True, output=True, compute_bound=True)
def _det_backward(ctx: Any, grad: Tensor) -> tuple:
    """``gA = g · det(A) · A⁻ᵀ`` (invertible A)."""
    (a,) = ctx.inputs
    scale = reshape(grad * ctx.output, grad.shape + (1, 1))
    return (scale * _mT(inv(a)),)


@differentiable("linalg_solve", inputs=True, output=True, compute_bound=True)
def _solve_backward(ctx: Any, grad: Tensor) -> tuple:
    """``gB = A⁻ᵀ g`` (a solve with Aᵀ), ``gA = -gB Xᵀ``."""
    a, _ = ctx.inputs
    grad_b = call("linalg_solve", (_mT(a), grad), grad.shape, grad.dtype)
    grad_a = -(grad_b @ _mT(ctx.output)) if ctx.needs_input_grad[0] else None
    return grad_a, grad_b


@differentiable("linalg_cholesky", inputs=False, output=True, compute_bound=True)
def _cholesky_backward(ctx: Any, grad: Tensor) -> tuple:
    """PyTorch's: ``Φ = tril(Lᵀ g)``, ``gA = L⁻ᵀ ½(Φ + tril(Φ, -1)ᵀ) L⁻¹``."""
    low = ctx.output
    phi = tril(_mT(low) @ grad)
    middle = 0.5 * (phi + _mT(tril(phi, -1)))
    low_inv = inv(low)
    return (_mT(low_inv) @ middle @ low_inv,)


@differentiable("linalg_eigh", inputs=False, output=True, compute_bound=True)
def _eigh_backward(ctx: Any, grads: tuple) -> tuple:
    """PyTorch's: ``gA = V (diag(gL) + skew(Vᵀ gV) / E) Vᵀ`` with ``E_ij = L_j - L_i``
    (1 on the diagonal, which the skew part leaves 0)."""
    grad_values, grad_vectors = grads
    values, vectors = ctx.output
    n = values.shape[-1]
    if grad_vectors is None:
        inner = zeros(vectors.shape, dtype=vectors.dtype, device=vectors.device)
    else:
        vhgv = _mT(vectors) @ grad_vectors
        skew = 0.5 * (vhgv - _mT(vhgv))
        gaps = reshape(values, values.shape[:-1] + (1, n)) - reshape(values, values.shape + (1,))
        inner = skew / (gaps + eye(n, dtype=values.dtype, device=values.device))
    if grad_values is not None:
        inner = inner + _diag_embed(grad_values)
    return (vectors @ inner @ _mT(vectors),)


@differentiable("linalg_svd", inputs=False, output=True, compute_bound=True)
def _svd_backward(ctx: Any, grads: tuple) -> tuple:
    """Singular values only: ``gA = U_k diag(gS) Vh_k``."""
    grad_u, grad_s, grad_vh = grads
    if grad_u is not None or grad_vh is not None:
        raise EmberError("linalg.svd: gradients through U or Vh are not supported; only the "
                         "singular values have a gradient (help: use em.linalg.svdvals)")
    u, s, vh = ctx.output
    k = s.shape[-1]
    u_k = u[..., :k] if u.shape[-1] != k else u
    vh_k = vh[..., :k, :] if vh.shape[-2] != k else vh
    return ((u_k * reshape(grad_s, grad_s.shape[:-1] + (1, k))) @ vh_k,)


def _diag_embed(v: Tensor) -> Tensor:
    """A batch of diagonal matrices from the last dim of ``v``."""
    n = v.shape[-1]
    return reshape(v, v.shape + (1,)) * eye(n, dtype=v.dtype, device=v.device)
