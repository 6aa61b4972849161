"""Functional nn ops with PyTorch names and signatures.

The fused ops (softmax, log_softmax, layer_norm, rms_norm, rope, rope_i, rope_thd,
scaled_dot_product_attention, cross_entropy) follow candle's CustomOp pattern: the forward
is one storage-level op of the device's backend, so is the backward (`*_backward` storage
ops: one row kernel for dx, column sums for the norms' parameters), and a `*_slow`
composite built from primitive Tensor ops is the reference the tests hold the fused op to
(forward and gradients). Every other op here is a composite of Tensor ops,
so autograd differentiates it without a rule of its own.
"""
from __future__ import annotations

import math
import warnings
from math import prod

from .. import dtype as _dt
from ..errors import ArgumentError, DeviceError, DTypeError, IndexOutOfRange, ShapeError, TensorliteError, describe
from ..autograd import is_grad_enabled, no_grad, note_write
from ..backend import batch_of_one, sdpa_layout
from ..layout import Layout as _Layout
from ..custom_op import custom_op, normalize_dim, result, storage_and_layout
from ..tensor import (Tensor, _shape_arg, arange, avg_pool2d, broadcast_shapes, cat,  # noqa: F401
                      conv1d, conv2d, conv_transpose1d, conv_transpose2d, max_pool2d, maximum, rand, stack, tensor,
                      upsample_nearest2d, where)

# machine epsilon per float dtype: rms_norm's default eps, as torch.finfo(dtype).eps
# rms_norm's default eps, PyTorch's: the machine epsilon of the type the op computes in (float32
# for 16-bit inputs, not their own, coarser epsilon)
_FINFO_EPS = {"float16": 2.0 ** -23, "bfloat16": 2.0 ** -23, "float32": 2.0 ** -23, "float64": 2.0 ** -52}


def _floating(x: Tensor) -> Tensor:
    return x if x.dtype.is_floating_point else x._cast(_dt.get_default_dtype())


def _check_like(op, x, **others):
    """Optional operands (weights, tables, masks) must share x's device and dtype."""
    for name, t in others.items():
        if t is not None and (t._device is not x._device or t.dtype is not x.dtype):
            error = DeviceError if t._device is not x._device else DTypeError
            raise error(f"{describe(op, input=x, **{k: v for k, v in others.items() if v is not None})}: "
                        f"{name} must have the device and dtype of the input")


# ---- activations (core unary ops carry their own backward) ---------------------------

relu, sigmoid, tanh, silu = Tensor.relu, Tensor.sigmoid, Tensor.tanh, Tensor.silu  # the op table's methods


