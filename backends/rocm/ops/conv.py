"""Convolution, pooling, upsampling and batch norm (conv.hip; the platform's DNN library through dnn.py).

A convolution goes to the DNN library where it takes the case (TENSORLITE_DNN), else to
im2col + `gemm` per group (conv_transpose: `gemm` + col2im); pooling likewise to the
library or to the portable window kernels. 1-d ops run as 2-d ops of height 1.
"""
from __future__ import annotations

import struct

from tensorlite.backend import PoolParams
from tensorlite.errors import DTypeError, ShapeError, storage_error
from tensorlite.layout import Layout

from ..dnn import bn_param_dtype, dnn_for, run as dnn_run
from ..kernel_table import ALL, FLOATS, kernel_for
from ..launch import BLOCK, grid_for, view4
from .matmul import gemm, matrix_view

# the entry points of this family's kernel source (kernel_table.py assembles every family's);
# gemm_<t> is the portable GEMM that ops/matmul.py's `gemm` falls back to
KERNELS = {"conv.hip": tuple(f"{op}_{t}" for op in ("im2col", "col2im", "max_pool2d", "avg_pool2d",
                                                    "upsample_nearest2d") for t in ALL)
           + tuple(f"max_pool2d_backward_{t}" for t in FLOATS) + tuple(f"gemm_{t}" for t in ALL)}

_GEOM2D = struct.Struct("<14q")                  # struct Geom2d of conv.hip


