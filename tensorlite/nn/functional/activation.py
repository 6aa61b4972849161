"""Activations and the softmax family, as torch.nn.functional's (the core unary ops carry
their own backward; softmax and log_softmax are fused ops with fused backwards)."""
from __future__ import annotations

import warnings

from ... import amp
from ... import dtype as dtypes
from ...autograd import register_double_backward
from ...custom_op import custom_op, normalize_dim, result, storage_and_layout
from ...errors import ArgumentError, ShapeError, describe
from ...ops.creation import rand
from ...ops.elementwise import where
from ...tensor import Tensor
from .common import check_positive, floating, inplace_result, log1p_exp

sigmoid, tanh = Tensor.sigmoid, Tensor.tanh  # the op table's methods


def relu(input, inplace: bool = False):
    """max(input, 0).

    >>> import tensorlite as tl; tl.nn.functional.relu(tl.tensor([-1.0, 2.0])).tolist()
    [0.0, 2.0]"""
    return input.relu_() if inplace else input.relu()


def silu(input, inplace: bool = False):
    """input * sigmoid(input).

    >>> import tensorlite as tl; tl.nn.functional.silu(tl.tensor([0.0])).tolist()
    [0.0]"""
    return inplace_result(input, input.silu(), inplace)


def gelu(x, approximate: str = "none"):
    """approximate='none' is the exact erf form, 'tanh' the tanh approximation (GPT-2)."""
    if approximate == "none":
        return x.gelu()
    if approximate == "tanh":
        return x.gelu_tanh()
    raise ArgumentError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def elu(input, alpha: float = 1.0, inplace: bool = False):
    """input where > 0, else alpha * (exp(input) - 1).

    >>> import tensorlite as tl; tl.nn.functional.elu(tl.tensor([0.0, 2.0])).tolist()
    [0.0, 2.0]"""
    return inplace_result(input, input.elu(alpha), inplace)


def selu(input, inplace: bool = False):
    """scale * elu(input, alpha) with the self-normalising constants.

    >>> import tensorlite as tl; round(tl.nn.functional.selu(tl.tensor([1.0])).item(), 4)
    1.0507"""
    alpha, scale = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
    return inplace_result(input, input.elu(alpha) * scale, inplace)


