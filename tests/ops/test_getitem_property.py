"""Property test: random basic keys (ints, slices, None, ...) index exactly as NumPy does.

For basic keys NumPy's and PyTorch's rules agree, except that PyTorch (and
ember) reject negative slice steps, so steps are drawn positive.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import ember as em


def _items_for(draw, sizes) -> list:
    """One int or slice per size (in range for it), with Nones drawn in between."""
    items = []
    for size in sizes:
        items += [None] * draw(st.integers(0, 1))
        if size and draw(st.booleans()):
            items.append(draw(st.integers(-size, size - 1)))
        else:
            bound = st.none() | st.integers(-8, 8)
            items.append(slice(draw(bound), draw(bound), draw(st.none() | st.integers(1, 4))))
    return items + [None] * draw(st.integers(0, 1))


@st.composite
def shapes_and_keys(draw):
    shape = tuple(draw(st.lists(st.integers(0, 5), max_size=4)))
    front = draw(st.integers(0, len(shape)))
    items = _items_for(draw, shape[:front])
    if draw(st.booleans()):  # an Ellipsis, then items for the last dims
        back = draw(st.integers(0, len(shape) - front))
        items += [Ellipsis] + _items_for(draw, shape[len(shape) - back:])
    key = items[0] if len(items) == 1 and draw(st.booleans()) else tuple(items)
    return shape, key


@settings(max_examples=300, deadline=None)
@given(shapes_and_keys())
def test_basic_getitem_matches_numpy(case) -> None:
    shape, key = case
    data = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    got = em.tensor(data)[key]
    want = data[key]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want)


@settings(max_examples=100, deadline=None)
@given(shapes_and_keys())
def test_basic_index_put_matches_numpy(case) -> None:
    shape, key = case
    data = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    want = data.copy()
    want[key] = -1
    np.testing.assert_array_equal(em.tensor(data).index_put(key, -1).numpy(), want)
