"""CpuStorage's scaled dot-product attention and its backward (GQA, causal, masks), the batch
split over the cores. A mixin (storage.py)."""
from __future__ import annotations

import math

import numpy as np

from tensorlite import dtype as dtypes
from tensorlite.backend import sdpa_layout, sdpa_mode
from tensorlite.errors import ShapeError, storage_error

from .common import row_dot
from .parallel import batch_shares, in_parallel


class AttentionOps:
    __slots__ = ()  # a mixin of CpuStorage (storage.py), which holds the data: self is a CpuStorage

    def _sdpa_operands(self, op, layout, k, k_layout, v, v_layout, mask, mask_layout, scale):
        """(q, k, v, the mask as an array or None, scale, GQA group size) in the compute dtype."""
        q = self._float_read(op, layout)
        kk, vv = k._read(k_layout, compute=True), v._read(v_layout, compute=True)
        hq, hk = q.shape[1], kk.shape[1]
        if hk == 0 or hq % hk:
            raise storage_error(ShapeError, "sdpa", "query heads must be a multiple of key/value heads",
                                q=(self, layout), k=(k, k_layout), v=(v, v_layout))
        m = None if mask is None else mask._read(mask_layout, compute=True)
        return q, kk, vv, m, 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale, hq // hk

    def sdpa(self, layout, k, k_layout, v, v_layout, mask, mask_layout, scale, is_causal, return_lse=False):
        mode = sdpa_mode()  # read (and validated) on every device, though the cpu has no kernels
        q, kk, vv, m, scale, groups = self._sdpa_operands("sdpa", layout, k, k_layout, v, v_layout, mask,
                                                          mask_layout, scale)
        out = np.empty(q.shape[:-1] + vv.shape[-1:], q.dtype)
        lse = np.empty(q.shape[:-1], q.dtype)

        def rows(lo, hi):
            def task():
                out[lo:hi], lse[lo:hi] = _sdpa_forward(q[lo:hi], kk[lo:hi], vv[lo:hi], _batch_rows(m, lo, hi, len(q)),
                                                       scale, is_causal, groups)
            return task
        scores = q.size * kk.shape[2] // max(1, q.shape[-1])
        in_parallel([rows(lo, hi) for lo, hi in batch_shares(q.shape[0], scores)])
        out = self._new_in(out, sdpa_layout(layout, vv.shape[-1]))
        if not return_lse:
            return out
        if mode == "gemm":  # the switch forces the composite backward everywhere
            return out, None
        return out, self._new(lse, dtypes.float64 if self.dtype is dtypes.float64 else dtypes.float32)

    def sdpa_backward(self, layout, k, k_layout, v, v_layout, out, out_layout, grad, grad_layout, lse, mask,
                      mask_layout, scale, is_causal):
        # in the compute dtype (f32 for f32/f16/bf16, as lse), the reference the fused GPU backward is held to
        q, kk, vv, m, scale, groups = self._sdpa_operands("sdpa_backward", layout, k, k_layout, v, v_layout, mask,
                                                          mask_layout, scale)
        b, hq, L, d = q.shape
        if grad.dtype is not self.dtype or out.dtype is not self.dtype or lse.data.size != b * hq * L \
                or tuple(out_layout.shape) != (b, hq, L, vv.shape[-1]) or grad_layout.shape != out_layout.shape:
            raise storage_error(ShapeError, "sdpa_backward", "out and grad must be (b, hq, L, dv) of q's dtype, "
                                "lse (b, hq, L) as sdpa(return_lse=True) returned it",
                                q=(self, layout), out=(out, out_layout), grad=(grad, grad_layout))
        o, g = (st._read(lay, compute=True) for st, lay in ((out, out_layout), (grad, grad_layout)))
        row_lse = lse.data.astype(q.dtype, copy=False).reshape(b, hq, L, 1)
        dq, dk, dv = np.empty(q.shape, q.dtype), np.empty(kk.shape, q.dtype), np.empty(vv.shape, q.dtype)

        def rows(lo, hi):
            def task():
                dq[lo:hi], dk[lo:hi], dv[lo:hi] = _sdpa_backward(
                    q[lo:hi], kk[lo:hi], vv[lo:hi], o[lo:hi], g[lo:hi], row_lse[lo:hi],
                    _batch_rows(m, lo, hi, b), scale, is_causal, groups)
            return task
        in_parallel([rows(lo, hi) for lo, hi in batch_shares(b, q.size * kk.shape[2] // max(1, d))])
        return (self._new_in(dq, sdpa_layout(layout)), self._new_in(dk, sdpa_layout(k_layout)),
                self._new_in(dv, sdpa_layout(v_layout)))


def _batch_rows(m, lo, hi, b):
    """The mask's rows for batch entries [lo, hi) (a mask broadcast over the batch: all of it)."""
    return m if m is None or m.ndim < 4 or m.shape[0] != b else m[lo:hi]


def _sdpa_scores(q, kk, m, scale, is_causal, groups):
    """Scaled, masked scores (b, hq, L, S) with -inf where dropped (m: the mask array or None)."""
    if groups > 1:
        kk = np.repeat(kk, groups, axis=1)  # GQA
    scores = q @ kk.swapaxes(-1, -2)
    scores *= scale
    keep = np.tri(*scores.shape[-2:], dtype=bool) if is_causal else None  # top-left aligned: i sees j <= i
    if m is not None:
        if m.dtype == np.bool_:
            keep = m if keep is None else keep & m
        else:
            scores = scores + m
    if keep is not None:
        np.copyto(scores, -np.inf, where=~keep)  # in place (np.where's copy is slower)
    return scores


def _sdpa_forward(q, kk, vv, m, scale, is_causal, groups):
    """(softmax(scores) @ v, logsumexp of each row) over a batch share; 0 and -inf for a row
    whose keys are all masked (torch returns zeros there)."""
    scores = _sdpa_scores(q, kk, m, scale, is_causal, groups)
    vv = np.repeat(vv, groups, axis=1) if groups > 1 else vv
    row_max = scores.max(axis=-1, keepdims=True, initial=-np.inf)  # initial: S may be 0
    dead = np.isneginf(row_max)
    with np.errstate(invalid="ignore", divide="ignore"):
        scores -= np.where(dead, 0, row_max)
        p = np.exp(scores, out=scores)
        total = p.sum(axis=-1, keepdims=True)
        p /= np.where(dead, 1, total)
        lse = np.where(dead, -np.inf, row_max + np.log(np.where(dead, 1, total)))[..., 0]
    return p @ vv, lse


def _sdpa_backward(q, kk, vv, o, g, row_lse, m, scale, is_causal, groups):
    """(dq, dk, dv) over a batch share, p recomputed from the scores and the forward's logsumexp."""
    scores = _sdpa_scores(q, kk, m, scale, is_causal, groups)
    with np.errstate(invalid="ignore"):
        scores -= np.where(np.isneginf(row_lse), np.inf, row_lse)  # dead rows (lse -inf): p = 0, no gradient
        p = np.exp(scores, out=scores)
    kx, vx = (np.repeat(t, groups, axis=1) if groups > 1 else t for t in (kk, vv))
    ds = g @ vx.swapaxes(-1, -2)
    ds -= row_dot(g, o)
    ds *= p  # through the softmax
    ds *= scale
    dq = ds @ kx
    dkx, dvx = ds.swapaxes(-1, -2) @ q, p.swapaxes(-1, -2) @ g

    def per_kv_head(t):  # the query heads that share a kv head add their gradients
        return t.reshape(t.shape[0], t.shape[1] // groups, groups, *t.shape[2:]).sum(2)
    return dq, per_kv_head(dkx), per_kv_head(dvx)
