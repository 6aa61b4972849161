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

import numpy as np

from .. import amp as _amp, dtype as _dt
from ..errors import ArgumentError, DeviceError, DTypeError, IndexOutOfRange, ShapeError, TensorliteError, describe
from ..autograd import attach_many, is_grad_enabled, no_grad, note_write
from ..backend import batch_of_one, sdpa_layout
from ..layout import Layout as _Layout
from ..custom_op import custom_op, normalize_dim, result, storage_and_layout
from ..tensor import (Tensor, _binary, _embed, _ints, _shape_arg, arange, avg_pool2d,  # noqa: F401
                      broadcast_shapes, cat, conv1d, conv2d, conv_transpose1d, conv_transpose2d, full, full_like,
                      max_pool2d, maximum, minimum, rand, stack, tensor, upsample_nearest2d, where)

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
    return _out(input, input.silu(), inplace)


def silu_mul(gate, up):
    """silu(gate) * up in one kernel, rounded once: the gated MLP of Llama-style models
    (down(silu(gate(x)) * up(x))). Broadcasts as `*`; differentiable in both operands.

    >>> import tensorlite as tl; tl.nn.functional.silu_mul(tl.tensor([0.0, 1.0]), tl.tensor([3.0, 2.0])).tolist()
    [0.0, 1.4621171951293945]"""
    return _binary("silu_mul", gate, up)


def _out(x, y, inplace):
    """inplace=True (PyTorch's in-place activations): y written into x's memory, x returned."""
    return x.copy_(y) if inplace else y


