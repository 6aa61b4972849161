"""Activation layers, the softmax family and MultiheadAttention, as torch.nn.modules.activation."""
from __future__ import annotations

import math

from ... import dtype as dtypes
from ...errors import ArgumentError, DTypeError, ShapeError, describe
from ...ops.creation import empty, ones, zeros
from .. import functional as F
from .. import init
from ..functional.attention import attention_probs
from ..parameter import Parameter
from .utils import REQUIRED, function_module
from .linear import Linear
from .module import Module

ReLU = function_module(__name__, "ReLU", "relu", "max(x, 0)", inplace=False)


SiLU = function_module(__name__, "SiLU", "silu", "x * sigmoid(x)", inplace=False)


Sigmoid = function_module(__name__, "Sigmoid", "sigmoid", "1 / (1 + exp(-x))")


Tanh = function_module(__name__, "Tanh", "tanh", "tanh(x)")


ReLU6 = function_module(__name__, "ReLU6", "relu6", "min(max(x, 0), 6)", inplace=False)


LeakyReLU = function_module(__name__, "LeakyReLU", "leaky_relu", "x if x >= 0 else negative_slope * x",
                            negative_slope=0.01, inplace=False)


ELU = function_module(__name__, "ELU", "elu", "x if x > 0 else alpha * (exp(x) - 1)", alpha=1.0, inplace=False)


CELU = function_module(__name__, "CELU", "celu", "max(0, x) + min(0, alpha * (exp(x / alpha) - 1))", alpha=1.0,
                       inplace=False)


SELU = function_module(__name__, "SELU", "selu", "scale * elu(x, alpha) with torch's fixed constants", inplace=False)


RReLU = function_module(__name__, "RReLU", "rrelu",
                        "leaky_relu with a random slope in [lower, upper] (their mean in eval)", lower=1.0 / 8,
                        upper=1.0 / 3, inplace=False)


RReLU.forward = lambda self, x: F.rrelu(x, self.lower, self.upper, self.training, self.inplace)


Mish = function_module(__name__, "Mish", "mish", "x * tanh(softplus(x))", inplace=False)


Softplus = function_module(__name__, "Softplus", "softplus", "log(1 + exp(beta * x)) / beta (linear above threshold)",
                           beta=1.0, threshold=20.0)


Hardtanh = function_module(__name__, "Hardtanh", "hardtanh", "clamp(x, min_val, max_val)", min_val=-1.0, max_val=1.0,
                           inplace=False)


Hardswish = function_module(__name__, "Hardswish", "hardswish", "x * relu6(x + 3) / 6", inplace=False)


Hardsigmoid = function_module(__name__, "Hardsigmoid", "hardsigmoid", "relu6(x + 3) / 6", inplace=False)


LogSigmoid = function_module(__name__, "LogSigmoid", "logsigmoid", "log(sigmoid(x))")


Softsign = function_module(__name__, "Softsign", "softsign", "x / (1 + |x|)")


Tanhshrink = function_module(__name__, "Tanhshrink", "tanhshrink", "x - tanh(x)")


Softshrink = function_module(__name__, "Softshrink", "softshrink",
                             "x - lambd above lambd, x + lambd below -lambd, else 0", lambd=0.5,
                             extra_repr=lambda self: f"{self.lambd}")


Hardshrink = function_module(__name__, "Hardshrink", "hardshrink", "x where |x| > lambd, else 0", lambd=0.5,
                             extra_repr=lambda self: f"{self.lambd}")


Threshold = function_module(__name__, "Threshold", "threshold", "x where x > threshold, else value",
                            threshold=REQUIRED, value=REQUIRED, inplace=False)


GLU = function_module(__name__, "GLU", "glu", "a * sigmoid(b) of the two halves of x along dim", dim=-1)


