"""``ember.nn``: modules, parameters, layers, initializers and the functional forms (``F``)."""

from ember.nn import functional, init
from ember.nn.config import Config
from ember.nn.layers.activation import (
    CELU,
    ELU,
    GELU,
    SELU,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    LeakyReLU,
    LogSigmoid,
    LogSoftmax,
    Mish,
    ReLU,
    ReLU6,
    Sigmoid,
    SiLU,
    Softmax,
    Softmin,
    Softplus,
    Softsign,
    Tanh,
)
from ember.nn.layers.container import Identity, ModuleDict, ModuleList, Sequential
from ember.nn.layers.flatten import Flatten, Unflatten
from ember.nn.layers.linear import Linear
from ember.nn.module import Module
from ember.nn.param import Buffer, Param

F = functional

__all__ = [
    "Buffer", "CELU", "Config", "ELU", "F", "Flatten", "GELU", "Hardsigmoid", "Hardswish",
    "Hardtanh", "Identity", "LeakyReLU", "Linear", "LogSigmoid", "LogSoftmax", "Mish", "Module",
    "ModuleDict", "ModuleList", "Param", "ReLU", "ReLU6", "SELU", "Sequential", "SiLU", "Sigmoid",
    "Softmax", "Softmin", "Softplus", "Softsign", "Tanh", "Unflatten", "functional", "init",
]
from ember.nn.layers.attention import MultiHeadAttention
from ember.nn.layers.dropout import Dropout
from ember.nn.layers.embedding import Embedding
from ember.nn.layers.normalization import (
    BatchNorm1d,
    BatchNorm2d,
    GroupNorm,
    InstanceNorm1d,
    InstanceNorm2d,
    LayerNorm,
    RMSNorm,
)
from ember.nn.layers.recurrent import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell
from ember.nn.layers.transformer import TransformerDecoderLayer, TransformerEncoderLayer
from ember.nn.layers.transformer_model import Transformer, TransformerDecoder, TransformerEncoder

__all__ += [
    "BatchNorm1d", "BatchNorm2d", "Dropout", "Embedding", "GRU", "GRUCell", "GroupNorm",
    "InstanceNorm1d", "InstanceNorm2d", "LSTM", "LSTMCell", "LayerNorm", "MultiHeadAttention",
    "RMSNorm", "RNN", "RNNCell", "Transformer", "TransformerDecoder", "TransformerDecoderLayer",
    "TransformerEncoder", "TransformerEncoderLayer",
]
from ember.nn.layers.conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d
from ember.nn.layers.pooling import (
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AdaptiveMaxPool1d,
    AdaptiveMaxPool2d,
    AvgPool1d,
    AvgPool2d,
    AvgPool3d,
    MaxPool1d,
    MaxPool2d,
    MaxPool3d,
)
from ember.nn.layers.upsampling import Upsample, UpsamplingBilinear2d, UpsamplingNearest2d

__all__ += ["AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d",
            "AvgPool1d", "AvgPool2d", "AvgPool3d", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d",
            "ConvTranspose2d", "MaxPool1d", "MaxPool2d", "MaxPool3d", "Upsample", "UpsamplingBilinear2d", "UpsamplingNearest2d"]
