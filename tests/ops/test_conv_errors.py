"""Convolution and pooling errors: raised at the call, naming the op and the shapes."""

from __future__ import annotations

import pytest

import ember as em
from ember import nn
from ember.nn import functional as F


def test_channel_mismatch_names_op_and_both_shapes() -> None:
    with pytest.raises(em.ShapeError) as info:
        F.conv2d(em.ones(64, 4, 32, 32), em.ones(32, 3, 3, 3))
    assert str(info.value) == ("conv2d: input (64, 4, 32, 32) has 4 channels, but weight "
                               "(32, 3, 3, 3) with groups=1 expects 3")


def test_kernel_larger_than_padded_input() -> None:
    with pytest.raises(em.ShapeError, match=r"conv2d: kernel \(3, 3\) \(dilation included\) is "
                                            r"larger than the padded input \(2, 2\): input "
                                            r"\(1, 4, 2, 2\), weight \(8, 4, 3, 3\)"):
        F.conv2d(em.ones(1, 4, 2, 2), em.ones(8, 4, 3, 3))
    with pytest.raises(em.ShapeError, match=r"kernel \(5,\) \(dilation included\)"):
        F.conv1d(em.ones(1, 1, 4), em.ones(1, 1, 3), dilation=2)
    F.conv2d(em.ones(1, 4, 2, 2), em.ones(8, 4, 3, 3), padding=1)  # fits once padded


def test_groups_must_divide_channels() -> None:
    with pytest.raises(em.ShapeError, match=r"conv2d: weight \(6, 2, 3, 3\) has 6 output "
                                            r"channels, not divisible by groups=4"):
        F.conv2d(em.ones(1, 8, 5, 5), em.ones(6, 2, 3, 3), groups=4)
    with pytest.raises(em.ShapeError, match=r"input \(1, 5, 5, 5\) has 5 channels, but weight "
                                            r"\(6, 2, 3, 3\) with groups=2 expects 4"):
        F.conv2d(em.ones(1, 5, 5, 5), em.ones(6, 2, 3, 3), groups=2)


def test_bias_shape() -> None:
    with pytest.raises(em.ShapeError, match=r"conv2d: bias \(5,\) does not match weight "
                                            r"\(6, 4, 3, 3\): expected \(6,\)"):
        F.conv2d(em.ones(1, 4, 5, 5), em.ones(6, 4, 3, 3), em.ones(5))


@pytest.mark.parametrize("fn, x, w, pattern", [
    (F.conv2d, (4, 5), (6, 4, 3, 3), r"conv2d: expected a 3-D \(unbatched\) or 4-D \(batched\) "
                                     r"input \(C, H, W\), got input of shape \(4, 5\)"),
    (F.conv1d, (1, 2, 3, 4), (6, 2, 3), r"conv1d: expected a 2-D .* or 3-D .* got input of "
                                        r"shape \(1, 2, 3, 4\)"),
    (F.conv2d, (1, 4, 5, 5), (6, 4, 3), r"conv2d: expected a 4-D weight .* got weight of "
                                        r"shape \(6, 4, 3\)"),
    (F.conv_transpose2d, (1, 4, 5), (4, 2, 3), r"conv_transpose2d: expected a 4-D weight"),
])
def test_ranks(fn, x, w, pattern) -> None:
    with pytest.raises(em.ShapeError, match=pattern):
        fn(em.ones(*x), em.ones(*w))


