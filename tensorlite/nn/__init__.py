"""tensorlite.nn: Module, Parameter, layers, functional ops, initialisers, utilities."""
from . import functional, init, utils  # noqa: F401
from .parameter import Parameter  # noqa: F401
from .modules import (  # noqa: F401
    AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveMaxPool1d, AdaptiveMaxPool2d, AvgPool1d, AvgPool2d, BatchNorm1d,
    BatchNorm2d, BCELoss, BCEWithLogitsLoss, CELU, ConstantPad1d, ConstantPad2d, Conv1d, Conv2d, ConvTranspose1d,
    ConvTranspose2d, CosineSimilarity, CrossEntropyLoss, Dropout, Dropout1d, Dropout2d, ELU, Embedding, Flatten, GELU,
    GLU, GroupNorm, GRU, GRUCell, Hardshrink, Hardsigmoid, Hardswish, Hardtanh, HuberLoss, Identity, IncompatibleKeys,
    InstanceNorm1d, InstanceNorm2d, Int8Linear, KLDivLoss, L1Loss, LayerNorm, LeakyReLU, Linear, LogSigmoid,
    LogSoftmax, LSTM, LSTMCell, MaxPool1d, MaxPool2d, Mish, Module, ModuleDict, ModuleList, MSELoss, MultiheadAttention,
    NLLLoss, PairwiseDistance, ParameterDict, ParameterList, PixelShuffle, PixelUnshuffle, PReLU, ReflectionPad1d,
    ReflectionPad2d, ReLU, ReLU6, ReplicationPad1d, ReplicationPad2d, RMSNorm, RNN, RNNBase, RNNCell,
    RNNCellBase, RReLU, SELU, Sequential, Sigmoid, SiLU, SmoothL1Loss, Softmax, Softmin, Softplus, Softshrink, Softsign,
    Tanh, Tanhshrink, Threshold, Transformer, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder,
    TransformerEncoderLayer, Unflatten, Upsample, ZeroPad1d, ZeroPad2d)
from .modules.quantized import quantize_weights  # noqa: F401  (also tl.quantize_weights)
