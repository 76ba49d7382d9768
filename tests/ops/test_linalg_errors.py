"""matmul's errors: raised at the call, naming the op and both shapes, with a help where known."""

from __future__ import annotations

import pytest

import ember as em


def test_inner_mismatch_message_is_exact() -> None:
    with pytest.raises(em.ShapeError) as info:
        em.ones(32, 64) @ em.ones(128, 10)
    assert str(info.value) == "matmul: inner dimensions differ: lhs (32, 64) vs rhs (128, 10)"


def test_inner_mismatch_suggests_rhs_T() -> None:
    with pytest.raises(em.ShapeError) as info:
        em.ones(32, 64) @ em.ones(10, 64)
    assert str(info.value) == ("matmul: inner dimensions differ: lhs (32, 64) vs rhs (10, 64)\n"
                               "help: did you mean rhs.T?")


def test_inner_mismatch_suggests_lhs_T() -> None:
    with pytest.raises(em.ShapeError, match=r"lhs \(64, 32\) vs rhs \(64, 10\)\nhelp: did you "
                                            r"mean lhs\.T\?"):
        em.ones(64, 32) @ em.ones(64, 10)


def test_batched_mismatch_suggests_transpose_of_last_two_dims() -> None:
    with pytest.raises(em.ShapeError, match=r"rhs \(8, 10, 64\)\nhelp: did you mean "
                                            r"rhs\.transpose\(-2, -1\)\?"):
        em.ones(8, 32, 64) @ em.ones(8, 10, 64)


def test_vector_mismatch() -> None:
    with pytest.raises(em.ShapeError, match=r"matmul: inner dimensions differ: lhs \(3,\) vs "
                                            r"rhs \(4,\)$"):
        em.ones(3) @ em.ones(4)


def test_batch_dims_that_do_not_broadcast() -> None:
    with pytest.raises(em.ShapeError, match=r"matmul: batch dimensions do not broadcast: "
                                            r"lhs \(2, 3, 4\) vs rhs \(3, 4, 5\)"):
        em.ones(2, 3, 4) @ em.ones(3, 4, 5)


def test_zero_dim_operand() -> None:
    with pytest.raises(em.ShapeError, match=r"matmul: .*lhs \(\) vs rhs \(3,\)"):
        em.tensor(2.0) @ em.ones(3)


def test_bool_operands() -> None:
    with pytest.raises(em.DTypeError, match="matmul: not defined for bool tensors, got bool and "
                                            "float32"):
        em.ones(2, 2, dtype=em.bool) @ em.ones(2, 2)


def test_non_tensor_operand() -> None:
    with pytest.raises(em.DTypeError, match="matmul: expected two tensors, got Tensor and int"):
        em.ones(2, 2) @ 3
    with pytest.raises(em.DTypeError, match="matmul: expected two tensors, got list and Tensor"):
        [[1.0]] @ em.ones(1, 1)


def test_different_devices() -> None:
    with pytest.raises(em.DeviceError, match="matmul: .*cpu:0, cpu:1"):
        em.ones(2, 2, device="cpu:0") @ em.ones(2, 2, device="cpu:1")


def test_errors_raise_before_anything_is_submitted() -> None:
    a, b = em.ones(32, 64), em.ones(128, 10)
    before = em.stats().ops_submitted
    with pytest.raises(em.ShapeError):
        a @ b
    assert em.stats().ops_submitted == before