def gelu(x, approximate: str = "none"):
    """approximate='none' is the exact erf form, 'tanh' the tanh approximation (GPT-2)."""
    if approximate == "none":
        return x.gelu()
    if approximate == "tanh":
        return x.gelu_tanh()
    raise ArgumentError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def dropout(x, p: float = 0.5, training: bool = True, inplace: bool = False, _mask_shape=None, _op="dropout"):
    """Zero each element with probability p and scale the rest by 1/(1-p) (inverted dropout)."""
    if not (isinstance(p, (int, float)) and 0.0 <= p <= 1.0):
        raise ArgumentError(f"{describe(_op, input=x)}: probability must be in [0, 1], got {p!r}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return _out(x, x * 0.0, inplace)
    keep = rand(_mask_shape or x.shape, dtype=_dt.float32, device=x._device) >= p  # f32 draws: bf16 would skew p
    return _out(x, where(keep, _floating(x).affine(1.0 / (1.0 - p), 0.0), 0.0), inplace)


def _feature_dropout(op, x, p, training, inplace, nd):
    """Whole channels zeroed: one draw per (N, C) of an (N, C, *nd) or (C, *nd) input."""
    if not isinstance(x, Tensor) or x.ndim not in (nd + 1, nd + 2):
        raise ShapeError(f"{describe(op, input=x)}: expected an (N, C, ...) or (C, ...) input with {nd} spatial dims")
    lead = x.ndim - nd
    return dropout(x, p, training, inplace, x.shape[:lead] + (1,) * nd, op)


def dropout1d(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Channel dropout of an (N, C, L) or (C, L) input.

    >>> import tensorlite as tl; tl.nn.functional.dropout1d(tl.ones(1, 2, 3), 0.5, training=False).shape
    (1, 2, 3)"""
    return _feature_dropout("dropout1d", input, p, training, inplace, 1)


def dropout2d(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Channel dropout of an (N, C, H, W) or (C, H, W) input.

    >>> import tensorlite as tl; tl.nn.functional.dropout2d(tl.ones(1, 2, 3, 3), 0.0).shape
    (1, 2, 3, 3)"""
    return _feature_dropout("dropout2d", input, p, training, inplace, 2)


def dropout3d(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Channel dropout of an (N, C, D, H, W) or (C, D, H, W) input.

    >>> import tensorlite as tl; tl.nn.functional.dropout3d(tl.ones(2, 1, 1, 1), 1.0).sum().item()
    0.0"""
    return _feature_dropout("dropout3d", input, p, training, inplace, 3)


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
    """exp(x) / sum(exp(x)) along dim (fused on the device; 16-bit input computes in float32 under autocast), as torch's.

    >>> import tensorlite as tl
    >>> tl.nn.functional.softmax(tl.tensor([0.0, 0.0]), -1).tolist()
    [0.5, 0.5]
    """
    x, = _amp.full_precision(x)
    x = _floating(x if dtype is None else x._cast(_dt.get(dtype)))
    return _over_last_dim("softmax", "softmax_last_dim", x, dim)


def log_softmax(x, dim: int = -1, dtype=None):
    """log(softmax(x)) along dim, computed stably in one op, as torch.nn.functional.log_softmax.

    >>> import tensorlite as tl
    >>> round(tl.nn.functional.log_softmax(tl.tensor([0.0, 0.0]), -1)[0].item(), 4)
    -0.6931
    """
    x, = _amp.full_precision(x)
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
    """(x - mean) / sqrt(var + eps) * weight + bias over the last dims normalized_shape, as torch's.

    >>> import tensorlite as tl
    >>> round(tl.nn.functional.layer_norm(tl.tensor([[1.0, 3.0]]), (2,))[0, 1].item(), 4)
    1.0
    """
    x, weight, bias = _amp.full_precision(x, weight, bias)
    x2, (w, b), n = _flatten_normalized("layer_norm", x, normalized_shape, weight=weight, bias=bias)
    xs, xl = storage_and_layout(x2)
    y = result(xs.layer_norm(xl, *storage_and_layout(w), *storage_and_layout(b), eps), x2.shape, x2.dtype)
    return _reshaped(custom_op(y, (x2, w, b), lambda g: _fused_norm_grads("layer_norm", g, x2, w, b, eps),
                               "layer_norm", (x2, w)), x.shape)


def rms_norm(x, normalized_shape, weight=None, eps=None):
    """x / sqrt(mean(x^2) + eps) * weight; eps defaults to the machine epsilon of the computing
    type (float32 for float16/bfloat16, as PyTorch)."""
    x, weight = _amp.full_precision(x, weight)
    x2, (w,), n = _flatten_normalized("rms_norm", x, normalized_shape, weight=weight)
    eps = _FINFO_EPS[x2.dtype.name] if eps is None else float(eps)
    xs, xl = storage_and_layout(x2)
    y = result(xs.rms_norm(xl, *storage_and_layout(w), eps), x2.shape, x2.dtype)
    return _reshaped(custom_op(y, (x2, w), lambda g: _fused_norm_grads("rms_norm", g, x2, w, None, eps)[:2],
                               "rms_norm", (x2, w)), x.shape)


def add_rms_norm(input, residual, normalized_shape, weight=None, eps=None):
    """(rms_norm(input + residual), input + residual): a pre-norm transformer block's residual
    add and the next RMSNorm, one kernel on GPUs where no gradient is needed; with autograd,
    the two ops. The sum is rounded to the dtype before the norm reads it, as the unfused ops.
    input and residual: one shape and dtype.

    >>> import tensorlite as tl
    >>> x, r = tl.tensor([[1.0, 2.0]]), tl.tensor([[2.0, 2.0]])
    >>> normed, total = tl.nn.functional.add_rms_norm(x, r, 2)
    >>> total.tolist(), [round(v, 4) for v in normed[0].tolist()]
    ([[3.0, 4.0]], [0.8485, 1.1314])
    """
    if tuple(input.shape) != tuple(residual.shape) or input.dtype is not residual.dtype:
        error = ShapeError if tuple(input.shape) != tuple(residual.shape) else DTypeError
        raise error(f"{describe('add_rms_norm', input=input, residual=residual)}: input and residual must have "
                    "one shape and dtype")
    if is_grad_enabled() and any(t is not None and t.requires_grad for t in (input, residual, weight)) \
            or _amp.is_autocast_enabled():
        total = input + residual
        return rms_norm(total, normalized_shape, weight, eps), total
    x2, (w,), n = _flatten_normalized("add_rms_norm", input, normalized_shape, weight=weight)
    r2 = _reshaped(_floating(residual), x2.shape)
    _check_like("add_rms_norm", x2, residual=r2)
    eps = _FINFO_EPS[x2.dtype.name] if eps is None else float(eps)
    xs, xl = storage_and_layout(x2)
    total, normed = xs.add_rms_norm(xl, *storage_and_layout(r2), *storage_and_layout(w), eps)
    return (_reshaped(result(normed, x2.shape, x2.dtype), input.shape),
            _reshaped(result(total, x2.shape, x2.dtype), input.shape))


def add_layer_norm(input, residual, normalized_shape, weight=None, bias=None, eps: float = 1e-5, dtype=None):
    """(layer_norm(input + residual) in `dtype`, input + residual): a pre-norm transformer
    block's residual add, the next LayerNorm and the cast of the normed rows to the dtype of
    the products after it, with autograd. input and residual have one shape; the sum has their
    promoted dtype (a float32 stream plus a bfloat16 or float16 branch output is float32, as
    torch promotes), which weight and bias share; `dtype` (default: the sum's) is the normed
    output's. On GPUs one kernel forward and one backward (which also adds the sum's gradient
    and writes the residual's) for contiguous rows of one dtype, or of a float32 stream with a
    half-type residual and output; otherwise the ops themselves. Not a PyTorch op.

    >>> import tensorlite as tl
    >>> x, r = tl.tensor([[1.0, 2.0]]), tl.tensor([[2.0, 4.0]], dtype=tl.bfloat16)
    >>> normed, total = tl.nn.functional.add_layer_norm(x, r, 2, dtype=tl.bfloat16)
    >>> total.tolist(), total.dtype, normed.tolist(), normed.dtype
    ([[3.0, 6.0]], tensorlite.float32, [[-1.0, 1.0]], tensorlite.bfloat16)
    """
    op = "add_layer_norm"
    input, weight, bias = _amp.full_precision(input, weight, bias)  # autocast: the norm in float32
    if not isinstance(residual, Tensor) or tuple(input.shape) != tuple(residual.shape):
        raise ShapeError(f"{describe(op, input=input, residual=residual)}: input and residual must have one shape")
    if not (input.dtype.is_floating_point and residual.dtype.is_floating_point):
        raise DTypeError(f"{describe(op, input=input, residual=residual)}: input and residual must be floating point")
    sum_dt = _dt.promote_types(input.dtype, residual.dtype)
    out_dt = sum_dt if dtype is None else _dt.get(dtype)
    if not out_dt.is_floating_point:
        raise DTypeError(f"{describe(op, input=input)}: dtype must be a floating dtype, got {out_dt.name}")
    # x: the stream (the sum's dtype); r: the other addend, cast first unless a half type
    # added to a float32 stream (which the GPU kernels read as it is)
    x, r = (input, residual) if input.dtype is sum_dt else (residual, input)
    if r.dtype is not sum_dt and not (sum_dt is _dt.float32 and r.dtype in _dt.HALVES):
        r = r._cast(sum_dt)
    x2, (w, b), n = _flatten_normalized(op, x, normalized_shape, weight=weight, bias=bias)
    r2 = _reshaped(r, x2.shape)
    if r2._device is not x2._device:
        raise DeviceError(f"{describe(op, input=input, residual=residual)}: input and residual must share a device")
    (xs, xl), (rs, rl) = storage_and_layout(x2), storage_and_layout(r2)
    total_st, normed_st = xs.add_layer_norm(xl, rs, rl, *storage_and_layout(w), *storage_and_layout(b), float(eps),
                                            out_dt)
    total2, normed2 = result(total_st, x2.shape, sum_dt), result(normed_st, x2.shape, out_dt)

    def grad(grads):
        g_normed, g_total = grads
        want_w, want_b = w is not None and w.requires_grad, b is not None and b.requires_grad
        if g_normed is None:  # only the sum was used: the add's gradient
            return g_total, None if g_total is None else g_total._cast(r.dtype), None, None
        (ts, tl_), (gs, gl) = storage_and_layout(total2), storage_and_layout(g_normed._cast(out_dt))
        gt = None if g_total is None else g_total._cast(sum_dt)
        (gts, gtl), (ws, wl) = storage_and_layout(gt), storage_and_layout(w)
        d_total, d_res, dw, db = ts.add_layer_norm_backward(tl_, gs, gl, gts, gtl, ws, wl, float(eps), r.dtype,
                                                             want_w, want_b)
        return (result(d_total, x2.shape, sum_dt), result(d_res, x2.shape, r.dtype),
                None if dw is None else result(dw, (n,), sum_dt), None if db is None else result(db, (n,), sum_dt))
    attach_many([normed2, total2], (x2, r2, w, b), grad, op, saved=(total2, w))
    return _reshaped(normed2, input.shape), _reshaped(total2, input.shape)


def rms_norm_linear(input, normalized_shape, norm_weight, weight, bias=None, eps=None, gated: bool = False):
    """linear(rms_norm(input, normalized_shape, norm_weight, eps), weight, bias): a pre-norm
    block's RMSNorm and the projection after it. With `gated`, the projection's two halves g
    and u along the last dim give silu(g) * u (SwiGLU: weight is the gate's and the up
    projection's weights stacked). One kernel on GPUs for a single row without autograd (a
    decode step's q/k/v, gate/up and LM head: the norm's launch saved); otherwise the ops
    themselves. Not a PyTorch op.

    >>> import tensorlite as tl
    >>> x, w = tl.tensor([[3.0, 4.0]]), tl.tensor([[1.0, 0.0], [1.0, 1.0]])
    >>> [round(v, 4) for v in tl.nn.functional.rms_norm_linear(x, 2, None, w, eps=0.0)[0].tolist()]
    [0.8485, 1.9799]
    """
    op = "rms_norm_linear"
    if weight.ndim != 2 or input.ndim == 0 or input.shape[-1] != weight.shape[-1] or (gated and weight.shape[0] % 2) \
            or _shape_arg((normalized_shape,), op, input) != (input.shape[-1],):
        raise ShapeError(f"{describe(op, input=input, weight=weight)}: expected input (..., in_features), "
                         f"normalized_shape (in_features,) and weight (out_features, in_features)"
                         f"{', out_features even (gated)' if gated else ''}")
    if bias is not None or is_grad_enabled() and any(t is not None and t.requires_grad
                                                     for t in (input, norm_weight, weight)) \
            or _amp.is_autocast_enabled():
        y = linear(rms_norm(input, normalized_shape, norm_weight, eps), weight, bias)
        return silu_mul(*y.chunk(2, -1)) if gated else y
    x2, (g,), _ = _flatten_normalized(op, input, normalized_shape, weight=norm_weight)
    _check_like(op, x2, weight=weight)
    eps = _FINFO_EPS[x2.dtype.name] if eps is None else float(eps)
    (xs, xl), (ws, wl) = _rows(*storage_and_layout(x2), x2.dtype), storage_and_layout(weight)
    n = weight.shape[0] // 2 if gated else weight.shape[0]
    y = xs.rms_norm_matmul(xl, *storage_and_layout(g), eps, ws, wl.transpose(0, 1), gated)
    return result(y, x2.shape[:-1] + (n,), x2.dtype)


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
    cdt = _dt.float32 if x.dtype in _dt.HALVES else x.dtype
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


def normalize(x, p: float = 2.0, dim: int = 1, eps: float = 1e-12):
    """x / max(||x||_p, eps) along dim (torch.nn.functional.normalize); p > 0, or inf."""
    dim = normalize_dim(dim, x.ndim, "normalize", x)
    if not (isinstance(p, (int, float)) and p > 0):
        raise ArgumentError(f"{describe('normalize', input=x)}: p must be a positive number, got {p!r}")
    return x / maximum(_vector_norm(x, p, dim), eps)


from ..linalg import _vector_norm  # noqa: E402  (||x||_p with PyTorch's gradient, also tl.linalg's)


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


def rope_kv_cache(qkv, cos, sin, k_cache, v_cache, positions):
    """A decode step's rotary embedding and key/value cache write, one kernel on GPUs (what
    vLLM's rotary_embedding and reshape_and_cache do). qkv (b, hq + 2*hkv, t, d): the heads of
    one q/k/v product, queries then keys then values; cos, sin as rope's; k_cache, v_cache
    (b, hkv, S, d); positions (t,) integer ids below S. Writes the caches in place and returns
    the rotated queries (b, hq, t, d). The same as

        q, k, v = qkv.split([hq, hkv, hkv], 1)
        k_cache.index_copy_(2, positions, rope(k, cos, sin)); v_cache.index_copy_(2, positions, v)
        return rope(q, cos, sin)

    which it runs where autograd records or the caches are not contiguous."""
    op = "rope_kv_cache"
    if qkv.ndim != 4 or k_cache.ndim != 4 or tuple(k_cache.shape) != tuple(v_cache.shape) \
            or k_cache.shape[0] != qkv.shape[0] or k_cache.shape[3] != qkv.shape[3] \
            or qkv.shape[1] <= 2 * k_cache.shape[1]:
        raise ShapeError(f"{describe(op, qkv=qkv, k_cache=k_cache, v_cache=v_cache)}: expected qkv (b, hq + 2*hkv, "
                         f"t, d) with hq >= 1 and caches (b, hkv, S, d) of one shape")
    if tuple(positions.shape) != (qkv.shape[2],) or positions.dtype.is_floating_point:
        raise ShapeError(f"{describe(op, qkv=qkv, positions=positions)}: positions must be ({qkv.shape[2]},) "
                         f"integer ids")
    if not qkv.dtype.is_floating_point:
        raise DTypeError(f"{describe(op, qkv=qkv)}: qkv must be floating point")
    _check_like(op, qkv, k_cache=k_cache, v_cache=v_cache)
    if positions._device is not qkv._device:
        raise DeviceError(f"{describe(op, qkv=qkv, positions=positions)}: positions must be on qkv's device")
    hkv = k_cache.shape[1]
    hq = qkv.shape[1] - 2 * hkv
    recording = is_grad_enabled() and any(t.requires_grad for t in (qkv, cos, sin, k_cache, v_cache))
    if recording or not (k_cache._layout.is_contiguous() and v_cache._layout.is_contiguous()):
        qk = rope(qkv[:, :hq + hkv], cos, sin)
        k_cache.index_copy_(2, positions, qk[:, hq:])
        v_cache.index_copy_(2, positions, qkv[:, hq + hkv:])
        return qk[:, :hq]
    c, s = _rope_tables("rope", qkv, cos, sin)
    ids = positions if positions.dtype is _dt.int64 else positions._cast(_dt.int64)
    (xs, xl), (cs, cl), (ss, sl) = storage_and_layout(qkv), storage_and_layout(c), storage_and_layout(s)
    (ks, kl), (vs, vl), (ps, pl) = storage_and_layout(k_cache), storage_and_layout(v_cache), storage_and_layout(ids)
    qk = result(xs.rope_kv_cache(xl, cs, cl, ss, sl, ks, kl, vs, vl, ps, pl), (qkv.shape[0], hq + hkv) +
                tuple(qkv.shape[2:]), qkv.dtype)
    note_write(ks)
    note_write(vs)
    return qk[:, :hq]


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
    query, key, value = _amp.low_precision(query, key, value)
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
    x, weight, bias = _amp.low_precision(x, weight, bias)
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
    if reduction == "batchmean":  # kl_div's: the sum over the batch size
        return loss.sum() / (loss.shape[0] if loss.ndim else 1)
    raise ArgumentError(f"{op}: reduction must be 'none', 'mean' or 'sum', got {reduction!r}")


def _reduction(op, size_average, reduce, reduction, extra=()):
    """PyTorch's reduction argument, checked before any work; the deprecated size_average /
    reduce pair overrides it as in torch."""
    if size_average is not None or reduce is not None:
        warnings.warn(f"{op}: size_average and reduce are deprecated, use reduction", UserWarning, stacklevel=3)
        reduction = "none" if reduce is False else "sum" if size_average is False else "mean"
    if reduction not in ("none", "mean", "sum") + extra:
        raise ArgumentError(f"{op}: reduction must be one of {', '.join(('none', 'mean', 'sum') + extra)}, "
                            f"got {reduction!r}")
    return reduction


def _up(t):
    """f16/bf16 -> float32: the losses compute in float32 and round once (PyTorch's opmath)."""
    return t._cast(_dt.float32) if isinstance(t, Tensor) and t.dtype in _dt.HALVES else t


def _loss(op, input, target, reduction, fn, weight=None, shapes="warn", weight_rule=None):
    """reduction(fn(input, target) * weight) in float32 for f16/bf16, rounded once to the
    operands' dtype. A target of another shape broadcasts with PyTorch's warning
    (shapes='warn'), raises (shapes='raise', as torch's BCE) or just broadcasts (None). The
    weight broadcasts (weight_rule None) or has the input's shape, and 'mean' then divides by
    its sum (weight_rule 'sum': l1_loss, mse_loss) or by the count ('mean': huber_loss)."""
    if not isinstance(input, Tensor):
        raise DTypeError(f"{op}: input must be a Tensor, got {type(input).__name__}")
    target = target if isinstance(target, Tensor) else tensor(target, dtype=input.dtype, device=input._device)
    input, target = _amp.full_precision(input, target)
    if weight_rule and weight is not None and tuple(getattr(weight, "shape", ())) != input.shape:
        raise ShapeError(f"{describe(op, input=input, weight=weight)}: weight must have the input's shape")
    if input.shape != target.shape and shapes == "raise":
        raise ShapeError(f"{describe(op, input=input, target=target)}: target must have the input's shape")
    if input.shape != target.shape and shapes == "warn":
        warnings.warn(f"{op}: target size {target.shape} differs from input size {input.shape}: the two "
                      "broadcast, which is likely not what you want (as PyTorch warns)", UserWarning, stacklevel=3)
    try:
        loss = fn(_up(input), _up(target))
        loss = loss if weight is None else loss * _up(weight)
    except TensorliteError as e:  # named as the loss, not the op inside it
        raise type(e)(f"{op}: {e}") from None
    denominator = _up(weight).sum() if weight_rule == "sum" and weight is not None else None
    return _reduce_loss(op, loss, reduction, denominator)._cast(_dt.promote_types(input.dtype, target.dtype))


def _classes_last(x):
    """(N, C, d1, ...) -> (N, d1, ..., C): the fused log_softmax and gather work on the last dim."""
    return x.permute((0,) + tuple(range(2, x.ndim)) + (1,)) if x.ndim > 2 else x


def nll_loss(input, target, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
             reduction: str = "mean"):
    """Negative log-likelihood of log-probabilities `input` (N, C, ...) at class ids `target` (N, ...).

    >>> import tensorlite as tl; tl.nn.functional.nll_loss(tl.tensor([[-1.0, -2.0]]), tl.tensor([1])).item()
    2.0"""
    input, = _amp.full_precision(input)
    reduction = _reduction("nll_loss", size_average, reduce, reduction)
    if not isinstance(input, Tensor) or input.ndim == 0:
        raise ShapeError(f"{describe('nll_loss', input=input)}: expected log-probabilities (C,), (N, C) or (N, C, ...)")
    classes = input.shape[1 if input.ndim > 1 else 0]
    if weight is not None and tuple(getattr(weight, "shape", ())) != (classes,):
        raise ShapeError(f"{describe('nll_loss', input=input, weight=weight)}: weight must be 1-D with one "
                         f"value per class ({classes})")
    target = target if isinstance(target, Tensor) else tensor(target, device=input._device)
    if target.dtype.is_floating_point:
        raise DTypeError(f"{describe('nll_loss', input=input, target=target)}: target must hold class ids (integers)")
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


def cross_entropy(input, target, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                  reduction: str = "mean", label_smoothing: float = 0.0):
    """torch.nn.functional.cross_entropy: input logits (N, C) / (N, C, d1, ...) / (C,), target
    class ids (int) or class probabilities (float, input's shape). 'mean' over class ids
    divides by the (weighted) count of targets that are not ignore_index. Class ids without
    label smoothing take the fused op (storage cross_entropy / cross_entropy_backward);
    the rest, the composite `cross_entropy_slow`.

    >>> import tensorlite as tl; round(tl.nn.functional.cross_entropy(tl.zeros(1, 4), tl.tensor([0])).item(), 4)
    1.3863"""
    reduction = _reduction("cross_entropy", size_average, reduce, reduction)
    input, = _amp.full_precision(input)
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


def mse_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", weight=None):
    """Mean squared error (input - target)^2, reduced.

    >>> import tensorlite as tl; tl.nn.functional.mse_loss(tl.tensor([1.0, 2.0]), tl.tensor([2.0, 4.0])).item()
    2.5"""
    return _loss("mse_loss", input, target, _reduction("mse_loss", size_average, reduce, reduction),
                 lambda x, t: (x - t).square(), weight, weight_rule="sum")


def l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", weight=None):
    """Mean absolute error |input - target|, reduced.

    >>> import tensorlite as tl; tl.nn.functional.l1_loss(tl.tensor([1.0, 2.0]), tl.tensor([2.0, 4.0])).item()
    1.5"""
    return _loss("l1_loss", input, target, _reduction("l1_loss", size_average, reduce, reduction),
                 lambda x, t: (x - t).abs(), weight, weight_rule="sum")


def _check_positive(op, name, v, zero_ok=False):
    if not (isinstance(v, (int, float)) and (v >= 0 if zero_ok else v > 0)):
        raise ArgumentError(f"{op}: {name} must be {'non-negative' if zero_ok else 'positive'}, got {v!r}")


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0):
    """0.5 d^2 / beta where d = |input - target| < beta, else d - 0.5 beta.

    >>> import tensorlite as tl; tl.nn.functional.smooth_l1_loss(tl.tensor([0.5, 3.0]), tl.zeros(2)).item()
    1.3125"""
    _check_positive("smooth_l1_loss", "beta", beta, zero_ok=True)

    def fn(x, t):
        d = (x - t).abs()
        return d if beta == 0 else where(d < beta, d * d * (0.5 / beta), d - 0.5 * beta)
    return _loss("smooth_l1_loss", input, target, _reduction("smooth_l1_loss", size_average, reduce, reduction), fn)


def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0, weight=None):
    """0.5 d^2 where d = |input - target| < delta, else delta (d - 0.5 delta).

    >>> import tensorlite as tl; tl.nn.functional.huber_loss(tl.tensor([0.5, 3.0]), tl.zeros(2)).item()
    1.3125"""
    _check_positive("huber_loss", "delta", delta)

    def fn(x, t):
        d = (x - t).abs()
        return where(d < delta, d * d * 0.5, (d - 0.5 * delta) * delta)
    return _loss("huber_loss", input, target, _reduction("huber_loss", None, None, reduction), fn, weight,
                 weight_rule="mean")


def _bce(x, t):
    """-(t log x + (1 - t) log(1 - x)), each log clamped at -100, with PyTorch's gradients
    (finite at x = 0 or 1, where the composite's would be 0 * inf)."""
    with no_grad():
        lx, l1x = x.log().clamp(min=-100.0), (1.0 - x).log().clamp(min=-100.0)
        loss = -(t * lx + (1.0 - t) * l1x)
    return custom_op(loss, (x, t), lambda g: (g * (x - t) / maximum(x * (1.0 - x), 1e-12), g * (l1x - lx)),
                     "binary_cross_entropy", (x, t))


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
    """Binary cross entropy of probabilities `input` in [0, 1] (checked on cpu, as PyTorch's; on a GPU
    the check would wait for the device at every call, so there a value outside gives nan).

    >>> import tensorlite as tl; round(tl.nn.functional.binary_cross_entropy(tl.tensor([0.5]), tl.ones(1)).item(), 4)
    0.6931"""
    op = "binary_cross_entropy"
    reduction = _reduction(op, size_average, reduce, reduction)
    if isinstance(input, Tensor) and input.numel() and input.device == "cpu":
        with no_grad():
            if (~((input >= 0) & (input <= 1))).sum().item():
                raise ArgumentError(f"{describe(op, input=input)}: all elements of input should be between 0 and 1")
    return _loss(op, input, target, reduction, _bce, weight, shapes="raise")


def _softplus(x):
    """log(1 + exp(x)) without overflow or cancellation, with the gradient sigmoid(x)."""
    with no_grad():
        y = maximum(x, 0.0) + (-x.abs()).exp().log1p()
    return custom_op(y, (x,), lambda g: (g * x.sigmoid(),), "softplus", (x,))


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction: str = "mean", pos_weight=None):
    """Binary cross entropy of sigmoid(input), computed stably from the logits; pos_weight
    scales the positive term (one value per class, broadcast over the last dim).

    >>> import tensorlite as tl; x = tl.zeros(1)
    >>> round(tl.nn.functional.binary_cross_entropy_with_logits(x, x + 1).item(), 4)
    0.6931"""
    def fn(x, t):
        sp = _softplus(-x)  # -log sigmoid(x)
        return (1.0 - t) * x + (sp if pos_weight is None else sp * ((_up(pos_weight) - 1.0) * t + 1.0))
    op = "binary_cross_entropy_with_logits"
    return _loss(op, input, target, _reduction(op, size_average, reduce, reduction), fn, weight, shapes="raise")


def kl_div(input, target, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False):
    """KL divergence sum(target * (log target - input)) of log-probabilities `input`;
    reduction='batchmean' divides the sum by the batch size (the KL divergence proper).

    >>> import tensorlite as tl; tl.nn.functional.kl_div(tl.zeros(2), tl.ones(2), reduction="batchmean").item()
    0.0"""
    reduction = _reduction("kl_div", size_average, reduce, reduction, ("batchmean",))
    if reduction == "mean":
        warnings.warn("kl_div: reduction='mean' divides the sum by the number of elements, not the batch size; "
                      "'batchmean' gives the KL divergence (as PyTorch warns)", UserWarning, stacklevel=2)

    def fn(x, t):  # t log t is 0 at t = 0 (xlogy)
        return t.exp() * (t - x) if log_target else t * (where(t == 0, 1.0, t).log() - x)
    return _loss("kl_div", input, target, reduction, fn, shapes=None)


def poisson_nll_loss(input, target, log_input: bool = True, full: bool = False, size_average=None,
                     eps: float = 1e-8, reduce=None, reduction: str = "mean"):
    """Poisson negative log-likelihood: exp(input) - target * input (log_input), or
    input - target * log(input + eps); `full` adds Stirling's term where target > 1.

    >>> import tensorlite as tl; tl.nn.functional.poisson_nll_loss(tl.zeros(2), tl.ones(2)).item()
    1.0"""
    def fn(x, t):
        loss = x.exp() - t * x if log_input else x - t * (x + eps).log()
        if full:
            t1 = where(t > 1, t, 1.0)
            loss = loss + where(t > 1, t * t1.log() - t + 0.5 * (t1 * (2 * math.pi)).log(), 0.0)
        return loss
    op = "poisson_nll_loss"
    return _loss(op, input, target, _reduction(op, size_average, reduce, reduction), fn, shapes=None)


def gaussian_nll_loss(input, target, var, full: bool = False, eps: float = 1e-6, reduction: str = "mean"):
    """Gaussian negative log-likelihood 0.5 (log var + (input - target)^2 / var), var clamped
    at eps (the clamp passes the gradient through, as PyTorch's).

    >>> import tensorlite as tl; tl.nn.functional.gaussian_nll_loss(tl.zeros(2), tl.zeros(2), tl.ones(2)).item()
    0.0"""
    op = "gaussian_nll_loss"
    reduction = _reduction(op, None, None, reduction)
    var = var if isinstance(var, Tensor) else full_like(input, float(var))
    if var.shape != input.shape:
        if var.shape == input.shape[:-1]:  # one variance per sample
            var = var.unsqueeze(-1)
        elif not (var.shape[:-1] == input.shape[:-1] and var.shape[-1:] == (1,)):
            raise ShapeError(f"{describe(op, input=input, var=var)}: var is of incorrect size")
    if (var < 0).sum().item():
        raise ArgumentError(f"{describe(op, var=var)}: var has negative entries")

    def fn(x, t):
        v = _up(var)
        v = v + (maximum(v.detach(), eps) - v.detach())
        return ((x - t).square() / v + v.log()) * 0.5 + (0.5 * math.log(2 * math.pi) if full else 0.0)
    return _loss(op, input, target, reduction, fn, shapes=None)


def _paired(op, x1, x2, target, reduction, fn, ndims=(1, 2)):
    """reduction(fn(x1, x2, target)) of the ranking / embedding losses, f16/bf16 in float32."""
    if not all(isinstance(t, Tensor) for t in (x1, x2)) or x1.ndim != x2.ndim or x1.ndim not in ndims:
        raise ShapeError(f"{describe(op, input1=x1, input2=x2)}: inputs must be tensors of the same number of "
                         f"dims, one of {ndims}")
    target = target if isinstance(target, Tensor) else tensor(target, dtype=x1.dtype, device=x1._device)
    try:
        loss = fn(_up(x1), _up(x2), _up(target))
    except TensorliteError as e:
        raise type(e)(f"{op}: {e}") from None
    return _reduce_loss(op, loss, reduction)._cast(_dt.promote_types(x1.dtype, x2.dtype))


def cosine_embedding_loss(input1, input2, target, margin: float = 0, size_average=None, reduce=None,
                          reduction: str = "mean"):
    """1 - cos(input1, input2) where target is 1, max(0, cos - margin) where it is -1 (cos over the last dim).

    >>> import tensorlite as tl; x = tl.ones(1, 2)
    >>> tl.nn.functional.cosine_embedding_loss(x, x, tl.tensor([-1])).item()
    1.0"""
    def fn(a, b, t):
        cos = (a * b).sum(-1) / (((a * a).sum(-1) + 1e-12) * ((b * b).sum(-1) + 1e-12)).sqrt()
        return where(t == 1, 1.0 - cos, 0.0) + where(t == -1, (cos - margin).clamp(min=0.0), 0.0)
    op = "cosine_embedding_loss"
    return _paired(op, input1, input2, target, _reduction(op, size_average, reduce, reduction), fn)


def margin_ranking_loss(input1, input2, target, margin: float = 0, size_average=None, reduce=None,
                        reduction: str = "mean"):
    """max(0, -target * (input1 - input2) + margin).

    >>> import tensorlite as tl; x = tl.tensor([1.0])
    >>> tl.nn.functional.margin_ranking_loss(x, x + 1, x).item()
    1.0"""
    op = "margin_ranking_loss"
    return _paired(op, input1, input2, target, _reduction(op, size_average, reduce, reduction),
                   lambda a, b, t: (-t * (a - b) + margin).clamp(min=0.0), (0, 1, 2, 3, 4, 5, 6))


def hinge_embedding_loss(input, target, margin: float = 1.0, size_average=None, reduce=None,
                         reduction: str = "mean"):
    """input where target is 1, max(0, margin - input) where it is -1.

    >>> import tensorlite as tl; x, y = tl.tensor([0.25, 2.0]), tl.tensor([-1.0, 1.0])
    >>> tl.nn.functional.hinge_embedding_loss(x, y).item()
    1.375"""
    def fn(x, t):
        return where(t != 1, (margin - x).clamp(min=0.0), 0.0) + where(t != -1, x, 0.0)
    op = "hinge_embedding_loss"
    return _loss(op, input, target, _reduction(op, size_average, reduce, reduction), fn, shapes=None)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    """log(1 + exp(-target * input)).

    >>> import tensorlite as tl; round(tl.nn.functional.soft_margin_loss(tl.zeros(1), tl.ones(1)).item(), 4)
    0.6931"""
    op = "soft_margin_loss"
    return _loss(op, input, target, _reduction(op, size_average, reduce, reduction),
                 lambda x, t: _softplus(-t * x), shapes="raise")


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None,
                                reduction: str = "mean"):
    """Per-class binary cross entropy of sigmoid(input), averaged over the classes (last dim).

    >>> import tensorlite as tl; x = tl.zeros(1, 2)
    >>> round(tl.nn.functional.multilabel_soft_margin_loss(x, x + 1).item(), 4)
    0.6931"""
    op = "multilabel_soft_margin_loss"
    reduction = _reduction(op, size_average, reduce, reduction)

    def fn(x, t):
        loss = t * _softplus(-x) + (1.0 - t) * _softplus(x)
        loss = loss if weight is None else loss * _up(weight)
        return loss.sum(-1) / x.shape[-1]
    return _loss(op, input, target, reduction, fn, shapes="raise")


def triplet_margin_loss(anchor, positive, negative, margin: float = 1.0, p: float = 2, eps: float = 1e-6,
                        swap: bool = False, size_average=None, reduce=None, reduction: str = "mean"):
    """max(0, margin + d(anchor, positive) - d(anchor, negative)), d the pairwise p-norm distance.

    >>> import tensorlite as tl; x = tl.zeros(1, 2)
    >>> tl.nn.functional.triplet_margin_loss(x, x, x + 1).item()
    0.0"""
    op = "triplet_margin_loss"
    reduction = _reduction(op, size_average, reduce, reduction)
    if not isinstance(negative, Tensor) or getattr(anchor, "ndim", None) != negative.ndim:
        raise ShapeError(f"{describe(op, anchor=anchor, negative=negative)}: inputs must have the same number of dims")

    def fn(a, pos, neg):
        d_neg = pairwise_distance(a, neg, p, eps)
        if swap:
            d_neg = minimum(d_neg, pairwise_distance(pos, neg, p, eps))
        return (margin + pairwise_distance(a, pos, p, eps) - d_neg).clamp(min=0.0)
    return _paired(op, anchor, positive, negative, reduction, fn)


# ---- distances, one-hot --------------------------------------------------------------

def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
    """||x1 - x2 + eps||_p over the last dim.

    >>> import tensorlite as tl; x = tl.tensor([[3.0, 4.0]])
    >>> round(tl.nn.functional.pairwise_distance(x, x * 0).item(), 4)
    5.0"""
    if not (isinstance(p, (int, float)) and p > 0):
        raise ArgumentError(f"pairwise_distance: p must be a positive number or inf, got {p!r}")
    try:
        d = _vector_norm(_up(x1) - _up(x2) + eps, p, -1)
    except TensorliteError as e:
        raise type(e)(f"pairwise_distance: {e}") from None
    return (d if keepdim else d.squeeze(-1))._cast(_dt.promote_types(x1.dtype, x2.dtype))


def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8):
    """sum(x1 * x2) / (max(||x1||, eps) * max(||x2||, eps)) along dim (the inputs broadcast).

    >>> import tensorlite as tl; x = tl.tensor([[1.0, 0.0]])
    >>> tl.nn.functional.cosine_similarity(x, x * 2).tolist()
    [1.0]"""
    shape = broadcast_shapes(x1.shape, x2.shape)
    if shape is None:
        raise ShapeError(f"{describe('cosine_similarity', x1=x1, x2=x2)}: shapes do not broadcast")
    d = normalize_dim(dim, len(shape), "cosine_similarity", x1)
    a, b = (_up(t).broadcast_to(shape) for t in (x1, x2))
    # the norms clamped at eps without cutting their gradient (PyTorch clamps them under no_grad)
    na, nb = (n + (maximum(n.detach(), eps) - n.detach()) for n in (_vector_norm(a, 2, d), _vector_norm(b, 2, d)))
    return ((a / na) * (b / nb)).sum(d)._cast(_dt.promote_types(x1.dtype, x2.dtype))


