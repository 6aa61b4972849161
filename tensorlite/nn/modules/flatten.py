"""Flatten and Unflatten, as torch.nn.modules.flatten."""
from __future__ import annotations

from .module import Module


class Flatten(Module):
    """Dims start_dim (1) to end_dim (-1) merged into one, as torch.nn.Flatten.

    >>> import tensorlite as tl
    >>> tl.nn.Flatten()(tl.zeros(2, 3, 4)).shape
    tensorlite.Size([2, 12])
    """
    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        """x.flatten(start_dim, end_dim)."""
        return x.flatten(self.start_dim, self.end_dim)

    def extra_repr(self):
        """start_dim and end_dim, for the repr."""
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Split dim `dim` into `unflattened_size`."""

    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, x):
        """x.unflatten(dim, unflattened_size)."""
        return x.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self):
        """dim and unflattened_size, for the repr."""
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
