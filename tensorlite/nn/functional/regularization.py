"""Dropout (element-wise and whole channels), as torch.nn.functional's dropout family.
(Not dropout.py: the package would then have a submodule and a function both named `dropout`.)"""
from __future__ import annotations

from ... import dtype as dtypes
from ...errors import ArgumentError, ShapeError, describe
from ...ops.creation import rand
from ...ops.elementwise import where
from ...tensor import Tensor
from .common import floating, inplace_result


def dropout(x, p: float = 0.5, training: bool = True, inplace: bool = False, _mask_shape=None, _op="dropout"):
    """Zero each element with probability p and scale the rest by 1/(1-p) (inverted dropout)."""
    if not (isinstance(p, (int, float)) and 0.0 <= p <= 1.0):
        raise ArgumentError(f"{describe(_op, input=x)}: probability must be in [0, 1], got {p!r}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return inplace_result(x, x * 0.0, inplace)
    keep = rand(_mask_shape or x.shape, dtype=dtypes.float32, device=x._device) >= p  # f32 draws: bf16 would skew p
    return inplace_result(x, where(keep, floating(x).affine(1.0 / (1.0 - p), 0.0), 0.0), inplace)


def _feature_dropout(op, x, p, training, inplace, nd):
    """Whole channels zeroed: one draw per (N, C) of an (N, C, *nd) or (C, *nd) input."""
    if not isinstance(x, Tensor) or x.ndim not in (nd + 1, nd + 2):
        raise ShapeError(f"{describe(op, input=x)}: expected an (N, C, ...) or (C, ...) input with {nd} spatial dims")
    lead = x.ndim - nd
    return dropout(x, p, training, inplace, x.shape[:lead] + (1,) * nd, op)


def dropout1d(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Channel dropout of an (N, C, L) or (C, L) input.

    >>> import tensorlite as tl; tl.nn.functional.dropout1d(tl.ones(1, 2, 3), 0.5, training=False).shape
    tensorlite.Size([1, 2, 3])"""
    return _feature_dropout("dropout1d", input, p, training, inplace, 1)


def dropout2d(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Channel dropout of an (N, C, H, W) or (C, H, W) input.

    >>> import tensorlite as tl; tl.nn.functional.dropout2d(tl.ones(1, 2, 3, 3), 0.0).shape
    tensorlite.Size([1, 2, 3, 3])"""
    return _feature_dropout("dropout2d", input, p, training, inplace, 2)


def dropout3d(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Channel dropout of an (N, C, D, H, W) or (C, D, H, W) input.

    >>> import tensorlite as tl; tl.nn.functional.dropout3d(tl.ones(2, 1, 1, 1), 1.0).sum().item()
    0.0"""
    return _feature_dropout("dropout3d", input, p, training, inplace, 3)
