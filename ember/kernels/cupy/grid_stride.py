"""The launch shape of ember's small grid-stride kernels (tf32_split, take_along)."""

from __future__ import annotations

BLOCK = 256
# Past this many blocks the kernel's grid-stride loop covers the rest: 2M threads fill an
# H200's 132 SMs.
MAX_BLOCKS = 8192


def launch_shape(items: int) -> tuple[tuple[int], tuple[int]]:
    """(grid, block) of a grid-stride kernel over ``items`` (one per thread, up to the cap)."""
    return (min(-(-items // BLOCK), MAX_BLOCKS),), (BLOCK,)