def one_hot(tensor, num_classes: int = -1):
    """int64 (*, num_classes) with 1 at each index of `tensor` (int64); num_classes=-1 takes max + 1 (a host read).

    >>> import tensorlite as tl; tl.nn.functional.one_hot(tl.tensor([0, 2])).tolist()
    [[1, 0, 0], [0, 0, 1]]"""
    t = tensor
    if not isinstance(t, Tensor) or t.dtype is not _dt.int64:
        raise DTypeError(f"{describe('one_hot', tensor=t)}: one_hot is only applicable to index (int64) tensors")
    if t.numel() == 0 and num_classes == -1:
        raise ArgumentError(f"{describe('one_hot', tensor=t)}: can not infer the number of classes of an empty tensor")
    lo, hi = stack([t.amin(), t.amax()]).tolist() if t.numel() else (0, -1)  # one host read
    if lo < 0:
        raise ArgumentError(f"{describe('one_hot', tensor=t)}: class values must be non-negative, got {lo}")
    if num_classes != -1 and not (isinstance(num_classes, int) and hi < num_classes):
        raise ArgumentError(f"{describe('one_hot', tensor=t)}: class values must be smaller than num_classes "
                            f"{num_classes!r}, got {hi}")
    n = hi + 1 if num_classes == -1 else num_classes
    return (t.unsqueeze(-1) == arange(n, device=t._device))._cast(_dt.int64)


