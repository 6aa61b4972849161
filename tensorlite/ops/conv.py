"""Convolutions (conv1d/2d and their transposes), pooling (max, average) and nearest upsampling:
the frontend of the storage's conv and pool contract methods, with their gradients.
"""
from __future__ import annotations

import builtins
import numbers
from math import isfinite

import numpy as np

from .. import amp, dtype as dtypes
from .._core import TensorBase, check_size, ints, out_of_memory, same_device, wrap
from ..autograd import attach, is_grad_enabled
from ..backend import ConvParams, PoolParams
from ..errors import ArgumentError, DTypeError, ShapeError, describe
from .creation import full, tensor, zeros
from .elementwise import where
from .joins import cat
from .views import embed, narrow


def as_tuple(v, n):
    """`v` as an n-tuple: a tuple or list as given, an int repeated (kernel sizes, strides)."""
    return tuple(v) if isinstance(v, (tuple, list)) else (int(v),) * n


def _conv_weight_grad(x, g, wshape, stride, padding, dilation, groups):
    """dL/dW of a 2-D conv as a conv of the input with the output gradient (batch as channels)."""
    per = []
    cin, cout = x.shape[1] // groups, g.shape[1] // groups
    for gi in range(groups):
        xt = narrow(x, 1, gi * cin, cin).transpose(0, 1)
        gt = narrow(g, 1, gi * cout, cout).transpose(0, 1)
        r = conv2d(xt, gt, None, dilation, padding, stride)
        per.append(r[:, :, :wshape[2], :wshape[3]].transpose(0, 1))
    return per[0] if groups == 1 else cat(per, 0)


