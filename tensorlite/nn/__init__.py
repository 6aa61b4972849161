"""tensorlite.nn: Module, Parameter, layers, functional ops, initialisers, utilities."""
from . import functional, init, utils  # noqa: F401
from .modules import (AvgPool2d, BatchNorm1d, BatchNorm2d, Conv1d, Conv2d, Dropout, Embedding, Flatten, GELU, Identity,  # noqa: F401
                      IncompatibleKeys, LayerNorm, Linear, MaxPool2d, Module, ModuleDict, ModuleList, Parameter,
                      ReLU, RMSNorm, Sequential, Sigmoid, SiLU, Softmax, Tanh)
