"""Pooling: max / average over windows (1-d via the 2-d kernels) and adaptive pooling to a
fixed output size, as torch.nn.functional's. avg_pool2d and max_pool2d are the Tensor
library's (tensorlite.avg_pool2d / max_pool2d)."""
from __future__ import annotations

from ...errors import ArgumentError, ShapeError, describe
from ...ops.conv import avg_pool2d, max_pool2d
from ...tensor import Tensor
from .common import adaptive_pool


def _no_indices(op, return_indices):
    if return_indices:
        raise ArgumentError(f"{op}: return_indices=True is not supported")


def adaptive_avg_pool1d(input, output_size):
    """Average over adaptive windows of the last dim to `output_size` positions.

    >>> import tensorlite as tl; tl.nn.functional.adaptive_avg_pool1d(tl.tensor([[[1.0, 2.0, 3.0, 4.0]]]), 2).tolist()
    [[[1.5, 3.5]]]"""
    return adaptive_pool("adaptive_avg_pool1d", input, output_size, 1, "avg")


def adaptive_avg_pool2d(input, output_size):
    """Average over adaptive windows of the last 2 dims to output_size (h, w) (an int: square).

    >>> import tensorlite as tl; tl.nn.functional.adaptive_avg_pool2d(tl.ones(1, 1, 3, 3), 1).tolist()
    [[[[1.0]]]]"""
    return adaptive_pool("adaptive_avg_pool2d", input, output_size, 2, "avg")


def adaptive_avg_pool3d(input, output_size):
    """Average over adaptive windows of the last 3 dims.

    >>> import tensorlite as tl; tl.nn.functional.adaptive_avg_pool3d(tl.ones(1, 2, 2, 2), 1).shape
    tensorlite.Size([1, 1, 1, 1])"""
    return adaptive_pool("adaptive_avg_pool3d", input, output_size, 3, "avg")


def adaptive_max_pool1d(input, output_size, return_indices: bool = False):
    """Maximum over adaptive windows of the last dim.

    >>> import tensorlite as tl; tl.nn.functional.adaptive_max_pool1d(tl.tensor([[[1.0, 5.0, 3.0, 4.0]]]), 2).tolist()
    [[[5.0, 4.0]]]"""
    _no_indices("adaptive_max_pool1d", return_indices)
    return adaptive_pool("adaptive_max_pool1d", input, output_size, 1, "max")


def adaptive_max_pool2d(input, output_size, return_indices: bool = False):
    """Maximum over adaptive windows of the last 2 dims.

    >>> import tensorlite as tl; tl.nn.functional.adaptive_max_pool2d(tl.arange(4.0).reshape(1, 1, 2, 2), 1).tolist()
    [[[[3.0]]]]"""
    _no_indices("adaptive_max_pool2d", return_indices)
    return adaptive_pool("adaptive_max_pool2d", input, output_size, 2, "max")


def adaptive_max_pool3d(input, output_size, return_indices: bool = False):
    """Maximum over adaptive windows of the last 3 dims.

    >>> import tensorlite as tl; tl.nn.functional.adaptive_max_pool3d(tl.arange(8.0).reshape(1, 2, 2, 2), 1).tolist()
    [[[[7.0]]]]"""
    _no_indices("adaptive_max_pool3d", return_indices)
    return adaptive_pool("adaptive_max_pool3d", input, output_size, 3, "max")


def _pool1d(fn, op, input, kernel_size, stride, padding, *rest):
    """A 1-d pool as the 2-d one over (N, C, 1, L)."""
    if not isinstance(input, Tensor) or input.ndim not in (2, 3):
        raise ShapeError(f"{describe(op, input=input)}: expected an (N, C, L) or (C, L) input")

    def one(v):
        return v[0] if isinstance(v, (tuple, list)) and len(v) == 1 else v
    x = (input if input.ndim == 3 else input.unsqueeze(0)).unsqueeze(2)
    y = fn(x, (1, one(kernel_size)), None if stride is None else (1, one(stride)), (0, one(padding)), *rest).squeeze(2)
    return y if input.ndim == 3 else y.squeeze(0)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True):
    """Average pooling over the last dim of an (N, C, L) or (C, L) input.

    >>> import tensorlite as tl; tl.nn.functional.avg_pool1d(tl.tensor([[[1.0, 3.0, 5.0, 7.0]]]), 2).tolist()
    [[[2.0, 6.0]]]"""
    return _pool1d(avg_pool2d, "avg_pool1d", input, kernel_size, stride, padding, ceil_mode, count_include_pad)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):
    """Max pooling over the last dim of an (N, C, L) or (C, L) input.

    >>> import tensorlite as tl; tl.nn.functional.max_pool1d(tl.tensor([[[1.0, 3.0, 5.0, 2.0]]]), 2).tolist()
    [[[3.0, 5.0]]]"""
    _no_indices("max_pool1d", return_indices)
    one = dilation[0] if isinstance(dilation, (tuple, list)) else dilation
    return _pool1d(max_pool2d, "max_pool1d", input, kernel_size, stride, padding, (1, one), ceil_mode)