# (input, ConvParams) of a conv after PyTorch's checks of the operands and parameters; the input
# is zero-padded on the right where padding='same' needs one more on that side
def _conv_params(op, x, w, nd, stride, padding, dilation, groups, output_padding, transposed):
    if not isinstance(x, TensorBase) or not isinstance(w, TensorBase):
        raise DTypeError(f"{describe(op, input=x, weight=w)}: input and weight must be tensors")
    same_device(op, input=x, weight=w)
    if x.ndim != nd + 2 or w.ndim != nd + 2:
        raise ShapeError(f"{describe(op, input=x, weight=w)}: expected {nd + 2}-D input and weight")
    ops = dict(input=x, weight=w)
    groups = ints(op, "groups", groups, low=1, **ops)
    cin = w.shape[0] if transposed else w.shape[1] * groups
    if x.shape[1] != cin:  # PyTorch's wording: the counts, the weight and groups
        why = f"the weight's dim 0, groups={groups}" if transposed else f"{w.shape[1]} per group x groups={groups}"
        raise ShapeError(f"{describe(op, **ops)}: expected an input with {cin} channels ({why}), "
                         f"got {x.shape[1]} channels")
    if w.shape[0] % groups or w.shape[0] < groups:
        raise ShapeError(f"{describe(op, **ops)}: the weight's first dim ({w.shape[0]} "
                         f"{'input' if transposed else 'output'} channels) is not a multiple of groups={groups}")
    if builtins.min(w.shape[2:]) < 1:
        raise ShapeError(f"{describe(op, **ops)}: a kernel size is 0")
    if builtins.min(x.shape[2:]) < 1 and x.shape[0] and x.shape[1]:  # PyTorch's rule and wording
        raise ShapeError(f"{describe(op, **ops)}: only zero batch or zero channel inputs may have a spatial size "
                         f"of 0, got input shape {tuple(x.shape)}")
    if x.dtype is not w.dtype:
        raise DTypeError(f"{describe(op, **ops)}: input and weight dtypes differ")
    stride, dilation = ints(op, "stride", stride, nd, 1, **ops), ints(op, "dilation", dilation, nd, 1, **ops)
    if isinstance(padding, str) and not transposed:
        if padding not in ("same", "valid") or (padding == "same" and builtins.max(stride) > 1):
            raise ArgumentError(f"{describe(op, **ops)}: padding must be 'valid', 'same' (stride 1) or integers, "
                                f"got {padding!r} with stride {stride}")
        total = [d * (k - 1) if padding == "same" else 0 for d, k in zip(dilation, w.shape[2:])]
        for i, t in enumerate(total):  # an odd total: the extra zero goes on the right, as PyTorch
            if t % 2:
                x = cat([x, zeros(x.shape[:2 + i] + (1,) + x.shape[3 + i:], dtype=x.dtype, device=x._device)], 2 + i)
        padding = tuple(t // 2 for t in total)
    padding = ints(op, "padding", padding, nd, 0, **ops)
    out_pad = ints(op, "output_padding", output_padding, nd, 0, **ops) if transposed else ()
    if any(o >= builtins.max(s, d) for o, s, d in zip(out_pad, stride, dilation)):
        raise ArgumentError(f"{describe(op, **ops)}: output_padding {out_pad} must be smaller than the stride "
                            f"{stride} or the dilation {dilation}")
    return x, ConvParams(stride, padding, dilation, groups, out_pad)


def _conv(op, x, w, bias, nd, stride, padding, dilation, groups, output_padding=0):
    transposed = op.startswith("conv_transpose")
    x, w, bias = amp.low_precision(x, w, bias)
    x, p = _conv_params(op, x, w, nd, stride, padding, dilation, groups, output_padding, transposed)
    groups = p.groups
    spatial = p.out_size(x.shape[2:], w.shape[2:], transposed)
    if builtins.min(spatial) <= 0:
        raise ShapeError(f"{describe(op, input=x, weight=w)}: output size {spatial} is not positive")
    cout = w.shape[1] * groups if transposed else w.shape[0]
    shape = (x.shape[0], cout) + spatial
    check_size(op, shape, x.dtype, x._device)
    try:
        if x.numel() and cout:
            st = getattr(x._storage, op)(x._layout, w._storage, w._layout, p)
        else:  # nothing to compute (no batch, no channels): no kernel is launched
            st = x._device.zeros(shape, x.dtype)
    except MemoryError as e:  # more than is free now (check_size allows up to the total)
        raise out_of_memory(op, shape, x.dtype, x._device, e) from None
    out = wrap(st, shape, x.dtype)

    def grad(g):
        if not x.numel() or not g.numel():  # an empty batch, no channels, no input pixels: no gradient flows
            return tuple(zeros(t.shape, dtype=t.dtype, device=t._device) if t.requires_grad else None for t in (x, w))
        # work in 2-D: a 1-D conv is a 2-D conv over a height of 1 (stride 1, padding 0, dilation 1)
        x2, w2, g2 = (t.unsqueeze(2) for t in (x, w, g)) if nd == 1 else (x, w, g)
        q = p.as_2d() if nd == 1 else p
        # only the gradients some input needs (a network's first conv: not its input's, the costlier one)
        gx = gw = None
        if transposed:
            if x.requires_grad:
                gx = conv2d(g2, w2, None, q.stride, q.padding, q.dilation, groups)
            if w.requires_grad:
                gw = _conv_weight_grad(g2, x2, w2.shape, q.stride, q.padding, q.dilation, groups)
        else:  # the input's gradient: the transposed conv, output-padded back to the input's size
            if x.requires_grad:
                op2 = tuple(a - b for a, b in zip(x2.shape[2:], q.out_size(g2.shape[2:], w2.shape[2:], True)))
                gx = conv_transpose2d(g2, w2, None, q.stride, q.padding, op2, groups, q.dilation)
            if w.requires_grad:
                gw = _conv_weight_grad(x2, g2, w2.shape, q.stride, q.padding, q.dilation, groups)
        return tuple(t.squeeze(2) if nd == 1 and t is not None else t for t in (gx, gw))
    out = attach(out, (x, w), grad, op, (x, w))
    return out if bias is None else out + bias.reshape((1, -1) + (1,) * nd)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D convolution of (N, C, L) by weight (out, C / groups, k), as torch.nn.functional.conv1d.

    >>> import tensorlite as tl
    >>> tl.conv1d(tl.ones(1, 1, 4), tl.ones(1, 1, 2)).tolist()
    [[[2.0, 2.0, 2.0]]]
    """
    return _conv("conv1d", input, weight, bias, 1, stride, padding, dilation, groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D convolution of (N, C, H, W) by weight (out, C / groups, kh, kw), as torch.nn.functional.conv2d.

    >>> import tensorlite as tl
    >>> tl.conv2d(tl.ones(1, 1, 3, 3), tl.ones(1, 1, 2, 2), padding=1).shape
    tensorlite.Size([1, 1, 4, 4])
    """
    return _conv("conv2d", input, weight, bias, 2, stride, padding, dilation, groups)


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """1-D transposed convolution, weight (C, out / groups, k), as torch.nn.functional.conv_transpose1d.

    >>> import tensorlite as tl
    >>> tl.conv_transpose1d(tl.ones(1, 1, 2), tl.ones(1, 1, 2)).tolist()
    [[[1.0, 2.0, 1.0]]]
    """
    return _conv("conv_transpose1d", input, weight, bias, 1, stride, padding, dilation, groups, output_padding)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """2-D transposed convolution, weight (C, out / groups, kh, kw), as torch.nn.functional.conv_transpose2d.

    >>> import tensorlite as tl
    >>> tl.conv_transpose2d(tl.ones(1, 2, 3, 3), tl.ones(2, 4, 2, 2), stride=2).shape
    tensorlite.Size([1, 4, 6, 6])
    """
    return _conv("conv_transpose2d", input, weight, bias, 2, stride, padding, dilation, groups, output_padding)


def _pad2d(x, p, value):  # x (b, c, h, w) with p = (ph, pw) entries of value on each side
    for d, n in ((3, p[1]), (2, p[0])):
        if n:
            side = full(x.shape[:d] + (n,) + x.shape[d + 1:], value, dtype=x.dtype, device=x._device)
            x = cat([side, x, side], d)
    return x


def _pool(op, x, kernel_size, stride, padding, dilation=1, count_include_pad=True, ceil_mode=False):
    if not isinstance(x, TensorBase) or x.ndim != 4:
        raise ShapeError(f"{describe(op, input=x)}: expected a 4-D (b, c, h, w) input")
    if ceil_mode:
        raise ArgumentError(f"{describe(op, input=x)}: ceil_mode=True is not supported")
    k = ints(op, "kernel_size", kernel_size, 2, 1, input=x)
    p = PoolParams(k, k if stride is None else ints(op, "stride", stride, 2, 1, input=x),
                   ints(op, "padding", padding, 2, 0, input=x), ints(op, "dilation", dilation, 2, 1, input=x),
                   bool(count_include_pad))
    if any(pp * 2 > kk for pp, kk in zip(p.padding, k)):
        raise ArgumentError(f"{describe(op, input=x)}: padding {p.padding} must be at most half the kernel {k}")
    oh, ow = p.out_size(*x.shape[2:])
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"{describe(op, input=x)}: output size ({oh}, {ow}) is not positive")
    out = wrap(getattr(x._storage, op)(x._layout, p) if x.numel() else x._device.zeros(x.shape[:2] + (oh, ow), x.dtype),
                x.shape[:2] + (oh, ow), x.dtype)

    def grad(g):
        is_max = op == "max_pool2d"
        if is_max and not is_grad_enabled():  # one backend pass; create_graph takes the composite below
            if not x.numel():
                return (zeros(x.shape, dtype=x.dtype, device=x._device),)
            g = g._cast(x.dtype)
            return (wrap(x._storage.max_pool2d_backward(x._layout, p, g._storage, g._layout), x.shape, x.dtype),)
        # the composite, differentiable again (create_graph) where it is Tensor ops: visit the
        # kernel offsets in scan order; each is a strided window of the padded input
        xp = _pad2d(x, p.padding, float("-inf")) if is_max else None
        padded = (x.shape[0], x.shape[1], x.shape[2] + 2 * p.padding[0], x.shape[3] + 2 * p.padding[1])
        taken = zeros(g.shape, dtype=dtypes.bool_, device=g._device) if is_max else None
        gw = None if is_max else g / _avg_divisor(x.shape[2:], (oh, ow), p, g)
        gp = zeros(padded, dtype=g.dtype, device=g._device)
        for i in range(k[0]):
            for j in range(k[1]):
                h0, w0 = i * p.dilation[0], j * p.dilation[1]
                if is_max:
                    win = xp[:, :, h0:h0 + (oh - 1) * p.stride[0] + 1:p.stride[0],
                             w0:w0 + (ow - 1) * p.stride[1] + 1:p.stride[1]]
                    hit = (win == out) & ~taken
                    taken = taken | hit
                part = embed(where(hit, g, 0.0) if is_max else gw, padded[:3] + (ow,), 2, h0, p.stride[0])
                gp = gp + embed(part, padded, 3, w0, p.stride[1])
        return (gp[:, :, p.padding[0]:p.padding[0] + x.shape[2], p.padding[1]:p.padding[1] + x.shape[3]],)
    return attach(out, (x,), grad, op, (x, out))


