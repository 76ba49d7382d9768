"""``nn.functional`` (``F``): the functional forms of the layers, written from ember ops."""

from ember.nn.functional.activations import gelu, relu, silu, log_softmax, softmax
from ember.nn.functional.linear import linear

__all__ = ["gelu", "linear", "log_softmax", "relu", "silu", "softmax"]
