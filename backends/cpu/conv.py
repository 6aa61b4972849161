"""CpuStorage's convolution and pooling: conv, conv_transpose, avg/max pooling and max pooling's
backward, nearest upsampling (NCHW; 1-D ops are 2-D ops with height 1). A mixin (storage.py)."""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tensorlite.backend import ConvParams, PoolParams
from tensorlite.errors import DTypeError, ShapeError, storage_error

from .common import F32, accumulate_dtype


def _windows(x: np.ndarray, k, stride, dilation) -> np.ndarray:
    """(b, c, H, W) padded input -> (b, c, oh, ow, kh, kw) strided windows (no copy)."""
    span = tuple(d * (kk - 1) + 1 for kk, d in zip(k, dilation))
    w = sliding_window_view(x, span, axis=(2, 3))
    return w[:, :, ::stride[0], ::stride[1], ::dilation[0], ::dilation[1]]


def _window_reduce(ufunc, x: np.ndarray, k, stride, dilation) -> np.ndarray:
    """ufunc (np.add, np.maximum) over each window of a padded (b, c, H, W), one strided slice per
    kernel offset in scan order (reducing the 6-D window view is 10x slower)."""
    win = _windows(x, k, stride, dilation)
    out = np.array(win[..., 0, 0])
    for i in range(k[0]):
        for j in range(k[1]):
            if i or j:
                ufunc(out, win[..., i, j], out=out)
    return out


def _window_max_by_rows(x: np.ndarray, k, stride, dilation, out_hw) -> np.ndarray:
    """The window max of a padded (b, c, H, W) array of a total order without ties in value
    (integer keys, where the order of the comparisons cannot matter): over each row's kw
    offsets first (whole rows: long strided loops), then over the kh rows of each window."""
    (sh, sw), (dh, dw), (oh, ow) = stride, dilation, out_hw
    rows = None
    for j in range(k[1]):
        v = x[:, :, :, j * dw:j * dw + (ow - 1) * sw + 1:sw]
        rows = np.array(v) if rows is None else np.maximum(rows, v, out=rows)
    out = None
    for i in range(k[0]):
        v = rows[:, :, i * dh:i * dh + (oh - 1) * sh + 1:sh]
        out = np.array(v) if out is None else np.maximum(out, v, out=out)
    return out


def _max_pool_winner_keys(x: np.ndarray, p: PoolParams, out_hw) -> np.ndarray:
    """Each max-pool window's winner (the element PyTorch's rule picks, see max_pool2d_backward's
    contract) as its position iy * w + ix in its (h, w) plane, for a float32 (b, c, h, w) x with
    h * w < 2**31.

    One int64 key per element makes the rule a plain window max: the high 32 bits order the
    values (float32 bits as two's complement integers, -0 = +0; NaN above +inf), the low 32 bits
    break ties by the element's row-major position in its plane, which within any window is the
    scan order: reversed (the first maximum wins) for numbers, as is for NaN (the last NaN wins).
    Padding is the lowest key, below a real -inf. Contiguous integer passes and a window max:
    ~10x faster than tracking the running max and its offset through the strided windows."""
    h, w = x.shape[2:]
    bits = np.ascontiguousarray(x).view(np.int32)
    if bits.size and bits.min() < 0:  # sign bits (skipped after a relu): sign-magnitude -> two's complement
        sign = bits >> 31
        bits = bits & np.int32(0x7FFFFFFF)
        bits ^= sign
        bits -= sign  # -0 and +0 both become 0
    pos = np.arange(h * w, dtype=np.int64).reshape(h, w)
    has_nan = bool(np.isnan(x.max())) if x.size else False  # one fast reduction; NaN is rare
    if has_nan:
        nan = np.isnan(x)
        bits = np.where(nan, np.iinfo(np.int32).max, bits)
    keys = bits.astype(np.int64)
    keys <<= 32
    tie = 0xFFFFFFFF - pos  # a larger key for an earlier position
    if has_nan:
        keys |= np.where(nan, pos, tie)
    else:
        keys |= tie
    best = _window_max_by_rows(_pad_hw(keys, p.padding, np.iinfo(np.int64).min), p.kernel, p.stride, p.dilation,
                               out_hw)
    nan_won = (best >> 32) == np.iinfo(np.int32).max if has_nan else None
    low = np.bitwise_and(best, 0xFFFFFFFF, out=best)
    return np.subtract(0xFFFFFFFF, low, out=low) if nan_won is None else np.where(nan_won, low, 0xFFFFFFFF - low)