class ConvOps:
    __slots__ = ()  # a mixin of GpuStorage (storage.py), which holds the data: self is a GpuStorage

    # ---- convolution, pooling, upsampling --------------------------------------------
    def _conv_check(self, op, layout, kernel, kernel_layout, nd):
        if layout.ndim != nd + 2 or kernel_layout.ndim != nd + 2:
            raise storage_error(ShapeError, op, f"expected {nd + 2}-d input and kernel", self=(self, layout),
                                kernel=(kernel, kernel_layout))
        if kernel.dtype is not self.dtype:
            raise storage_error(DTypeError, op, "input and kernel dtypes differ", self=(self, layout),
                                kernel=(kernel, kernel_layout))

    def conv2d(self, layout, kernel, kernel_layout, params):
        self._conv_check("conv2d", layout, kernel, kernel_layout, 2)
        b, c, h, w = layout.shape
        c_out, c_g, kh, kw = kernel_layout.shape
        g = params.groups
        if c != c_g * g or c_out % g:
            raise storage_error(ShapeError, "conv2d", f"channels do not match groups={g}", self=(self, layout),
                                kernel=(kernel, kernel_layout))
        oh, ow = params.out_size((h, w), (kh, kw))
        out = self._new(b * c_out * oh * ow)
        if out.numel == 0:
            return out
        dnn = dnn_for(self.device)  # the DNN library where it takes the case (TENSORLITE_DNN)
        if dnn is not None and dnn.supports_conv(self.dtype, layout, out.numel):
            wk, wl = kernel._contiguous(kernel_layout)  # filter descriptors have no strides
            if dnn_run(dnn, "conv2d", dnn.conv2d, self, layout, wk, wl, params, out, (b, c_out, oh, ow)):
                return out
        dev = self.device
        # im2col: cols (b, c*kh*kw, oh*ow); group g's rows are one contiguous block
        n_cols = b * c * kh * kw * oh * ow
        cols = self._new(n_cols)
        geom = _GEOM2D.pack(b, c, h, w, kh, kw, oh, ow, *params.stride, *params.padding, *params.dilation)
        dev.launch(kernel_for(dev, f"im2col_{self.dtype.short}", "conv2d", self=(self, layout)),
                   grid_for(dev, n_cols), BLOCK,
                   [("int64", n_cols), ("bytes", geom), ("bytes", view4(layout)), ("ptr", self.buffer.ptr),
                    ("ptr", cols.buffer.ptr)])
        # per group: out[:, g] (c_out/g x oh*ow) = W_g (c_out/g x K) . cols[:, g] (K x oh*ow)
        kdim, o_g, hw = c_g * kh * kw, c_out // g, oh * ow
        wk, wl = matrix_view(kernel, kernel_layout, (c_out, kdim))
        for gi in range(g):
            a_layout = Layout((b, o_g, kdim), (0, wl.strides[0], wl.strides[1]), wl.offset + gi * o_g * wl.strides[0])
            b_layout = Layout((b, kdim, hw), (c * kh * kw * hw, hw, 1), gi * kdim * hw)
            gemm(wk, a_layout, cols, b_layout, out, gi * o_g * hw, c_out * hw, hw, b, o_g, hw, kdim)
        return out

    def conv1d(self, layout, kernel, kernel_layout, params):
        self._conv_check("conv1d", layout, kernel, kernel_layout, 1)
        return self.conv2d(_unsqueeze_h(layout), kernel, _unsqueeze_h(kernel_layout), params.as_2d())

    def conv_transpose2d(self, layout, kernel, kernel_layout, params):
        self._conv_check("conv_transpose2d", layout, kernel, kernel_layout, 2)
        b, c_in, h, w = layout.shape
        c_in_k, o_g, kh, kw = kernel_layout.shape
        g = params.groups
        if c_in != c_in_k or c_in % g:
            raise storage_error(ShapeError, "conv_transpose2d", f"channels do not match groups={g}",
                                self=(self, layout), kernel=(kernel, kernel_layout))
        c_out = o_g * g
        oh, ow = params.out_size((h, w), (kh, kw), transposed=True)
        out = self._new(b * c_out * oh * ow)
        if out.numel == 0:
            return out
        dnn = dnn_for(self.device)  # the library's convolution backward-data, where it has one
        if dnn is not None and dnn.supports_conv(self.dtype, layout, out.numel, transposed=True):
            wk, wl = kernel._contiguous(kernel_layout)
            if dnn_run(dnn, "conv_transpose2d", dnn.conv_transpose2d, self, layout, wk, wl, params, out,
                       (b, c_out, oh, ow)):
                return out
        dev = self.device
        # cols[:, g] (o_g*kh*kw x h*w) = W_g^T (o_g*kh*kw x c_in/g) . x[:, g] (c_in/g x h*w)
        i_g, kdim, hw = c_in // g, o_g * kh * kw, h * w
        cols = self._new(b * c_out * kh * kw * hw)
        wk, wl = matrix_view(kernel, kernel_layout, (c_in, kdim))
        xs, xl = matrix_view(self, layout, (b, c_in, hw))
        for gi in range(g):
            a_layout = Layout((b, kdim, i_g), (0, wl.strides[1], wl.strides[0]), wl.offset + gi * i_g * wl.strides[0])
            b_layout = Layout((b, i_g, hw), xl.strides, xl.offset + gi * i_g * xl.strides[1])
            gemm(wk, a_layout, xs, b_layout, cols, gi * kdim * hw, c_out * kh * kw * hw, hw, b, kdim, hw, i_g)
        n = out.numel
        geom = _GEOM2D.pack(b, c_out, h, w, kh, kw, oh, ow, *params.stride, *params.padding, *params.dilation)
        dev.launch(kernel_for(dev, f"col2im_{self.dtype.short}", "conv_transpose2d", self=(self, layout)),
                   grid_for(dev, n), BLOCK, [("int64", n), ("bytes", geom), ("ptr", cols.buffer.ptr),
                                             ("ptr", out.buffer.ptr)])
        return out

    def conv_transpose1d(self, layout, kernel, kernel_layout, params):
        self._conv_check("conv_transpose1d", layout, kernel, kernel_layout, 1)
        return self.conv_transpose2d(_unsqueeze_h(layout), kernel, _unsqueeze_h(kernel_layout),
                                     params.as_2d())

    def _window_op(self, name, op, layout, out_hw, geom_tail, extra=()):
        if layout.ndim != 4:
            raise storage_error(ShapeError, op, "expected a 4-d (b, c, h, w) input", self=(self, layout))
        b, c, h, w = layout.shape
        oh, ow = out_hw
        dev = self.device
        kernel = kernel_for(dev, f"{name}_{self.dtype.short}", op, self=(self, layout))
        n = b * c * oh * ow
        out = self._new(n)
        if n:
            geom = _GEOM2D.pack(b, c, h, w, geom_tail[0], geom_tail[1], oh, ow, *geom_tail[2:])
            dev.launch(kernel, grid_for(dev, n), BLOCK,
                       [("int64", n), ("bytes", geom), ("bytes", view4(layout)), *extra,
                        ("ptr", self.buffer.ptr), ("ptr", out.buffer.ptr)])
        return out

    def _dnn_pool(self, kind, layout, params):
        """The pooling through the DNN library, or None (the portable kernel runs)."""
        if layout.ndim != 4:
            return None
        oh, ow = params.out_size(*layout.shape[2:])
        n = layout.shape[0] * layout.shape[1] * oh * ow
        if n <= 0:
            return None
        dnn = dnn_for(self.device)
        if dnn is None or not dnn.supports_pool(self.dtype, layout, params, kind, n):
            return None
        out = self._new(n)
        ok = dnn_run(dnn, f"{kind}_pool2d", dnn.pool2d, kind, self, layout, params, out, layout.shape[:2] + (oh, ow))
        return out if ok else None

    def batch_norm_fused(self, layout, weight, w_layout, bias, b_layout, mean, m_layout, var, v_layout,
                         training: bool, momentum: float, eps: float):
        """Spatial batch norm forward through the DNN library, updating the running stats in
        place when training; None where the library does not take the case (F.batch_norm
        then runs its composite; see the contract). weight/bias/mean/var: 1-d, unit stride,
        of bn_param_dtype(self.dtype)."""
        if not 2 <= layout.ndim <= 4 or layout.numel() == 0:
            return None
        dnn = dnn_for(self.device)
        if dnn is None or not dnn.supports_batch_norm(self.dtype, layout):
            return None
        c, pdt = layout.shape[1], bn_param_dtype(self.dtype)
        ops = ((weight, w_layout), (bias, b_layout), (mean, m_layout), (var, v_layout))
        if any(st.dtype is not pdt or tuple(lay.shape) != (c,) or (c > 1 and lay.strides[0] != 1) for st, lay in ops):
            return None
        out = self._new(layout.numel())
        save = [self._new(c, pdt), self._new(c, pdt)]   # batch mean / inverse std (unused: the backward recomputes)
        ok = dnn_run(dnn, "batch_norm", dnn.batch_norm, self, layout, out,
                     *[st.addr(lay.offset) for st, lay in ops], float(eps), bool(training), float(momentum),
                     save[0].ptr, save[1].ptr)
        return out if ok else None

    def avg_pool2d(self, layout, params: PoolParams):
        out = self._dnn_pool("avg", layout, params)
        if out is not None:
            return out
        out_hw = params.out_size(*layout.shape[2:]) if layout.ndim == 4 else (0, 0)
        return self._window_op("avg_pool2d", "avg_pool2d", layout, out_hw,
                               (*params.kernel, *params.stride, *params.padding, 1, 1),
                               (("int32", int(bool(params.count_include_pad))),))

    def max_pool2d(self, layout, params: PoolParams):
        out = self._dnn_pool("max", layout, params)
        if out is not None:
            return out
        out_hw = params.out_size(*layout.shape[2:]) if layout.ndim == 4 else (0, 0)
        return self._window_op("max_pool2d", "max_pool2d", layout, out_hw,
                               (*params.kernel, *params.stride, *params.padding, *params.dilation))

    def max_pool2d_backward(self, layout, params: PoolParams, grad, grad_layout):
        op = "max_pool2d_backward"
        out_hw = params.out_size(*layout.shape[2:]) if layout.ndim == 4 else None
        if grad.dtype is not self.dtype or out_hw is None or tuple(grad_layout.shape) != layout.shape[:2] + out_hw:
            raise storage_error(DTypeError if grad.dtype is not self.dtype else ShapeError, op,
                                "expected a 4-d (b, c, h, w) input and a grad of max_pool2d's output shape "
                                "(b, c, oh, ow) and the input's dtype",
                                self=(self, layout), grad=(grad, grad_layout))
        dev = self.device
        kernel = kernel_for(dev, f"{op}_{self.dtype.short}", op, self=(self, layout), grad=(grad, grad_layout))
        b, c, h, w = layout.shape
        n = b * c * h * w
        out = self._new(n)
        if n:  # one thread per input element: the gather form (no atomics)
            geom = _GEOM2D.pack(b, c, h, w, *params.kernel, *out_hw, *params.stride, *params.padding,
                                *params.dilation)
            dev.launch(kernel, grid_for(dev, n), BLOCK,
                       [("int64", n), ("bytes", geom), ("bytes", view4(layout)), ("bytes", view4(grad_layout)),
                        ("ptr", self.buffer.ptr), ("ptr", grad.buffer.ptr), ("ptr", out.buffer.ptr)])
        return out

    def upsample_nearest2d(self, layout, out_h, out_w):
        return self._window_op("upsample_nearest2d", "upsample_nearest2d", layout, (out_h, out_w),
                               (1, 1, 1, 1, 0, 0, 1, 1))


def _unsqueeze_h(layout: Layout) -> Layout:
    """(b, c, l) -> (b, c, 1, l): 1-d ops run as 2-d ops of height 1."""
    return Layout(layout.shape[:2] + (1,) + layout.shape[2:], layout.strides[:2] + (0,) + layout.strides[2:],
                  layout.offset)
