"""Padding, resampling (interpolate and the deprecated upsample names) and pixel
(un)shuffle, as torch.nn.functional's."""
from __future__ import annotations

import math
import warnings

import numpy as np

from ...errors import ArgumentError, DTypeError, ShapeError, describe
from ...ops.conv import upsample_nearest2d
from ...ops.creation import full
from ...ops.joins import cat
from ...tensor import Tensor
from .common import adaptive_pool, matrix_along, select_host, upcast


def pad(input, pad, mode: str = "constant", value=None):
    """Pad (negative values crop) the last len(pad) // 2 dims, the last dim first: (left, right, top, bottom, ...).
    mode 'reflect' / 'replicate' / 'circular' pad 1-3 dims of an (N, C, *) or (C, *) input.

    >>> import tensorlite as tl; tl.nn.functional.pad(tl.tensor([[1, 2, 3]]), (2, 1), mode="reflect").tolist()
    [[3, 2, 1, 2, 3, 2]]"""
    x, op = input, "pad"
    if not isinstance(x, Tensor):
        raise DTypeError(f"pad: input must be a Tensor, got {type(x).__name__}")
    if not isinstance(pad, (tuple, list)) or len(pad) % 2 or len(pad) // 2 > x.ndim or \
            not all(isinstance(p, int) for p in pad):
        raise ArgumentError(f"{describe(op, input=x)}: pad must be an even-length sequence of ints, at most 2 per dim; "
                            f"got {pad!r}")
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise ArgumentError(f"pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', got {mode!r}")
    n = len(pad) // 2
    if mode != "constant" and value not in (None, 0):
        raise ArgumentError(f"pad: mode {mode!r} takes no value, got {value!r}")
    if mode != "constant" and (n > 3 or x.ndim not in (n + 1, n + 2)):
        raise ShapeError(f"{describe(op, input=x)}: mode {mode!r} pads 1 to 3 trailing dims of an (N, C, *) or "
                         f"(C, *) input; got {n} dims to pad")
    for i in range(n):
        d, lo, hi = x.ndim - 1 - i, pad[2 * i], pad[2 * i + 1]
        size = x.shape[d]
        if size + min(lo, 0) + min(hi, 0) < 0 or (mode != "constant" and size + lo + hi < 0):
            raise ShapeError(f"{describe(op, input=x)}: padding ({lo}, {hi}) leaves dim {d} of size {size} negative")
        if mode == "constant":
            x = x.narrow(d, max(-lo, 0), size + min(lo, 0) + min(hi, 0))  # negative pads crop

            fill = 0 if value is None else value
            lo_pad, hi_pad = ([full(x.shape[:d] + (k,) + x.shape[d + 1:], fill, dtype=x.dtype, device=x._device)]
                              if k > 0 else [] for k in (lo, hi))
            x = cat(lo_pad + [x] + hi_pad, d) if lo > 0 or hi > 0 else x
            continue
        if {"reflect": max(lo, hi) >= size, "circular": max(lo, hi) > size, "replicate": size == 0 < max(lo, hi)}[mode]:
            raise ArgumentError(f"{describe(op, input=x)}: {mode} padding ({lo}, {hi}) is too large for dim {d} "
                                f"of size {size} (reflect: < size, circular: <= size, replicate: a non-empty dim)")
        j = np.arange(-lo, size + hi)
        if mode == "reflect":
            j = (size - 1) - np.abs((size - 1) - np.abs(j))
        elif mode == "replicate":
            j = np.clip(j, 0, size - 1)
        else:  # circular
            j = j % size
        x = select_host(x, d, j)
    return x


_LINEAR_MODES = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}


