"""A program that used a CUDA device exits quietly (no "Exception ignored" from CuPy's
per-thread allocator at interpreter exit)."""

from __future__ import annotations

import subprocess
import sys


from tests.cuda.gpu import needs_gpu

pytestmark = needs_gpu


def test_exit_prints_no_ignored_exceptions():
    program = "import ember as em; print((em.ones(3, device=em.cuda(0)) + 1).numpy())"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=90)
    assert done.returncode == 0, done.stderr
    assert "[2. 2. 2.]" in done.stdout
    assert "Exception ignored" not in done.stderr, done.stderr
