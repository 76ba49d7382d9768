"""``nn.functional`` (``F``): the functional forms of the layers, written from ember ops."""

from ember.nn.functional.activations import (
    celu,
    elu,
    gelu,
    hardsigmoid,
    hardswish,
    hardtanh,
    leaky_relu,
    log_softmax,
    logsigmoid,
    mish,
    relu,
    relu6,
    selu,
    sigmoid,
    silu,
    softmax,
    softmin,
    softplus,
    softsign,
    tanh,
)
from ember.nn.functional.linear import linear

__all__ = ["celu", "elu", "gelu", "hardsigmoid", "hardswish", "hardtanh", "leaky_relu", "linear",
           "log_softmax", "logsigmoid", "mish", "relu", "relu6", "selu", "sigmoid", "silu",
           "softmax", "softmin", "softplus", "softsign", "tanh"]
from ember.nn.functional.attention import scaled_dot_product_attention
from ember.nn.functional.dropout import dropout
from ember.nn.functional.distance import cosine_similarity, normalize
from ember.nn.functional.embedding import embedding, one_hot
from ember.nn.functional.interpolation import interpolate
from ember.nn.functional.normalization import (
    batch_norm,
    group_norm,
    instance_norm,
    layer_norm,
    rms_norm,
)
from ember.nn.functional.padding import pad

__all__ += ["batch_norm", "cosine_similarity", "dropout", "embedding", "group_norm",
            "instance_norm", "interpolate", "layer_norm", "normalize", "one_hot", "pad",
            "rms_norm", "scaled_dot_product_attention"]
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
    conv3d,
    conv_transpose1d,
    conv_transpose2d,
    max_pool2d,
    max_pool3d,
    avg_pool3d,
)

__all__ += ["adaptive_avg_pool2d", "avg_pool2d", "avg_pool3d", "conv1d", "conv2d", "conv3d",
            "conv_transpose1d", "conv_transpose2d", "max_pool2d", "max_pool3d"]
from ember.nn.functional.pooling import (
    adaptive_avg_pool1d,
    adaptive_max_pool1d,
    adaptive_max_pool2d,
    avg_pool1d,
    max_pool1d,
)

__all__ += ["adaptive_avg_pool1d", "adaptive_max_pool1d", "adaptive_max_pool2d", "avg_pool1d",
            "max_pool1d"]
