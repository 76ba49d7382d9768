"""Shape ops' errors: raised at the call, naming the op and the shapes or dims involved."""

from __future__ import annotations

import pytest

import ember as em


def test_reshape_numel_mismatch_names_both_shapes_and_counts() -> None:
    with pytest.raises(em.ShapeError, match=r"reshape: cannot reshape a tensor of shape \(2, 3\) "
                                            r"\(6 elements\) into shape \(4, 2\) \(8 elements\)"):
        em.zeros(2, 3).reshape(4, 2)


def test_reshape_minus_one_that_does_not_divide() -> None:
    with pytest.raises(em.ShapeError, match=r"reshape: .*shape \(2, 3\) \(6 elements\) into "
                                            r"shape \(4, -1\): 6 is not a multiple of 4"):
        em.zeros(2, 3).reshape(4, -1)


def test_reshape_two_minus_ones_and_bad_sizes() -> None:
    with pytest.raises(em.ShapeError, match=r"reshape: only one dimension can be -1, got shape "
                                            r"\(-1, -1\)"):
        em.zeros(6).view(-1, -1)
    with pytest.raises(em.ShapeError, match=r"reshape: invalid size in shape \(-2, 3\)"):
        em.zeros(6).reshape(-2, 3)
    with pytest.raises(TypeError, match="reshape: sizes must be ints, got 2.0"):
        em.zeros(6).reshape(2.0, 3)


def test_reshape_ambiguous_minus_one_on_empty() -> None:
    with pytest.raises(em.ShapeError, match=r"reshape: .*shape \(0, 3\) \(0 elements\) into "
                                            r"shape \(0, -1\): the -1 is ambiguous"):
        em.zeros(0, 3).reshape(0, -1)


def test_flatten_start_after_end() -> None:
    with pytest.raises(em.ShapeError, match=r"flatten: start dim 1 comes after end dim 0 .*"
                                            r"\(2, 3\)"):
        em.zeros(2, 3).flatten(1, 0)


def test_dims_out_of_range_are_index_errors() -> None:
    with pytest.raises(IndexError, match="squeeze: dim 2 is out of range for a tensor of 2 dims"):
        em.zeros(3, 4).squeeze(2)
    with pytest.raises(IndexError, match="unsqueeze: dim 3 is out of range for a tensor of 3 dims"):
        em.zeros(2, 3).unsqueeze(3)
    with pytest.raises(IndexError, match="transpose: dim -3 is out of range"):
        em.zeros(2, 3).transpose(0, -3)
    with pytest.raises(IndexError, match="chunk: dim 1 is out of range"):
        em.zeros(4).chunk(2, 1)


def test_squeeze_repeated_dim() -> None:
    with pytest.raises(em.ShapeError, match=r"squeeze: dim 0 appears more than once in \(0, 0\)"):
        em.zeros(1, 3).squeeze((0, 0))


def test_permute_must_be_a_permutation() -> None:
    with pytest.raises(em.ShapeError, match=r"permute: got 1 dims \(0,\) for a tensor of shape "
                                            r"\(3, 4\) \(2 dims\)"):
        em.zeros(3, 4).permute(0)
    with pytest.raises(em.ShapeError, match=r"permute: dims \(0, -2\) repeat a dim; expected a "
                                            r"permutation of \(0, 1\) for a tensor of shape "
                                            r"\(3, 4\)"):
        em.zeros(3, 4).permute(0, -2)


def test_T_of_more_than_two_dims() -> None:
    with pytest.raises(em.ShapeError, match=r"T: needs a tensor of at most 2 dims, got shape "
                                            r"\(2, 3, 4\); help: use x.transpose\(-2, -1\) .* "
                                            r"x.permute\(2, 1, 0\)"):
        em.zeros(2, 3, 4).T


