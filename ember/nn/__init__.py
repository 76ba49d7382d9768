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
