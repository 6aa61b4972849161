"""Convolution layers, as torch.nn.modules.conv."""
from __future__ import annotations

from ...errors import ArgumentError, ShapeError, describe
from ...ops.conv import as_tuple
from ...ops.creation import empty
from .. import functional as F
from ..parameter import Parameter
from .linear import Linear
from .module import Module


class _ConvNd(Module):
    """Conv1d/Conv2d: weight (out, in/groups, *k) ~ kaiming_uniform(a=sqrt(5)), bias
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)), as torch."""
    nd, transposed = 2, False

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, device=None, dtype=None):
        super().__init__()
        if not isinstance(groups, int) or groups < 1 or in_channels % groups or out_channels % groups:
            raise ShapeError(f"{type(self).__name__}: channels ({in_channels}, {out_channels}) must be divisible "
                             f"by groups={groups}")
        k = as_tuple(kernel_size, self.nd)
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, k
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        shape = (in_channels, out_channels // groups) if self.transposed else (out_channels, in_channels // groups)
        self.weight = Parameter(empty(shape + k, device=device, dtype=dtype))
        self.bias = Parameter(empty(out_channels, device=device, dtype=dtype)) if bias else None
        self.reset_parameters()

    reset_parameters = Linear.reset_parameters

    def forward(self, x):
        """The convolution of x with this module's weight and bias."""
        conv = F.conv2d if self.nd == 2 else F.conv1d
        return conv(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self):
        """The channels, kernel size, stride, and the settings that differ from their defaults, for
        the repr (as torch's, which holds each size as a tuple)."""
        nd, pad = self.nd, self.padding if isinstance(self.padding, str) else as_tuple(self.padding, self.nd)
        text = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={as_tuple(self.stride, nd)}")
        for name, value, default in (("padding", pad, (0,) * nd), ("dilation", as_tuple(self.dilation, nd), (1,) * nd),
                                     ("output_padding", as_tuple(getattr(self, "output_padding", 0), nd), (0,) * nd),
                                     ("groups", self.groups, 1)):
            text += f", {name}={value}" if value != default else ""
        return text + (", bias=False" if self.bias is None else "")


class Conv2d(_ConvNd):
    """2-D convolution layer over (N, C, H, W) (no padding_mode argument), as torch.nn.Conv2d.

    >>> import tensorlite as tl
    >>> tl.nn.Conv2d(3, 8, 3, padding=1)(tl.randn(1, 3, 5, 5)).shape
    tensorlite.Size([1, 8, 5, 5])
    """
    nd = 2


class Conv1d(_ConvNd):
    """1-D convolution layer over (N, C, L) (no padding_mode argument), as torch.nn.Conv1d.

    >>> import tensorlite as tl
    >>> tl.nn.Conv1d(3, 8, 3)(tl.randn(1, 3, 10)).shape
    tensorlite.Size([1, 8, 8])
    """
    nd = 1


class ConvTranspose2d(_ConvNd):
    """The gradient of Conv2d with respect to its input (a "deconvolution"); weight
    (in_channels, out_channels / groups, *kernel_size), as torch.nn.ConvTranspose2d.

    >>> import tensorlite as tl
    >>> up = tl.nn.ConvTranspose2d(4, 2, kernel_size=2, stride=2)
    >>> tuple(up.weight.shape), tuple(up(tl.zeros(1, 4, 3, 3)).shape)
    ((4, 2, 2, 2), (1, 2, 6, 6))
    """
    nd, transposed = 2, True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, padding_mode="zeros", device=None, dtype=None):
        if padding_mode != "zeros":
            raise ArgumentError(f"{type(self).__name__}: only padding_mode='zeros' is supported, got {padding_mode!r}")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, device, dtype)
        self.output_padding, self.padding_mode = output_padding, padding_mode

    def forward(self, x, output_size=None):
        """output_size (the spatial sizes, optionally with batch and channels) picks output_padding."""
        op = self.output_padding if output_size is None else self._output_padding(x, output_size)
        conv = F.conv_transpose2d if self.nd == 2 else F.conv_transpose1d
        return conv(x, self.weight, self.bias, self.stride, self.padding, op, self.groups, self.dilation)

    def _output_padding(self, x, output_size):
        nd, want = self.nd, tuple(output_size)[-self.nd:]
        s, p, d = (as_tuple(v, nd) for v in (self.stride, self.padding, self.dilation))
        low = [(x.shape[i - nd] - 1) * s[i] - 2 * p[i] + d[i] * (self.kernel_size[i] - 1) + 1 for i in range(nd)]
        if len(want) != nd or any(not lo <= w < lo + si for w, lo, si in zip(want, low, s)):
            raise ShapeError(f"{describe(type(self).__name__, input=x)}: requested output size {want}, but valid "
                             f"sizes range from {tuple(low)} to {tuple(lo + si - 1 for lo, si in zip(low, s))}")
        return tuple(w - lo for w, lo in zip(want, low))


class ConvTranspose1d(ConvTranspose2d):
    """1-D ConvTranspose2d: input (N, C, L) or (C, L), weight (in, out / groups, k)."""
    nd = 1
