"""Elementwise misuse raises at the call, on the caller's line, naming the op and operands;
failures that depend on the data (integer division by zero) surface at the read."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from tests.runtime_mode import lazy_only


def test_mixed_devices_name_both_devices() -> None:
    a = em.ones(3, device="cpu:0")
    b = em.ones(3, device="cpu:1")
    for call in (lambda: a + b, lambda: b * a, lambda: a == b, lambda: a.maximum(b),
                 lambda: em.where(a > 0, a, b), lambda: a.clamp(b, None)):
        with pytest.raises(em.DeviceError) as info:
            call()
        assert "cpu:0" in str(info.value) and "cpu:1" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_non_broadcastable_shapes_name_op_and_both_shapes() -> None:
    a, b = em.ones(3, 4), em.ones(5)
    with pytest.raises(em.ShapeError, match=r"add: .*\(3, 4\), \(5,\)"):
        a + b
    with pytest.raises(em.ShapeError, match=r"lt: .*\(5,\), \(3, 4\)"):
        b < a
    with pytest.raises(em.ShapeError, match=r"where"):
        em.where(em.ones(2, dtype=em.bool), a, 0.0)
    with pytest.raises(em.ShapeError, match=r"\(0,\), \(2,\)"):
        em.ones(0) * em.ones(2)


@pytest.mark.parametrize("value", [[1, 2, 3], (1, 2, 3), np.ones(3)])
def test_list_and_array_operands_raise_with_a_hint(value) -> None:
    t = em.ones(3)
    for call in (lambda: t + value, lambda: value + t, lambda: t < value, lambda: t.pow(value)):
        with pytest.raises(em.DTypeError, match=r"help: wrap it with em\.tensor"):
            call()


def test_other_operand_types_raise_dtype_errors() -> None:
    t = em.ones(3)
    for value in (None, "2", object(), 1j):
        with pytest.raises(em.DTypeError, match="expected a tensor or a Python scalar"):
            t * value
    assert isinstance(pytest.raises(em.DTypeError, lambda: t + None).value, TypeError)


@pytest.mark.parametrize("dtype", [em.float32, em.float16, em.bfloat16, em.float64])
def test_bitwise_ops_refuse_floats(dtype) -> None:
    x, n = em.ones(3, dtype=dtype), em.ones(3, dtype=em.int64)
    for call, name in ((lambda: x & n, "bitwise_and"), (lambda: n | x, "bitwise_or"),
                       (lambda: x ^ True, "bitwise_xor"), (lambda: ~x, "bitwise_not"),
                       (lambda: n & 1.5, "bitwise_and")):
        with pytest.raises(em.DTypeError, match=f"{name}: needs bool or integer tensors, got"):
            call()


def test_bool_refusals_follow_torch() -> None:
    b = em.tensor([True, False])
    for call in (lambda: b - b, lambda: b - 1, lambda: 1 - b, lambda: em.ones(2) - True,
                 lambda: -b, lambda: abs(b), lambda: b.floor(), lambda: b.relu(),
                 lambda: b // b, lambda: b % b, lambda: b ** b, lambda: b.clamp(True, True),
                 lambda: b.clamp(b, b)):
        with pytest.raises(em.DTypeError):
            call()
    with pytest.raises(em.DTypeError, match=r"help: use a \^ b"):
        b - b


def test_remembered_dtype_rules_still_refuse_what_the_operands_decide() -> None:
    # int64 - int64 and int64 - bool compute in int64 alike; the rule's remembered answer
    # for the first must not let the second through.
    n, b = em.tensor([3, 4]), em.tensor([True, False])
    assert (n - n).tolist() == [0, 0]
    with pytest.raises(em.DTypeError, match=r"help: use a \^ b"):
        n - b
    with pytest.raises(em.DTypeError):
        b - n


def test_remembered_reduction_rules_still_refuse_bad_dims() -> None:
    x = em.ones((2, 3))
    assert x.sum(1).tolist() == [3.0, 3.0]
    with pytest.raises(IndexError, match="sum"):
        x.sum(2)
    with pytest.raises(em.DTypeError, match="mean"):
        em.tensor([1, 2]).mean()
    with pytest.raises(em.DTypeError, match="mean"):
        em.tensor([1, 2]).mean()  # refused again: refusals are not remembered


def test_integer_negative_scalar_power_raises_at_the_call() -> None:
    with pytest.raises(em.DTypeError, match=r"negative integer powers.*help"):
        em.tensor([1, 2, 3]) ** -1
    (em.tensor([1, 2, 3]) ** -1.0).numpy()  # a float exponent is fine


@lazy_only
@pytest.mark.parametrize("dtype", [em.int32, em.int64])
def test_integer_division_by_zero_fails_at_the_read(dtype) -> None:
    x = em.tensor([4, -7, 9], dtype=dtype)
    zero_tensor = em.tensor([1, 0, 2], dtype=dtype)
    for op, call in (("floordiv", lambda: x // zero_tensor), ("remainder", lambda: x % 0),
                     ("floordiv", lambda: 5 // zero_tensor), ("remainder", lambda: x % zero_tensor)):
        result = call()  # no error yet: the failure is in the data
        with pytest.raises(em.KernelError) as info:
            result.numpy()
        assert op in str(info.value) and "ZeroDivisionError" in str(info.value)
        assert f"{__file__}:" in str(info.value), "the error names the user's line"
        assert isinstance(info.value.__cause__, ZeroDivisionError)
    # Other work on the device is unaffected, and a float division by zero is inf.
    assert (x // 2).tolist() == [2, -4, 4]
    assert (x.float() / 0).tolist() == [np.inf, -np.inf, np.inf]


@lazy_only
def test_kernel_error_propagates_to_dependents_only() -> None:
    x = em.tensor([1, 2, 3])
    bad = x // 0
    dependent = bad + 1
    fine = x + 1
    with pytest.raises(em.KernelError, match="floordiv"):
        dependent.numpy()
    assert fine.tolist() == [2, 3, 4]


def test_where_condition_must_be_a_bool_tensor() -> None:
    x = em.ones(3)
    with pytest.raises(em.DTypeError, match="where: cond must be a bool tensor, got float32"):
        em.where(x, x, x)
    with pytest.raises(em.DTypeError, match="got list"):
        em.where([True, False, True], x, x)
    with pytest.raises(em.DTypeError, match="help: wrap it"):
        em.where(x > 0, [1, 2, 3], x)


def test_argument_errors() -> None:
    x = em.ones(3)
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh'"):
        x.gelu(approximate="erf")
    with pytest.raises(ValueError, match="at least one of min and max"):
        x.clamp()
    with pytest.raises(TypeError, match="decimals must be an int"):
        x.round(1.5)
    with pytest.raises(em.DTypeError, match="needs a floating tensor"):
        em.tensor([1, 2]).round(decimals=1)
    with pytest.raises(em.DTypeError):
        em.tensor([1.0]).clamp("a")


def test_errors_are_raised_synchronously_before_any_read() -> None:
    """The op raises at the call (its traceback ends in ember's op, called from this line)."""
    a, b = em.ones(2, 3), em.ones(4)
    try:
        a + b
    except em.ShapeError as exc:
        frames = list(_frames(exc.__traceback__))
        assert frames[0].f_code.co_filename == __file__
        assert all("ember" in f.f_code.co_filename for f in frames[1:])
    else:
        pytest.fail("no ShapeError")


def _frames(tb):
    while tb is not None:
        yield tb.tb_frame
        tb = tb.tb_next
