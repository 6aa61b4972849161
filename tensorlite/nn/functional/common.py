"""Helpers that several nn.functional families share (internal: the user-facing ops are
re-exported by tensorlite.nn.functional)."""
from __future__ import annotations

from math import prod

import numpy as np

from ... import dtype as dtypes
from ..._core import shape_arg
from ...autograd import no_grad
from ...custom_op import custom_op
from ...errors import ArgumentError, DeviceError, DTypeError, ShapeError, describe
from ...layout import Layout
from ...ops.creation import tensor
from ...ops.elementwise import maximum
from ...tensor import Tensor
# for 16-bit inputs, not their own, coarser epsilon)
FINFO_EPS = {"float16": 2.0 ** -23, "bfloat16": 2.0 ** -23, "float32": 2.0 ** -23, "float64": 2.0 ** -52}


def floating(x: Tensor) -> Tensor:
    return x if x.dtype.is_floating_point else x._cast(dtypes.get_default_dtype())


def check_like(op, x, **others):
    """Optional operands (weights, tables, masks) must share x's device and dtype."""
    for name, t in others.items():
        if t is not None and (t._device is not x._device or t.dtype is not x.dtype):
            error = DeviceError if t._device is not x._device else DTypeError
            raise error(f"{describe(op, input=x, **{k: v for k, v in others.items() if v is not None})}: "
                        f"{name} must have the device and dtype of the input")


def inplace_result(x, y, inplace):
    """inplace=True (PyTorch's in-place activations): y written into x's memory, x returned."""
    return x.copy_(y) if inplace else y


def upcast(t):
    """f16/bf16 -> float32: the losses compute in float32 and round once (PyTorch's opmath)."""
    return t._cast(dtypes.float32) if isinstance(t, Tensor) and t.dtype in dtypes.HALVES else t


def log1p_exp(x):
    """log(1 + exp(x)) without overflow or cancellation, with the gradient sigmoid(x)."""
    with no_grad():
        y = maximum(x, 0.0) + (-x.abs()).exp().log1p()
    return custom_op(y, (x,), lambda g: (g * x.sigmoid(),), "softplus", (x,))


def check_positive(op, name, v, zero_ok=False):
    if not (isinstance(v, (int, float)) and (v >= 0 if zero_ok else v > 0)):
        raise ArgumentError(f"{op}: {name} must be {'non-negative' if zero_ok else 'positive'}, got {v!r}")


def flatten_normalized(op, x, normalized_shape, **params):
    """(x with the normalised trailing dims merged into one, the 1-D params, that size)."""
    ns = shape_arg((normalized_shape,), op, x)
    if not ns or len(ns) > x.ndim or tuple(x.shape[x.ndim - len(ns):]) != ns:
        raise ShapeError(f"{describe(op, input=x)}: normalized_shape {ns} does not match the trailing dims")
    for name, p in params.items():
        if p is not None and tuple(p.shape) != ns:
            raise ShapeError(f"{describe(op, input=x, **{name: p})}: {name} must have shape {ns}")
    x = floating(x)
    check_like(op, x, **params)
    n = prod(ns)
    flat = [None if p is None else reshaped(p, (n,)) for p in params.values()]
    return reshaped(x, x.shape[:x.ndim - len(ns)] + (n,)), flat, n


def reshaped(t, shape):
    """t.reshape(shape), or t itself where it has that shape already: the common 1-d norm
    case then adds no view and no reshape node (forward and backward) to the graph."""
    return t if t.shape == shape else t.reshape(shape)


def as_rows(st, lay, dtype):
    """(storage, 2-D layout) of the tensor (st, lay) of `dtype` with its leading dims folded
    into rows: a view where the strides allow, else a contiguous copy."""
    if len(lay.shape) == 2:
        return st, lay
    shape = (prod(lay.shape[:-1]), lay.shape[-1])
    rows = lay.reshape(shape)
    if rows is None:
        return st.to_dtype(lay, dtype), Layout.contiguous(shape)
    return st, rows


def select_host(x, d, idx):
    """x.index_select(d, idx) of host indices idx; x itself where idx is the identity."""
    if len(idx) == x.shape[d] and (idx == np.arange(len(idx))).all():
        return x
    return x.index_select(d, tensor(np.ascontiguousarray(idx, dtype=np.int64), device=x._device))


def matrix_along(x, d, w):
    """sum_i x[..., i, ...] w[i, j] along dim d: a separable linear resampling (one matmul)."""
    w = tensor(w, dtype=x.dtype, device=x._device)
    return x @ w if d == x.ndim - 1 else (x.transpose(d, -1) @ w).transpose(d, -1)


def adaptive_pool(op, x, output_size, nd, kind):
    """Adaptive average / max pooling over the last nd dims, one dim at a time (both separate):
    output o of a dim covers inputs [floor(o n / m), ceil((o + 1) n / m))."""
    if not isinstance(x, Tensor) or x.ndim not in (nd + 1, nd + 2):
        raise ShapeError(f"{describe(op, input=x)}: expected an (N, C, ...) or (C, ...) input with {nd} pooled dims")
    out = tuple(output_size) if isinstance(output_size, (tuple, list)) else (output_size,) * nd
    out = tuple(n if o is None else o for o, n in zip(out, x.shape[-nd:]))
    if len(out) != nd or not all(isinstance(o, int) and o >= 1 for o in out) or 0 in x.shape[-nd:]:
        raise ArgumentError(f"{describe(op, input=x)}: output_size must be {nd} positive ints (or None) over "
                            f"non-empty dims, got {output_size!r}")
    if kind == "avg" and not x.dtype.is_floating_point:
        raise DTypeError(f"{describe(op, input=x)}: average pooling needs a floating point input")
    y = upcast(x) if kind == "avg" else x
    for k, m in enumerate(out):
        d, n = x.ndim - nd + k, x.shape[x.ndim - nd + k]
        o = np.arange(m)
        lo, hi = o * n // m, -(-(o + 1) * n // m)
        if kind == "avg":
            w = np.zeros((n, m))
            for i in range(m):
                w[lo[i]:hi[i], i] = 1.0 / (hi[i] - lo[i])
            y = matrix_along(y, d, w)
        else:  # the running maximum of the window's j-th elements (short windows repeat their last)
            z = select_host(y, d, lo)
            for j in range(1, int((hi - lo).max())):
                z = maximum(z, select_host(y, d, np.minimum(lo + j, hi - 1)))
            y = z
    return y._cast(x.dtype)
