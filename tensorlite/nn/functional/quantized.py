"""Weight-only int8: per-output-channel symmetric quantization of a linear layer's weight and the
product with it (gpt-fast's int8 weight-only scheme: activations stay in their float dtype).
Decoding streams every weight once per token, so int8 weights halve (bf16) the bytes a step
reads; the GPU backend multiplies them without a dequantised copy (gemv.hip's gemv1_q8)."""
from __future__ import annotations

from ...autograd import is_grad_enabled
from ...custom_op import result, storage_and_layout
from ...dtype import int8
from ...errors import DTypeError, ShapeError, describe
from .common import as_rows

INT8_MAX = 127  # symmetric: -127..127, so that -w quantizes to -q


def quantize_per_channel_int8(weight):
    """(q, scale) with weight ~= q * scale[:, None]: q int8 (out, in), scale (out,) of weight's
    dtype, each row's largest magnitude mapped to 127 (an all-zero row quantizes to zeros)."""
    if weight.dim() != 2 or not weight.dtype.is_floating_point:
        raise ShapeError(f"{describe('quantize_per_channel_int8', weight=weight)}: expected a 2-D floating weight "
                         "(out_features, in_features)")
    w = weight.detach().float()
    amax = w.abs().amax(dim=1)
    scale = amax.clamp(min=1e-30) / INT8_MAX  # an all-zero row: q = 0, not 0 / 0
    q = (w / scale[:, None]).round().clamp(-INT8_MAX, INT8_MAX).to(int8)
    return q, scale.to(weight.dtype)


def linear_int8(x, weight, scale, bias=None, *, residual=None):
    """x @ (weight * scale[:, None]).T + bias for an int8 weight (out, in) and its per-row scale
    (out,) of x's dtype, as F.linear with a dequantised weight; `residual` (the result's shape) is
    added too (a block's residual add after its last projection). Differentiable in x, bias and
    residual through the dequantised weight; without autograd one storage op (matmul_int8)."""
    if x.dim() < 1 or weight.dim() != 2 or x.shape[-1] != weight.shape[1] or scale.shape != (weight.shape[0],) or \
            (bias is not None and bias.shape != (weight.shape[0],)):
        raise ShapeError(f"{describe('linear_int8', input=x, weight=weight, scale=scale, bias=bias)}: expected input "
                         "(..., in_features), weight (out_features, in_features), scale and bias (out_features,)")
    if weight.dtype is not int8 or not x.dtype.is_floating_point or scale.dtype is not x.dtype or \
            (bias is not None and bias.dtype is not x.dtype):
        raise DTypeError(f"{describe('linear_int8', input=x, weight=weight, scale=scale, bias=bias)}: expected an int8 "
                         "weight, and a floating input with scale and bias of its dtype")
    shape = tuple(x.shape[:-1]) + (weight.shape[0],)
    if residual is not None and (tuple(residual.shape) != shape or residual.dtype is not x.dtype):
        raise ShapeError(f"{describe('linear_int8', input=x, weight=weight, residual=residual)}: expected a residual "
                         f"of the result's shape {shape} and the input's dtype")
    if (is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, bias, residual))) or \
            any(t is not None and t.device != x.device for t in (weight, scale, bias, residual)):
        y = x @ (weight.to(x.dtype) * scale[:, None]).mT  # autograd's path; device errors as matmul's
        y = y if bias is None else y + bias
        return y if residual is None else residual + y
    (xs, xl), (ws, wl), (ss, sl) = storage_and_layout(x), storage_and_layout(weight), storage_and_layout(scale)
    xs, xl = as_rows(xs, xl, x.dtype)
    add = None
    if residual is not None and bias is None:  # the add in the product's store
        add = as_rows(*storage_and_layout(residual), x.dtype)
    y = result(xs.matmul_int8(xl, ws, wl, ss, sl, *(add or (None, None))), shape, x.dtype)
    y = y if bias is None else y + bias
    return y if residual is None or add is not None else residual + y