def _max_pool_winner_scan(x: np.ndarray, p: PoolParams, out_hw) -> np.ndarray:
    """_max_pool_winner_keys for any float dtype (float64 values do not fit a key beside their
    position): PyTorch's scan itself, one kernel offset at a time over the strided windows. A
    value replaces the running max (-inf at the first unpadded element) when greater or NaN."""
    b, c, h, w = x.shape
    k, stride, pad, dil = p.kernel, p.stride, p.padding, p.dilation
    win = _windows(_pad_hw(x, pad, -np.inf), k, stride, dil)  # (b, c, oh, ow, kh, kw); padding never wins
    starts = [np.arange(n) * s - pp for n, s, pp in zip(out_hw, stride, pad)]  # windows' first rows / cols
    # each window's first unpadded element: ceil(-start / d) kernel steps past a start in the padding
    firsts = [np.maximum(0, -(st // d)) for st, d in zip(starts, dil)]
    best = np.full((b, c) + tuple(out_hw), -np.inf, x.dtype)
    arg = np.empty(best.shape, np.int64)
    arg[...] = firsts[0][:, None] * k[1] + firsts[1][None, :]
    take, nan = np.empty(best.shape, bool), np.empty(best.shape, bool)
    for off in range(k[0] * k[1]):
        v = win[..., off // k[1], off % k[1]]
        np.greater(v, best, out=take)
        take |= np.not_equal(v, v, out=nan)  # NaN: the only value unequal to itself
        np.copyto(best, v, where=take)
        np.copyto(arg, off, where=take)
    rows = starts[0][:, None] + (arg // k[1]) * dil[0]
    cols = starts[1][None, :] + (arg % k[1]) * dil[1]
    return rows * w + cols


def _windows_holding_input(n, out, k, stride, pad, dilation) -> np.ndarray:
    """Along one axis of n input elements: whether each of the `out` pooling windows covers at
    least one of them (not padding alone)."""
    pos = (np.arange(out) * stride - pad)[:, None] + np.arange(k) * dilation
    return ((pos >= 0) & (pos < n)).any(axis=1)


def _pad_hw(x: np.ndarray, padding, value=0) -> np.ndarray:
    ph, pw = padding
    if not ph and not pw:
        return x
    out = np.full(x.shape[:2] + (x.shape[2] + 2 * ph, x.shape[3] + 2 * pw), value, x.dtype)
    out[:, :, ph:ph + x.shape[2], pw:pw + x.shape[3]] = x
    return out


def _conv2d(x: np.ndarray, w: np.ndarray, p: ConvParams) -> np.ndarray:
    """x (b, c_in, h, w), w (c_out, c_in/g, kh, kw) -> (b, c_out, oh, ow): im2col (one copy) and
    one GEMM per group. The columns' inner dim is the larger of the output's pixels (oh, ow) and
    the kernel's (kh, kw), so the copy runs along rows (the weight gradient is a conv whose
    kernel is larger than its output)."""
    b, c_in = x.shape[:2]
    c_out, g = w.shape[0], p.groups
    kh, kw = w.shape[2:]
    win = _windows(_pad_hw(x, p.padding), (kh, kw), p.stride, p.dilation)  # (b, c_in, oh, ow, kh, kw)
    oh, ow = win.shape[2:4]
    wg = w.reshape(g, c_out // g, -1)
    if kh * kw <= oh * ow:  # (c_out/g, K) @ (K, b*oh*ow) per group
        cols = win.transpose(1, 4, 5, 0, 2, 3).reshape(g, -1, b * oh * ow)
        return np.matmul(wg, cols).reshape(c_out, b, oh, ow).transpose(1, 0, 2, 3)
    cols = win.transpose(0, 2, 3, 1, 4, 5).reshape(b * oh * ow, g, -1).transpose(1, 0, 2)  # (b*oh*ow, K) per group
    out = np.matmul(cols, wg.transpose(0, 2, 1))  # (g, b*oh*ow, c_out/g)
    return out.transpose(1, 0, 2).reshape(b, oh, ow, c_out).transpose(0, 3, 1, 2)


def _conv_transpose2d(x: np.ndarray, w: np.ndarray, p: ConvParams) -> np.ndarray:
    """x (b, c_in, h, w), w (c_in, c_out/g, kh, kw): each input pixel scatters
    x * kernel into the output (one GEMM per group, then col2im), then `padding` is cropped
    from both sides."""
    b, c_in, h, wd = x.shape
    g = p.groups
    kh, kw = w.shape[2:]
    c_out = w.shape[1] * g
    oh, ow = p.out_size((h, wd), (kh, kw), transposed=True)
    (sh, sw), (dh, dw), (ph, pw) = p.stride, p.dilation, p.padding
    wt = w.reshape(g, c_in // g, -1).transpose(0, 2, 1)  # (g, c_out/g * kh * kw, c_in/g)
    # uncropped canvas; output_padding may reach past it, so leave room for that too
    full_h, full_w = max((h - 1) * sh + dh * (kh - 1) + 1, ph + oh), max((wd - 1) * sw + dw * (kw - 1) + 1, pw + ow)
    if sh == sw == 1 and np.isfinite(w).all():
        # The input placed on the canvas's own (b, full_h, full_w) grid (zeros around it): kernel offset
        # (i, j) then moves every column by one flat shift, so col2im is kh * kw adds of whole
        # contiguous rows instead of strided 4-d windows (the GEMM's extra zero columns cost less).
        # Not with an inf/NaN weight: the grid's zeros times it would be NaN where no pixel lands.
        n = b * full_h * full_w
        grid = np.zeros((c_in, b, full_h, full_w), x.dtype)
        grid[:, :, :h, :wd] = x.transpose(1, 0, 2, 3)
        cols = np.matmul(wt, grid.reshape(g, c_in // g, n)).reshape(c_out, kh, kw, n)
        canvas = np.zeros((c_out, n + dh * (kh - 1) * full_w + dw * (kw - 1)), cols.dtype)
        for i in range(kh):
            for j in range(kw):
                shift = i * dh * full_w + j * dw  # no wrap: a real pixel's target stays in its row and image
                canvas[:, shift:shift + n] += cols[:, i, j]
        full = canvas[:, :n].reshape(c_out, b, full_h, full_w)
    else:
        xt = x.reshape(b, g, c_in // g, h * wd).transpose(1, 2, 0, 3).reshape(g, c_in // g, b * h * wd)
        cols = np.matmul(wt, xt).reshape(c_out, kh, kw, b, h, wd)
        full = np.zeros((c_out, b, full_h, full_w), cols.dtype)
        for i in range(kh):
            for j in range(kw):
                full[:, :, i * dh:i * dh + (h - 1) * sh + 1:sh, j * dw:j * dw + (wd - 1) * sw + 1:sw] += cols[:, i, j]
    return full[:, :, ph:ph + oh, pw:pw + ow].transpose(1, 0, 2, 3)


class ConvOps:
    __slots__ = ()  # a mixin of CpuStorage (storage.py), which holds the data: self is a CpuStorage

    def _conv(self, fn, layout, kernel, kernel_layout, params, one_d):
        acc = accumulate_dtype(self.dtype)
        x, w = self._read(layout).astype(acc, copy=False), kernel._read(kernel_layout).astype(acc, copy=False)
        if one_d:  # (b, c, l) -> (b, c, 1, l)
            x, w, params = x[:, :, None], w[:, :, None], params.as_2d()
        out = fn(x, w, params)
        return self._new(out[:, :, 0] if one_d else out)

    def conv1d(self, layout, kernel, kernel_layout, params):
        return self._conv(_conv2d, layout, kernel, kernel_layout, params, True)

    def conv2d(self, layout, kernel, kernel_layout, params):
        return self._conv(_conv2d, layout, kernel, kernel_layout, params, False)

    def conv_transpose1d(self, layout, kernel, kernel_layout, params):
        return self._conv(_conv_transpose2d, layout, kernel, kernel_layout, params, True)

    def conv_transpose2d(self, layout, kernel, kernel_layout, params):
        return self._conv(_conv_transpose2d, layout, kernel, kernel_layout, params, False)

    def avg_pool2d(self, layout, params: PoolParams):
        work = accumulate_dtype(self.dtype) if self.dtype.is_floating_point else np.float64
        x = self._read(layout).astype(work)
        sums = _window_reduce(np.add, _pad_hw(x, params.padding), params.kernel, params.stride, (1, 1))
        if params.count_include_pad:
            count = params.kernel[0] * params.kernel[1]
        else:  # divide by the number of real (unpadded) elements in each window
            ones = _pad_hw(np.ones((1, 1) + x.shape[2:], x.dtype), params.padding)
            count = _windows(ones, params.kernel, params.stride, (1, 1)).sum(axis=(-2, -1))
        return self._new(sums / count)

    def max_pool2d(self, layout, params: PoolParams):
        x = self._read(layout, compute=True)
        lowest = -np.inf if x.dtype.kind == "f" else (False if x.dtype.kind == "b" else np.iinfo(x.dtype).min)
        return self._new(_window_reduce(np.maximum, _pad_hw(x, params.padding, lowest), params.kernel, params.stride,
                                        params.dilation))

    def max_pool2d_backward(self, layout, params: PoolParams, grad, grad_layout):
        x = self._float_read("max_pool2d_backward", layout)
        out_hw = params.out_size(*layout.shape[2:]) if layout.ndim == 4 else None
        if grad.dtype is not self.dtype or out_hw is None or tuple(grad_layout.shape) != layout.shape[:2] + out_hw:
            raise storage_error(DTypeError if grad.dtype is not self.dtype else ShapeError, "max_pool2d_backward",
                                "expected a 4-d (b, c, h, w) input and a grad of max_pool2d's output shape "
                                "(b, c, oh, ow) and the input's dtype",
                                self=(self, layout), grad=(grad, grad_layout))
        g = grad._read(grad_layout, compute=True).reshape(-1)
        b, c, h, w = x.shape
        winner = _max_pool_winner_keys if x.dtype == F32 and h * w < 2 ** 31 else _max_pool_winner_scan
        planes = x.reshape(b * c, 1, h, w)
        won = np.empty((b * c, 1) + out_hw, np.int64)
        step = max(1, (1 << 16) // max(1, h * w))  # planes of ~64k elements at a time: the int64 passes stay in cache
        for i in range(0, b * c, step):
            won[i:i + step] = winner(planes[i:i + step], params, out_hw)
        won += (np.arange(b * c, dtype=np.int64) * (h * w)).reshape(-1, 1, 1, 1)  # position in x.reshape(-1)
        won = won.reshape(-1)
        # a window of padding alone (a dilated kernel over a small input) has no winner: its
        # gradient goes nowhere, as PyTorch's (its output is -inf)
        holds = [_windows_holding_input(n, o, kk, s, pp, d) for n, o, kk, s, pp, d in
                 zip((h, w), out_hw, params.kernel, params.stride, params.padding, params.dilation)]
        if not (holds[0].all() and holds[1].all()):
            keep = np.broadcast_to(np.outer(*holds), (b * c,) + out_hw).reshape(-1)
            won, g = won[keep], g[keep]
        span = [d * (kk - 1) + 1 for kk, d in zip(params.kernel, params.dilation)]
        if all(s >= sp for s, sp in zip(params.stride, span)):  # disjoint windows: each input wins at most once
            out = np.zeros(x.size, g.dtype)
            out[won] = g
        else:  # an element may win several windows: their gradients add up (in float64)
            out = np.bincount(won, weights=g, minlength=x.size)
        return self._new(out.reshape(x.shape))

    def upsample_nearest2d(self, layout, out_h, out_w):
        x = self._read(layout)
        h, w = x.shape[2:]
        rows = np.arange(out_h) * h // out_h  # floor(dst * in / out), exact in integers
        cols = np.arange(out_w) * w // out_w
        return self._new(x[:, :, rows[:, None], cols[None, :]])