def _source_matrix(mode, n_in, n_out, scale, align_corners):
    """(n_in, n_out) weights of one dim of a linear / cubic resampling, PyTorch's source positions."""
    j = np.arange(n_out, dtype=np.float64)
    if align_corners:
        src = j * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    else:
        src = (j + 0.5) * (1.0 / scale if scale else n_in / n_out) - 0.5
        src = src if mode == "bicubic" else np.maximum(src, 0.0)
    i0 = np.floor(src)
    t, i0 = src - i0, i0.astype(np.int64)
    if mode == "bicubic":  # Keys' cubic convolution, a = -0.75 (PyTorch's)
        a = -0.75

        def near(s):
            return ((a + 2) * s - (a + 3)) * s * s + 1

        def far(s):
            return ((a * s - 5 * a) * s + 8 * a) * s - 4 * a
        taps = [(i0 - 1, far(t + 1)), (i0, near(t)), (i0 + 1, near(1 - t)), (i0 + 2, far(2 - t))]
    else:
        taps = [(i0, 1 - t), (i0 + 1, t)]
    w = np.zeros((n_in, n_out))
    for i, wt in taps:  # taps past an edge read the edge (PyTorch clamps the index)
        np.add.at(w, (np.clip(i, 0, n_in - 1), np.arange(n_out)), wt)
    return w


def _nearest_source(mode, n_in, n_out, scale):
    """Source index of each output position (PyTorch's float32 rule)."""
    if mode == "nearest" and n_out in (n_in, 2 * n_in):
        return np.arange(n_out) * n_in // n_out
    r = np.float32(1.0 / scale if scale else n_in / n_out)
    j = np.arange(n_out, dtype=np.float32) + np.float32(0.5 if mode == "nearest-exact" else 0.0)
    return np.minimum(np.floor(j * r).astype(np.int64), n_in - 1)


