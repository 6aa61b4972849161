"""Batch normalisation, and instance normalisation (batch norm per sample, which shares its
parameters, buffers and running statistics: torch keeps it in instancenorm.py), as
torch.nn.BatchNorm1d/2d and InstanceNorm1d/2d."""
from __future__ import annotations

from ... import dtype as dtypes
from ...autograd import no_grad
from ...errors import ShapeError
from ...ops.creation import ones, zeros
from .. import functional as F
from ..parameter import Parameter
from .module import Module


class _BatchNorm(Module):
    """torch.nn.BatchNorm*d: weight ones, bias zeros, buffers running_mean (zeros),
    running_var (ones) and num_batches_tracked; momentum=None is a cumulative average."""
    dims: tuple = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum=0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.weight = Parameter(ones(num_features, device=device, dtype=dtype)) if affine else None
        self.bias = Parameter(zeros(num_features, device=device, dtype=dtype)) if affine else None
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, device=device, dtype=dtype))
            self.register_buffer("running_var", ones(num_features, device=device, dtype=dtype))
            self.register_buffer("num_batches_tracked", zeros((), dtype=dtypes.int64, device=device))
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def forward(self, x):
        """Normalise with the batch's stats in training (updating the running ones), else the running ones."""
        if x.ndim not in self.dims:
            raise ShapeError(f"{type(self).__name__}: expected a {' or '.join(f'{d}-D' for d in self.dims)} input, "
                             f"got shape {tuple(x.shape)}")
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / int(self.num_batches_tracked)
        use_batch = self.training or self.running_mean is None
        track = not self.training or self.track_running_stats
        return F.batch_norm(x, self.running_mean if track else None, self.running_var if track else None,
                            self.weight, self.bias, use_batch, factor, self.eps)

    def extra_repr(self):
        """The settings, for the repr."""
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalisation of (N, C) or (N, C, L) per channel C, as torch.nn.BatchNorm1d.

    >>> import tensorlite as tl
    >>> tl.nn.BatchNorm1d(3)(tl.randn(4, 3, 5)).shape
    tensorlite.Size([4, 3, 5])
    """
    dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalisation of (N, C, H, W) per channel C, as torch.nn.BatchNorm2d.

    >>> import tensorlite as tl
    >>> tl.nn.BatchNorm2d(3)(tl.randn(2, 3, 4, 4)).shape
    tensorlite.Size([2, 3, 4, 4])
    """
    dims = (4,)


class _InstanceNorm(_BatchNorm):
    """Normalise each channel of each sample over its positions; running stats (off by
    default) as torch's: updated in training, used in eval."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum=0.1, affine: bool = False,
                 track_running_stats: bool = False, device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)

    def forward(self, x):
        """F.instance_norm of x (a batch or one sample) with this module's settings."""
        if x.ndim not in self.dims:
            raise ShapeError(f"{type(self).__name__}: expected a {' or '.join(f'{d}-D' for d in self.dims)} input, "
                             f"got shape {tuple(x.shape)}")
        one = x.ndim == self.dims[0]  # unbatched
        y = F.instance_norm(x.unsqueeze(0) if one else x, self.running_mean, self.running_var, self.weight, self.bias,
                            self.training or not self.track_running_stats, self.momentum or 0.0, self.eps)
        return y.squeeze(0) if one else y


class InstanceNorm1d(_InstanceNorm):
    """Instance normalisation of (N, C, L) or (C, L), as torch.nn.InstanceNorm1d.

    >>> import tensorlite as tl
    >>> tl.nn.InstanceNorm1d(3)(tl.randn(2, 3, 5)).shape
    tensorlite.Size([2, 3, 5])
    """
    dims = (2, 3)


class InstanceNorm2d(_InstanceNorm):
    """Instance normalisation of (N, C, H, W) or (C, H, W), as torch.nn.InstanceNorm2d.

    >>> import tensorlite as tl
    >>> tl.nn.InstanceNorm2d(3)(tl.randn(2, 3, 4, 4)).shape
    tensorlite.Size([2, 3, 4, 4])
    """
    dims = (3, 4)
