"""What the GPU tests share: the skip on machines without a CUDA device."""

from __future__ import annotations

import pytest

import ember as em

needs_gpu = pytest.mark.skipif(
    not em.available("cuda"),
    reason="no CUDA device: needs CuPy (the cuda12 / cuda13 extra) and an NVIDIA GPU")