# ---- padding and resampling ----------------------------------------------------------

def _index(x, d, idx):
    """x.index_select(d, idx) of host indices idx; x itself where idx is the identity."""
    if len(idx) == x.shape[d] and (idx == np.arange(len(idx))).all():
        return x
    return x.index_select(d, tensor(np.ascontiguousarray(idx, dtype=np.int64), device=x._device))


def _matrix_along(x, d, w):
    """sum_i x[..., i, ...] w[i, j] along dim d: a separable linear resampling (one matmul)."""
    w = tensor(w, dtype=x.dtype, device=x._device)
    return x @ w if d == x.ndim - 1 else (x.transpose(d, -1) @ w).transpose(d, -1)


def pad(input, pad, mode: str = "constant", value=None):
    """Pad (negative values crop) the last len(pad) // 2 dims, the last dim first: (left, right, top, bottom, ...).
    mode 'reflect' / 'replicate' / 'circular' pad 1-3 dims of an (N, C, *) or (C, *) input.

    >>> import tensorlite as tl; tl.nn.functional.pad(tl.tensor([[1, 2, 3]]), (2, 1), mode="reflect").tolist()
    [[3, 2, 1, 2, 3, 2]]"""
    x, op = input, "pad"
    if not isinstance(x, Tensor):
        raise DTypeError(f"pad: input must be a Tensor, got {type(x).__name__}")
    if not isinstance(pad, (tuple, list)) or len(pad) % 2 or len(pad) // 2 > x.ndim or \
            not all(isinstance(p, int) for p in pad):
        raise ArgumentError(f"{describe(op, input=x)}: pad must be an even-length sequence of ints, at most 2 per dim; "
                            f"got {pad!r}")
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise ArgumentError(f"pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', got {mode!r}")
    n = len(pad) // 2
    if mode != "constant" and value not in (None, 0):
        raise ArgumentError(f"pad: mode {mode!r} takes no value, got {value!r}")
    if mode != "constant" and (n > 3 or x.ndim not in (n + 1, n + 2)):
        raise ShapeError(f"{describe(op, input=x)}: mode {mode!r} pads 1 to 3 trailing dims of an (N, C, *) or "
                         f"(C, *) input; got {n} dims to pad")
    for i in range(n):
        d, lo, hi = x.ndim - 1 - i, pad[2 * i], pad[2 * i + 1]
        size = x.shape[d]
        if size + min(lo, 0) + min(hi, 0) < 0 or (mode != "constant" and size + lo + hi < 0):
            raise ShapeError(f"{describe(op, input=x)}: padding ({lo}, {hi}) leaves dim {d} of size {size} negative")
        if mode == "constant":
            x = x.narrow(d, max(-lo, 0), size + min(lo, 0) + min(hi, 0))  # negative pads crop

            def side(k):
                return [full(x.shape[:d] + (k,) + x.shape[d + 1:], 0 if value is None else value, dtype=x.dtype,
                             device=x._device)] if k > 0 else []
            x = cat(side(lo) + [x] + side(hi), d) if lo > 0 or hi > 0 else x
            continue
        if {"reflect": max(lo, hi) >= size, "circular": max(lo, hi) > size, "replicate": size == 0 < max(lo, hi)}[mode]:
            raise ArgumentError(f"{describe(op, input=x)}: {mode} padding ({lo}, {hi}) is too large for dim {d} "
                                f"of size {size} (reflect: < size, circular: <= size, replicate: a non-empty dim)")
        j = np.arange(-lo, size + hi)
        x = _index(x, d, {"reflect": lambda: (size - 1) - np.abs((size - 1) - np.abs(j)),
                          "replicate": lambda: np.clip(j, 0, size - 1), "circular": lambda: j % size}[mode]())
    return x


