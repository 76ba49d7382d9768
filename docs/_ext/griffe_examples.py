"""A griffe extension for the docs build: ember's docstrings head their doctests
``Example:``; Google style names that section ``Examples:``. Unrenamed, griffe takes it
for an admonition and renders ``>>>`` lines as Markdown (nested quotes, and ``[i][j]``
read as a link)."""

from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE = re.compile(r"^(\s*)Example:[ \t]*$", re.MULTILINE)


class ExampleSections(griffe.Extension):
    """Rename each ``Example:`` section header to ``Examples:`` before parsing."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _EXAMPLE.sub(r"\1Examples:", obj.docstring.value)
