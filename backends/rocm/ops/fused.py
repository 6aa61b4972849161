"""Fused nn kernels: row ops (fused.hip: softmax, log_softmax, layer_norm, rms_norm; rope),
their backwards, cross-entropy and AdamW (fused_grad.hip).

Row geometry: a row is the last dim; `launch_rows` (launch.py) sizes threads per row and
rows per block. Kernels that hold a row in registers (RowRegs) take it by 16-byte vectors
where the row allows; the long-row ones stream it (rows.h RowTile).
"""
from __future__ import annotations

from typing import TYPE_CHECKING
import math
import struct

from tensorlite import dtype as dtypes
from tensorlite.backend import adam_bias_corrections, adam_state_dtype, check_adam_scalar, check_cross_entropy
from tensorlite.errors import ArgumentError, DTypeError, IndexOutOfRange, ShapeError, storage_error, unsupported_dtype
from tensorlite.fused_unary import UNARIES
from tensorlite.layout import Layout

from ..dnn import dnn_for, run as dnn_run
from ..kernel_table import FLOATS, kernel_for
from ..launch import (BLOCK, VIEW3, grid_for, launch_rows, pack_strided, ptr_or_null, row_vector, rows_of,
                      sm_count, table_blocks, view4)
from .index import ids_known_in_range

if TYPE_CHECKING:
    from ..storage import GpuStorage

# add_layer_norm's (and its backward's) mixed-precision entries, <stream>_<half>: an f32
# residual stream whose residual and normed output are of the half type
MIXED_NORM = ("f32_f16", "f32_bf16")

# the entry points of this family's kernel sources (kernel_table.py assembles every family's);
# attn_softmax is the GEMM path's masked softmax (ops/attention.py); the fused unaries' backwards
# (tensorlite/fused_unary.py: gelu_tanh_bwd, ...) run from ops/elementwise.py
KERNELS = {
    "fused.hip": tuple(f"{op}_{t}" for op in ("softmax", "log_softmax", "layer_norm", "rms_norm", "add_rms_norm",
                                              "add_layer_norm", "rope", "rope_i", "rope_thd", "rope_kv_cache",
                                              "attn_softmax")
                         for t in FLOATS) + tuple(f"add_layer_norm_{t}" for t in MIXED_NORM),
    "fused_grad.hip": tuple(f"{op}_{t}" for op in ("softmax_bwd", "log_softmax_bwd", "layer_norm_bwd", "rms_norm_bwd",
                                                   "layer_norm_bwd_fit", "rms_norm_bwd_fit",
                                                   "layer_norm_bwd_fit_vec", "rms_norm_bwd_fit_vec",
                                                   "norm_wgrad", "norm_wgrad_finish", "cross_entropy_fwd",
                                                   "cross_entropy_bwd", *(u.backward_kernel for u in UNARIES),
                                                   "adamw", "adamw_many", "adamw_cap", "adamw_many_cap",
                                                   "add_layer_norm_bwd")
                           for t in FLOATS) + tuple(f"add_layer_norm_bwd_{t}" for t in MIXED_NORM),
}

_ADAM_TENSORS, _ADAM_CHUNK = 24, 2048             # TL_ADAM_TENSORS, TL_ADAM_CHUNK in fused_grad.hip
# struct AdamTable: n[24], first_block[25], p, g, m, v [24] each, int count (+4 bytes padding)
_ADAM_TABLE = struct.Struct(f"<{_ADAM_TENSORS}q{_ADAM_TENSORS + 1}q{4 * _ADAM_TENSORS}Qi4x")
_ADAM_TABLE_CAP = struct.Struct(_ADAM_TABLE.format + f"{_ADAM_TENSORS}Q")  # AdamTableCap: + step[24]
_NORM_FIT_THREADS = 256                          # TL_NORM_FIT_THREADS in fused_grad.hip: block size
ROPE_SPREAD_BELOW = 1 << 16                       # pairs: below, a rope thread takes one head (see rope)