class GELU(Module):
    """gelu(x) = x * Phi(x), exact or approximate='tanh', as torch.nn.GELU.

    >>> import tensorlite as tl
    >>> tl.nn.GELU()(tl.tensor([0.0])).tolist()
    [0.0]
    """
    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        """F.gelu(x, approximate)."""
        return F.gelu(x, self.approximate)

    def extra_repr(self):
        """approximate, for the repr."""
        return f"approximate={self.approximate!r}"


class PReLU(Module):
    """max(0, x) + weight * min(0, x) with a learned slope (one, or one per channel of dim 1)."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters = num_parameters
        self.weight = Parameter(ones(num_parameters, device=device, dtype=dtype) * init)

    def forward(self, x):
        """F.prelu(x, weight)."""
        return F.prelu(x, self.weight)

    def extra_repr(self):
        """num_parameters, for the repr."""
        return f"num_parameters={self.num_parameters}"


class Softmax(Module):
    """softmax along dim (default -1; torch's default None is deprecated), as torch.nn.Softmax.

    >>> import tensorlite as tl
    >>> tl.nn.Softmax(-1)(tl.zeros(1, 4)).tolist()
    [[0.25, 0.25, 0.25, 0.25]]
    """
    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        """F.softmax(x, dim)."""
        return F.softmax(x, self.dim)

    def extra_repr(self):
        """dim, for the repr."""
        return f"dim={self.dim}"


LogSoftmax = function_module(__name__, "LogSoftmax", "log_softmax", "log(softmax(x, dim))", dim=-1)


Softmin = function_module(__name__, "Softmin", "softmin", "softmax(-x, dim)", dim=-1)


def _torch_mask(op, name, mask, want, shape, q):
    """A torch MHA mask of shape `want` (bool: True = masked out; float: added) in sdpa's
    convention (bool: True = attend), reshaped to `shape` (broadcastable to (N, H, L, S))."""
    if mask is None:
        return None
    if tuple(mask.shape) != want:
        raise ShapeError(f"{describe(op, **{name: mask})}: expected shape {want}")
    mask = mask.reshape(shape)
    if mask.dtype is dtypes.bool_:
        return ~mask
    if not mask.dtype.is_floating_point:
        raise DTypeError(f"{describe(op, **{name: mask})}: masks must be bool or floating point")
    return mask._cast(q.dtype)


def _merge_masks(a, b):
    if a is None or b is None:
        return a if b is None else b
    if a.dtype is dtypes.bool_ and b.dtype is dtypes.bool_:
        return a & b
    bias = [m if m.dtype is not dtypes.bool_ else zeros(m.shape, dtype=(b if m is a else a).dtype,
                                                        device=m._device).masked_fill(~m, float("-inf"))
            for m in (a, b)]
    return bias[0] + bias[1]


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention: out_proj(attention(q W_q, k W_k, v W_v)) over num_heads heads.

    Inputs (L, N, E) (or (N, L, E) with batch_first, or unbatched (L, E)); returns
    (output, the attention weights averaged over heads or per head, or None without need_weights).
    attn_mask (L, S) or (N * num_heads, L, S) and key_padding_mask (N, S): bool True = not
    attended, or float added to the scores. A query whose keys are all masked gives zeros
    (PyTorch gives NaN). is_causal without attn_mask applies the causal mask.

    >>> import tensorlite as tl
    >>> mha = tl.nn.MultiheadAttention(8, 2, batch_first=True)
    >>> out, w = mha(tl.ones(3, 5, 8), tl.ones(3, 4, 8), tl.ones(3, 4, 8))
    >>> tuple(out.shape), tuple(w.shape), list(mha.state_dict())
    ((3, 5, 8), (3, 5, 4), ['in_proj_weight', 'in_proj_bias', 'out_proj.weight', 'out_proj.bias'])
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim=None, vdim=None,
                 batch_first: bool = False, device=None, dtype=None):
        super().__init__()
        if num_heads < 1 or embed_dim % num_heads:
            raise ShapeError(f"MultiheadAttention: embed_dim ({embed_dim}) must be divisible by num_heads "
                             f"({num_heads})")
        if add_bias_kv or add_zero_attn:
            raise ArgumentError("MultiheadAttention: add_bias_kv and add_zero_attn are not supported")
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.kdim, self.vdim, self.head_dim = kdim or embed_dim, vdim or embed_dim, embed_dim // num_heads
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        kw = dict(device=device, dtype=dtype)
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(empty(3 * embed_dim, embed_dim, **kw))
            self.q_proj_weight = self.k_proj_weight = self.v_proj_weight = None
        else:
            self.q_proj_weight = Parameter(empty(embed_dim, embed_dim, **kw))
            self.k_proj_weight = Parameter(empty(embed_dim, self.kdim, **kw))
            self.v_proj_weight = Parameter(empty(embed_dim, self.vdim, **kw))
            self.register_parameter("in_proj_weight", None)
        self.in_proj_bias = Parameter(zeros(3 * embed_dim, **kw)) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, **kw)
        for w in (self.in_proj_weight, self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
            if w is not None:
                init.xavier_uniform_(w)
        if bias:
            init.zeros_(self.out_proj.bias)

    def forward(self, query, key, value, key_padding_mask=None, need_weights: bool = True, attn_mask=None,
                average_attn_weights: bool = True, is_causal: bool = False):
        """(attention output, weights averaged over heads or None), with torch's arguments and masks."""
        op, E, H = "MultiheadAttention", self.embed_dim, self.num_heads
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim or query.shape[-1] != E \
                or key.shape[-1] != self.kdim or value.shape[-1] != self.vdim or key.shape[:-1] != value.shape[:-1]:
            raise ShapeError(f"{describe(op, query=query, key=key, value=value)}: expected (L, N, E) inputs (N first "
                             f"with batch_first, or unbatched (L, E)) with E = {E}, {self.kdim}, {self.vdim} "
                             "and key/value of one length")
        batched = query.ndim == 3
        q, k, v = ((t.transpose(0, 1) if not self.batch_first else t) if batched else t.unsqueeze(0)
                   for t in (query, key, value))
        N, L, S = q.shape[0], q.shape[1], k.shape[1]
        if q.shape[0] != k.shape[0]:
            raise ShapeError(f"{describe(op, query=query, key=key)}: query and key batch sizes differ")
        w = self.in_proj_weight.chunk(3) if self.in_proj_weight is not None else \
            (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        b = (None,) * 3 if self.in_proj_bias is None else self.in_proj_bias.chunk(3)
        q, k, v = (F.linear(t, wi, bi).unflatten(-1, (H, self.head_dim)).transpose(1, 2)
                   for t, wi, bi in zip((q, k, v), w, b))
        if is_causal and attn_mask is None:
            attn_mask = ~F.causal_mask(L, S, device=q._device)
        two_d = attn_mask is None or attn_mask.ndim == 2
        mask = _merge_masks(_torch_mask(op, "attn_mask", attn_mask, (L, S) if two_d else (N * H, L, S),
                                        (L, S) if two_d else (N, H, L, S), q),
                            _torch_mask(op, "key_padding_mask", key_padding_mask, (N, S) if batched else (S,),
                                        (N, 1, 1, S), q))
        p = self.dropout if self.training else 0.0
        if need_weights:
            weights = F.dropout(attention_probs(q, k, mask, 1.0 / math.sqrt(self.head_dim), False), p)
            out = weights @ v
            weights = weights.mean(1) if average_attn_weights else weights
        else:
            out, weights = F.scaled_dot_product_attention(q, k, v, mask, p), None
        out = self.out_proj(out.transpose(1, 2).reshape(N, L, E))
        out = (out if self.batch_first else out.transpose(0, 1)) if batched else out.squeeze(0)
        return out, (weights if batched or weights is None else weights.squeeze(0))
