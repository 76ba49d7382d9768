"""Every fused-elementwise variant (vector width, vectors loaded per thread, grid) gives the same bits as the scalar kernel, on a GPU: sizes that leave a
partial vector, a partial tile of ``block * unroll`` vectors or less than one tile;
contiguous, broadcast, strided and one-element inputs; float32, float16, bfloat16 and
bool outputs."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from tests.cuda.gpu import needs_gpu

pytestmark = needs_gpu

SCALAR = (256, 1, 1, 16)
VARIANTS = [
    (256, 4, 1, 16),
    (256, 4, 4, 0),  # 0: fused.WHOLE_GRID
    (256, 4, 8, 0),
    (128, 4, 8, 1),  # one block per SM: every thread loops
    (256, 8, 2, 0),
]
# (rows, cols): 3 elements (no whole vector), a partial vector and partial tiles, a
# partial tile of 8 * 128 vectors, and one of over 1M elements.
SHAPES = [(1, 3), (3, 1367), (5, 2057), (1031, 1019)]


def _force(monkeypatch, variant):
    from ember.kernels.cupy import fused

    monkeypatch.setattr(fused, "_variants", lambda n, full: [variant])


def _results(cuda, shape, dtype):
    """float32 bits and bools of a chain over a full, a broadcast row, a strided view
    and a one-element input."""
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    t = rng.standard_normal(shape[::-1]).astype(np.float32)
    row = rng.standard_normal(shape[-1:]).astype(np.float32)
    one = np.float32([0.25])
    dt = getattr(em, dtype)
    tx, tt, trow, tone = (em.from_numpy(a, device=cuda).astype(dt) for a in (x, t, row, one))
    y = ((tx * trow + tone).gelu() * 0.5 - tt.permute(1, 0)).clamp(min=-0.9)
    mask = y > 0.1
    z = em.where(mask, y, tx)
    return [y.astype(em.float32).numpy().view(np.uint32), mask.numpy(),
            z.astype(em.float32).numpy().view(np.uint32)]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("shape", SHAPES)
def test_every_variant_gives_the_scalar_kernels_bits(cuda, monkeypatch, shape, dtype):
    em.sync(cuda)
    # Errors of earlier tests on this shared device are not this test's.
    monkeypatch.setattr(cuda.actor.backend.fused, "last_error", None)
    _force(monkeypatch, SCALAR)
    expected = _results(cuda, shape, dtype)
    for variant in VARIANTS:
        _force(monkeypatch, variant)
        got = _results(cuda, shape, dtype)
        for want, have in zip(expected, got):
            np.testing.assert_array_equal(have, want, err_msg=f"variant {variant}")
    assert cuda.actor.backend.fused.last_error is None


def test_misaligned_or_odd_inputs_take_the_scalar_kernel_only():
    import cupy

    from ember.kernels.cupy import fused

    n = 1 << 21
    aligned = cupy.empty(n + 8, dtype=cupy.float32)
    variants = fused._variants(n, [aligned[:n]])
    assert variants[0] == (fused.DEFAULT_BLOCK, fused.VECTOR, 1, 16)
    assert (fused.DEFAULT_BLOCK, fused.VECTOR, 4, fused.WHOLE_GRID) in variants
    assert fused._variants(n, [aligned[1:n + 1]]) == [SCALAR]
    assert fused._variants(n - 1, [aligned[:n - 1]]) == [SCALAR]
    # Under the tuning size only the default runs.
    assert fused._variants(4096, [aligned[:4096]]) == [variants[0]]