def gelu(x, approximate: str = "none"):
    """approximate='none' is the exact erf form, 'tanh' the tanh approximation (GPT-2)."""
    if approximate == "none":
        return x.gelu()
    if approximate == "tanh":
        return x.gelu_tanh()
    raise ArgumentError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def dropout(x, p: float = 0.5, training: bool = True):
    """Zero each element with probability p and scale the rest by 1/(1-p) (inverted dropout)."""
    if not (isinstance(p, (int, float)) and 0.0 <= p <= 1.0):
        raise ArgumentError(f"{describe('dropout', input=x)}: probability must be in [0, 1], got {p!r}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    keep = rand(x.shape, dtype=_dt.float32, device=x._device) >= p  # f32 draws: bf16 would skew p
    return where(keep, _floating(x).affine(1.0 / (1.0 - p), 0.0), 0.0)


# ---- softmax family ------------------------------------------------------------------

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


def softmax(x, dim: int = -1, dtype=None):
    x = _floating(x if dtype is None else x._cast(_dt.get(dtype)))
    return _over_last_dim("softmax", "softmax_last_dim", x, dim)


def log_softmax(x, dim: int = -1, dtype=None):
    x = _floating(x if dtype is None else x._cast(_dt.get(dtype)))
    return _over_last_dim("log_softmax", "log_softmax", x, dim)


def softmax_slow(x, dim: int = -1):
    """Composite reference: exp(x - max) / sum."""
    x = _floating(x)
    e = (x - x.detach().amax(dim, keepdim=True)).exp()
    return e / e.sum(dim, keepdim=True)


def log_softmax_slow(x, dim: int = -1):
    x = _floating(x)
    return x - x.logsumexp(dim, keepdim=True)


# ---- normalisation -------------------------------------------------------------------

def _flatten_normalized(op, x, normalized_shape, **params):
    """(x with the normalised trailing dims merged into one, the 1-D params, that size)."""
    ns = _shape_arg((normalized_shape,), op, x)
    if not ns or len(ns) > x.ndim or tuple(x.shape[x.ndim - len(ns):]) != ns:
        raise ShapeError(f"{describe(op, input=x)}: normalized_shape {ns} does not match the trailing dims")
    for name, p in params.items():
        if p is not None and tuple(p.shape) != ns:
            raise ShapeError(f"{describe(op, input=x, **{name: p})}: {name} must have shape {ns}")
    x = _floating(x)
    _check_like(op, x, **params)
    n = prod(ns)
    flat = [None if p is None else _reshaped(p, (n,)) for p in params.values()]
    return _reshaped(x, x.shape[:x.ndim - len(ns)] + (n,)), flat, n


def _reshaped(t, shape):
    """t.reshape(shape), or t itself where it has that shape already: the common 1-d norm
    case then adds no view and no reshape node (forward and backward) to the graph."""
    return t if t.shape == shape else t.reshape(shape)


def _normalize_rows(x, eps, center: bool):
    """x_hat = x / std over the last dim; centred for layer_norm, not for rms_norm."""
    xc = x - x.mean(-1, keepdim=True) if center else x
    return xc * ((xc * xc).mean(-1, keepdim=True) + eps).pow(-0.5)


def _fused_norm_grads(op, g, x2, w, b, eps):
    """(dx, dweight, dbias) of layer_norm / rms_norm from the storage's fused backward: dx
    in one row kernel, the parameter gradients as column sums (only those wanted)."""
    want_w, want_b = w is not None and w.requires_grad, b is not None and b.requires_grad
    (xs, xl), (gst, gl), (ws, wl) = (storage_and_layout(t) for t in (x2, g._cast(x2.dtype), w))
    if op == "layer_norm":
        gs = xs.layer_norm_backward(xl, gst, gl, ws, wl, eps, want_w, want_b)
    else:
        gs = xs.rms_norm_backward(xl, gst, gl, ws, wl, eps, want_w) + (None,)
    n = x2.shape[-1]
    return (result(gs[0], x2.shape, x2.dtype),) + tuple(None if st is None else result(st, (n,), x2.dtype)
                                                        for st in gs[1:])


def layer_norm(x, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    x2, (w, b), n = _flatten_normalized("layer_norm", x, normalized_shape, weight=weight, bias=bias)
    xs, xl = storage_and_layout(x2)
    y = result(xs.layer_norm(xl, *storage_and_layout(w), *storage_and_layout(b), eps), x2.shape, x2.dtype)
    return _reshaped(custom_op(y, (x2, w, b), lambda g: _fused_norm_grads("layer_norm", g, x2, w, b, eps),
                               "layer_norm", (x2, w)), x.shape)


def rms_norm(x, normalized_shape, weight=None, eps=None):
    """x / sqrt(mean(x^2) + eps) * weight; eps defaults to the machine epsilon of the computing
    type (float32 for float16/bfloat16, as PyTorch)."""
    x2, (w,), n = _flatten_normalized("rms_norm", x, normalized_shape, weight=weight)
    eps = _FINFO_EPS[x2.dtype.name] if eps is None else float(eps)
    xs, xl = storage_and_layout(x2)
    y = result(xs.rms_norm(xl, *storage_and_layout(w), eps), x2.shape, x2.dtype)
    return _reshaped(custom_op(y, (x2, w), lambda g: _fused_norm_grads("rms_norm", g, x2, w, None, eps)[:2],
                               "rms_norm", (x2, w)), x.shape)


def layer_norm_slow(x, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    x2, (w, b), _ = _flatten_normalized("layer_norm", x, normalized_shape, weight=weight, bias=bias)
    y = _normalize_rows(x2, eps, center=True)
    y = y if w is None else y * w
    return (y if b is None else y + b).reshape(x.shape)


def rms_norm_slow(x, normalized_shape, weight=None, eps=None):
    x2, (w,), _ = _flatten_normalized("rms_norm", x, normalized_shape, weight=weight)
    eps = _FINFO_EPS[x2.dtype.name] if eps is None else float(eps)
    y = _normalize_rows(x2, eps, center=False)
    return (y if w is None else y * w).reshape(x.shape)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5):
    """torch.nn.functional.batch_norm over dim 1 of an (N, C, *) input, as a composite of
    Tensor ops (autograd differentiates it). Training normalises with the batch's biased
    variance and, when running stats are given, updates them in place with
    `(1 - momentum) * running + momentum * batch` (the variance unbiased, as torch).
    f16/bf16 inputs compute in f32 and round once."""
    x = input
    if x.ndim < 2:
        raise ShapeError(f"{describe('batch_norm', input=x)}: expected an (N, C, ...) input with at least 2 dims")
    if not x.dtype.is_floating_point:
        raise DTypeError(f"{describe('batch_norm', input=x)}: expected a floating point input")
    c = x.shape[1]
    for name, t in dict(running_mean=running_mean, running_var=running_var, weight=weight, bias=bias).items():
        if t is not None and t._device is not x._device:
            raise DeviceError(f"{describe('batch_norm', input=x, **{name: t})}: {name} must be on the input's device")
        if t is not None and t.shape != (c,):
            raise ShapeError(f"{describe('batch_norm', input=x, **{name: t})}: {name} must have shape ({c},)")
    if not training and (running_mean is None or running_var is None):
        raise ArgumentError("batch_norm: running_mean and running_var are required when training=False")
    dims = (0,) + tuple(range(2, x.ndim))
    bshape = (1, c) + (1,) * (x.ndim - 2)
    cdt = _dt.float32 if x.dtype in (_dt.float16, _dt.bfloat16) else x.dtype
    n = prod(x.shape) // c if c else 0
    if training and n <= 1:
        raise ShapeError(f"batch_norm: expected more than 1 value per channel when training, "
                         f"got input of shape {tuple(x.shape)}")
    if None not in (weight, bias, running_mean, running_var):  # a DNN library's one call, where it takes the case
        xs, xl = storage_and_layout(x)
        st = xs.batch_norm_fused(xl, *storage_and_layout(weight), *storage_and_layout(bias),
                                 *storage_and_layout(running_mean), *storage_and_layout(running_var), training,
                                 momentum, eps)
        if st is not None:
            if training:  # the library updated the running statistics in place
                for stat in (running_mean, running_var):
                    note_write(storage_and_layout(stat)[0])
            return _batch_norm_attach(result(st, x.shape, x.dtype), x, running_mean, running_var, weight, bias,
                                      training, eps, dims, bshape, cdt)
    mean, var, xc = _batch_statistics(x._cast(cdt), running_mean, running_var, training, dims, bshape)
    if training:
        with no_grad():
            m = float(momentum)
            for stat, batch, w in ((running_mean, mean, m), (running_var, var, m * n / (n - 1))):  # var unbiased
                if stat is not None:
                    stat.copy_(stat._cast(cdt) * (1.0 - m) + batch.detach() * w)
    y = xc * (var + eps).pow(-0.5).reshape(bshape)
    if weight is not None:
        y = y * weight._cast(cdt).reshape(bshape)
    if bias is not None:
        y = y + bias._cast(cdt).reshape(bshape)
    return y._cast(x.dtype)


def _batch_statistics(xf, running_mean, running_var, training, dims, bshape):
    """(mean, variance, xf - mean) of xf (N, C, ...) per channel: the batch's (the variance
    biased) when training, else the running ones, in xf's dtype."""
    if training:
        mean = xf.mean(dims)
        xc = xf - mean.reshape(bshape)
        return mean, (xc * xc).mean(dims), xc
    mean, var = running_mean._cast(xf.dtype), running_var._cast(xf.dtype)
    return mean, var, xf - mean.reshape(bshape)


def _batch_norm_attach(y, x, running_mean, running_var, weight, bias, training, eps, dims, bshape, cdt):
    """The backward of a fused batch norm forward, in Tensor ops (statistics recomputed
    from x: the batch's when training, else the running ones)."""
    def grad(g):
        xf, gf = x._cast(cdt), g._cast(cdt)
        _, var, xc = _batch_statistics(xf, running_mean, running_var, training, dims, bshape)
        rstd = (var + eps).pow(-0.5).reshape(bshape)
        xhat = xc * rstd
        gw = gf * weight._cast(cdt).reshape(bshape)
        if training:
            gx = rstd * (gw - gw.mean(dims, keepdim=True) - xhat * (gw * xhat).mean(dims, keepdim=True))
        else:
            gx = gw * rstd
        return gx._cast(x.dtype), (gf * xhat).sum(dims)._cast(weight.dtype), gf.sum(dims)._cast(bias.dtype)
    # the running statistics are read back in eval mode only (training updates them in place)
    return custom_op(y, (x, weight, bias), grad, "batch_norm",
                     (x, weight) if training else (x, weight, running_mean, running_var))


def normalize(x, p: float = 2.0, dim: int = -1, eps: float = 1e-12):
    """x / max(||x||_p, eps) along dim (torch.nn.functional.normalize); p > 0, or inf."""
    dim = normalize_dim(dim, x.ndim, "normalize", x)
    if not (isinstance(p, (int, float)) and p > 0):
        raise ArgumentError(f"{describe('normalize', input=x)}: p must be a positive number, got {p!r}")
    return x / maximum(_vector_norm(x, p, dim), eps)


def _vector_norm(x, p, dim):
    """||x||_p along dim (kept), with PyTorch's gradient: 0 where the norm is 0, where the
    composite's would be 0 * inf."""
    with no_grad():
        norm = x.abs().amax(dim, keepdim=True) if p == math.inf and x.numel() else \
            (x.abs() ** p).sum(dim, keepdim=True) ** (1.0 / p)

    def grad(g):
        if p == math.inf:
            hit = (x.abs() == norm)._cast(x.dtype)
            d = x.sign() * hit / hit.sum(dim, keepdim=True)
        else:
            d = x.sign() * x.abs() ** (p - 1) / norm ** (p - 1)
        return (where(norm == 0, 0.0, g * d),)
    return custom_op(norm, (x,), grad, "vector_norm", (x, norm))


# ---- rotary embeddings ---------------------------------------------------------------
# x is (b, h, t, d) for 'rope' / 'rope_i' and (b, t, h, d) for 'rope_thd'; cos/sin are
# (t, d/2) or per batch (b, t, d/2).

_HEAD_DIM = {"rope": 1, "rope_i": 1, "rope_thd": 2}


def _rope_tables(variant, x, cos, sin):
    if x.ndim != 4 or x.shape[-1] % 2:
        raise ShapeError(f"{describe(variant, x=x, cos=cos, sin=sin)}: x must be 4-D with an even last dim")
    b, d2 = x.shape[0], x.shape[-1] // 2
    t = x.shape[2] if variant != "rope_thd" else x.shape[1]
    if any(tuple(table.shape) not in ((t, d2), (b, t, d2)) for table in (cos, sin)):
        raise ShapeError(f"{describe(variant, x=x, cos=cos, sin=sin)}: cos/sin must be ({t}, {d2}) or "
                         f"({b}, {t}, {d2})")
    _check_like(variant, x, cos=cos, sin=sin)
    return [table.unsqueeze(0).expand(b, t, d2) if table.ndim == 2 else table for table in (cos, sin)]


def _rope_pairs(variant, x):
    """The two halves each rotation mixes: (x[2i], x[2i+1]) interleaved, (x[i], x[i+d/2]) half-split."""
    if variant == "rope_i":
        return x.narrow(-1, 0, x.shape[-1] // 2, 2), x.narrow(-1, 1, x.shape[-1] // 2, 2)
    return x.chunk(2, -1)


def _rope(variant, x, cos, sin):
    x = _floating(x)
    c, s = _rope_tables(variant, x, cos, sin)
    (xs, xl), (cs, cl), (ss, sl) = storage_and_layout(x), storage_and_layout(c), storage_and_layout(s)
    y = result(xs.rope(xl, cs, cl, ss, sl, variant), x.shape, x.dtype)

    def grad(g):
        g = g._cast(x.dtype)  # a rotation's transpose is the rotation by -theta: the same kernel, sin negated
        gs, gl = storage_and_layout(g)
        gx = result(gs.rope_backward(gl, cs, cl, ss, sl, variant), x.shape, x.dtype)
        if not (c.requires_grad or s.requires_grad):
            return gx, None, None
        (x1, x2), (g1, g2) = _rope_pairs(variant, x), _rope_pairs(variant, g)
        hd = _HEAD_DIM[variant]
        return gx, (g1 * x1 + g2 * x2).sum(hd), (g2 * x1 - g1 * x2).sum(hd)
    return custom_op(y, (x, c, s), grad, variant, (x, c, s))


def _rope_slow(variant, x, cos, sin):
    x = _floating(x)
    c, s = (t.unsqueeze(_HEAD_DIM[variant]) for t in _rope_tables(variant, x, cos, sin))
    x1, x2 = _rope_pairs(variant, x)
    r1, r2 = x1 * c - x2 * s, x1 * s + x2 * c
    return stack([r1, r2], -1).reshape(x.shape) if variant == "rope_i" else cat([r1, r2], -1)


def rope(x, cos, sin):
    """Half-split rotary embedding (Hugging Face Llama): pairs (x[i], x[i + d/2]), x (b, h, t, d)."""
    return _rope("rope", x, cos, sin)


def rope_i(x, cos, sin):
    """Interleaved rotary embedding (GPT-J): pairs (x[2i], x[2i+1]), x (b, h, t, d)."""
    return _rope("rope_i", x, cos, sin)


def rope_thd(x, cos, sin):
    """Half-split rotary embedding with x laid out (b, t, h, d)."""
    return _rope("rope_thd", x, cos, sin)


def rope_slow(x, cos, sin):
    return _rope_slow("rope", x, cos, sin)


def rope_i_slow(x, cos, sin):
    return _rope_slow("rope_i", x, cos, sin)


def rope_thd_slow(x, cos, sin):
    return _rope_slow("rope_thd", x, cos, sin)


# ---- attention -----------------------------------------------------------------------

def causal_mask(q_len: int, kv_len: int, bottom_right: bool = False, device=None) -> Tensor:
    """Bool (q_len, kv_len) mask, True = attend. Top-left (torch's is_causal): query i sees
    keys j <= i. Bottom-right (decoding with a KV cache, where the q_len queries are the
    last ones of the kv_len sequence): query i sees keys j <= i + kv_len - q_len."""
    shift = kv_len - q_len if bottom_right else 0
    rows = arange(q_len, device=device).reshape(q_len, 1)
    return arange(kv_len, device=device).reshape(1, kv_len) <= rows + shift


def _attention_mask(op, q, k, attn_mask, is_causal):
    """(mask broadcast to (b, hq, L, S) or None, whether the kernel's top-left causal applies)."""
    if is_causal not in (False, True, "top_left", "bottom_right"):
        raise ArgumentError(f"{op}: is_causal must be False, True, 'top_left' or 'bottom_right', got {is_causal!r}")
    L, S = q.shape[-2], k.shape[-2]
    if is_causal == "bottom_right" and L == 1:
        is_causal = False  # one new query sees every key: no mask to build (KV-cache decoding)
    kernel_causal = bool(is_causal) and (is_causal != "bottom_right" or L == S)
    if is_causal == "bottom_right" and L != S:
        keep = causal_mask(L, S, bottom_right=True, device=q._device)
        if attn_mask is None:
            attn_mask = keep
        elif attn_mask.dtype is _dt.bool_:
            attn_mask = attn_mask & keep
        else:
            attn_mask = where(keep, attn_mask, float("-inf"))
    if attn_mask is None:
        return None, kernel_causal
    if attn_mask.dtype is not _dt.bool_:
        if not attn_mask.dtype.is_floating_point:
            raise DTypeError(f"{describe(op, query=q, attn_mask=attn_mask)}: attn_mask must be bool or float")
        attn_mask = attn_mask._cast(q.dtype)
    full = q.shape[:2] + (L, S)
    if broadcast_shapes(attn_mask.shape, full) != full:
        raise ShapeError(f"{describe(op, query=q, key=k, attn_mask=attn_mask)}: attn_mask must broadcast to {full}")
    return attn_mask.broadcast_to(full), kernel_causal


def _repeat_kv(t, groups):
    """(b, hk, S, d) -> (b, hk * groups, S, d): query head h reads kv head h // groups."""
    if groups == 1:
        return t
    b, h, s, d = t.shape
    return t.unsqueeze(2).expand(b, h, groups, s, d).reshape(b, h * groups, s, d)


def _attention_probs(q, kx, mask, scale, causal):
    """softmax(q k^T * scale + mask) with fully-masked rows giving zeros (as the kernels do)."""
    scores = (q @ kx.mT) * scale
    keep = causal_mask(q.shape[-2], kx.shape[-2], device=q._device) if causal else None
    if mask is not None:
        if mask.dtype is _dt.bool_:
            keep = mask if keep is None else keep & mask
        else:
            scores = scores + mask
    if keep is not None:
        scores = where(keep, scores, float("-inf"))
    row_max = scores.detach().amax(-1, keepdim=True)
    e = (scores - where(row_max == float("-inf"), 0.0, row_max)).exp()
    total = e.sum(-1, keepdim=True)
    return e / where(total == 0.0, 1.0, total)


def _attention_operands(op, query, key, value, scale):
    if query.ndim not in (3, 4) or key.ndim != query.ndim or value.ndim != query.ndim:
        raise ShapeError(f"{describe(op, query=query, key=key, value=value)}: expected (b, h, L, d) or (h, L, d)")
    q, k, v = (_floating(t) if t.ndim == 4 else _floating(t).unsqueeze(0) for t in (query, key, value))
    hq, hk = q.shape[1], k.shape[1]
    if (q.shape[0], q.shape[3]) != (k.shape[0], k.shape[3]) or k.shape[:3] != v.shape[:3] \
            or hk == 0 or hq % hk:
        raise ShapeError(f"{describe(op, query=query, key=key, value=value)}: batch/head/length dims do not match "
                         "(query heads must be a multiple of key/value heads)")
    _check_like(op, q, key=k, value=v)
    return q, k, v, hq // hk, 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal=False,
                                 scale=None, enable_gqa: bool = True):
    """PyTorch's SDPA: softmax(q k^T * scale + mask) v for q (b, hq, L, d), k/v (b, hk, S, d).

    - attn_mask: bool (True = attend) or additive float, broadcastable to (b, hq, L, S).
    - is_causal=True (or 'top_left') aligns the causal mask top-left as torch does: query i
      sees keys j <= i. is_causal='bottom_right' aligns it to the end of the keys (query i
      sees keys j <= i + S - L): what a KV-cache decoder needs when L new queries follow
      S - L cached keys. The two agree when L == S; `causal_mask` builds either explicitly.
    - Grouped-query attention is automatic when k/v have fewer heads (a divisor of hq):
      query head h uses kv head h // (hq // hk). `enable_gqa` is accepted for torch
      compatibility and not needed.
    - Rows whose keys are all masked give zeros.
    - On GPUs, TENSORLITE_SDPA picks the kernel: 'flash' (fused flash attention forward and
      backward: f32/f16/bf16, head dims <= 128; an error elsewhere), 'gemm' (scores in memory,
      composite backward), 'auto' (default: flash where it covers the case, else gemm).
    """
    if dropout_p > 0.0:  # the fused kernel has no dropout: take the composite path
        return sdpa_slow(query, key, value, attn_mask, dropout_p, is_causal, scale)
    q, k, v, groups, scale = _attention_operands("scaled_dot_product_attention", query, key, value, scale)
    mask, causal = _attention_mask("scaled_dot_product_attention", q, k, attn_mask, is_causal)
    # The fused backward needs the forward's logsumexp; an additive mask that wants its own
    # gradient (and backends or TENSORLITE_SDPA=gemm that give no lse) take the composite.
    fused_grad = is_grad_enabled() and any(t.requires_grad for t in (q, k, v)) \
        and not (mask is not None and mask.requires_grad)
    (qs, ql), (ks, kl), (vs, vl), (ms, ml) = (storage_and_layout(t) for t in (q, k, v, mask))
    st = qs.sdpa(ql, ks, kl, vs, vl, ms, ml, scale, causal, return_lse=fused_grad)
    st, lse = st if fused_grad else (st, None)
    out_layout = sdpa_layout(ql, v.shape[3])  # q's memory order: see backend.sdpa_layout
    out = result(st, out_layout.shape, q.dtype, out_layout)

    def grad(g):
        if lse is not None:
            gs, gl = storage_and_layout(g._cast(q.dtype))
            grads = qs.sdpa_backward(ql, ks, kl, vs, vl, st, out_layout, gs, gl, lse, ms, ml, scale, causal)
            return (*(result(gd, lay.shape, q.dtype, sdpa_layout(lay)) for gd, lay in zip(grads, (ql, kl, vl))), None)
        kx, vx = _repeat_kv(k, groups), _repeat_kv(v, groups)
        p = _attention_probs(q, kx, mask, scale, causal)
        gp = g @ vx.mT
        gs = p * (gp - (gp * p).sum(-1, keepdim=True))  # through the softmax
        b, hq, s = kx.shape[0], kx.shape[1], kx.shape[2]

        def per_kv_head(t):  # sum the gradients of the query heads that share a kv head
            return t if groups == 1 else t.reshape(b, hq // groups, groups, s, t.shape[-1]).sum(2)
        gmask = gs if mask is not None and mask.dtype.is_floating_point else None
        return (gs @ kx) * scale, per_kv_head((gs.mT @ q) * scale), per_kv_head(p.mT @ g), gmask
    out = custom_op(out, (q, k, v, mask), grad, "sdpa", (q, k, v, mask, out))
    return out if query.ndim == 4 else out.squeeze(0)


def sdpa_slow(query, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal=False, scale=None):
    """Composite reference of scaled_dot_product_attention (same arguments)."""
    q, k, v, groups, scale = _attention_operands("sdpa_slow", query, key, value, scale)
    mask, causal = _attention_mask("sdpa_slow", q, k, attn_mask, is_causal)
    p = _attention_probs(q, _repeat_kv(k, groups), mask, scale, causal)
    out = dropout(p, dropout_p) @ _repeat_kv(v, groups)
    return out if query.ndim == 4 else out.squeeze(0)


# ---- layers and losses ---------------------------------------------------------------

def _rows(st, lay, dtype):
    """(storage, 2-D layout) of the tensor (st, lay) of `dtype` with its leading dims folded
    into rows: a view where the strides allow, else a contiguous copy."""
    if len(lay.shape) == 2:
        return st, lay
    shape = (prod(lay.shape[:-1]), lay.shape[-1])
    rows = lay.reshape(shape)
    if rows is None:
        return st.to_dtype(lay, dtype), _Layout.contiguous(shape)
    return st, rows


def linear(x, weight, bias=None):
    """x @ weight.T + bias as ONE autograd node: the leading dims of x fold into one GEMM, and
    the backward is one GEMM each for dx = g @ weight and dweight = g.T @ x (written
    contiguous, as the optimizer wants it) plus a column sum for dbias (the bias add and that
    sum ride on the GEMMs where the backend's BLAS has epilogues). A training step runs
    dozens of these, so the node saves the views, broadcasts and reshapes (and their
    backward nodes) of the matmul + add composite, which is the fallback for operands that
    need type promotion."""
    (xs, xl), (ws, wl), (bs, bl) = storage_and_layout(x), storage_and_layout(weight), storage_and_layout(bias)
    x_shape, w_shape = xl.shape, wl.shape  # not the properties: dozens of calls per step
    if not x_shape or len(w_shape) != 2 or x_shape[-1] != w_shape[-1] or \
            (bias is not None and bl.shape != (w_shape[0],)):
        raise ShapeError(f"{describe('linear', input=x, weight=weight, bias=bias)}: expected input (..., in_features), "
                         f"weight (out_features, in_features) and bias (out_features,)")
    dt = x.dtype
    if not dt.is_floating_point or weight.dtype is not dt or (bias is not None and bias.dtype is not dt) or \
            weight._device is not x._device or (bias is not None and bias._device is not x._device):
        y = x @ weight.mT  # promotion / device errors as matmul and add report them
        return y if bias is None else y + bias
    (n, k), lead = w_shape, x_shape[:-1]
    xs, xl = _rows(xs, xl, dt)
    m = xl.shape[0]
    if bias is None:
        out = xs.matmul(ws, (1, m, n, k), batch_of_one(xl), batch_of_one(wl.transpose(0, 1)))
    else:  # the GPU backend adds the bias in the GEMM's epilogue where the BLAS has one
        out = xs.matmul_add_bias(ws, (m, n, k), xl, wl.transpose(0, 1), bs, bl)
    y = result(out, lead + (n,), dt)

    def grad(g):
        gs, gl = _rows(*storage_and_layout(g._cast(dt)), dt)
        dx = dw = db = None
        if x.requires_grad:
            dx = result(gs.matmul(ws, (1, m, k, n), batch_of_one(gl), batch_of_one(wl)), x_shape, dt)
        want_db = bias is not None and bias.requires_grad
        if weight.requires_grad and want_db:  # one call: the GPU backend sums g in the GEMM's epilogue
            dws, dbs = gs.matmul_row_sums(xs, (n, k, m), gl.transpose(0, 1), xl)
            dw, db = result(dws, (n, k), dt), result(dbs, (n,), dt)
        elif weight.requires_grad:
            dw = result(gs.matmul(xs, (1, n, k, m), batch_of_one(gl.transpose(0, 1)), batch_of_one(xl)), (n, k), dt)
        elif want_db:
            db = result(gs.reduce_op("sum", gl, (0,)), (n,), dt)
        return (dx, dw) if bias is None else (dx, dw, db)
    return custom_op(y, (x, weight) if bias is None else (x, weight, bias), grad, "linear", (x, weight))


def embedding(input, weight, padding_idx=None):
    """Rows of weight at the ids in `input` (any shape); the padding_idx row gets no gradient."""
    if not isinstance(weight, Tensor) or weight.ndim != 2:
        raise ShapeError(f"{describe('embedding', weight=weight)}: weight must be 2-D (num_embeddings, dim)")
    ids = input if isinstance(input, Tensor) else tensor(input, dtype=_dt.int64, device=weight._device)
    out = weight.index_select(0, ids.reshape(-1)).reshape(ids.shape + (weight.shape[-1],))
    if padding_idx is not None:
        if not (isinstance(padding_idx, int) and -weight.shape[0] <= padding_idx < weight.shape[0]):
            raise ArgumentError(f"{describe('embedding', weight=weight)}: padding_idx {padding_idx!r} is not a row")
        padding_idx = padding_idx % weight.shape[0]
        out = where((ids != padding_idx).unsqueeze(-1), out, out.detach())
    return out


def _reduce_loss(op, loss, reduction, denominator=None):
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.mean() if denominator is None else loss.sum() / denominator
    raise ArgumentError(f"{op}: reduction must be 'none', 'mean' or 'sum', got {reduction!r}")


def _classes_last(x):
    """(N, C, d1, ...) -> (N, d1, ..., C): the fused log_softmax and gather work on the last dim."""
    return x.permute((0,) + tuple(range(2, x.ndim)) + (1,)) if x.ndim > 2 else x


def nll_loss(input, target, weight=None, ignore_index: int = -100, reduction: str = "mean"):
    """Negative log-likelihood of log-probabilities `input` (N, C, ...) at class ids `target` (N, ...)."""
    return _nll(_classes_last(input), target, weight, ignore_index, reduction, 0.0, "nll_loss")


def _nll(logp, target, weight, ignore_index, reduction, label_smoothing, op):
    """logp has the classes on its last dim; target holds class ids or class probabilities."""
    if logp.dtype.itemsize < 4:  # f16/bf16: reduce in float32 (bf16 counts are exact only to 256)
        up = [None if t is None else t.float() if t.dtype.is_floating_point else t for t in (logp, target, weight)]
        return _nll(*up, ignore_index, reduction, label_smoothing, op)._cast(logp.dtype)
    n_classes = logp.shape[-1]
    if target.dtype.is_floating_point:  # class probabilities, same shape as logp
        if target.shape != logp.shape:
            raise ShapeError(f"{describe(op, input=logp, target=target)}: probability targets need the input's shape")
        if label_smoothing:
            target = target * (1.0 - label_smoothing) + label_smoothing / n_classes
        loss = -((logp * target if weight is None else logp * target * weight).sum(-1))
        return _reduce_loss(op, loss, reduction)
    if target.shape != logp.shape[:-1]:
        raise ShapeError(f"{describe(op, input=logp, target=target)}: target must have shape {logp.shape[:-1]}")
    valid = target != ignore_index
    safe = where(valid, target, 0)._cast(_dt.int64)
    try:
        picked = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    except IndexOutOfRange as e:  # named as the loss, not its gather
        raise IndexOutOfRange(f"{op}: a target is not a class id: {e}") from None
    w_t = None if weight is None else weight.index_select(0, safe.reshape(-1)).reshape(safe.shape)
    w = valid._cast(logp.dtype) if w_t is None else where(valid, w_t, 0.0)  # each target's weight, 0 if ignored
    if label_smoothing:  # torch: (1 - eps) * nll + eps * mean over classes of -logp (weighted)
        smooth = -(logp if weight is None else logp * weight).sum(-1) / n_classes
        picked = (picked if w_t is None else picked * w_t) * (1.0 - label_smoothing) + smooth * label_smoothing
    elif w_t is not None:
        picked = picked * w
    return _reduce_loss(op, where(valid, picked, 0.0), reduction, w.sum())


def cross_entropy(input, target, weight=None, ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0):
    """torch.nn.functional.cross_entropy: input logits (N, C) / (N, C, d1, ...) / (C,), target
    class ids (int) or class probabilities (float, input's shape). 'mean' over class ids
    divides by the (weighted) count of targets that are not ignore_index. Class ids without
    label smoothing take the fused op (storage cross_entropy / cross_entropy_backward);
    the rest, the composite `cross_entropy_slow`."""
    if not isinstance(input, Tensor) or input.ndim == 0 or input.shape[1 if input.ndim > 1 else 0] == 0:
        raise ShapeError(f"{describe('cross_entropy', input=input)}: expected logits (C,), (N, C) or (N, C, ...), C > 0")
    if not (isinstance(label_smoothing, (int, float)) and 0.0 <= label_smoothing <= 1.0):
        raise ArgumentError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing!r}")
    if not isinstance(target, Tensor):
        target = tensor(target, device=input._device)
    classes = input.shape[1 if input.ndim > 1 else 0]
    if weight is not None and tuple(getattr(weight, "shape", ())) != (classes,):
        raise ShapeError(f"{describe('cross_entropy', input=input, weight=weight)}: weight must be 1-D with one "
                         f"value per class ({classes})")
    if not label_smoothing and not target.dtype.is_floating_point:
        logits, tgt = (input.unsqueeze(0), target.unsqueeze(0)) if input.ndim == 1 else (input, target)
        loss = _cross_entropy_fused(_classes_last(logits), tgt, weight, ignore_index, reduction)
        if loss is not None:
            return loss.squeeze(0) if input.ndim == 1 and reduction == "none" else loss
    return cross_entropy_slow(input, target, weight, ignore_index, reduction, label_smoothing)


def _cross_entropy_fused(x, tgt, weight, ignore_index, reduction):
    """Log-softmax + NLL of logits x (classes on the last dim) at integer class ids `tgt` as
    the storage's fused cross_entropy (per-row loss, logsumexp and target weight in f32,
    f64 for f64) with its one-kernel backward (softmax - onehot, scaled); the reduction
    sums in that dtype and rounds once to x's dtype. None where it does not take the case
    (the caller runs the composite): float targets, a weight that needs a gradient or has
    another dtype, shapes the composite will reject."""
    if reduction not in ("none", "sum", "mean") or not x.dtype.is_floating_point or tgt.dtype.is_floating_point \
            or tgt._device is not x._device or tuple(tgt.shape) != tuple(x.shape[:-1]) or (weight is not None and (
                weight.requires_grad or weight.dtype is not x.dtype or weight._device is not x._device
                or tuple(weight.shape) != (x.shape[-1],))):
        return None
    t = tgt if tgt.dtype is _dt.int64 else tgt._cast(_dt.int64)
    (xs, xl), (ts, tgl) = storage_and_layout(x), storage_and_layout(t)
    loss, lse, wt = xs.cross_entropy(xl, ts, tgl, *storage_and_layout(weight), ignore_index)
    acc = loss.dtype

    def grad(g):
        gs, gl = storage_and_layout(g._cast(acc))
        gx = xs.cross_entropy_backward(xl, ts, tgl, lse, wt, gs, gl)
        return (result(gx, x.shape, x.dtype),)
    rows = custom_op(result(loss, t.shape, acc), (x,), grad, "cross_entropy", (x, t))
    if reduction == "sum":
        rows = rows.sum()
    elif reduction == "mean":  # over the (weighted) count of targets that are not ignore_index
        rows = rows.sum() / result(wt, t.shape, acc).sum()
    return rows._cast(x.dtype)


def cross_entropy_slow(input, target, weight=None, ignore_index: int = -100, reduction: str = "mean",
                       label_smoothing: float = 0.0):
    """Composite reference of cross_entropy (log_softmax + gather + reductions as Tensor
    ops); cross_entropy itself takes this path for the cases the fused op does not cover."""
    if not isinstance(target, Tensor):
        target = tensor(target, device=input._device)
    logits, tgt = (input.unsqueeze(0), target.unsqueeze(0)) if input.ndim == 1 else (input, target)
    if tgt.dtype.is_floating_point:
        tgt = _classes_last(tgt)
    loss = _nll(log_softmax(_classes_last(logits), -1), tgt, weight, ignore_index, reduction, label_smoothing,
                "cross_entropy")
    return loss.squeeze(0) if input.ndim == 1 and reduction == "none" else loss


def mse_loss(input, target, reduction: str = "mean"):
    if isinstance(input, Tensor) and isinstance(target, Tensor) and input.shape != target.shape:
        warnings.warn(f"mse_loss: target size {target.shape} differs from input size {input.shape}: the two "
                      "broadcast, which is likely not what you want (as PyTorch warns)", UserWarning, stacklevel=2)
    try:
        diff = input - target
    except TensorliteError as e:  # named as the loss, not its subtraction
        raise type(e)(f"mse_loss: {e}") from None
    return _reduce_loss("mse_loss", diff * diff, reduction)