def _avg_divisor(in_hw, out_hw, p, like):
    if p.count_include_pad:
        return float(p.kernel[0] * p.kernel[1])
    starts = [np.arange(o) * s - pad for o, s, pad in zip(out_hw, p.stride, p.padding)]  # each window's first row/col
    counts = [np.minimum(st + k, n) - np.maximum(st, 0) for st, k, n in zip(starts, p.kernel, in_hw)]  # inside ones
    return tensor(np.outer(*counts), dtype=like.dtype, device=like._device)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """2-D max pooling of (N, C, H, W), as torch.nn.functional.max_pool2d (no ceil_mode).

    >>> import tensorlite as tl
    >>> tl.max_pool2d(tl.arange(16.0).reshape(1, 1, 4, 4), 2).tolist()
    [[[[5.0, 7.0], [13.0, 15.0]]]]
    """
    return _pool("max_pool2d", input, kernel_size, stride, padding, dilation, True, ceil_mode)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """2-D average pooling of (N, C, H, W), as torch.nn.functional.avg_pool2d (no ceil_mode).

    >>> import tensorlite as tl
    >>> tl.avg_pool2d(tl.arange(16.0).reshape(1, 1, 4, 4), 2).tolist()
    [[[[2.5, 4.5], [10.5, 12.5]]]]
    """
    return _pool("avg_pool2d", input, kernel_size, stride, padding, 1, count_include_pad, ceil_mode)


