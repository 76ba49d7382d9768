"""Every Python snippet of the guide pages (docs/*.md) runs against the current API.

A page's ```python blocks run in order in one fresh process, sharing one namespace, as a
reader would paste them. A block that needs what CI lacks (a GPU, a Ray cluster) is
marked by the line ``<!-- not run: why -->`` just above its fence.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
_BLOCK = re.compile(r"(<!-- not run: [^>]+-->\n)?```python\n(.*?)```", re.DOTALL)
PAGES = sorted(DOCS.glob("*.md"))


def snippets(page: Path) -> tuple[list[str], int]:
    """The page's runnable blocks, and how many are marked not run."""
    blocks = _BLOCK.findall(page.read_text())
    return [code for marker, code in blocks if not marker], sum(1 for m, _ in blocks if m)


def test_pages_found():
    assert {p.name for p in PAGES} >= {"index.md", "three-paths.md", "async.md", "pytorch.md"}


def test_block_pattern(tmp_path):
    text = ("```python\nx = 1\n```\n<!-- not run: needs a GPU -->\n```python\ny = em.cuda()\n```\n"
            "```sh\nmake docs\n```\n")
    page = tmp_path / "pattern.md"
    page.write_text(text)
    assert snippets(page) == (["x = 1\n"], 1)


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_page_snippets_run(page, tmp_path):
    code, _ = snippets(page)
    if not code:
        pytest.skip(f"{page.name} has no runnable Python snippet")
    script = "\n".join(f"# --- block {i}\n{c}" for i, c in enumerate(code))
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(DOCS.parent)})
    assert done.returncode == 0, f"{page.name}:\n{script}\n--- stderr:\n{done.stderr[-3000:]}"
