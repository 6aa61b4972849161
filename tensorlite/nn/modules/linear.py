"""Identity and Linear, as torch.nn.modules.linear."""
from __future__ import annotations

import math

from ...ops.creation import empty
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .module import Module


class Identity(Module):
    """Returns its input (arguments are accepted and ignored, as torch's)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        """x unchanged."""
        return x


class Linear(Module):
    """y = x W^T + b; W (out_features, in_features) ~ kaiming_uniform(a=sqrt(5)) and
    b ~ U(-1/sqrt(in), 1/sqrt(in)), as torch.nn.Linear."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(empty(out_features, in_features, device=device, dtype=dtype))
        self.bias = Parameter(empty(out_features, device=device, dtype=dtype)) if bias else None
        self.reset_parameters()

    def reset_parameters(self):  # also the convolutions' (fan_in: the weight's in-features times its kernel size)
        """Re-initialise the weight (kaiming_uniform, a=sqrt(5)) and bias as torch does."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = init.calculate_fan_in_and_fan_out(self.weight)[0]
            bound = 1.0 / math.sqrt(fan_in) if fan_in else 0.0  # no in-features: a zero bias, as torch
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        """F.linear(x, weight, bias): x W^T + b."""
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self):
        """in_features, out_features and bias, for the repr."""
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
