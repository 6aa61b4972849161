"""Normalisation: layer_norm and rms_norm (fused ops with fused backwards, and their
composite references), batch / group / instance norm and normalize, as torch.nn.functional's."""
from __future__ import annotations

from math import prod

from ... import amp
from ... import dtype as dtypes
from ...autograd import no_grad, note_write
from ...custom_op import custom_op, normalize_dim, result, storage_and_layout
from ...errors import ArgumentError, DeviceError, DTypeError, ShapeError, describe
from ...ops.linalg import p_norm  # ||x||_p with PyTorch's gradient, also tl.linalg's
from ...ops.elementwise import maximum
from ...tensor import Tensor
from .common import FINFO_EPS, flatten_normalized, reshaped


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
    x, weight, bias = amp.full_precision(x, weight, bias)
    x2, (w, b), n = flatten_normalized("layer_norm", x, normalized_shape, weight=weight, bias=bias)
    xs, xl = storage_and_layout(x2)
    y = result(xs.layer_norm(xl, *storage_and_layout(w), *storage_and_layout(b), eps), x2.shape, x2.dtype)
    return reshaped(custom_op(y, (x2, w, b), lambda g: _fused_norm_grads("layer_norm", g, x2, w, b, eps),
                               "layer_norm", (x2, w)), x.shape)


def rms_norm(x, normalized_shape, weight=None, eps=None):
    """x / sqrt(mean(x^2) + eps) * weight; eps defaults to the machine epsilon of the computing
    type (float32 for float16/bfloat16, as PyTorch)."""
    x, weight = amp.full_precision(x, weight)
    x2, (w,), n = flatten_normalized("rms_norm", x, normalized_shape, weight=weight)
    eps = FINFO_EPS[x2.dtype.name] if eps is None else float(eps)
    xs, xl = storage_and_layout(x2)
    y = result(xs.rms_norm(xl, *storage_and_layout(w), eps), x2.shape, x2.dtype)
    return reshaped(custom_op(y, (x2, w), lambda g: _fused_norm_grads("rms_norm", g, x2, w, None, eps)[:2],
                               "rms_norm", (x2, w)), x.shape)


def layer_norm_slow(x, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    x2, (w, b), _ = flatten_normalized("layer_norm", x, normalized_shape, weight=weight, bias=bias)
    y = _normalize_rows(x2, eps, center=True)
    y = y if w is None else y * w
    return (y if b is None else y + b).reshape(x.shape)


def rms_norm_slow(x, normalized_shape, weight=None, eps=None):
    x2, (w,), _ = flatten_normalized("rms_norm", x, normalized_shape, weight=weight)
    eps = FINFO_EPS[x2.dtype.name] if eps is None else float(eps)
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
    cdt = dtypes.float32 if x.dtype in dtypes.HALVES else x.dtype
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


def normalize(x, p: float = 2.0, dim: int = 1, eps: float = 1e-12):
    """x / max(||x||_p, eps) along dim (torch.nn.functional.normalize); p > 0, or inf."""
    dim = normalize_dim(dim, x.ndim, "normalize", x)
    if not (isinstance(p, (int, float)) and p > 0):
        raise ArgumentError(f"{describe('normalize', input=x)}: p must be a positive number, got {p!r}")
    return x / maximum(p_norm(x, p, dim), eps)