def celu(input, alpha: float = 1.0, inplace: bool = False):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)).

    >>> import tensorlite as tl; tl.nn.functional.celu(tl.tensor([3.0])).tolist()
    [3.0]"""
    if alpha == 0:
        raise ArgumentError("celu: alpha must not be 0")
    return inplace_result(input, (input / alpha).elu(1.0) * alpha, inplace)


def leaky_relu(input, negative_slope: float = 0.01, inplace: bool = False):
    """input where > 0, else negative_slope * input.

    >>> import tensorlite as tl; tl.nn.functional.leaky_relu(tl.tensor([-2.0, 2.0]), 0.5).tolist()
    [-1.0, 2.0]"""
    return inplace_result(input, where(input > 0, input, input * negative_slope), inplace)


def prelu(input, weight):
    """input where > 0, else weight * input; weight has one value or one per channel (dim 1).

    >>> import tensorlite as tl; tl.nn.functional.prelu(tl.tensor([-2.0, 2.0]), tl.tensor([0.25])).tolist()
    [-0.5, 2.0]"""
    c = input.shape[1] if input.ndim > 1 else 1
    if weight.numel() not in (1, c):
        raise ShapeError(f"{describe('prelu', input=input, weight=weight)}: weight must have 1 or {c} elements")
    w = weight.reshape(()) if weight.numel() == 1 else weight.reshape((1, c) + (1,) * (input.ndim - 2))
    return where(input > 0, input, input * w)


def rrelu(input, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False, inplace: bool = False):
    """leaky_relu with a random slope in [lower, upper] per element when training, their mean otherwise.

    >>> import tensorlite as tl; tl.nn.functional.rrelu(tl.tensor([-3.0, 1.0]), 0.25, 0.75).tolist()
    [-1.5, 1.0]"""
    if not training:
        return leaky_relu(input, (lower + upper) / 2, inplace)
    slope = rand(input.shape, dtype=dtypes.float32, device=input._device) * (upper - lower) + lower
    return inplace_result(input, where(input >= 0, input, input * slope._cast(input.dtype)), inplace)


def hardtanh(input, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
    """input clamped to [min_val, max_val].

    >>> import tensorlite as tl; tl.nn.functional.hardtanh(tl.tensor([-2.0, 0.5, 2.0])).tolist()
    [-1.0, 0.5, 1.0]"""
    if min_val > max_val:
        raise ArgumentError(f"hardtanh: min_val {min_val} cannot be greater than max_val {max_val}")
    return inplace_result(input, input.clamp(min_val, max_val), inplace)


def relu6(input, inplace: bool = False):
    """min(max(input, 0), 6).

    >>> import tensorlite as tl; tl.nn.functional.relu6(tl.tensor([-1.0, 7.0])).tolist()
    [0.0, 6.0]"""
    return hardtanh(input, 0.0, 6.0, inplace)


def hardsigmoid(input, inplace: bool = False):
    """relu6(input + 3) / 6.

    >>> import tensorlite as tl; tl.nn.functional.hardsigmoid(tl.tensor([0.0, 4.0])).tolist()
    [0.5, 1.0]"""
    return inplace_result(input, (input + 3.0).clamp(0.0, 6.0) / 6.0, inplace)


def hardswish(input, inplace: bool = False):
    """input * relu6(input + 3) / 6.

    >>> import tensorlite as tl; tl.nn.functional.hardswish(tl.tensor([-4.0, 4.0])).tolist()
    [-0.0, 4.0]"""
    return inplace_result(input, input * (input + 3.0).clamp(0.0, 6.0) / 6.0, inplace)


def softplus(input, beta: float = 1.0, threshold: float = 20.0):
    """log(1 + exp(beta * input)) / beta, linear where beta * input > threshold.

    >>> import tensorlite as tl; round(tl.nn.functional.softplus(tl.tensor([0.0])).item(), 4)
    0.6931"""
    return where(input * beta > threshold, input, log1p_exp(input * beta) / beta)


def logsigmoid(input):
    """log(sigmoid(input)), stable for large |input|.

    >>> import tensorlite as tl; round(tl.nn.functional.logsigmoid(tl.tensor([0.0])).item(), 4)
    -0.6931"""
    return -log1p_exp(-input)


def mish(input, inplace: bool = False):
    """input * tanh(softplus(input)).

    >>> import tensorlite as tl; tl.nn.functional.mish(tl.tensor([0.0])).tolist()
    [0.0]"""
    return inplace_result(input, input * log1p_exp(input).tanh(), inplace)


def softsign(input):
    """input / (1 + |input|).

    >>> import tensorlite as tl; tl.nn.functional.softsign(tl.tensor([1.0, -3.0])).tolist()
    [0.5, -0.75]"""
    return input / (input.abs() + 1.0)


def tanhshrink(input):
    """input - tanh(input).

    >>> import tensorlite as tl; tl.nn.functional.tanhshrink(tl.tensor([0.0])).tolist()
    [0.0]"""
    return input - input.tanh()


def softshrink(input, lambd: float = 0.5):
    """input - lambd above lambd, input + lambd below -lambd, else 0.

    >>> import tensorlite as tl; tl.nn.functional.softshrink(tl.tensor([-2.0, 0.25, 2.0])).tolist()
    [-1.5, 0.0, 1.5]"""
    check_positive("softshrink", "lambd", lambd, zero_ok=True)
    return where(input > lambd, input - lambd, where(input < -lambd, input + lambd, 0.0))


def hardshrink(input, lambd: float = 0.5):
    """input where |input| > lambd, else 0.

    >>> import tensorlite as tl; tl.nn.functional.hardshrink(tl.tensor([-2.0, 0.25])).tolist()
    [-2.0, 0.0]"""
    return where(input.abs() > lambd, input, 0.0)


def threshold(input, threshold: float, value: float, inplace: bool = False):
    """input where > threshold, else value.

    >>> import tensorlite as tl; tl.nn.functional.threshold(tl.tensor([1.0, 3.0]), 2.0, -1.0).tolist()
    [-1.0, 3.0]"""
    return inplace_result(input, where(input > threshold, input, value), inplace)


def glu(input, dim: int = -1):
    """a * sigmoid(b) of the two halves a, b of input along dim.

    >>> import tensorlite as tl; tl.nn.functional.glu(tl.tensor([2.0, 0.0])).tolist()
    [1.0]"""
    d = normalize_dim(dim, input.ndim, "glu", input)
    if input.shape[d] % 2:
        raise ShapeError(f"{describe('glu', input=input)}: halving dimension {d} must be even, got {input.shape[d]}")
    a, b = input.chunk(2, d)
    return a * b.sigmoid()


def _over_last_dim(op, method, x, dim):
    """The storage's fused last-dim `method` (softmax_last_dim, log_softmax) along `dim`,
    transposed there and back (a view each way). Its backward is one kernel of the output y
    (`method`_backward: y * (g - <g, y>) for softmax, g - exp(y) * sum(g) for log_softmax)."""
    if x.ndim == 0:
        return _over_last_dim(op, method, x.reshape(1), -1).reshape(())
    d = normalize_dim(dim, x.ndim, op, x)
    if d != x.ndim - 1:
        return _over_last_dim(op, method, x.transpose(d, -1), -1).transpose(d, -1)
    xs, xl = storage_and_layout(x)
    y = result(getattr(xs, method)(xl), x.shape, x.dtype)

    def grad(g):  # the fused backward kernels take one dtype: g in y's
        (ys, yl), (gs, gl) = storage_and_layout(y), storage_and_layout(g._cast(y.dtype))
        return (result(getattr(ys, method + "_backward")(yl, gs, gl), y.shape, y.dtype),)
    return custom_op(y, (x,), grad, op, (y,))


def _of_output(f):  # the double backward f(y, g) of a fused softmax: y its (saved) output
    return lambda node, g: (f(node.saved[0], g._cast(node.saved[0].dtype)),)


# their backward kernels in Tensor ops, for a second derivative (create_graph=True)
register_double_backward("softmax", _of_output(lambda y, g: y * (g - (g * y).sum(-1, keepdim=True))))
register_double_backward("log_softmax", _of_output(lambda y, g: g - y.exp() * g.sum(-1, keepdim=True)))


def softmax(x, dim: int = -1, dtype=None):
    """exp(x) / sum(exp(x)) along dim (fused on the device; 16-bit input computes in float32 under
    autocast), as torch's.

    >>> import tensorlite as tl
    >>> tl.nn.functional.softmax(tl.tensor([0.0, 0.0]), -1).tolist()
    [0.5, 0.5]
    """
    x, = amp.full_precision(x)
    x = floating(x if dtype is None else x._cast(dtypes.get(dtype)))
    return _over_last_dim("softmax", "softmax_last_dim", x, dim)


def log_softmax(x, dim: int = -1, dtype=None):
    """log(softmax(x)) along dim, computed stably in one op, as torch.nn.functional.log_softmax.

    >>> import tensorlite as tl
    >>> round(tl.nn.functional.log_softmax(tl.tensor([0.0, 0.0]), -1)[0].item(), 4)
    -0.6931
    """
    x, = amp.full_precision(x)
    x = floating(x if dtype is None else x._cast(dtypes.get(dtype)))
    return _over_last_dim("log_softmax", "log_softmax", x, dim)


def softmax_slow(x, dim: int = -1):
    """Composite reference: exp(x - max) / sum."""
    x = floating(x)
    e = (x - x.detach().amax(dim, keepdim=True)).exp()
    return e / e.sum(dim, keepdim=True)


def log_softmax_slow(x, dim: int = -1):
    x = floating(x)
    return x - x.logsumexp(dim, keepdim=True)


def softmin(input, dim=None, _stacklevel: int = 3, dtype=None):
    """softmax(-input) along dim (None: PyTorch's implicit choice, with its warning).

    >>> import tensorlite as tl; tl.nn.functional.softmin(tl.tensor([1.0, 1.0]), 0).tolist()
    [0.5, 0.5]"""
    if dim is None:
        warnings.warn("softmin: implicit dimension choice is deprecated, pass dim", UserWarning, stacklevel=_stacklevel)
        dim = 0 if input.ndim in (0, 1, 3) else 1
    return softmax(-(input if dtype is None else input._cast(dtypes.get(dtype))), dim)
