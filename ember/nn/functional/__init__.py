"""``nn.functional`` (``F``): the functional forms of the layers, written from ember ops."""

from ember.nn.functional.activations import gelu, relu, silu, log_softmax, softmax
from ember.nn.functional.linear import linear

__all__ = ["gelu", "linear", "log_softmax", "relu", "silu", "softmax"]
from ember.nn.functional.attention import scaled_dot_product_attention
from ember.nn.functional.dropout import dropout
from ember.nn.functional.embedding import embedding
from ember.nn.functional.normalization import batch_norm, group_norm, layer_norm, rms_norm

__all__ += ["batch_norm", "dropout", "embedding", "group_norm", "layer_norm", "rms_norm",
            "scaled_dot_product_attention"]
from ember.nn.functional.losses import (
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cross_entropy,
    huber_loss,
    kl_div,
    l1_loss,
    mse_loss,
    nll_loss,
)

__all__ += ["binary_cross_entropy", "binary_cross_entropy_with_logits", "cross_entropy",
            "huber_loss", "kl_div", "l1_loss", "mse_loss", "nll_loss"]
from ember.nn.functional.conv import (
    adaptive_avg_pool2d,
    avg_pool2d,
    conv1d,
    conv2d,
    conv_transpose1d,
    conv_transpose2d,
    max_pool2d,
)

__all__ += ["adaptive_avg_pool2d", "avg_pool2d", "conv1d", "conv2d", "conv_transpose1d",
            "conv_transpose2d", "max_pool2d"]