def _rope_group(dtype, variant: str, d: int) -> int:
    """Pairs a rope thread rotates (fused.hip RopeGroup::G: 16 bytes of x, 8 for rope_i's
    interleaved pairs), or 1 where d/2 is not a multiple of them."""
    group = (8 if variant == "rope_i" else 16) // dtype.itemsize
    return group if (d // 2) % group == 0 else 1


def _norm_fit_cols(dtype) -> int:
    """Elements of a row per thread in norm_bwd_fit (NormFit::S in fused_grad.hip)."""
    return 8 if dtype.itemsize == 8 else 16


def _norm_fit_blocks(dtype, vec: bool) -> int:
    """Resident blocks per SM that norm_bwd_fit's launch bounds keep (TL_NORM_FIT_VEC_BLOCKS)."""
    return (2 if dtype.itemsize == 8 else 3) if vec else 1


def _rows_vectorized(st, outer: Layout, inner: int, row_len: int) -> bool:
    """Every row of `st` under (outer, inner) is contiguous, 16-byte aligned and whole
    16-byte vectors (what norm_bwd_fit's Vec variant assumes without checking)."""
    n = 16 // st.dtype.itemsize
    return (inner == 1 and row_len % n == 0 and st.addr(outer.offset) % 16 == 0
            and all(s % n == 0 for d, s in zip(outer.shape, outer.strides) if d > 1))


def _tile_vector(dtype, inner_stride: int) -> int:
    """Row geometry of the RowTile kernels (kernels/rows.h: cross_entropy, long-row norm
    backward): contiguous rows go by 16-byte vectors (any length or alignment: the rest
    element by element)."""
    return 16 // dtype.itemsize if inner_stride == 1 else 1


class FusedOps:
    __slots__ = ()  # a mixin of GpuStorage (storage.py), which holds the data: self is a GpuStorage

    # ---- fused nn ops ---------------------------------------------------------------
    def _rows_op(self, name, op, layout, extra_in=(), extra_out=()) -> "GpuStorage":
        """softmax-like kernels `name(n_rows, row_len, outer, inner_stride, in, *extra_in,
        *extra_out, out)` over the rows of the last dim."""
        dev = self.device
        kernel = kernel_for(dev, f"{name}_{self.dtype.short}", op, self=(self, layout))
        n_rows, row_len, outer, inner_stride = rows_of(layout)
        out = self._new(n_rows * row_len)
        if out.numel:
            launch_rows(dev, kernel, n_rows, row_len,
                        [("int64", n_rows), ("int64", row_len), ("bytes", pack_strided(outer)[0]),
                         ("int64", inner_stride), ("ptr", self.buffer.ptr), *extra_in, *extra_out,
                         ("ptr", out.buffer.ptr)],
                        vector=row_vector(self.dtype, row_len, inner_stride), held=True)
        return out

    def softmax_last_dim(self, layout):
        return self._rows_op("softmax", "softmax_last_dim", layout)

    def log_softmax(self, layout):
        return self._rows_op("log_softmax", "log_softmax", layout)

    def _affine_operand(self, op, name, st, lay, layout):
        if st is None:
            return [("ptr", 0), ("int64", 0)]
        if st.dtype is not self.dtype or lay.ndim != 1 or lay.shape[0] != (layout.shape[-1] if layout.ndim else 1):
            raise storage_error(ShapeError, op, f"{name} must be 1-d of the last dim's size and dtype",
                                self=(self, layout), **{name: (st, lay)})
        return [("ptr", st.addr(lay.offset)), ("int64", lay.strides[0])]

    def layer_norm(self, layout, weight, w_layout, bias, b_layout, eps):
        dnn = dnn_for(self.device, "layer_norm")  # the DNN library's op where it has one (TENSORLITE_DNN)
        if dnn is not None and dnn.supports_layer_norm(self.dtype, layout, (weight, w_layout), (bias, b_layout)):
            out = self._new(layout.numel())
            if dnn_run(dnn, "layer_norm", dnn.layer_norm, self, layout, weight, w_layout, bias, b_layout, eps, out):
                return out
        args = (self._affine_operand("layer_norm", "weight", weight, w_layout, layout)
                + self._affine_operand("layer_norm", "bias", bias, b_layout, layout))
        return self._rows_op("layer_norm", "layer_norm", layout, args, (("double", float(eps)),))

    def rms_norm(self, layout, weight, w_layout, eps):
        dnn = dnn_for(self.device, "rms_norm")  # as layer_norm
        if dnn is not None and dnn.supports_rms_norm(self.dtype, layout, (weight, w_layout)):
            out = self._new(layout.numel())
            if dnn_run(dnn, "rms_norm", dnn.rms_norm, self, layout, weight, w_layout, eps, out):
                return out
        args = self._affine_operand("rms_norm", "weight", weight, w_layout, layout)
        return self._rows_op("rms_norm", "rms_norm", layout, args, (("double", float(eps)),))

    def add_rms_norm(self, layout, res, res_layout, weight, w_layout, eps):
        # rms_norm's kernel with the residual rows added first (fused.hip norm_pass's Add) over
        # contiguous operands of one shape and dtype; anything else: the contract's add + rms_norm
        if (res.dtype is not self.dtype or tuple(res_layout.shape) != tuple(layout.shape) or layout.ndim == 0
                or not (layout.is_contiguous() and res_layout.is_contiguous())):
            return super().add_rms_norm(layout, res, res_layout, weight, w_layout, eps)
        wargs = self._affine_operand("add_rms_norm", "weight", weight, w_layout, layout)
        return self._add_norm(f"add_rms_norm_{self.dtype.short}", "add_rms_norm", layout, res, res_layout, wargs,
                              eps, self.dtype)

    def _add_norm(self, entry, op, layout, res, res_layout, affine, eps, out_dtype):
        """(sum, normed) of add_rms_norm / add_layer_norm by their kernel `entry` over
        contiguous self and res of one shape; `affine`: the weight (and bias) arguments."""
        dev = self.device
        kernel = kernel_for(dev, entry, op, self=(self, layout), residual=(res, res_layout))
        # both row sets from their own first element (the rows' offsets in the launch are 0)
        n_rows, row_len, outer, inner_stride = rows_of(Layout.contiguous(tuple(layout.shape)))
        total, out = self._new(layout.numel()), self._new(layout.numel(), out_dtype)
        if out.numel:
            launch_rows(dev, kernel, n_rows, row_len,
                        [("int64", n_rows), ("int64", row_len), ("bytes", pack_strided(outer)[0]),
                         ("int64", inner_stride), ("ptr", self.addr(layout.offset)),
                         ("ptr", res.addr(res_layout.offset)), *affine, ("double", float(eps)),
                         ("ptr", total.buffer.ptr), ("ptr", out.buffer.ptr)],
                        vector=row_vector(self.dtype, row_len, inner_stride), held=True)
        return total, out

    def _add_norm_suffix(self, other, out_dtype):
        """The add_layer_norm(_bwd) entry's suffix for a stream of self's dtype whose residual
        (and normed output) are of `other` and `out_dtype`: one dtype throughout, or an f32
        stream with both of one half type (MIXED_NORM); None where no entry takes them."""
        t = self.dtype
        if other is t and out_dtype is t and t.is_floating_point:
            return t.short
        sfx = f"{t.short}_{other.short}"
        return sfx if out_dtype is other and sfx in MIXED_NORM else None

    def add_layer_norm(self, layout, res, res_layout, weight, w_layout, bias, b_layout, eps, out_dtype):
        # fused.hip norm_pass with Add (and a narrower output) over contiguous operands of one
        # shape; anything else: the contract's ops
        sfx = self._add_norm_suffix(res.dtype, out_dtype)
        if sfx is None or tuple(res_layout.shape) != tuple(layout.shape) or layout.ndim == 0 \
                or not (layout.is_contiguous() and res_layout.is_contiguous()):
            return super().add_layer_norm(layout, res, res_layout, weight, w_layout, bias, b_layout, eps, out_dtype)
        op = "add_layer_norm"
        affine = (self._affine_operand(op, "weight", weight, w_layout, layout)
                  + self._affine_operand(op, "bias", bias, b_layout, layout))
        return self._add_norm(f"add_layer_norm_{sfx}", op, layout, res, res_layout, affine, eps, out_dtype)

    def add_layer_norm_backward(self, layout, grad, grad_layout, grad_sum, gs_layout, weight, w_layout, eps,
                                res_dtype, weight_grad, bias_grad):
        # norm_bwd_fit's Vec rows with the sum's gradient added (and dx also written in the
        # residual's dtype) in the same pass; anything else: the contract's ops
        op = "add_layer_norm_backward"
        sfx = self._add_norm_suffix(res_dtype, grad.dtype)
        n_rows, row_len, xo, xi = rows_of(layout)
        _, _, go, gi = rows_of(grad_layout)
        if sfx is None or not n_rows * row_len or row_len > _NORM_FIT_THREADS * _norm_fit_cols(self.dtype) \
                or tuple(grad_layout.shape) != tuple(layout.shape) \
                or not (_rows_vectorized(self, xo, xi, row_len) and _rows_vectorized(grad, go, gi, row_len)) \
                or (grad_sum is not None and (grad_sum.dtype is not self.dtype or not gs_layout.is_contiguous()
                                              or tuple(gs_layout.shape) != tuple(layout.shape)
                                              or grad_sum.addr(gs_layout.offset) % 16)):
            return super().add_layer_norm_backward(layout, grad, grad_layout, grad_sum, gs_layout, weight, w_layout,
                                                   eps, res_dtype, weight_grad, bias_grad)
        wargs = self._affine_operand(op, "weight", weight, w_layout, layout)
        dres = None if res_dtype is self.dtype else self._new(n_rows * row_len, res_dtype)
        gs_ptr = 0 if grad_sum is None else grad_sum.addr(gs_layout.offset)
        dx, dw, db = self._norm_backward_fit(
            "add_layer_norm_bwd", op, layout, grad, grad_layout, wargs, eps, weight_grad, bias_grad,
            add=(sfx, [("ptr", gs_ptr), ("ptr", ptr_or_null(dres))]))
        return dx, dx if dres is None else dres, dw, db

    def rope(self, layout, cos, cos_layout, sin, sin_layout, variant, _inverse=False):
        dnn = None if _inverse else dnn_for(self.device, "rope_i")  # the DNN library's rope: rope_i only
        if dnn is not None and dnn.supports_rope(self.dtype, variant, layout, cos, cos_layout, sin, sin_layout):
            out = self._new(layout.numel())
            if dnn_run(dnn, "rope_i", dnn.rope, self, layout, cos, cos_layout, sin, sin_layout, out):
                return out
        if variant not in ("rope", "rope_i", "rope_thd"):
            raise ArgumentError(f"rope: unknown variant {variant!r}; expected 'rope', 'rope_i' or 'rope_thd'")
        if layout.ndim != 4 or layout.shape[-1] % 2 or cos_layout.ndim != 3 or sin_layout.ndim != 3:
            raise storage_error(ShapeError, variant, "expected x 4-d with an even last dim and cos/sin 3-d (b, t, d/2)",
                                x=(self, layout), cos=(cos, cos_layout), sin=(sin, sin_layout))
        dev = self.device
        kernel = kernel_for(dev, f"{variant}_{self.dtype.short}", variant, x=(self, layout), cos=(cos, cos_layout))
        n0, n1, n2, d = layout.shape
        n_pairs = n0 * n1 * n2 * (d // 2)
        out = self._new(layout.numel())
        if n_pairs:
            # a thread rotates `group` pairs where d/2 allows (fused.hip RopeGroup), in 4, 2
            # or 1 heads at one position (rope_heads): the most that divides the head count,
            # which puts more loads in flight per thread where bandwidth bounds the launch;
            # one below ROPE_SPREAD_BELOW pairs, where the instructions a thread runs do (a
            # decode step's rope: code cold in the instruction cache, 4 heads 4x as long)
            group = _rope_group(self.dtype, variant, d)
            heads = 1 if n_pairs < ROPE_SPREAD_BELOW else \
                next(h for h in (4, 2, 1) if (n2 if variant == "rope_thd" else n1) % h == 0)
            dev.launch(kernel, grid_for(dev, n_pairs // (group * heads)), BLOCK,
                       [("int64", n_pairs), ("int64", n1), ("int64", n2), ("int64", d), ("bytes", view4(layout)),
                        ("bytes", VIEW3.pack(cos_layout.offset, *cos_layout.strides)),
                        ("bytes", VIEW3.pack(sin_layout.offset, *sin_layout.strides)),
                        ("ptr", self.buffer.ptr), ("ptr", cos.buffer.ptr), ("ptr", sin.buffer.ptr),
                        ("ptr", out.buffer.ptr), ("int32", int(bool(_inverse))), ("int32", heads)])
        return out

    def rope_kv_cache(self, layout, cos, cos_layout, sin, sin_layout, k_cache, k_layout, v_cache, v_layout, ids,
                      ids_layout):
        # one kernel (fused.hip rope_kv_cache_<t>) where x, the tables and the caches share a
        # dtype and the caches are contiguous; else the contract's rope + scatter_sets
        b, h, t, d = layout.shape
        hkv, size = k_layout.shape[1], k_layout.shape[2]
        if (any(st.dtype is not self.dtype for st in (cos, sin, k_cache, v_cache)) or ids.dtype is not dtypes.int64
                or not (k_layout.is_contiguous() and v_layout.is_contiguous()) or d % 2):
            return super().rope_kv_cache(layout, cos, cos_layout, sin, sin_layout, k_cache, k_layout, v_cache,
                                         v_layout, ids, ids_layout)
        dev = self.device
        kernel = kernel_for(dev, f"rope_kv_cache_{self.dtype.short}", "rope_kv_cache", x=(self, layout),
                            cos=(cos, cos_layout), k_cache=(k_cache, k_layout))
        ids, ids_layout = ids._contiguous(ids_layout)
        out = self._new(b * (h - hkv) * t * d)
        n_pairs = b * h * t * (d // 2)
        if n_pairs == 0:
            self._check_ids_on_host("rope_kv_cache", ids, ids_layout, size, k_layout)
            return out
        group = _rope_group(self.dtype, "rope", d)
        self._run_checked("rope_kv_cache", ids, ids_layout, size, k_layout, lambda err: dev.launch(
            kernel, grid_for(dev, n_pairs // group), BLOCK,
            [("int64", n_pairs), ("int64", h), ("int64", hkv), ("int64", t), ("int64", d), ("int64", size),
             ("bytes", view4(layout)), ("bytes", VIEW3.pack(cos_layout.offset, *cos_layout.strides)),
             ("bytes", VIEW3.pack(sin_layout.offset, *sin_layout.strides)), ("ptr", self.buffer.ptr),
             ("ptr", cos.buffer.ptr), ("ptr", sin.buffer.ptr), ("ptr", ids.addr(ids_layout.offset)),
             ("ptr", out.buffer.ptr), ("ptr", k_cache.addr(k_layout.offset)), ("ptr", v_cache.addr(v_layout.offset)),
             ("ptr", err)]))
        return out

    def rope_backward(self, layout, cos, cos_layout, sin, sin_layout, variant):
        # the rope kernel with sin negated (a rotation's transpose); self is the gradient
        return self.rope(layout, cos, cos_layout, sin, sin_layout, variant, _inverse=True)

    # ---- backward of the fused ops, fused cross-entropy, AdamW (kernels/fused_grad.hip) ------
    def _check_grad(self, op, layout, grad, grad_layout):
        if not self.dtype.is_floating_point:
            raise unsupported_dtype(op, self=(self, layout))
        if grad.dtype is not self.dtype or tuple(grad_layout.shape) != tuple(layout.shape):
            raise storage_error(DTypeError if grad.dtype is not self.dtype else ShapeError, op,
                                "grad must have the input's shape and dtype", self=(self, layout),
                                grad=(grad, grad_layout))

    def _rows_bwd(self, name, op, layout, grad, grad_layout, extra=(), stats=None, vector=1):
        """Row kernels `name(n_rows, row_len, xo, xi, go, gi, x, g, *extra, [stats,] out)`
        (`vector`: elements a thread reads at once, as launch_rows)."""
        self._check_grad(op, layout, grad, grad_layout)
        dev = self.device
        kernel = kernel_for(dev, f"{name}_{self.dtype.short}", op, self=(self, layout), grad=(grad, grad_layout))
        n_rows, row_len, xo, xi = rows_of(layout)
        _, _, go, gi = rows_of(grad_layout)
        out = self._new(n_rows * row_len)
        if out.numel:
            tail = [] if stats is False else [("ptr", ptr_or_null(stats))]
            launch_rows(dev, kernel, n_rows, row_len,
                        [("int64", n_rows), ("int64", row_len), ("bytes", pack_strided(xo)[0]), ("int64", xi),
                         ("bytes", pack_strided(go)[0]), ("int64", gi), ("ptr", self.buffer.ptr),
                         ("ptr", grad.buffer.ptr), *extra, *tail, ("ptr", out.buffer.ptr)], vector=vector)
        return out

    def softmax_last_dim_backward(self, layout, grad, grad_layout):
        return self._rows_bwd("softmax_bwd", "softmax_backward", layout, grad, grad_layout, stats=False)

    def log_softmax_backward(self, layout, grad, grad_layout):
        return self._rows_bwd("log_softmax_bwd", "log_softmax_backward", layout, grad, grad_layout, stats=False)

    def _acc_dtype(self):
        return dtypes.float64 if self.dtype is dtypes.float64 else dtypes.float32

    def _norm_backward(self, name, op, layout, grad, grad_layout, weight, w_layout, eps, weight_grad, bias_grad):
        """Rows that fit 256 threads: dx and the dweight/dbias partials in one pass
        (_norm_backward_fit). Longer rows: dx by the row kernel, which leaves per-row
        (mean, rstd) for the weight-gradient column sums (_norm_wgrad)."""
        wargs = self._affine_operand(op, "weight", weight, w_layout, layout)
        n_rows, row_len, _, xi = rows_of(layout)
        if n_rows * row_len and row_len <= _NORM_FIT_THREADS * _norm_fit_cols(self.dtype):
            self._check_grad(op, layout, grad, grad_layout)
            return self._norm_backward_fit(name, op, layout, grad, grad_layout, wargs, eps, weight_grad, bias_grad)
        # per-row (mean, rstd) for the weight gradient; the bias gradient needs none
        stats = self._new(2 * n_rows, self._acc_dtype()) if weight_grad and n_rows * row_len else None
        dx = self._rows_bwd(name, op, layout, grad, grad_layout, (*wargs, ("double", float(eps))), stats,
                            vector=_tile_vector(self.dtype, xi))
        dw = self._new(row_len) if weight_grad else None
        db = self._new(row_len) if bias_grad else None
        if dw is None and db is None:
            return dx, dw, db
        if n_rows * row_len == 0:  # empty sums
            for st in (dw, db):
                if st is not None and st.numel:
                    self.device.memset(st.buffer.ptr, 0, st.numel * st.dtype.itemsize)
            return dx, dw, db
        self._norm_wgrad(layout, grad, grad_layout, stats, dw, db)
        return dx, dw, db

    def _norm_backward_fit(self, name, op, layout, grad, grad_layout, wargs, eps, weight_grad, bias_grad, add=None):
        """Rows that fit a block of _NORM_FIT_THREADS (fused_grad.hip norm_bwd_fit): tpr threads
        per row (tpr * cols >= row_len), up to 256 // tpr rows per block, as many blocks per SM
        as stay resident (each sums its dweight/dbias partials over all of its rows), then
        norm_wgrad_finish over the blocks' partials. Rows of whole aligned vectors take the
        _vec variant (fewer registers: more blocks per SM). add: (entry suffix, its extra
        arguments) of add_layer_norm_bwd, whose rows the caller saw vectorized."""
        dev, acc = self.device, self._acc_dtype()
        n_rows, row_len, xo, xi = rows_of(layout)
        _, _, go, gi = rows_of(grad_layout)
        dx = self._new(n_rows * row_len)
        dw = self._new(row_len) if weight_grad else None
        db = self._new(row_len) if bias_grad else None
        vec = add is not None or (_rows_vectorized(self, xo, xi, row_len) and _rows_vectorized(grad, go, gi, row_len))
        entry = f"{name}_{add[0]}" if add else f"{name}_fit{'_vec' if vec else ''}_{self.dtype.short}"
        kernel = kernel_for(dev, entry, op, self=(self, layout), grad=(grad, grad_layout))
        cols = _norm_fit_cols(self.dtype)
        tpr = 1
        while tpr * cols < row_len:
            tpr *= 2
        sms, blocks = sm_count(dev), _norm_fit_blocks(self.dtype, vec)
        # fewer rows per block when the rows would not fill every SM's blocks
        rpb = max(1, min(_NORM_FIT_THREADS // tpr, -(-n_rows // (sms * blocks))))
        groups = -(-n_rows // rpb)
        grid = -(-groups // -(-groups // (sms * blocks)))  # every block the same number of turns
        pw = self._new(grid * row_len, acc) if dw is not None else None
        pb = self._new(grid * row_len, acc) if db is not None else None
        parts = [("ptr", ptr_or_null(pw))] + ([] if name == "rms_norm_bwd" else [("ptr", ptr_or_null(pb))])
        dev.launch(kernel, grid, (tpr, rpb),
                   [("int64", n_rows), ("int64", row_len), ("bytes", pack_strided(xo)[0]), ("int64", xi),
                    ("bytes", pack_strided(go)[0]), ("int64", gi), ("ptr", self.buffer.ptr),
                    ("ptr", grad.buffer.ptr), *wargs, ("double", float(eps)), *parts, ("ptr", dx.buffer.ptr),
                    *(add[1] if add else ())])
        if dw is not None or db is not None:
            self._norm_wgrad_finish(grid, row_len, pw, pb, dw, db)
        return dx, dw, db

    def _norm_wgrad_finish(self, n_chunks, row_len, pw, pb, dw, db):
        """dw/db = column sums of the (n_chunks, row_len) partials (fused_grad.hip
        norm_wgrad_finish: 32 columns x up to 32 chunk lanes per block, fixed order)."""
        dev = self.device
        kernel = kernel_for(dev, f"norm_wgrad_finish_{self.dtype.short}", "norm_backward")
        by = max(1, min(32, n_chunks, kernel.max_threads // 32))  # TL_FINISH_THREADS: 32 * 32
        dev.launch(kernel, grid_for(dev, row_len, 32), (32, by),
                   [("int64", n_chunks), ("int64", row_len), ("ptr", ptr_or_null(pw)), ("ptr", ptr_or_null(pb)),
                    ("ptr", ptr_or_null(dw)), ("ptr", ptr_or_null(db))])

    def _norm_wgrad(self, layout, grad, grad_layout, stats, dw, db):
        """dweight/dbias of rows too long for the fused pass, as column sums: per (row
        chunk, column) partials, then one sum per column (deterministic, no atomics)."""
        dev = self.device
        t, acc = self.dtype.short, self._acc_dtype()
        n_rows, row_len, xo, xi = rows_of(layout)
        _, _, go, gi = rows_of(grad_layout)
        bx = 32
        while bx < row_len and bx < 256:
            bx *= 2
        by = 256 // bx
        tiles = -(-row_len // bx)
        sms = sm_count(dev)
        n_chunks = max(1, min(-(-4 * sms // tiles), -(-n_rows // by), 65535))
        rows_per_chunk = -(-n_rows // n_chunks)
        n_chunks = -(-n_rows // rows_per_chunk)
        pw = self._new(n_chunks * row_len, acc) if dw is not None else None
        pb = self._new(n_chunks * row_len, acc) if db is not None else None
        kernel = kernel_for(dev, f"norm_wgrad_{t}", "norm_backward", self=(self, layout))
        dev.launch(kernel, (tiles, n_chunks), (bx, by),
                   [("int64", n_rows), ("int64", row_len), ("int64", rows_per_chunk), ("bytes", pack_strided(xo)[0]),
                    ("int64", xi), ("bytes", pack_strided(go)[0]), ("int64", gi), ("ptr", self.buffer.ptr),
                    ("ptr", grad.buffer.ptr), ("ptr", ptr_or_null(stats)), ("ptr", ptr_or_null(pw)),
                    ("ptr", ptr_or_null(pb))])
        self._norm_wgrad_finish(n_chunks, row_len, pw, pb, dw, db)

    def layer_norm_backward(self, layout, grad, grad_layout, weight, w_layout, eps, weight_grad, bias_grad):
        return self._norm_backward("layer_norm_bwd", "layer_norm_backward", layout, grad, grad_layout, weight,
                                   w_layout, eps, weight_grad, bias_grad)

    def rms_norm_backward(self, layout, grad, grad_layout, weight, w_layout, eps, weight_grad):
        return self._norm_backward("rms_norm_bwd", "rms_norm_backward", layout, grad, grad_layout, weight,
                                   w_layout, eps, weight_grad, False)[:2]

    def _ce_check(self, op, layout, target, target_layout):
        if not self.dtype.is_floating_point:
            raise unsupported_dtype(op, self=(self, layout))
        check_cross_entropy(op, self, layout, target, target_layout)

    def cross_entropy(self, layout, target, target_layout, weight, w_layout, ignore_index):
        op = "cross_entropy"
        self._ce_check(op, layout, target, target_layout)
        n_rows, n_cls, xo, xi = rows_of(layout)
        if weight is not None and (weight.dtype is not self.dtype or tuple(w_layout.shape) != (n_cls,)):
            raise storage_error(ShapeError, op, f"weight must be ({n_cls},) of the logits' dtype",
                                self=(self, layout), weight=(weight, w_layout))
        acc = self._acc_dtype()
        loss, lse, wt = (self._new(n_rows, acc) for _ in range(3))
        if n_rows == 0:
            return loss, lse, wt
        dev = self.device
        kernel = kernel_for(dev, f"cross_entropy_fwd_{self.dtype.short}", op, self=(self, layout))
        wargs = [("ptr", 0), ("int64", 0)] if weight is None else [("ptr", weight.addr(w_layout.offset)),
                                                                   ("int64", w_layout.strides[0])]

        def report():
            t = target.to_cpu(target_layout).reshape(-1)
            bad = t[(t != ignore_index) & ((t < 0) | (t >= n_cls))]
            raise storage_error(IndexOutOfRange, op, f"target {int(bad[0]) if bad.size else '?'} is out of range for "
                                f"{n_cls} classes", self=(self, layout), target=(target, target_layout))
        # waits, as the index ops do, unless the host knows the targets are in range
        dev.run_checked(op, lambda flag: launch_rows(
            dev, kernel, n_rows, n_cls,
            [("int64", n_rows), ("int64", n_cls), ("bytes", pack_strided(xo)[0]), ("int64", xi),
             ("bytes", pack_strided(target_layout)[0]), ("ptr", target.buffer.ptr), *wargs,
             ("int64", int(ignore_index)), ("ptr", self.buffer.ptr), ("ptr", loss.buffer.ptr),
             ("ptr", lse.buffer.ptr), ("ptr", wt.buffer.ptr), ("ptr", flag)],
            vector=_tile_vector(self.dtype, xi)), report, check=not ids_known_in_range(target, n_cls))
        return loss, lse, wt

    def cross_entropy_backward(self, layout, target, target_layout, lse, wt, grad, grad_layout):
        op = "cross_entropy_backward"
        self._ce_check(op, layout, target, target_layout)
        n_rows, n_cls, xo, xi = rows_of(layout)
        acc = self._acc_dtype()
        if grad.dtype is not acc or lse.dtype is not acc or wt.dtype is not acc or grad_layout.numel() != n_rows \
                or lse.numel != n_rows or wt.numel != n_rows:
            raise storage_error(DTypeError, op, f"lse, wt and grad must be {acc.name} with one value per row, as "
                                "cross_entropy returned them", self=(self, layout), grad=(grad, grad_layout))
        out = self._new(n_rows * n_cls)
        if out.numel == 0:
            return out
        dev = self.device
        launch_rows(dev, kernel_for(dev, f"cross_entropy_bwd_{self.dtype.short}", op, self=(self, layout)),
                    n_rows, n_cls,
                    [("int64", n_rows), ("int64", n_cls), ("bytes", pack_strided(xo)[0]), ("int64", xi),
                     ("bytes", pack_strided(target_layout)[0]), ("ptr", target.buffer.ptr),
                     ("bytes", pack_strided(grad_layout)[0]), ("ptr", grad.buffer.ptr), ("ptr", lse.buffer.ptr),
                     ("ptr", wt.buffer.ptr), ("ptr", self.buffer.ptr), ("ptr", out.buffer.ptr)],
                    vector=_tile_vector(self.dtype, xi))
        return out

    def _check_adamw(self, layout, grad, grad_layout, exp_avg, exp_avg_sq, max_exp_avg_sq) -> int:
        op = "adamw_step"
        self._check_grad(op, layout, grad, grad_layout)
        n, sdt = layout.numel(), adam_state_dtype(self.dtype)
        for st in (exp_avg, exp_avg_sq, max_exp_avg_sq):  # a loop, not any(...): once per parameter per step
            if st is not None and (st.dtype is not sdt or st.numel != n):
                raise storage_error(DTypeError, op, f"state buffers must be {sdt.name} with {n} elements",
                                    self=(self, layout), exp_avg=(exp_avg, Layout((exp_avg.numel,))))
        return n

    @staticmethod
    def _adam_fixed(lr, betas, eps, weight_decay, step):
        """The hyper-parameters of adamw / adamw_many: everything, bias corrections included, from the host."""
        step_size, bc2_sqrt = adam_bias_corrections(lr, betas, step)
        return [("double", float(lr)), ("double", float(betas[0])), ("double", float(betas[1])), ("double", float(eps)),
                ("double", float(weight_decay)), ("double", step_size), ("double", bc2_sqrt)]

    def _adam_counted(self, layout, lr, betas, eps, weight_decay):
        """The hyper-parameters of the _cap kernels (capturable): lr by address (or value),
        betas with their logs (the kernel's bias corrections are -expm1(t * log b))."""
        lr = check_adam_scalar("adamw_step", "lr", lr, self, layout)
        lr_ptr, lr_value = (lr[0].addr(lr[1].offset), 0.0) if isinstance(lr, tuple) else (0, float(lr))
        logs = [math.log(b) if b > 0 else -math.inf for b in map(float, betas)]
        return [("ptr", lr_ptr), ("double", lr_value), ("double", float(betas[0])), ("double", float(betas[1])),
                ("double", float(eps)), ("double", float(weight_decay)), ("double", logs[0]), ("double", logs[1])]

    def adamw_step(self, layout, grad, grad_layout, exp_avg, exp_avg_sq, max_exp_avg_sq, lr, betas, eps,
                   weight_decay, step, decoupled=True, maximize=False):
        op = "adamw_step"
        n = self._check_adamw(layout, grad, grad_layout, exp_avg, exp_avg_sq, max_exp_avg_sq)
        if n == 0:
            return
        dev = self.device
        flags = int(bool(decoupled)) | 2 * int(bool(maximize)) | 4 * int(max_exp_avg_sq is not None)
        lp, lg = pack_strided(layout, grad_layout)
        args = [("int64", n), ("bytes", lp), ("bytes", lg), ("ptr", self.buffer.ptr), ("ptr", grad.buffer.ptr),
                ("ptr", exp_avg.buffer.ptr), ("ptr", exp_avg_sq.buffer.ptr), ("ptr", ptr_or_null(max_exp_avg_sq))]
        if isinstance(step, tuple):  # capturable: the count and lr in device memory
            st, st_layout = check_adam_scalar(op, "step", step, self, layout)
            name = f"adamw_cap_{self.dtype.short}"
            args += self._adam_counted(layout, lr, betas, eps, weight_decay) + [
                ("ptr", st.addr(st_layout.offset)), ("int32", flags)]
        else:
            name = f"adamw_{self.dtype.short}"
            args += self._adam_fixed(lr, betas, eps, weight_decay, step) + [("int32", flags)]
        dev.launch(kernel_for(dev, name, op, self=(self, layout)), grid_for(dev, n), BLOCK, args)

    @classmethod
    def adamw_steps(cls, steps, lr, betas, eps, weight_decay, decoupled=True, maximize=False):
        # contiguous, non-empty parameters without amsgrad go by adamw_many (TL_ADAM_TENSORS
        # per launch), grouped by device, dtype and step count (capturable: by device and dtype,
        # each tensor's count read from its address by adamw_many_cap); the rest one by one
        batches, single = {}, []
        for item in steps:
            p, layout, grad, grad_layout, m, v, vmax, step = item
            if vmax is None and layout.is_contiguous() and grad_layout.is_contiguous():
                n = p._check_adamw(layout, grad, grad_layout, m, v, vmax)
                if n:
                    counted = isinstance(step, tuple)
                    if counted:
                        st, st_layout = check_adam_scalar("adamw_step", "step", step, p, layout)
                        step = st.addr(st_layout.offset)
                    batches.setdefault((p.device, p.dtype, None if counted else step), []).append(
                        (p, layout, grad, grad_layout, m, v, n, step))
            else:
                single.append(item)
        super().adamw_steps(single, lr, betas, eps, weight_decay, decoupled, maximize)
        flags = int(bool(decoupled)) | 2 * int(bool(maximize))
        for (dev, dtype, step), items in batches.items():
            counted = step is None
            kernel = kernel_for(dev, f"adamw_many_{'cap_' if counted else ''}{dtype.short}", "adamw_step",
                                self=(items[0][0], items[0][1]))
            if counted:
                hyper = items[0][0]._adam_counted(items[0][1], lr, betas, eps, weight_decay) + [("int32", flags)]
            else:
                hyper = cls._adam_fixed(lr, betas, eps, weight_decay, step) + [("int32", flags)]
            for i in range(0, len(items), _ADAM_TENSORS):
                chunk = items[i:i + _ADAM_TENSORS]
                pad = [0] * (_ADAM_TENSORS - len(chunk))
                first = table_blocks([c[6] for c in chunk], _ADAM_CHUNK)
                fields = [*[c[6] for c in chunk], *pad, *first, *pad,
                          *[p.addr(lay.offset) for p, lay, *_ in chunk], *pad,
                          *[g.addr(glay.offset) for _, _, g, glay, *_ in chunk], *pad,
                          *[c[4].buffer.ptr for c in chunk], *pad,
                          *[c[5].buffer.ptr for c in chunk], *pad, len(chunk)]
                table = (_ADAM_TABLE_CAP.pack(*fields, *[c[7] for c in chunk], *pad) if counted
                         else _ADAM_TABLE.pack(*fields))
                dev.launch(kernel, grid_for(dev, first[-1], 1), BLOCK, [("bytes", table), *hyper])