def test_bad_arguments() -> None:
    x, w = em.ones(1, 2, 5, 5), em.ones(2, 2, 3, 3)
    with pytest.raises(em.ShapeError, match=r"conv2d: stride must be positive, got 0"):
        F.conv2d(x, w, stride=0)
    with pytest.raises(em.ShapeError, match=r"conv2d: padding must be non-negative"):
        F.conv2d(x, w, padding=-1)
    with pytest.raises(em.ShapeError, match=r"conv2d: dilation must be an int or 2 ints, got "
                                            r"\(1, 1, 1\)"):
        F.conv2d(x, w, dilation=(1, 1, 1))
    with pytest.raises(TypeError, match=r"conv2d: stride must be an int"):
        F.conv2d(x, w, stride=1.5)
    with pytest.raises(em.ShapeError, match=r"padding='same' is not supported for strided"):
        F.conv2d(x, w, padding="same", stride=2)
    with pytest.raises(em.ShapeError, match=r"padding must be an int, 2 ints, 'same' or 'valid'"):
        F.conv2d(x, w, padding="full")
    with pytest.raises(em.ShapeError, match=r"groups must be positive"):
        F.conv2d(x, w, groups=0)


def test_dtypes() -> None:
    with pytest.raises(em.DTypeError, match=r"conv2d: dtypes differ: input float32, weight "
                                            r"float64"):
        F.conv2d(em.ones(1, 2, 5, 5), em.ones(2, 2, 3, 3, dtype=em.float64))
    with pytest.raises(em.DTypeError, match=r"conv1d: expected floating-point tensors, got "
                                            r"input of dtype int64"):
        F.conv1d(em.ones(1, 2, 5, dtype=em.int64), em.ones(2, 2, 3))
    with pytest.raises(em.DTypeError, match=r"avg_pool2d: expected floating-point"):
        F.avg_pool2d(em.ones(1, 2, 4, 4, dtype=em.int32), 2)
    with pytest.raises(em.DTypeError, match=r"max_pool2d: expected floating-point"):
        F.max_pool2d(em.ones(1, 2, 4, 4, dtype=em.bool), 2)
    with pytest.raises(em.DTypeError, match=r"weight must be a tensor"):
        F.conv2d(em.ones(1, 2, 5, 5), [[1.0]])


def test_devices() -> None:
    with pytest.raises(em.DeviceError, match=r"conv2d: tensors are on different devices "
                                             r"\(cpu:0, cpu:1\)"):
        F.conv2d(em.ones(1, 2, 5, 5, device="cpu:0"), em.ones(2, 2, 3, 3, device="cpu:1"))


def test_conv_transpose_errors() -> None:
    x = em.ones(1, 2, 3, 3)
    with pytest.raises(em.ShapeError, match=r"conv_transpose2d: output_padding \(1, 1\) must be "
                                            r"smaller than either stride \(1, 1\) or dilation "
                                            r"\(1, 1\)"):
        F.conv_transpose2d(x, em.ones(2, 2, 3, 3), output_padding=1)
    with pytest.raises(em.ShapeError, match=r"conv_transpose2d: input \(1, 2, 3, 3\) has 2 "
                                            r"channels, but weight \(3, 2, 3, 3\) expects 3"):
        F.conv_transpose2d(x, em.ones(3, 2, 3, 3))
    with pytest.raises(em.ShapeError, match=r"gives output size \(-1, -1\), which is too small"):
        F.conv_transpose2d(x, em.ones(2, 2, 1, 1), padding=2)
    with pytest.raises(em.ShapeError, match=r"bias \(2,\) does not match weight \(2, 2, 3, 3\) "
                                            r"with groups=2: expected \(4,\)"):
        F.conv_transpose2d(x, em.ones(2, 2, 3, 3), em.ones(2), groups=2)