def interpolate(input, size=None, scale_factor=None, mode: str = "nearest", align_corners=None,
                recompute_scale_factor=None, antialias: bool = False):
    """Resample the spatial dims of an (N, C, d1[, d2[, d3]]) input to `size` or by `scale_factor`;
    mode 'nearest', 'nearest-exact', 'linear', 'bilinear', 'bicubic', 'trilinear' or 'area'.

    >>> import tensorlite as tl; tl.nn.functional.interpolate(tl.tensor([[[0.0, 2.0]]]), size=4, mode="linear").tolist()
    [[[0.0, 0.5, 1.5, 2.0]]]"""
    x, op = input, "interpolate"
    nd = x.ndim - 2 if isinstance(x, Tensor) else 0
    if not 1 <= nd <= 3:
        raise ShapeError(f"{describe(op, input=x)}: expected an (N, C, d1[, d2[, d3]]) input")
    if mode not in ("nearest", "nearest-exact", "area") + tuple(_LINEAR_MODES):
        raise ArgumentError(f"interpolate: unknown mode {mode!r}")
    if _LINEAR_MODES.get(mode, nd) != nd:
        raise ShapeError(f"{describe(op, input=x)}: mode {mode!r} needs a {_LINEAR_MODES[mode] + 2}-D input")
    if align_corners is not None and mode not in _LINEAR_MODES:
        raise ArgumentError(f"interpolate: align_corners can only be set with the interpolating modes "
                            f"linear | bilinear | bicubic | trilinear, not {mode!r}")
    if antialias:
        raise ArgumentError("interpolate: antialias=True is not supported")
    if (size is None) == (scale_factor is None):
        raise ArgumentError("interpolate: give exactly one of size and scale_factor")
    seq = size if size is not None else scale_factor
    seq = tuple(seq) if isinstance(seq, (tuple, list)) else (seq,) * nd
    if len(seq) != nd:
        raise ArgumentError(f"{describe(op, input=x)}: size / scale_factor needs {nd} values, got {seq!r}")
    if size is not None:
        out, scales = seq, (None,) * nd
    else:
        if not all(isinstance(f, (int, float)) and math.isfinite(f) and f > 0 for f in seq):
            raise ArgumentError(f"interpolate: scale_factor must be positive finite numbers, got {scale_factor!r}")
        out = tuple(int(math.floor(float(n) * f)) for n, f in zip(x.shape[2:], seq))
        scales = (None,) * nd if recompute_scale_factor else seq
    if not all(isinstance(o, int) and o >= 1 for o in out):
        raise ArgumentError(f"{describe(op, input=x)}: output size {out!r} must be positive ints")
    if mode == "area":
        return adaptive_pool("interpolate", x, out, nd, "avg")
    if mode in ("nearest", "nearest-exact"):
        src = [_nearest_source(mode, n, o, s) for n, o, s in zip(x.shape[2:], out, scales)]
        if nd == 2 and x.dtype.is_floating_point and all(
                np.array_equal(i, np.arange(o) * n // o) for i, o, n in zip(src, out, x.shape[2:])):
            return upsample_nearest2d(x, size=out)  # the fused kernel takes the case
        for k, idx in enumerate(src):
            x = select_host(x, 2 + k, idx)
        return x
    if not x.dtype.is_floating_point:
        raise DTypeError(f"{describe(op, input=x)}: mode {mode!r} needs a floating point input")
    y = upcast(x)
    for k, (n, o, s) in enumerate(zip(x.shape[2:], out, scales)):
        y = matrix_along(y, 2 + k, _source_matrix(mode, n, o, s, bool(align_corners)))
    return y._cast(x.dtype)


def upsample(input, size=None, scale_factor=None, mode: str = "nearest", align_corners=None):
    """Deprecated alias of interpolate (as PyTorch's, with its warning).

    >>> import tensorlite as tl; tl.nn.functional.upsample(tl.ones(1, 1, 1), 2).shape
    tensorlite.Size([1, 1, 2])"""
    warnings.warn("upsample is deprecated, use interpolate", UserWarning, stacklevel=2)
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    """Deprecated: interpolate(..., mode='nearest').

    >>> import tensorlite as tl; tl.nn.functional.upsample_nearest(tl.ones(1, 1, 1), 2).shape
    tensorlite.Size([1, 1, 2])"""
    warnings.warn("upsample_nearest is deprecated, use interpolate", UserWarning, stacklevel=2)
    return interpolate(input, size, scale_factor, "nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """Deprecated: interpolate(..., mode='bilinear', align_corners=True).

    >>> import tensorlite as tl; tl.nn.functional.upsample_bilinear(tl.ones(1, 1, 1, 1), 2).shape
    tensorlite.Size([1, 1, 2, 2])"""
    warnings.warn("upsample_bilinear is deprecated, use interpolate", UserWarning, stacklevel=2)
    return interpolate(input, size, scale_factor, "bilinear", True)


def pixel_shuffle(input, upscale_factor: int):
    """(*, C r^2, H, W) -> (*, C, H r, W r).

    >>> import tensorlite as tl; tl.nn.functional.pixel_shuffle(tl.arange(4.0).reshape(1, 4, 1, 1), 2).tolist()
    [[[[0.0, 1.0], [2.0, 3.0]]]]"""
    r = upscale_factor
    if not isinstance(r, int) or r < 1 or input.ndim < 3 or input.shape[-3] % (r * r):
        raise ShapeError(f"{describe('pixel_shuffle', input=input)}: expected (*, C * {r!r}^2, H, W)")
    *b, c, h, w = input.shape
    k = len(b)
    y = input.reshape(*b, c // (r * r), r, r, h, w).permute(*range(k), k, k + 3, k + 1, k + 4, k + 2)
    return y.reshape(*b, c // (r * r), h * r, w * r)


def pixel_unshuffle(input, downscale_factor: int):
    """(*, C, H r, W r) -> (*, C r^2, H, W), the inverse of pixel_shuffle.

    >>> import tensorlite as tl; tl.nn.functional.pixel_unshuffle(tl.ones(1, 1, 2, 2), 2).shape
    tensorlite.Size([1, 4, 1, 1])"""
    r = downscale_factor
    if not isinstance(r, int) or r < 1 or input.ndim < 3 or input.shape[-2] % r or input.shape[-1] % r:
        raise ShapeError(f"{describe('pixel_unshuffle', input=input)}: expected (*, C, H * {r!r}, W * {r!r})")
    *b, c, h, w = input.shape
    k = len(b)
    y = input.reshape(*b, c, h // r, r, w // r, r).permute(*range(k), k, k + 2, k + 4, k + 1, k + 3)
    return y.reshape(*b, c * r * r, h // r, w // r)
