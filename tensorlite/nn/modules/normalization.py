"""LayerNorm, RMSNorm and GroupNorm, as torch.nn.modules.normalization."""
from __future__ import annotations

from ...errors import ShapeError
from ...ops.creation import ones, zeros
from .. import functional as F
from ..parameter import Parameter
from .module import Module


class _Norm(Module):
    def __init__(self, normalized_shape, eps, elementwise_affine, bias, device, dtype):
        super().__init__()
        ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape, self.eps = ns, eps
        self.weight = Parameter(ones(ns, device=device, dtype=dtype)) if elementwise_affine else None
        self.bias = Parameter(zeros(ns, device=device, dtype=dtype)) if elementwise_affine and bias else None

    def extra_repr(self):
        """normalized_shape, eps and elementwise_affine, for the repr."""
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.weight is not None}"


class LayerNorm(_Norm):
    """Layer normalisation over the last dims normalized_shape, weight ones and bias zeros, as torch.nn.LayerNorm.

    >>> import tensorlite as tl
    >>> tl.nn.LayerNorm(8)(tl.randn(2, 8)).shape
    tensorlite.Size([2, 8])
    """
    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None):
        super().__init__(normalized_shape, eps, elementwise_affine, bias, device, dtype)

    def forward(self, x):
        """F.layer_norm of x with this module's weight, bias and eps."""
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        """_Norm's settings and whether there is a bias, for the repr."""
        return super().extra_repr() + f", bias={self.bias is not None}"


class RMSNorm(_Norm):
    """x / sqrt(mean(x^2) + eps) * weight over the last dims normalized_shape, as torch.nn.RMSNorm.

    >>> import tensorlite as tl
    >>> tl.nn.RMSNorm(8)(tl.randn(2, 8)).shape
    tensorlite.Size([2, 8])
    """
    def __init__(self, normalized_shape, eps=None, elementwise_affine: bool = True, device=None, dtype=None):
        super().__init__(normalized_shape, eps, elementwise_affine, False, device, dtype)

    def forward(self, x):
        """F.rms_norm of x with this module's weight and eps."""
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)


class GroupNorm(Module):
    """Normalise each sample over groups of channels (input (N, C, *)); per-channel affine.

    >>> import tensorlite as tl
    >>> gn = tl.nn.GroupNorm(2, 4)
    >>> [round(v, 3) for v in gn(tl.arange(8.0).reshape(1, 4, 2))[0, :2].flatten().tolist()]
    [-1.342, -0.447, 0.447, 1.342]
    """

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device=None, dtype=None):
        super().__init__()
        if num_groups < 1 or num_channels % num_groups:
            raise ShapeError(f"GroupNorm: num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        self.weight = Parameter(ones(num_channels, device=device, dtype=dtype)) if affine else None
        self.bias = Parameter(zeros(num_channels, device=device, dtype=dtype)) if affine else None

    def forward(self, x):
        """F.group_norm of x with this module's groups, weight, bias and eps."""
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        """The settings, for the repr."""
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")
