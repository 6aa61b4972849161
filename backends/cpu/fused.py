"""CpuStorage's fused nn ops, computed in f32 (f64 for f64) and cast back: softmax, log_softmax,
layer_norm, rms_norm, rope, their backwards, cross-entropy and AdamW. A mixin (storage.py)."""
from __future__ import annotations

import math

import numpy as np

from tensorlite import dtype as dtypes
from tensorlite.backend import adam_bias_corrections, adam_state_dtype, check_adam_scalar, check_cross_entropy
from tensorlite.dtype import cast_array
from tensorlite.errors import ArgumentError, DTypeError, IndexOutOfRange, ShapeError, storage_error
from tensorlite.layout import Layout

from .common import row_dot, strided


def _normalized(x: np.ndarray, eps: float, center: bool):
    """(x_hat, rstd) of layer_norm (center) or rms_norm over the last dim: x_hat = (x - mean) *
    rstd a fresh array, rstd = 1 / sqrt(mean((x - mean)^2) + eps) of shape (..., 1)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        xc = x - x.mean(axis=-1, keepdims=True) if center else np.array(x)
        rstd = 1.0 / np.sqrt(row_dot(xc, xc) / x.shape[-1] + eps)
        xc *= rstd
    return xc, rstd


class FusedOps:
    __slots__ = ()  # a mixin of CpuStorage (storage.py), which holds the data: self is a CpuStorage

    def softmax_last_dim(self, layout):
        x = self._float_read("softmax_last_dim", layout)
        e = np.exp(x - x.max(axis=-1, keepdims=True)) if x.size else x
        return self._new(e / e.sum(axis=-1, keepdims=True))

    def log_softmax(self, layout):
        x = self._float_read("log_softmax", layout)
        if x.size:
            shifted = x - x.max(axis=-1, keepdims=True)
            x = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        return self._new(x)

    def layer_norm(self, layout, weight, w_layout, bias, b_layout, eps):
        y, _ = _normalized(self._float_read("layer_norm", layout), eps, True)
        if weight is not None:
            y *= weight._read(w_layout, compute=True)
        if bias is not None:
            y += bias._read(b_layout, compute=True)
        return self._new(y)

    def rms_norm(self, layout, weight, w_layout, eps):
        y, _ = _normalized(self._float_read("rms_norm", layout), eps, False)
        if weight is not None:
            y *= weight._read(w_layout, compute=True)
        return self._new(y)

    def rope(self, layout, cos, cos_layout, sin, sin_layout, variant):
        x = self._float_read(variant, layout)
        c, s = cos._read(cos_layout, compute=True), sin._read(sin_layout, compute=True)
        # cos/sin are (b, t, d/2): insert the head axis where x has it
        c, s = (c[:, :, None], s[:, :, None]) if variant == "rope_thd" else (c[:, None], s[:, None])
        half = x.shape[-1] // 2
        if variant == "rope_i":
            a, b = x[..., 0::2], x[..., 1::2]
            out = np.stack([a * c - b * s, a * s + b * c], axis=-1).reshape(x.shape)
        elif variant in ("rope", "rope_thd"):
            a, b = x[..., :half], x[..., half:]
            out = np.concatenate([a * c - b * s, b * c + a * s], axis=-1)
        else:
            raise ArgumentError(f"rope: unknown variant {variant!r}; expected 'rope', 'rope_i' or 'rope_thd'")
        return self._new(out)

    def softmax_last_dim_backward(self, layout, grad, grad_layout):
        y, g = self._grad_read("softmax_backward", layout, grad, grad_layout)
        return self._new(y * (g - (g * y).sum(axis=-1, keepdims=True)))

    def log_softmax_backward(self, layout, grad, grad_layout):
        y, g = self._grad_read("log_softmax_backward", layout, grad, grad_layout)
        return self._new(g - np.exp(y) * g.sum(axis=-1, keepdims=True))

    def _norm_backward(self, op, layout, grad, grad_layout, weight, w_layout, eps, center, weight_grad, bias_grad):
        x, g = self._grad_read(op, layout, grad, grad_layout)
        n = x.shape[-1]
        xhat, rstd = _normalized(x, eps, center)
        with np.errstate(invalid="ignore", divide="ignore"):
            gw = g if weight is None else g * weight._read(w_layout, compute=True)
            # dx = rstd * (gw - xhat * mean(gw * xhat) - mean(gw)), the last term for layer_norm only
            dx = np.multiply(xhat, row_dot(gw, xhat) / n)
            np.subtract(gw, dx, out=dx)
            if center:
                dx -= gw.mean(axis=-1, keepdims=True)
            dx *= rstd
        rows = math.prod(x.shape[:-1])  # not -1: a last dim of 0 leaves numpy nothing to infer
        dw = self._new(np.einsum("ij,ij->j", g.reshape(rows, n), xhat.reshape(rows, n))) if weight_grad else None
        db = self._new(g.reshape(rows, n).sum(0)) if bias_grad else None
        return self._new(dx), dw, db

    def layer_norm_backward(self, layout, grad, grad_layout, weight, w_layout, eps, weight_grad, bias_grad):
        return self._norm_backward("layer_norm_backward", layout, grad, grad_layout, weight, w_layout, eps, True,
                                   weight_grad, bias_grad)

    def rms_norm_backward(self, layout, grad, grad_layout, weight, w_layout, eps, weight_grad):
        return self._norm_backward("rms_norm_backward", layout, grad, grad_layout, weight, w_layout, eps, False,
                                   weight_grad, False)[:2]

    def rope_backward(self, layout, cos, cos_layout, sin, sin_layout, variant):
        neg = self._new(-sin._read(sin_layout, compute=True), sin.dtype)  # rotate by -theta
        return self.rope(layout, cos, cos_layout, neg, Layout.contiguous(sin_layout.shape), variant)

    def _ce_operands(self, op, layout, target, target_layout):
        """(x as (R, C) in the compute dtype, int64 targets (R,), the loss dtype)."""
        x = self._float_read(op, layout)
        check_cross_entropy(op, self, layout, target, target_layout)
        t = target._read(target_layout).reshape(-1)
        acc = dtypes.float64 if self.dtype is dtypes.float64 else dtypes.float32
        return x.reshape(math.prod(x.shape[:-1]), x.shape[-1]), t, acc

    def cross_entropy(self, layout, target, target_layout, weight, w_layout, ignore_index):
        x, t, acc = self._ce_operands("cross_entropy", layout, target, target_layout)
        n_cls = x.shape[1]
        ignored = t == ignore_index
        bad = ~ignored & ((t < 0) | (t >= n_cls))
        if bad.any():
            raise storage_error(IndexOutOfRange, "cross_entropy", f"target {int(t[bad][0])} is out of range for "
                                f"{n_cls} classes", self=(self, layout), target=(target, target_layout))
        if weight is not None and (weight.dtype is not self.dtype or tuple(w_layout.shape) != (n_cls,)):
            raise storage_error(ShapeError, "cross_entropy", f"weight must be ({n_cls},) of the logits' dtype",
                                self=(self, layout), weight=(weight, w_layout))
        safe = np.where(ignored, 0, t)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            m = x.max(axis=1, initial=-np.inf)
            lse = m + np.log(np.exp(x - m[:, None]).sum(axis=1))
            wt = np.ones(len(t), x.dtype) if weight is None else weight._read(w_layout, compute=True)[safe]
            wt = np.where(ignored, 0, wt).astype(x.dtype)
            picked = x[np.arange(len(t)), safe] if n_cls else np.zeros(len(t), x.dtype)
            loss = np.where(ignored, 0, wt * (lse - picked))
        return self._new(loss, acc), self._new(lse, acc), self._new(wt, acc)

    def cross_entropy_backward(self, layout, target, target_layout, lse, wt, grad, grad_layout):
        x, t, acc = self._ce_operands("cross_entropy_backward", layout, target, target_layout)
        if grad.dtype is not acc or lse.dtype is not acc or wt.dtype is not acc \
                or grad_layout.numel() != len(t) or lse.data.size != len(t) or wt.data.size != len(t):
            raise storage_error(DTypeError, "cross_entropy_backward", f"lse, wt and grad must be {acc.name} with one "
                                "value per row, as cross_entropy returned them", self=(self, layout),
                                grad=(grad, grad_layout))
        g = grad._read(grad_layout).reshape(-1)
        w = wt.data
        with np.errstate(invalid="ignore", over="ignore"):
            p = np.exp(x - lse.data[:, None])
            rows = np.nonzero(w != 0)[0]
            p[rows, t[rows]] -= 1  # ignored rows (wt 0) keep no onehot: their targets may be anything
            d = np.where((w != 0)[:, None], (g * w)[:, None] * p, 0)
        return self._new(d.reshape(layout.shape))

    def adamw_step(self, layout, grad, grad_layout, exp_avg, exp_avg_sq, max_exp_avg_sq, lr, betas, eps,
                   weight_decay, step, decoupled=True, maximize=False):
        p, g = self._grad_read("adamw_step", layout, grad, grad_layout)
        # capturable: the step count and lr are read from their memory at the update, as the kernel's
        lr, step = (check_adam_scalar("adamw_step", k, v, self, layout) for k, v in (("lr", lr), ("step", step)))
        lr, step = (float(v[0]._read(v[1]).reshape(-1)[0]) if isinstance(v, tuple) else v for v in (lr, step))
        sdt = adam_state_dtype(self.dtype)
        n = layout.numel()
        states = [exp_avg, exp_avg_sq] + ([max_exp_avg_sq] if max_exp_avg_sq is not None else [])
        if any(st.dtype is not sdt or st.data.size != n for st in states):
            raise storage_error(DTypeError, "adamw_step", f"state buffers must be {sdt.name} with {n} elements",
                                self=(self, layout), exp_avg=(exp_avg, Layout((exp_avg.data.size,))))
        a = sdt.np.type  # scalars round to the state dtype, as the kernel does
        # In place, one scratch buffer: each line rounds as the out-of-place formula beside it did
        # (a step over many small parameters is otherwise mostly fresh temporaries).
        in_place = self.dtype is sdt and layout.is_contiguous()
        p = strided(self.data, layout, writeable=True).reshape(-1) if in_place else p.astype(sdt.np).reshape(-1)
        g = g.reshape(-1)
        b1, b2 = betas
        step_size, bc2_sqrt = adam_bias_corrections(lr, betas, step)
        w1 = a(1.0 - b1)
        m, v = exp_avg.data, exp_avg_sq.data
        tmp = np.empty(n, sdt.np)
        with np.errstate(all="ignore"):
            if maximize or (weight_decay and not decoupled):
                g = g.astype(sdt.np)  # a copy: the gradient itself stays as it is
                if maximize:
                    np.negative(g, out=g)
                if weight_decay and not decoupled:
                    g += np.multiply(p, a(weight_decay), out=tmp)  # g + wd * p
            if decoupled:
                p *= a(1.0 - lr * weight_decay)
            np.subtract(g, m, out=tmp)
            if w1 < 0.5:  # torch's lerp: m + w1 * (g - m), else g - (g - m) * (1 - w1)
                tmp *= w1
                m += tmp
            else:
                tmp *= a(1) - w1
                np.subtract(g, tmp, out=m)
            v *= a(b2)  # v * b2 + (1 - b2) * g * g
            np.multiply(g, a(1.0 - b2), out=tmp)
            tmp *= g
            v += tmp
            if max_exp_avg_sq is not None:
                v = np.maximum(max_exp_avg_sq.data, v, out=max_exp_avg_sq.data)
            np.sqrt(v, out=tmp)  # p - step_size * (m / (sqrt(v) / bc2 + eps))
            tmp /= a(bc2_sqrt)
            tmp += a(eps)
            np.divide(m, tmp, out=tmp)
            tmp *= a(step_size)
            p -= tmp
        if not in_place:
            strided(self.data, layout, writeable=True)[...] = cast_array(p.reshape(layout.shape), self.dtype)
