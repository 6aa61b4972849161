"""Pooling layers, as torch.nn.modules.pooling."""
from __future__ import annotations

from ...ops.conv import as_tuple
from .. import functional as F
from .utils import REQUIRED, function_module
from .module import Module


def _max_pool_repr(self):
    """torch's: the stride is the kernel size where not given."""
    stride = self.kernel_size if self.stride is None else self.stride
    return (f"kernel_size={self.kernel_size}, stride={stride}, padding={self.padding}, dilation={self.dilation}, "
            f"ceil_mode={getattr(self, 'ceil_mode', False)}")


def _avg_pool_repr(self):
    """torch's (AvgPool1d holds its sizes as 1-tuples)."""
    one = (lambda v: as_tuple(v, 1)) if isinstance(self, AvgPool1d) else (lambda v: v)
    stride = self.kernel_size if self.stride is None else self.stride
    return f"kernel_size={one(self.kernel_size)}, stride={one(stride)}, padding={one(self.padding)}"


def _output_size_repr(self):
    return f"output_size={self.output_size}"


MaxPool1d = function_module(__name__, "MaxPool1d", "max_pool1d", "Max pooling over the last dim of (N, C, L)",
                            kernel_size=REQUIRED, stride=None, padding=0, dilation=1, return_indices=False,
                            ceil_mode=False, extra_repr=_max_pool_repr)


class MaxPool2d(Module):
    """2-D max pooling (no ceil_mode, return_indices), as torch.nn.MaxPool2d.

    >>> import tensorlite as tl
    >>> tl.nn.MaxPool2d(2)(tl.zeros(1, 1, 4, 4)).shape
    tensorlite.Size([1, 1, 2, 2])
    """
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1):
        super().__init__()
        self.kernel_size, self.stride, self.padding, self.dilation = kernel_size, stride, padding, dilation

    def forward(self, x):
        """F.max_pool2d of x with this module's settings."""
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation)

    extra_repr = _max_pool_repr


AvgPool1d = function_module(__name__, "AvgPool1d", "avg_pool1d", "Average pooling over the last dim of (N, C, L)",
                            kernel_size=REQUIRED, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                            extra_repr=_avg_pool_repr)


class AvgPool2d(Module):
    """2-D average pooling (no ceil_mode, divisor_override), as torch.nn.AvgPool2d.

    >>> import tensorlite as tl
    >>> tl.nn.AvgPool2d(2)(tl.ones(1, 1, 4, 4)).tolist()
    [[[[1.0, 1.0], [1.0, 1.0]]]]
    """
    def __init__(self, kernel_size, stride=None, padding=0, count_include_pad: bool = True):
        super().__init__()
        self.kernel_size, self.stride, self.padding, self.count_include_pad = kernel_size, stride, padding, \
            count_include_pad

    def forward(self, x):
        """F.avg_pool2d of x with this module's settings."""
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, count_include_pad=self.count_include_pad)

    extra_repr = _avg_pool_repr


AdaptiveAvgPool1d = function_module(__name__, "AdaptiveAvgPool1d", "adaptive_avg_pool1d",
                                    "Average pooling of (N, C, L) to a fixed length", output_size=REQUIRED)


AdaptiveAvgPool2d = function_module(__name__, "AdaptiveAvgPool2d", "adaptive_avg_pool2d",
                                    """Average pooling to a fixed output size.

    >>> import tensorlite as tl
    >>> tl.nn.AdaptiveAvgPool2d(1)(tl.arange(4.0).reshape(1, 1, 2, 2)).flatten().tolist()
    [1.5]
    """, output_size=REQUIRED)


AdaptiveMaxPool1d = function_module(__name__, "AdaptiveMaxPool1d", "adaptive_max_pool1d",
                                    "Max pooling of (N, C, L) to a fixed length", output_size=REQUIRED,
                                    return_indices=False, extra_repr=_output_size_repr)


AdaptiveMaxPool2d = function_module(__name__, "AdaptiveMaxPool2d", "adaptive_max_pool2d",
                                    "Max pooling of (N, C, H, W) to a fixed size", output_size=REQUIRED,
                                    return_indices=False, extra_repr=_output_size_repr)
