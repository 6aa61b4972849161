"""In-place parameter initialisers (torch.nn.init names). Each draws on the tensor's own
device and dtype and swaps the values in without recording autograd history."""
from __future__ import annotations

import math
import warnings

from ..autograd import no_grad
from ..errors import ArgumentError, ShapeError, describe
from ..ops.creation import full, randn
from ..ops.elementwise import where


def _fill(t, values):
    with no_grad():
        t.data = values._cast(t.dtype)
    return t


def calculate_fan_in_and_fan_out(t):
    """Linear weight (out, in): fans in/out; conv weight (out, in/groups, *k): times the kernel size."""
    if t.ndim < 2:
        raise ShapeError(f"{describe('calculate_fan_in_and_fan_out', tensor=t)}: needs at least 2 dims")
    receptive = math.prod(t.shape[2:])
    return t.shape[1] * receptive, t.shape[0] * receptive


_GAINS = {"linear": 1.0, "sigmoid": 1.0, "conv1d": 1.0, "conv2d": 1.0, "conv_transpose1d": 1.0, "conv_transpose2d": 1.0,
          "tanh": 5.0 / 3, "relu": math.sqrt(2.0), "selu": 3.0 / 4}  # leaky_relu's depends on its slope


def calculate_gain(nonlinearity: str, param=None) -> float:
    """The recommended gain for a nonlinearity (relu: sqrt(2), tanh: 5/3, ...), as torch.nn.init.calculate_gain.

    >>> import tensorlite as tl
    >>> tl.nn.init.calculate_gain('tanh')
    1.6666666666666667
    """
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1 + slope ** 2))
    if not isinstance(nonlinearity, str) or nonlinearity not in _GAINS:
        raise ArgumentError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")
    return _GAINS[nonlinearity]


def uniform_(t, a: float = 0.0, b: float = 1.0):
    """Fill t in place with U(a, b) samples and return it, as torch.nn.init.uniform_ (Tensor.uniform_
    without autograd)."""
    with no_grad():
        return t.uniform_(a, b)


def normal_(t, mean: float = 0.0, std: float = 1.0):
    """Fill t in place with N(mean, std) samples and return it, as torch.nn.init.normal_ (Tensor.normal_
    without autograd)."""
    with no_grad():
        return t.normal_(mean, std)


def trunc_normal_(t, mean=0.0, std=1.0, a=-2.0, b=2.0):
    """N(mean, std) restricted to [a, b] (resampling the few draws outside)."""
    with no_grad():
        v = randn(t.shape, dtype=t.dtype, device=t._device) * std + mean
        for _ in range(8):
            v = where((v < a) | (v > b), randn(t.shape, dtype=t.dtype, device=t._device) * std + mean, v)
        return _fill(t, v.clamp(a, b))


def constant_(t, value: float):
    """Fill t in place with value and return it, as torch.nn.init.constant_.

    >>> import tensorlite as tl
    >>> tl.nn.init.constant_(tl.zeros(2), 3.0).tolist()
    [3.0, 3.0]
    """
    return _fill(t, full(t.shape, value, dtype=t.dtype, device=t._device))


def zeros_(t):
    """Fill t with zeros in place, as torch.nn.init.zeros_."""
    return constant_(t, 0.0)


def ones_(t):
    """Fill t with ones in place, as torch.nn.init.ones_."""
    return constant_(t, 1.0)


def _zero_element(t) -> bool:
    """Whether t has no elements (nn.Linear(0, 3)'s weight: its fan is 0), warning as torch
    does: the kaiming initialisers leave such a tensor as it is."""
    if t.numel():
        return False
    warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=3)
    return True


def kaiming_uniform_(t, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu"):
    """He init: U(-b, b), b = gain * sqrt(3 / fan), in place, as torch.nn.init.kaiming_uniform_."""
    if _zero_element(t):
        return t
    fan = calculate_fan_in_and_fan_out(t)[0 if mode == "fan_in" else 1]
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / fan)
    return uniform_(t, -bound, bound)


def kaiming_normal_(t, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu"):
    """He init: N(0, gain / sqrt(fan)), in place, as torch.nn.init.kaiming_normal_."""
    if _zero_element(t):
        return t
    fan = calculate_fan_in_and_fan_out(t)[0 if mode == "fan_in" else 1]
    return normal_(t, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan))


def xavier_uniform_(t, gain: float = 1.0):
    """Glorot init: U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)), in place, as torch's."""
    fan_in, fan_out = calculate_fan_in_and_fan_out(t)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -bound, bound)


def xavier_normal_(t, gain: float = 1.0):
    """Glorot init: N(0, gain * sqrt(2 / (fan_in + fan_out))), in place, as torch's."""
    fan_in, fan_out = calculate_fan_in_and_fan_out(t)
    return normal_(t, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))