def upsample_nearest2d(x, size=None, scale_factor=None):
    """(N, C, H, W) resized to `size` or by scale_factor, nearest neighbour, as F.interpolate(mode='nearest').

    >>> import tensorlite as tl
    >>> tl.upsample_nearest2d(tl.tensor([[[[1.0, 2.0]]]]), scale_factor=2).tolist()
    [[[[1.0, 1.0, 2.0, 2.0], [1.0, 1.0, 2.0, 2.0]]]]
    """
    op = "upsample_nearest2d"
    if not isinstance(x, TensorBase) or x.ndim != 4 or builtins.min(x.shape[2:]) < 1:
        raise ShapeError(f"{describe(op, input=x)}: expected a 4-D (b, c, h, w) input with h, w >= 1")
    if (size is None) == (scale_factor is None):
        raise ArgumentError(f"{describe(op, input=x)}: give exactly one of size and scale_factor")
    if size is None:
        sf = scale_factor if isinstance(scale_factor, (tuple, list)) else (scale_factor,) * 2
        if len(sf) != 2 or not builtins.all(isinstance(f, numbers.Real) and isfinite(f) and f > 0 for f in sf):
            raise ArgumentError(f"{describe(op, input=x)}: scale_factor must be 1 or 2 positive finite numbers, "
                                f"got {scale_factor!r}")
        size = (int(x.shape[2] * sf[0]), int(x.shape[3] * sf[1]))
    oh, ow = ints(op, "the output size", size, 2, 1, input=x)
    shape = x.shape[:2] + (oh, ow)
    check_size(op, shape, x.dtype, x._device)
    h, w = x.shape[2:]
    try:
        out = wrap(x._storage.upsample_nearest2d(x._layout, oh, ow) if x.numel() else x._device.zeros(shape, x.dtype),
                   shape, x.dtype)
    except MemoryError as e:  # more than is free now (check_size allows up to the total)
        raise out_of_memory(op, shape, x.dtype, x._device, e) from None

    def grad(g):
        ih = tensor((np.arange(oh) * h // oh).astype(np.int64), device=g._device)
        iw = tensor((np.arange(ow) * w // ow).astype(np.int64), device=g._device)
        gh = zeros(x.shape[:2] + (h, ow), dtype=g.dtype, device=g._device).index_add(2, ih, g)
        return (zeros(x.shape, dtype=g.dtype, device=g._device).index_add(3, iw, gh),)
    return attach(out, (x,), grad, "upsample_nearest2d")