_LINEAR_MODES = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}


def _source_matrix(mode, n_in, n_out, scale, align_corners):
    """(n_in, n_out) weights of one dim of a linear / cubic resampling, PyTorch's source positions."""
    j = np.arange(n_out, dtype=np.float64)
    if align_corners:
        src = j * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    else:
        src = (j + 0.5) * (1.0 / scale if scale else n_in / n_out) - 0.5
        src = src if mode == "bicubic" else np.maximum(src, 0.0)
    i0 = np.floor(src)
    t, i0 = src - i0, i0.astype(np.int64)
    if mode == "bicubic":  # Keys' cubic convolution, a = -0.75 (PyTorch's)
        a = -0.75

        def near(s):
            return ((a + 2) * s - (a + 3)) * s * s + 1

        def far(s):
            return ((a * s - 5 * a) * s + 8 * a) * s - 4 * a
        taps = [(i0 - 1, far(t + 1)), (i0, near(t)), (i0 + 1, near(1 - t)), (i0 + 2, far(2 - t))]
    else:
        taps = [(i0, 1 - t), (i0 + 1, t)]
    w = np.zeros((n_in, n_out))
    for i, wt in taps:  # taps past an edge read the edge (PyTorch clamps the index)
        np.add.at(w, (np.clip(i, 0, n_in - 1), np.arange(n_out)), wt)
    return w


