"""tensorlite's fused ops that PyTorch lacks: silu_mul (the gated MLP's product), and a
residual add or a projection fused with the norm next to it (add_rms_norm, add_layer_norm,
rms_norm_linear). Each is one kernel where it takes the case, else the ops it fuses."""
from __future__ import annotations

from ... import amp
from ... import dtype as dtypes
from ..._core import shape_arg
from ...autograd import attach_many, is_grad_enabled
from ...custom_op import result, storage_and_layout
from ...errors import DeviceError, DTypeError, ShapeError, describe
from ...ops.elementwise import binary
from ...tensor import Tensor
from .common import FINFO_EPS, as_rows, check_like, flatten_normalized, floating, reshaped
from .dense import linear
from .normalization import rms_norm
from .quantized import linear_int8


def silu_mul(gate, up):
    """silu(gate) * up in one kernel, rounded once: the gated MLP of Llama-style models
    (down(silu(gate(x)) * up(x))). Broadcasts as `*`; differentiable in both operands.

    >>> import tensorlite as tl; tl.nn.functional.silu_mul(tl.tensor([0.0, 1.0]), tl.tensor([3.0, 2.0])).tolist()
    [0.0, 1.4621171951293945]"""
    return binary("silu_mul", gate, up)


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
            or amp.is_autocast_enabled():
        total = input + residual
        return rms_norm(total, normalized_shape, weight, eps), total
    x2, (w,), n = flatten_normalized("add_rms_norm", input, normalized_shape, weight=weight)
    r2 = reshaped(floating(residual), x2.shape)
    check_like("add_rms_norm", x2, residual=r2)
    eps = FINFO_EPS[x2.dtype.name] if eps is None else float(eps)
    xs, xl = storage_and_layout(x2)
    total, normed = xs.add_rms_norm(xl, *storage_and_layout(r2), *storage_and_layout(w), eps)
    return (reshaped(result(normed, x2.shape, x2.dtype), input.shape),
            reshaped(result(total, x2.shape, x2.dtype), input.shape))


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
    input, weight, bias = amp.full_precision(input, weight, bias)  # autocast: the norm in float32
    if not isinstance(residual, Tensor) or tuple(input.shape) != tuple(residual.shape):
        raise ShapeError(f"{describe(op, input=input, residual=residual)}: input and residual must have one shape")
    if not (input.dtype.is_floating_point and residual.dtype.is_floating_point):
        raise DTypeError(f"{describe(op, input=input, residual=residual)}: input and residual must be floating point")
    sum_dt = dtypes.promote_types(input.dtype, residual.dtype)
    out_dt = sum_dt if dtype is None else dtypes.get(dtype)
    if not out_dt.is_floating_point:
        raise DTypeError(f"{describe(op, input=input)}: dtype must be a floating dtype, got {out_dt.name}")
    # x: the stream (the sum's dtype); r: the other addend, cast first unless a half type
    # added to a float32 stream (which the GPU kernels read as it is)
    x, r = (input, residual) if input.dtype is sum_dt else (residual, input)
    if r.dtype is not sum_dt and not (sum_dt is dtypes.float32 and r.dtype in dtypes.HALVES):
        r = r._cast(sum_dt)
    x2, (w, b), n = flatten_normalized(op, x, normalized_shape, weight=weight, bias=bias)
    r2 = reshaped(r, x2.shape)
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
    return reshaped(normed2, input.shape), reshaped(total2, input.shape)


def rms_norm_linear(input, normalized_shape, norm_weight, weight, bias=None, eps=None, gated: bool = False,
                    scale=None):
    """linear(rms_norm(input, normalized_shape, norm_weight, eps), weight, bias): a pre-norm
    block's RMSNorm and the projection after it. With `gated`, the projection's two halves g
    and u along the last dim give silu(g) * u (SwiGLU: weight is the gate's and the up
    projection's weights stacked). `scale`: weight is int8 with this per-row scale (weight-only
    int8: F.linear_int8). One kernel on GPUs for a single row without autograd (a decode step's
    q/k/v, gate/up and LM head: the norm's launch saved); otherwise the ops themselves. Not a
    PyTorch op.

    >>> import tensorlite as tl
    >>> x, w = tl.tensor([[3.0, 4.0]]), tl.tensor([[1.0, 0.0], [1.0, 1.0]])
    >>> [round(v, 4) for v in tl.nn.functional.rms_norm_linear(x, 2, None, w, eps=0.0)[0].tolist()]
    [0.8485, 1.9799]
    """
    op = "rms_norm_linear"
    if weight.ndim != 2 or input.ndim == 0 or input.shape[-1] != weight.shape[-1] or (gated and weight.shape[0] % 2) \
            or shape_arg((normalized_shape,), op, input) != (input.shape[-1],):
        raise ShapeError(f"{describe(op, input=input, weight=weight)}: expected input (..., in_features), "
                         f"normalized_shape (in_features,) and weight (out_features, in_features)"
                         f"{', out_features even (gated)' if gated else ''}")
    if bias is not None or is_grad_enabled() and any(t is not None and t.requires_grad
                                                     for t in (input, norm_weight, weight)) \
            or amp.is_autocast_enabled():
        h = rms_norm(input, normalized_shape, norm_weight, eps)
        y = linear(h, weight, bias) if scale is None else linear_int8(h, weight, scale, bias)
        return silu_mul(*y.chunk(2, -1)) if gated else y
    x2, (g,), _ = flatten_normalized(op, input, normalized_shape, weight=norm_weight)
    if scale is None:
        check_like(op, x2, weight=weight)
    elif weight.dtype is not dtypes.int8 or scale.dtype is not x2.dtype or scale.shape != (weight.shape[0],) or \
            weight.device != x2.device or scale.device != x2.device:
        raise DTypeError(f"{describe(op, input=input, weight=weight, scale=scale)}: with a scale, expected an int8 "
                         "weight and a scale (out_features,) of the input's dtype, on the input's device")
    eps = FINFO_EPS[x2.dtype.name] if eps is None else float(eps)
    (xs, xl), (ws, wl) = as_rows(*storage_and_layout(x2), x2.dtype), storage_and_layout(weight)
    n = weight.shape[0] // 2 if gated else weight.shape[0]
    y = xs.rms_norm_matmul(xl, *storage_and_layout(g), eps, ws, wl.transpose(0, 1), gated,
                           *(storage_and_layout(scale) if scale is not None else (None, None)))
    return result(y, x2.shape[:-1] + (n,), x2.dtype)
