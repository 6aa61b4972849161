"""Scaled dot-product attention (the fused flash / GEMM kernels and their composite
reference) and the causal masks, as torch.nn.functional.scaled_dot_product_attention."""
from __future__ import annotations

import math

from ... import amp
from ... import dtype as dtypes
from ...autograd import is_grad_enabled
from ...backend import sdpa_layout
from ...custom_op import custom_op, result, storage_and_layout
from ...errors import ArgumentError, DTypeError, ShapeError, describe
from ...layout import broadcast_shapes
from ...ops.creation import arange
from ...ops.elementwise import where
from ...tensor import Tensor
from .common import check_like, floating
from .regularization import dropout


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
        elif attn_mask.dtype is dtypes.bool_:
            attn_mask = attn_mask & keep
        else:
            attn_mask = where(keep, attn_mask, float("-inf"))
    if attn_mask is None:
        return None, kernel_causal
    if attn_mask.dtype is not dtypes.bool_:
        if not attn_mask.dtype.is_floating_point:
            raise DTypeError(f"{describe(op, query=q, attn_mask=attn_mask)}: attn_mask must be bool or float")
        attn_mask = attn_mask._cast(q.dtype)
    full = q.shape[:2] + (L, S)
    if broadcast_shapes(attn_mask.shape, full) != full:
        raise ShapeError(f"{describe(op, query=q, key=k, attn_mask=attn_mask)}: attn_mask must broadcast to "
                         f"{tuple(full)}")
    return attn_mask.broadcast_to(full), kernel_causal


def _repeat_kv(t, groups):
    """(b, hk, S, d) -> (b, hk * groups, S, d): query head h reads kv head h // groups."""
    if groups == 1:
        return t
    b, h, s, d = t.shape
    return t.unsqueeze(2).expand(b, h, groups, s, d).reshape(b, h * groups, s, d)


def attention_probs(q, kx, mask, scale, causal):
    """softmax(q k^T * scale + mask) with fully-masked rows giving zeros (as the kernels do)."""
    scores = (q @ kx.mT) * scale
    keep = causal_mask(q.shape[-2], kx.shape[-2], device=q._device) if causal else None
    if mask is not None:
        if mask.dtype is dtypes.bool_:
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
    q, k, v = (floating(t) if t.ndim == 4 else floating(t).unsqueeze(0) for t in (query, key, value))
    hq, hk = q.shape[1], k.shape[1]
    if (q.shape[0], q.shape[3]) != (k.shape[0], k.shape[3]) or k.shape[:3] != v.shape[:3] \
            or hk == 0 or hq % hk:
        raise ShapeError(f"{describe(op, query=query, key=key, value=value)}: batch/head/length dims do not match "
                         "(query heads must be a multiple of key/value heads)")
    check_like(op, q, key=k, value=v)
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
    query, key, value = amp.low_precision(query, key, value)
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
        p = attention_probs(q, kx, mask, scale, causal)
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
    p = attention_probs(q, _repeat_kv(k, groups), mask, scale, causal)
    out = dropout(p, dropout_p) @ _repeat_kv(v, groups)
    return out if query.ndim == 4 else out.squeeze(0)
