"""Dropout layers, as torch.nn.modules.dropout."""
from __future__ import annotations

from ...errors import ArgumentError
from .. import functional as F
from .module import Module


class Dropout(Module):
    """Zero each element with probability p in training (scaling the rest by 1 / (1 - p))."""
    fname = "dropout"

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ArgumentError(f"{type(self).__name__}: probability must be in [0, 1], got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, x):
        """The dropout of x in training mode; x itself in eval mode."""
        return getattr(F, self.fname)(x, self.p, self.training, self.inplace)

    def extra_repr(self):
        """p (and inplace), for the repr."""
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(Dropout):
    """Zero whole channels ((N, C, L) or (C, L)) with probability p in training."""
    fname = "dropout1d"


class Dropout2d(Dropout):
    """Zero whole channels ((N, C, H, W) or (C, H, W)) with probability p in training."""
    fname = "dropout2d"