def test_expand_errors() -> None:
    with pytest.raises(em.ShapeError, match=r"expand: cannot expand shape \(3, 4\) to \(3, 5\): "
                                            r"dim 1 has size 4, and only size-1 dims expand; "
                                            r"help: use repeat"):
        em.zeros(3, 4).expand(3, 5)
    with pytest.raises(em.ShapeError, match=r"expand: got 1 sizes \(4,\) for a tensor of shape "
                                            r"\(3, 4\); expected at least 2"):
        em.zeros(3, 4).expand(4)
    with pytest.raises(em.ShapeError, match=r"expand: size -1 is not allowed for the new leading "
                                            r"dim 0 \(expanding \(3,\) to \(-1, 3\)\)"):
        em.zeros(3).expand(-1, 3)


def test_repeat_errors() -> None:
    with pytest.raises(em.ShapeError, match=r"repeat: got 1 sizes \(2,\) for a tensor of shape "
                                            r"\(3, 4\); expected at least 2"):
        em.zeros(3, 4).repeat(2)
    with pytest.raises(em.ShapeError, match=r"repeat: sizes must be >= 0, got \(2, -1\)"):
        em.zeros(3).repeat(2, -1)


def test_split_errors() -> None:
    with pytest.raises(em.ShapeError, match=r"split: sizes \(2, 2\) must be >= 0 and sum to 5, "
                                            r"the size of dim 0 of shape \(5, 3\)"):
        em.zeros(5, 3).split([2, 2])
    with pytest.raises(em.ShapeError, match=r"split: piece size 0 is invalid for dim 1 of size 3 "
                                            r"\(shape \(5, 3\)\)"):
        em.zeros(5, 3).split(0, 1)
    with pytest.raises(em.ShapeError, match=r"split: needs a tensor of at least 1 dim, got "
                                            r"shape \(\)"):
        em.zeros(()).split(1)
    with pytest.raises(ValueError, match="chunk: chunks must be > 0, got 0"):
        em.zeros(5).chunk(0)


def test_cat_errors() -> None:
    with pytest.raises(em.ShapeError, match=r"cat: shapes must match except in dim 1, got "
                                            r"\(2, 3\), \(4, 3\)"):
        em.cat([em.zeros(2, 3), em.zeros(4, 3)], dim=1)
    with pytest.raises(em.ShapeError, match=r"cat: shapes must match except in dim 0, got "
                                            r"\(2, 3\), \(3,\)"):
        em.cat([em.zeros(2, 3), em.zeros(3)])
    with pytest.raises(em.ShapeError, match="cat: the 0-d tensor at position 1 cannot be joined"):
        em.cat([em.zeros(2), em.tensor(1.0)])
    with pytest.raises(IndexError, match="cat: dim 2 is out of range for a tensor of 2 dims"):
        em.cat([em.zeros(2, 3)], dim=2)
    with pytest.raises(ValueError, match="cat: expected a non-empty sequence of tensors"):
        em.cat([])
    with pytest.raises(TypeError, match="cat: expected tensors, got int at position 1"):
        em.cat([em.zeros(2), 3])
    with pytest.raises(TypeError, match="cat: expected a sequence of tensors, got Tensor"):
        em.cat(em.zeros(2))


def test_cat_and_stack_on_different_devices() -> None:
    a, b = em.zeros(2, device="cpu:0"), em.zeros(2, device="cpu:1")
    with pytest.raises(em.DeviceError, match=r"cat: tensors are on different devices \(cpu:0, "
                                             r"cpu:1\)"):
        em.cat([a, b])
    with pytest.raises(em.DeviceError, match="stack: tensors are on different devices"):
        em.stack([a, b])


def test_stack_errors() -> None:
    with pytest.raises(em.ShapeError, match=r"stack: all tensors must have the same shape, got "
                                            r"\(3,\), \(4,\)"):
        em.stack([em.zeros(3), em.zeros(4)])
    with pytest.raises(IndexError, match="stack: dim 3 is out of range for a tensor of 3 dims"):
        em.stack([em.zeros(2, 3)], dim=3)
