"""What the GPU tests share: the skips on machines without a CUDA device or without
nvcc, and generated CUDA source compiled to PTX for Hopper (no driver needed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import ember as em

needs_gpu = pytest.mark.skipif(
    not em.available("cuda"),
    reason="no CUDA device: needs CuPy (the cuda12 / cuda13 extra) and an NVIDIA GPU")

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None,
                                reason="nvcc (the CUDA compiler) is not installed")


def ptx_of(tmp_path: Path, code: str, *entries: str) -> str:
    """The PTX nvcc makes of ``code`` for compute capability 9.0 (C++17, as CuPy's NVRTC
    compiles ember's kernels), asserting that it compiled and defines each of ``entries``."""
    path = tmp_path / "kernel.cu"
    path.write_text(code)
    result = subprocess.run(["nvcc", "-ptx", "-arch=compute_90", "--std=c++17", str(path),
                             "-o", str(tmp_path / "kernel.ptx")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    ptx = (tmp_path / "kernel.ptx").read_text()
    for entry in entries:
        assert f".entry {entry}(" in ptx
    return ptx