def _nearest_source(mode, n_in, n_out, scale):
    """Source index of each output position (PyTorch's float32 rule)."""
    if mode == "nearest" and n_out in (n_in, 2 * n_in):
        return np.arange(n_out) * n_in // n_out
    r = np.float32(1.0 / scale if scale else n_in / n_out)
    j = np.arange(n_out, dtype=np.float32) + np.float32(0.5 if mode == "nearest-exact" else 0.0)
    return np.minimum(np.floor(j * r).astype(np.int64), n_in - 1)


def interpolate(input, size=None, scale_factor=None, mode: str = "nearest", align_corners=None,
                recompute_scale_factor=None, antialias: bool = False):
    """Resample the spatial dims of an (N, C, d1[, d2[, d3]]) input to `size` or by `scale_factor`;
    mode 'nearest', 'nearest-exact', 'linear', 'bilinear', 'bicubic', 'trilinear' or 'area'.

    >>> import tensorlite as tl; tl.nn.functional.interpolate(tl.tensor([[[0.0, 2.0]]]), size=4, mode="linear").tolist()
    [[[0.0, 0.5, 1.5, 2.0]]]"""
    x, op = input, "interpolate"
    nd = x.ndim - 2 if isinstance(x, Tensor) else 0
    if not 1 <= nd <= 3:
        raise ShapeError(f"{describe(op, input=x)}: expected an (N, C, d1[, d2[, d3]]) input")
    if mode not in ("nearest", "nearest-exact", "area") + tuple(_LINEAR_MODES):
        raise ArgumentError(f"interpolate: unknown mode {mode!r}")
    if _LINEAR_MODES.get(mode, nd) != nd:
        raise ShapeError(f"{describe(op, input=x)}: mode {mode!r} needs a {_LINEAR_MODES[mode] + 2}-D input")
    if align_corners is not None and mode not in _LINEAR_MODES:
        raise ArgumentError(f"interpolate: align_corners can only be set with the interpolating modes "
                            f"linear | bilinear | bicubic | trilinear, not {mode!r}")
    if antialias:
        raise ArgumentError("interpolate: antialias=True is not supported")
    if (size is None) == (scale_factor is None):
        raise ArgumentError("interpolate: give exactly one of size and scale_factor")
    seq = size if size is not None else scale_factor
    seq = tuple(seq) if isinstance(seq, (tuple, list)) else (seq,) * nd
    if len(seq) != nd:
        raise ArgumentError(f"{describe(op, input=x)}: size / scale_factor needs {nd} values, got {seq!r}")
    if size is not None:
        out, scales = seq, (None,) * nd
    else:
        if not all(isinstance(f, (int, float)) and math.isfinite(f) and f > 0 for f in seq):
            raise ArgumentError(f"interpolate: scale_factor must be positive finite numbers, got {scale_factor!r}")
        out = tuple(int(math.floor(float(n) * f)) for n, f in zip(x.shape[2:], seq))
        scales = (None,) * nd if recompute_scale_factor else seq
    if not all(isinstance(o, int) and o >= 1 for o in out):
        raise ArgumentError(f"{describe(op, input=x)}: output size {out!r} must be positive ints")
    if mode == "area":
        return _adaptive("interpolate", x, out, nd, "avg")
    if mode in ("nearest", "nearest-exact"):
        src = [_nearest_source(mode, n, o, s) for n, o, s in zip(x.shape[2:], out, scales)]
        if nd == 2 and x.dtype.is_floating_point and all(
                np.array_equal(i, np.arange(o) * n // o) for i, o, n in zip(src, out, x.shape[2:])):
            return upsample_nearest2d(x, size=out)  # the fused kernel takes the case
        for k, idx in enumerate(src):
            x = _index(x, 2 + k, idx)
        return x
    if not x.dtype.is_floating_point:
        raise DTypeError(f"{describe(op, input=x)}: mode {mode!r} needs a floating point input")
    y = _up(x)
    for k, (n, o, s) in enumerate(zip(x.shape[2:], out, scales)):
        y = _matrix_along(y, 2 + k, _source_matrix(mode, n, o, s, bool(align_corners)))
    return y._cast(x.dtype)


def upsample(input, size=None, scale_factor=None, mode: str = "nearest", align_corners=None):
    """Deprecated alias of interpolate (as PyTorch's, with its warning).

    >>> import tensorlite as tl; tl.nn.functional.upsample(tl.ones(1, 1, 1), 2).shape
    (1, 1, 2)"""
    warnings.warn("upsample is deprecated, use interpolate", UserWarning, stacklevel=2)
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    """Deprecated: interpolate(..., mode='nearest').

    >>> import tensorlite as tl; tl.nn.functional.upsample_nearest(tl.ones(1, 1, 1), 2).shape
    (1, 1, 2)"""
    warnings.warn("upsample_nearest is deprecated, use interpolate", UserWarning, stacklevel=2)
    return interpolate(input, size, scale_factor, "nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """Deprecated: interpolate(..., mode='bilinear', align_corners=True).

    >>> import tensorlite as tl; tl.nn.functional.upsample_bilinear(tl.ones(1, 1, 1, 1), 2).shape
    (1, 1, 2, 2)"""
    warnings.warn("upsample_bilinear is deprecated, use interpolate", UserWarning, stacklevel=2)
    return interpolate(input, size, scale_factor, "bilinear", True)


# ---- pooling -------------------------------------------------------------------------

def _adaptive(op, x, output_size, nd, kind):
    """Adaptive average / max pooling over the last nd dims, one dim at a time (both separate):
    output o of a dim covers inputs [floor(o n / m), ceil((o + 1) n / m))."""
    if not isinstance(x, Tensor) or x.ndim not in (nd + 1, nd + 2):
        raise ShapeError(f"{describe(op, input=x)}: expected an (N, C, ...) or (C, ...) input with {nd} pooled dims")
    out = tuple(output_size) if isinstance(output_size, (tuple, list)) else (output_size,) * nd
    out = tuple(n if o is None else o for o, n in zip(out, x.shape[-nd:]))
    if len(out) != nd or not all(isinstance(o, int) and o >= 1 for o in out) or 0 in x.shape[-nd:]:
        raise ArgumentError(f"{describe(op, input=x)}: output_size must be {nd} positive ints (or None) over "
                            f"non-empty dims, got {output_size!r}")
    if kind == "avg" and not x.dtype.is_floating_point:
        raise DTypeError(f"{describe(op, input=x)}: average pooling needs a floating point input")
    y = _up(x) if kind == "avg" else x
    for k, m in enumerate(out):
        d, n = x.ndim - nd + k, x.shape[x.ndim - nd + k]
        o = np.arange(m)
        lo, hi = o * n // m, -(-(o + 1) * n // m)
        if kind == "avg":
            w = np.zeros((n, m))
            for i in range(m):
                w[lo[i]:hi[i], i] = 1.0 / (hi[i] - lo[i])
            y = _matrix_along(y, d, w)
        else:  # the running maximum of the window's j-th elements (short windows repeat their last)
            z = _index(y, d, lo)
            for j in range(1, int((hi - lo).max())):
                z = maximum(z, _index(y, d, np.minimum(lo + j, hi - 1)))
            y = z
    return y._cast(x.dtype)


def _no_indices(op, return_indices):
    if return_indices:
        raise ArgumentError(f"{op}: return_indices=True is not supported")


def adaptive_avg_pool1d(input, output_size):
    """Average over adaptive windows of the last dim to `output_size` positions.

    >>> import tensorlite as tl; tl.nn.functional.adaptive_avg_pool1d(tl.tensor([[[1.0, 2.0, 3.0, 4.0]]]), 2).tolist()
    [[[1.5, 3.5]]]"""
    return _adaptive("adaptive_avg_pool1d", input, output_size, 1, "avg")


def adaptive_avg_pool2d(input, output_size):
    """Average over adaptive windows of the last 2 dims to output_size (h, w) (an int: square).

    >>> import tensorlite as tl; tl.nn.functional.adaptive_avg_pool2d(tl.ones(1, 1, 3, 3), 1).tolist()
    [[[[1.0]]]]"""
    return _adaptive("adaptive_avg_pool2d", input, output_size, 2, "avg")


def adaptive_avg_pool3d(input, output_size):
    """Average over adaptive windows of the last 3 dims.

    >>> import tensorlite as tl; tl.nn.functional.adaptive_avg_pool3d(tl.ones(1, 2, 2, 2), 1).shape
    (1, 1, 1, 1)"""
    return _adaptive("adaptive_avg_pool3d", input, output_size, 3, "avg")


def adaptive_max_pool1d(input, output_size, return_indices: bool = False):
    """Maximum over adaptive windows of the last dim.

    >>> import tensorlite as tl; tl.nn.functional.adaptive_max_pool1d(tl.tensor([[[1.0, 5.0, 3.0, 4.0]]]), 2).tolist()
    [[[5.0, 4.0]]]"""
    _no_indices("adaptive_max_pool1d", return_indices)
    return _adaptive("adaptive_max_pool1d", input, output_size, 1, "max")


def adaptive_max_pool2d(input, output_size, return_indices: bool = False):
    """Maximum over adaptive windows of the last 2 dims.

    >>> import tensorlite as tl; tl.nn.functional.adaptive_max_pool2d(tl.arange(4.0).reshape(1, 1, 2, 2), 1).tolist()
    [[[[3.0]]]]"""
    _no_indices("adaptive_max_pool2d", return_indices)
    return _adaptive("adaptive_max_pool2d", input, output_size, 2, "max")


def adaptive_max_pool3d(input, output_size, return_indices: bool = False):
    """Maximum over adaptive windows of the last 3 dims.

    >>> import tensorlite as tl; tl.nn.functional.adaptive_max_pool3d(tl.arange(8.0).reshape(1, 2, 2, 2), 1).tolist()
    [[[[7.0]]]]"""
    _no_indices("adaptive_max_pool3d", return_indices)
    return _adaptive("adaptive_max_pool3d", input, output_size, 3, "max")


def _pool1d(fn, op, input, kernel_size, stride, padding, *rest):
    """A 1-d pool as the 2-d one over (N, C, 1, L)."""
    if not isinstance(input, Tensor) or input.ndim not in (2, 3):
        raise ShapeError(f"{describe(op, input=input)}: expected an (N, C, L) or (C, L) input")

    def one(v):
        return v[0] if isinstance(v, (tuple, list)) and len(v) == 1 else v
    x = (input if input.ndim == 3 else input.unsqueeze(0)).unsqueeze(2)
    y = fn(x, (1, one(kernel_size)), None if stride is None else (1, one(stride)), (0, one(padding)), *rest).squeeze(2)
    return y if input.ndim == 3 else y.squeeze(0)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True):
    """Average pooling over the last dim of an (N, C, L) or (C, L) input.

    >>> import tensorlite as tl; tl.nn.functional.avg_pool1d(tl.tensor([[[1.0, 3.0, 5.0, 7.0]]]), 2).tolist()
    [[[2.0, 6.0]]]"""
    return _pool1d(avg_pool2d, "avg_pool1d", input, kernel_size, stride, padding, ceil_mode, count_include_pad)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):
    """Max pooling over the last dim of an (N, C, L) or (C, L) input.

    >>> import tensorlite as tl; tl.nn.functional.max_pool1d(tl.tensor([[[1.0, 3.0, 5.0, 2.0]]]), 2).tolist()
    [[[3.0, 5.0]]]"""
    _no_indices("max_pool1d", return_indices)
    one = dilation[0] if isinstance(dilation, (tuple, list)) else dilation
    return _pool1d(max_pool2d, "max_pool1d", input, kernel_size, stride, padding, (1, one), ceil_mode)


# ---- group / instance normalisation --------------------------------------------------

def _affine_channels(y, weight, bias):
    shape = (1, y.shape[1]) + (1,) * (y.ndim - 2)
    y = y if weight is None else y * weight.reshape(shape)
    return y if bias is None else y + bias.reshape(shape)


def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    """Normalise each of num_groups channel groups of an (N, C, *) input over its channels and
    positions, then scale and shift per channel (the fused layer_norm over each group).

    >>> import tensorlite as tl; tl.nn.functional.group_norm(tl.tensor([[1.0, 3.0]]), 1).round().tolist()
    [[-1.0, 1.0]]"""
    x = input
    if not isinstance(x, Tensor) or x.ndim < 2 or not isinstance(num_groups, int) or num_groups < 1 \
            or x.shape[1] % num_groups:
        raise ShapeError(f"{describe('group_norm', input=x)}: expected an (N, C, *) input with C divisible by "
                         f"num_groups={num_groups!r}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != (x.shape[1],):
            raise ShapeError(f"{describe('group_norm', input=x, **{name: t})}: {name} must have shape ({x.shape[1]},)")
    n = x.shape[0]
    g = x.reshape(n, num_groups, prod(x.shape[1:]) // num_groups)
    return _affine_channels(layer_norm(g, (g.shape[-1],), eps=eps).reshape(x.shape), weight, bias)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats: bool = True, momentum: float = 0.1, eps: float = 1e-5):
    """Normalise each channel of each sample of an (N, C, *) input over its positions; with
    running statistics, as batch_norm of the (1, N * C, *) input (their update averaged over N).

    >>> import tensorlite as tl; tl.nn.functional.instance_norm(tl.tensor([[[1.0, 3.0]]])).round().tolist()
    [[[-1.0, 1.0]]]"""
    x = input
    if not isinstance(x, Tensor) or x.ndim < 3:
        raise ShapeError(f"{describe('instance_norm', input=x)}: expected an (N, C, *) input with positions")
    if use_input_stats and running_mean is None and running_var is None:
        return group_norm(x, x.shape[1], weight, bias, eps)
    n, c = x.shape[:2]

    def per_sample(t):
        return None if t is None else t.unsqueeze(0).expand(n, c).reshape(n * c)
    rm, rv = per_sample(running_mean), per_sample(running_var)
    y = batch_norm(x.reshape((1, n * c) + x.shape[2:]), rm, rv, per_sample(weight), per_sample(bias),
                   use_input_stats, momentum, eps)
    if use_input_stats:
        with no_grad():
            for stat, rows in ((running_mean, rm), (running_var, rv)):
                if stat is not None:
                    stat.copy_(rows.reshape(n, c).mean(0))
    return y.reshape(x.shape)


# ---- more activations ----------------------------------------------------------------

def elu(input, alpha: float = 1.0, inplace: bool = False):
    """input where > 0, else alpha * (exp(input) - 1).

    >>> import tensorlite as tl; tl.nn.functional.elu(tl.tensor([0.0, 2.0])).tolist()
    [0.0, 2.0]"""
    return _out(input, input.elu(alpha), inplace)


def selu(input, inplace: bool = False):
    """scale * elu(input, alpha) with the self-normalising constants.

    >>> import tensorlite as tl; round(tl.nn.functional.selu(tl.tensor([1.0])).item(), 4)
    1.0507"""
    return _out(input, input.elu(1.6732632423543772848170429916717) * 1.0507009873554804934193349852946, inplace)


def celu(input, alpha: float = 1.0, inplace: bool = False):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)).

    >>> import tensorlite as tl; tl.nn.functional.celu(tl.tensor([3.0])).tolist()
    [3.0]"""
    if alpha == 0:
        raise ArgumentError("celu: alpha must not be 0")
    return _out(input, (input / alpha).elu(1.0) * alpha, inplace)


def leaky_relu(input, negative_slope: float = 0.01, inplace: bool = False):
    """input where > 0, else negative_slope * input.

    >>> import tensorlite as tl; tl.nn.functional.leaky_relu(tl.tensor([-2.0, 2.0]), 0.5).tolist()
    [-1.0, 2.0]"""
    return _out(input, where(input > 0, input, input * negative_slope), inplace)


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
    slope = rand(input.shape, dtype=_dt.float32, device=input._device) * (upper - lower) + lower
    return _out(input, where(input >= 0, input, input * slope._cast(input.dtype)), inplace)


def hardtanh(input, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
    """input clamped to [min_val, max_val].

    >>> import tensorlite as tl; tl.nn.functional.hardtanh(tl.tensor([-2.0, 0.5, 2.0])).tolist()
    [-1.0, 0.5, 1.0]"""
    if min_val > max_val:
        raise ArgumentError(f"hardtanh: min_val {min_val} cannot be greater than max_val {max_val}")
    return _out(input, input.clamp(min_val, max_val), inplace)


def relu6(input, inplace: bool = False):
    """min(max(input, 0), 6).

    >>> import tensorlite as tl; tl.nn.functional.relu6(tl.tensor([-1.0, 7.0])).tolist()
    [0.0, 6.0]"""
    return hardtanh(input, 0.0, 6.0, inplace)


def hardsigmoid(input, inplace: bool = False):
    """relu6(input + 3) / 6.

    >>> import tensorlite as tl; tl.nn.functional.hardsigmoid(tl.tensor([0.0, 4.0])).tolist()
    [0.5, 1.0]"""
    return _out(input, (input + 3.0).clamp(0.0, 6.0) / 6.0, inplace)


def hardswish(input, inplace: bool = False):
    """input * relu6(input + 3) / 6.

    >>> import tensorlite as tl; tl.nn.functional.hardswish(tl.tensor([-4.0, 4.0])).tolist()
    [-0.0, 4.0]"""
    return _out(input, input * (input + 3.0).clamp(0.0, 6.0) / 6.0, inplace)


def softplus(input, beta: float = 1.0, threshold: float = 20.0):
    """log(1 + exp(beta * input)) / beta, linear where beta * input > threshold.

    >>> import tensorlite as tl; round(tl.nn.functional.softplus(tl.tensor([0.0])).item(), 4)
    0.6931"""
    return where(input * beta > threshold, input, _softplus(input * beta) / beta)


def logsigmoid(input):
    """log(sigmoid(input)), stable for large |input|.

    >>> import tensorlite as tl; round(tl.nn.functional.logsigmoid(tl.tensor([0.0])).item(), 4)
    -0.6931"""
    return -_softplus(-input)


def mish(input, inplace: bool = False):
    """input * tanh(softplus(input)).

    >>> import tensorlite as tl; tl.nn.functional.mish(tl.tensor([0.0])).tolist()
    [0.0]"""
    return _out(input, input * _softplus(input).tanh(), inplace)


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
    _check_positive("softshrink", "lambd", lambd, zero_ok=True)
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
    return _out(input, where(input > threshold, input, value), inplace)


def glu(input, dim: int = -1):
    """a * sigmoid(b) of the two halves a, b of input along dim.

    >>> import tensorlite as tl; tl.nn.functional.glu(tl.tensor([2.0, 0.0])).tolist()
    [1.0]"""
    d = normalize_dim(dim, input.ndim, "glu", input)
    if input.shape[d] % 2:
        raise ShapeError(f"{describe('glu', input=input)}: halving dimension {d} must be even, got {input.shape[d]}")
    a, b = input.chunk(2, d)
    return a * b.sigmoid()


def softmin(input, dim=None, _stacklevel: int = 3, dtype=None):
    """softmax(-input) along dim (None: PyTorch's implicit choice, with its warning).

    >>> import tensorlite as tl; tl.nn.functional.softmin(tl.tensor([1.0, 1.0]), 0).tolist()
    [0.5, 0.5]"""
    if dim is None:
        warnings.warn("softmin: implicit dimension choice is deprecated, pass dim", UserWarning, stacklevel=_stacklevel)
        dim = 0 if input.ndim in (0, 1, 3) else 1
    return softmax(-(input if dtype is None else input._cast(_dt.get(dtype))), dim)


# ---- rearrangements ------------------------------------------------------------------

def pixel_shuffle(input, upscale_factor: int):
    """(*, C r^2, H, W) -> (*, C, H r, W r).

    >>> import tensorlite as tl; tl.nn.functional.pixel_shuffle(tl.arange(4.0).reshape(1, 4, 1, 1), 2).tolist()
    [[[[0.0, 1.0], [2.0, 3.0]]]]"""
    r = upscale_factor
    if not isinstance(r, int) or r < 1 or input.ndim < 3 or input.shape[-3] % (r * r):
        raise ShapeError(f"{describe('pixel_shuffle', input=input)}: expected (*, C * {r!r}^2, H, W)")
    *b, c, h, w = input.shape
    k = len(b)
    y = input.reshape(*b, c // (r * r), r, r, h, w).permute(*range(k), k, k + 3, k + 1, k + 4, k + 2)
    return y.reshape(*b, c // (r * r), h * r, w * r)


def pixel_unshuffle(input, downscale_factor: int):
    """(*, C, H r, W r) -> (*, C r^2, H, W), the inverse of pixel_shuffle.

    >>> import tensorlite as tl; tl.nn.functional.pixel_unshuffle(tl.ones(1, 1, 2, 2), 2).shape
    (1, 4, 1, 1)"""
    r = downscale_factor
    if not isinstance(r, int) or r < 1 or input.ndim < 3 or input.shape[-2] % r or input.shape[-1] % r:
        raise ShapeError(f"{describe('pixel_unshuffle', input=input)}: expected (*, C, H * {r!r}, W * {r!r})")
    *b, c, h, w = input.shape
    k = len(b)
    y = input.reshape(*b, c, h // r, r, w // r, r).permute(*range(k), k, k + 2, k + 4, k + 1, k + 3)
    return y.reshape(*b, c * r * r, h // r, w // r)


def _blocks(op, x, out_hw, kernel_size, dilation, padding, stride):
    """(kernel, dilation, padding, stride, (oh, ow) blocks) of unfold / fold, checked."""
    k, dl, p, s = (_ints(op, name, v, 2, low, input=x) for name, v, low in (
        ("kernel_size", kernel_size, 1), ("dilation", dilation, 1), ("padding", padding, 0), ("stride", stride, 1)))
    o = tuple((n + 2 * pp - d * (kk - 1) - 1) // ss + 1 for n, pp, d, kk, ss in zip(out_hw, p, dl, k, s))
    if min(o) < 1:
        raise ShapeError(f"{describe(op, input=x)}: the {tuple(out_hw)} plane holds no {k} block")
    return k, dl, p, s, o


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """The sliding blocks of an (N, C, H, W) or (C, H, W) input as columns (N, C * kh * kw, L) (im2col).

    >>> import tensorlite as tl; tl.nn.functional.unfold(tl.arange(4.0).reshape(1, 1, 2, 2), 1).tolist()
    [[[0.0, 1.0, 2.0, 3.0]]]"""
    x = input if input.ndim == 4 else input.unsqueeze(0)
    if input.ndim not in (3, 4):
        raise ShapeError(f"{describe('unfold', input=input)}: expected an (N, C, H, W) or (C, H, W) input")
    k, dl, p, s, (oh, ow) = _blocks("unfold", input, x.shape[2:], kernel_size, dilation, padding, stride)
    x = pad(x, (p[1], p[1], p[0], p[0]))
    cols = [x[:, :, i * dl[0]:i * dl[0] + (oh - 1) * s[0] + 1:s[0], j * dl[1]:j * dl[1] + (ow - 1) * s[1] + 1:s[1]]
            for i in range(k[0]) for j in range(k[1])]
    out = stack(cols, 2).reshape(x.shape[0], x.shape[1] * k[0] * k[1], oh * ow)
    return out if input.ndim == 4 else out.squeeze(0)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """The inverse arrangement of unfold (overlapping values sum): (N, C * kh * kw, L) -> (N, C, H, W).

    >>> import tensorlite as tl; tl.nn.functional.fold(tl.ones(1, 4, 4), (3, 3), 2).squeeze().tolist()[1]
    [2.0, 4.0, 2.0]"""
    x = input if input.ndim == 3 else input.unsqueeze(0)
    hw = _ints("fold", "output_size", output_size, 2, 1, input=input)
    k, dl, p, s, (oh, ow) = _blocks("fold", input, hw, kernel_size, dilation, padding, stride)
    if input.ndim not in (2, 3) or x.shape[1] % (k[0] * k[1]) or x.shape[2] != oh * ow:
        raise ShapeError(f"{describe('fold', input=input)}: expected (N, C * {k[0] * k[1]}, {oh * ow}) blocks of "
                         f"the {hw} output")
    n, c, (hp, wp) = x.shape[0], x.shape[1] // (k[0] * k[1]), (hw[0] + 2 * p[0], hw[1] + 2 * p[1])
    blocks = x.reshape(n, c, k[0] * k[1], oh, ow)
    out = None
    for i in range(k[0]):
        for j in range(k[1]):  # each kernel offset adds its (oh, ow) values at a strided window of the plane
            rows = _embed(blocks[:, :, i * k[1] + j], (n, c, hp, ow), 2, i * dl[0], s[0])
            part = _embed(rows, (n, c, hp, wp), 3, j * dl[1], s[1])
            out = part if out is None else out + part
    out = out[:, :, p[0]:p[0] + hw[0], p[1]:p[1] + hw[1]]
    return out if input.ndim == 3 else out.squeeze(0)
