"""``ember.nn``: modules, parameters, layers, initializers and the functional forms (``F``)."""

from ember.nn import functional, init
from ember.nn.config import Config
from ember.nn.layers.activation import GELU, ReLU, SiLU, Tanh
from ember.nn.layers.container import Sequential
from ember.nn.layers.linear import Linear
from ember.nn.module import Module
from ember.nn.param import Buffer, Param

F = functional

__all__ = [
    "Buffer", "Config", "F", "GELU", "Linear", "Module", "Param", "ReLU", "Sequential", "SiLU",
    "Tanh", "functional", "init",
]
from ember.nn.layers.attention import MultiHeadAttention
from ember.nn.layers.dropout import Dropout
from ember.nn.layers.embedding import Embedding
from ember.nn.layers.normalization import BatchNorm1d, BatchNorm2d, GroupNorm, LayerNorm, RMSNorm
from ember.nn.layers.recurrent import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell
from ember.nn.layers.transformer import TransformerEncoderLayer

__all__ += [
    "BatchNorm1d", "BatchNorm2d", "Dropout", "Embedding", "GRU", "GRUCell", "GroupNorm", "LSTM",
    "LSTMCell", "LayerNorm", "MultiHeadAttention", "RMSNorm", "RNN", "RNNCell",
    "TransformerEncoderLayer",
]
from ember.nn.layers.conv import Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d
from ember.nn.layers.pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d

__all__ += ["AdaptiveAvgPool2d", "AvgPool2d", "Conv1d", "Conv2d", "ConvTranspose1d",
            "ConvTranspose2d", "MaxPool2d"]