def test_pooling_errors() -> None:
    x = em.ones(1, 1, 5, 5)
    with pytest.raises(em.ShapeError, match=r"max_pool2d: padding \(2, 2\) must be at most half "
                                            r"the kernel size \(2, 2\)"):
        F.max_pool2d(x, 2, padding=2)
    with pytest.raises(em.ShapeError, match=r"avg_pool2d: input \(1, 1, 2, 2\) with kernel "
                                            r"\(3, 3\).* gives output size \(0, 0\), which is "
                                            r"too small"):
        F.avg_pool2d(em.ones(1, 1, 2, 2), 3)
    with pytest.raises(em.ShapeError, match=r"max_pool2d: kernel_size must be positive"):
        F.max_pool2d(x, 0)
    with pytest.raises(em.ShapeError, match=r"max_pool2d: expected a 3-D \(C, H, W\) or 4-D "
                                            r"\(N, C, H, W\) input .* got input of shape "
                                            r"\(1, 0, 5, 5\)"):
        F.max_pool2d(em.ones(1, 0, 5, 5), 2)
    with pytest.raises(em.ShapeError, match=r"max_pool2d: .* got input of shape \(5, 5\)"):
        F.max_pool2d(em.ones(5, 5), 2)
    with pytest.raises(em.ShapeError, match=r"avg_pool2d: divisor_override must not be zero"):
        F.avg_pool2d(x, 2, divisor_override=0)
    with pytest.raises(em.ShapeError, match=r"adaptive_avg_pool2d: output_size must be an int "
                                            r"or 2 ints, got \(1, 2, 3\)"):
        F.adaptive_avg_pool2d(x, (1, 2, 3))
    with pytest.raises(em.ShapeError, match=r"adaptive_avg_pool2d: .* got input of shape "
                                            r"\(1, 1, 0, 5\)"):
        F.adaptive_avg_pool2d(em.ones(1, 1, 0, 5), 2)


def test_layer_configuration_errors() -> None:
    with pytest.raises(em.ShapeError, match=r"Conv2d: in_channels=3 must be divisible by "
                                            r"groups=2"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(em.ShapeError, match=r"ConvTranspose2d: out_channels=3 must be divisible "
                                            r"by groups=2"):
        nn.ConvTranspose2d(4, 3, 3, groups=2)
    with pytest.raises(NotImplementedError, match=r"padding_mode='reflect'"):
        nn.Conv2d(3, 4, 3, padding_mode="reflect")
    with pytest.raises(ValueError, match=r"padding='same' is not supported for strided"):
        nn.Conv1d(3, 4, 3, stride=2, padding="same")
    up = nn.ConvTranspose2d(2, 2, 3, stride=2)
    with pytest.raises(em.ShapeError, match=r"requested output size \(20, 7\) is not reachable "
                                            r"from input \(1, 2, 3, 3\): dim 0 must lie in "
                                            r"\[7, 8\]"):
        up(em.ones(1, 2, 3, 3), output_size=(20, 7))
    with pytest.raises(em.ShapeError, match=r"conv2d: input \(1, 4, 8, 8\) has 4 channels, but "
                                            r"weight \(5, 3, 3, 3\) with groups=1 expects 3"):
        nn.Conv2d(3, 5, 3)(em.ones(1, 4, 8, 8))


def test_shapes_are_known_and_errors_raised_at_the_call() -> None:
    y = F.conv2d(em.ones(2, 3, 9, 9), em.ones(4, 3, 3, 3), stride=2, padding=1)
    z = F.max_pool2d(y, 3, 2, ceil_mode=True)
    assert (y.shape, z.shape) == ((2, 4, 5, 5), (2, 4, 2, 2))
    with pytest.raises(em.ShapeError, match=r"conv2d: kernel .* input \(2, 4, 2, 2\)"):
        F.conv2d(z, em.ones(4, 4, 3, 3))
    assert z.numpy().shape == (2, 4, 2, 2)


@pytest.mark.parametrize("stride", [True, (1, True), (0, 1), -1, (1,), [1, 0], 1.0])
def test_window_arguments_refused_after_plain_ones_passed(stride) -> None:
    # Plain ints and tuples of them pass a short check; everything else (bools, too few,
    # too small, floats) still meets the full one and its error.
    x, w = em.ones(1, 2, 5, 5), em.ones(3, 2, 3, 3)
    F.conv2d(x, w, stride=(1, 1))
    F.max_pool2d(x, 2, stride=(2, 2))
    with pytest.raises((TypeError, em.ShapeError), match="conv2d: stride"):
        F.conv2d(x, w, stride=stride)
    with pytest.raises((TypeError, em.ShapeError), match="max_pool2d: stride"):
        F.max_pool2d(x, 2, stride=stride)
