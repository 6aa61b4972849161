"""Reductions: sum, mean, prod, max / min (with indices), amax / amin, argmax / argmin, any / all,
count_nonzero, var / std (and *_mean), logsumexp, norm.
"""
from __future__ import annotations

import builtins
import numbers
from math import prod
from typing import TYPE_CHECKING

from .. import dtype as dtypes
from .._core import (MinMax, TensorBase, dims_arg, dtype_of, norm_dim, norm_dims, numpy_keywords, opmath,
                     wrap)
from ..autograd import attach, no_grad
from ..errors import ShapeError, describe
from .creation import ones, zeros
from .elementwise import maximum, minimum, where
from .joins import cat
from .linalg import matrix_norm, vector_norm
from .views import broadcast_to, narrow, squeeze

if TYPE_CHECKING:
    from ..tensor import Tensor


def _reduce(op, x, dim, keepdim, name):
    dims = norm_dims(dim, x.ndim, name, x)
    if x.ndim == 0:
        return _reduce(op, x.reshape(1), 0, True, name).reshape(())
    # the storage holds the result with the reduced dims kept as 1s; without them it is the same
    # elements in the same order, so the contiguous layout of either shape addresses it (no view)
    shape = x._layout.shape
    if keepdim:
        out_shape = tuple([1 if i in dims else n for i, n in enumerate(shape)])
    else:
        out_shape = () if len(dims) == len(shape) else tuple([n for i, n in enumerate(shape) if i not in dims])
    return wrap(x._storage.reduce_op(op, x._layout, dims), out_shape, None)


@numpy_keywords
def sum(x: Tensor, dim=None, keepdim=False, dtype=None) -> Tensor:
    """Sum over dim (an int, a tuple; every dim if None); integers and bools sum in int64, as torch.sum.

    >>> import tensorlite as tl
    >>> tl.tensor([[1, 2], [3, 4]]).sum(0).tolist()
    [4, 6]
    """
    if dtype is not None:
        x = x._cast(dtype_of(dtype, op="sum"))
    elif not x.dtype.is_floating_point and x.dtype is not dtypes.int64:
        x = x._cast(dtypes.int64)  # bool/u8/u32 sums count in int64, as PyTorch
    out = _reduce("sum", x, dim, keepdim, "sum")
    if not x.requires_grad or not x.dtype.is_floating_point:
        return out  # what attach would return: nothing to record
    dims, shape = norm_dims(dim, x.ndim, "sum", x), x.shape

    def grad(g):  # g with the summed dims kept (as size 1), broadcast back to x's shape
        kept = g if keepdim else g.reshape(tuple(1 if i in dims else n for i, n in enumerate(shape)))
        return (broadcast_to(kept, shape),)
    return attach(out, (x,), grad, "sum")


@numpy_keywords
def mean(x: Tensor, dim=None, keepdim=False) -> Tensor:
    """Mean over dim (an int, a tuple; every dim if None), as torch.mean (integer input gives a float).

    >>> import tensorlite as tl
    >>> tl.tensor([[1.0, 2.0], [3.0, 4.0]]).mean(1).tolist()
    [1.5, 3.5]
    """
    dt = opmath(x.dtype, dtypes.get_default_dtype())
    n = prod(x.shape[d] for d in norm_dims(dim, x.ndim, "mean", x))
    out = sum(x._cast(dt), dim, keepdim) * (1.0 / n if n else float("nan"))
    return out._cast(x.dtype) if x.dtype.is_floating_point else out


@numpy_keywords
def any_(x: Tensor, dim=None, keepdim=False) -> Tensor:
    """Whether any element (over dim, an int or a tuple; every dim if None) is nonzero: bool.

    >>> import tensorlite as tl
    >>> tl.tensor([[0, 1], [0, 0]]).any(1).tolist()
    [True, False]
    """
    return _reduce("sum", (x != 0)._cast(dtypes.int64), dim, keepdim, "any") > 0


@numpy_keywords
def all_(x: Tensor, dim=None, keepdim=False) -> Tensor:
    """Whether every element (over dim, an int or a tuple; every dim if None) is nonzero: bool.

    >>> import tensorlite as tl
    >>> tl.tensor([[1, 2], [0, 3]]).all(1).tolist()
    [True, False]
    """
    return _reduce("sum", (x == 0)._cast(dtypes.int64), dim, keepdim, "all") == 0


@numpy_keywords
def count_nonzero(x: Tensor, dim=None) -> Tensor:
    """The number of nonzero elements (over dim, an int or a tuple; every dim if None): int64.

    >>> import tensorlite as tl
    >>> tl.tensor([[0, 1], [2, 3]]).count_nonzero(0).tolist()
    [1, 2]
    """
    return _reduce("sum", (x != 0)._cast(dtypes.int64), dim, False, "count_nonzero")


def _check_nonempty(op, x, dims):
    if any(x.shape[d] == 0 for d in dims) or (x.ndim == 0 and x.numel() == 0):
        raise ShapeError(f"{describe(op, self=x)}: cannot reduce an empty dimension")


def _amaxmin(op, x, dim, keepdim, name=None):
    """Values only, over any dims; ties share the gradient evenly (PyTorch's amax rule)."""
    dims = norm_dims(dim, x.ndim, name or op, x)
    _check_nonempty(name or op, x, dims)
    out = _reduce(op, x, dim, True, name or op)
    if x.dtype.is_floating_point:
        def grad(g):
            mask = (x == out)._cast(x.dtype)
            return (mask * (g / mask.sum(dims, keepdim=True)),)
        out = attach(out, (x,), grad, op, (x, out))
    return out if keepdim or x.ndim == 0 else out.squeeze(dims)


def _minmax(op, x, dim, keepdim):
    if dim is None:
        return _amaxmin(op, x, None, False)
    d = norm_dim(dim, x.ndim, op, x)
    if x.ndim == 0:  # dim 0 or -1 of a 0-d tensor: its value, at index 0 (PyTorch)
        return MinMax(*_minmax(op, x.reshape(1), 0, False))
    _check_nonempty(op, x, (d,))
    idx = _reduce("arg" + op, x, d, keepdim, op)
    values = _reduce(op, x, d, keepdim, op)
    if x.dtype.is_floating_point:
        shape = x.shape
        def grad(g):
            i, gg = (idx, g) if keepdim else (idx.unsqueeze(d), g.unsqueeze(d))
            return (zeros(shape, dtype=g.dtype, device=g._device).scatter_add(d, i, gg),)
        attach(values, (x,), grad, op, (idx,))
    return MinMax(values, idx)


@numpy_keywords
def max(x, dim=None, keepdim=False):
    """max() -> scalar tensor; max(dim) -> (values, indices); max(x, other) -> maximum."""
    if isinstance(dim, TensorBase):
        return maximum(x, dim)
    return _minmax("max", x, dim, keepdim)


@numpy_keywords
def min(x, dim=None, keepdim=False):
    """min() the smallest element; min(dim) (values, indices); min(x, other) minimum, as torch.min.

    >>> import tensorlite as tl
    >>> tl.tensor([[3, 1], [2, 4]]).min(1).indices.tolist()
    [1, 0]
    """
    if isinstance(dim, TensorBase):
        return minimum(x, dim)
    return _minmax("min", x, dim, keepdim)


@numpy_keywords
def amax(x, dim=None, keepdim=False):
    """The largest values over dim (an int or a tuple; every dim if None), as torch.amax.

    >>> import tensorlite as tl
    >>> tl.tensor([[3, 1], [2, 4]]).amax(0).tolist()
    [3, 4]
    """
    return _amaxmin("max", x, dim, keepdim, "amax")


@numpy_keywords
def amin(x, dim=None, keepdim=False):
    """The smallest values over dim (an int or a tuple; every dim if None), as torch.amin.

    >>> import tensorlite as tl
    >>> tl.tensor([[3, 1], [2, 4]]).amin(0).tolist()
    [2, 1]
    """
    return _amaxmin("min", x, dim, keepdim, "amin")


def _arg(op, x, dim, keepdim):
    if x.numel() == 0:
        raise ShapeError(f"{describe(op, self=x)}: cannot take {op} of an empty tensor")
    if dim is None:
        out = _reduce(op, x.reshape(-1), 0, False, op)
        return out.reshape((1,) * x.ndim) if keepdim else out
    return _reduce(op, x, norm_dim(dim, x.ndim, op, x), keepdim, op)


@numpy_keywords
def argmax(x, dim=None, keepdim=False):
    """Index of the largest element (of the flattened tensor if dim is None), as torch.argmax.

    >>> import tensorlite as tl
    >>> tl.tensor([[3, 1], [2, 4]]).argmax(1).tolist()
    [0, 1]
    """
    return _arg("argmax", x, dim, keepdim)


@numpy_keywords
def argmin(x, dim=None, keepdim=False):
    """Index of the smallest element (of the flattened tensor if dim is None), as torch.argmin.

    >>> import tensorlite as tl
    >>> tl.tensor([[3, 1], [2, 4]]).argmin(1).tolist()
    [1, 0]
    """
    return _arg("argmin", x, dim, keepdim)


@numpy_keywords
def var(x, dim=None, keepdim=False, correction=1, unbiased=None):
    """Variance over dim with Bessel's correction (correction=1) by default, as torch.var.

    >>> import tensorlite as tl
    >>> tl.tensor([1.0, 3.0, 5.0]).var().item()
    4.0
    """
    if unbiased is not None:
        correction = int(unbiased)
    dt = opmath(x.dtype, dtypes.get_default_dtype())
    n = prod(x.shape[d] for d in norm_dims(dim, x.ndim, "var", x))
    xs = x._cast(dt)
    c = xs - mean(xs, dim, keepdim=True)
    out = sum(c * c, dim, keepdim) * (1.0 / builtins.max(n - correction, 0) if n > correction else float("nan"))
    return out._cast(x.dtype) if x.dtype.is_floating_point else out


@numpy_keywords
def std(x, dim=None, keepdim=False, correction=1, unbiased=None):
    """Standard deviation over dim (correction=1 by default), as torch.std.

    >>> import tensorlite as tl
    >>> round(tl.tensor([1.0, 3.0]).std().item(), 4)
    1.4142
    """
    norm_dims(dim, x.ndim, "std", x)  # errors name std, not the var it is made of
    v = var(x, dim, keepdim, correction, unbiased)
    with no_grad():
        out = v.sqrt()
    # 0 where the std is 0 (a constant row), as PyTorch, instead of sqrt's g / 0
    return attach(out, (v,), lambda g: (where(out == 0, 0.0, g / (out * 2)),), "std", (out,))


@numpy_keywords
def prod_(x, dim=None, keepdim=False):
    """Product by pairwise halving (log2(n) multiplies): exact for integers, and
    differentiable through mul."""
    if dim is None:
        return prod_(x.reshape(-1), 0, False).reshape((1,) * x.ndim if keepdim else ())
    if not isinstance(dim, numbers.Integral):
        dims = norm_dims(dim, x.ndim, "prod", x)
        for d in dims:
            x = prod_(x, d, True)
        return x if keepdim else x.squeeze(dims)
    d = norm_dim(dim, x.ndim, "prod", x)
    if not x.dtype.is_floating_point and x.dtype is not dtypes.int64:
        x = x._cast(dtypes.int64)
    y = x.transpose(d, -1) if x.ndim else x.reshape(1)
    if y.shape[-1] == 0:
        y = ones(y.shape[:-1] + (1,), dtype=x.dtype, device=x._device)
    while y.shape[-1] > 1:
        n = y.shape[-1]
        h = n // 2
        head = narrow(y, -1, 0, h) * narrow(y, -1, h, h)
        y = cat([head, narrow(y, -1, 2 * h, 1)], -1) if n % 2 else head
    y = y.transpose(d, -1) if x.ndim else y.reshape(())
    return y if keepdim or x.ndim == 0 else y.squeeze(d)


@numpy_keywords
def logsumexp(x, dim=None, keepdim=False):
    """log(sum(exp(x))) over dim, computed stably, as torch.logsumexp.

    >>> import tensorlite as tl
    >>> round(tl.tensor([0.0, 0.0]).logsumexp(0).item(), 4)
    0.6931
    """
    if not x.dtype.is_floating_point:
        x = x._cast(dtypes.get_default_dtype())
    dims = norm_dims(dim, x.ndim, "logsumexp", x)
    if any(x.shape[d] == 0 for d in dims):
        m = zeros((1,) * x.ndim, dtype=x.dtype, device=x._device)
    else:
        m = amax(x.detach(), dims, keepdim=True)
        m = where(m.abs() == float("inf"), 0.0, m)
    out = (x - m).exp().sum(dims, keepdim=True).log() + m
    return out if keepdim else squeeze(out, dims)


@numpy_keywords
def var_mean(x: Tensor, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """(var, mean) over dim, as torch.var_mean (correction 1 unless given; unbiased=False is 0).

    >>> import tensorlite as tl
    >>> [t.item() for t in tl.var_mean(tl.tensor([1.0, 3.0]))]
    [2.0, 2.0]"""
    if isinstance(dim, bool):  # var_mean(x, unbiased)
        dim, unbiased = None, dim
    c = correction if correction is not None else 1 if unbiased is None else int(unbiased)
    return var(x, dim, keepdim, c), mean(x, dim, keepdim)


@numpy_keywords
def std_mean(x: Tensor, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """(std, mean) over dim, as torch.std_mean.

    >>> import tensorlite as tl
    >>> [t.item() for t in tl.std_mean(tl.tensor([1.0, 3.0]), correction=0)]
    [1.0, 2.0]"""
    v, m = var_mean(x, dim, unbiased, keepdim, correction=correction)
    return v.sqrt(), m


def norm(x: Tensor, p="fro", dim=None, keepdim=False, dtype=None) -> Tensor:
    """torch.norm: the p-norm (a number, or 'fro') over dim (None: all), as one vector norm;
    'nuc' and other matrix norms through linalg.matrix_norm.

    >>> import tensorlite as tl
    >>> tl.tensor([3.0, 4.0]).norm().item()
    5.0"""
    dims = None if dim is None else dims_arg(dim, (), "norm", x)
    if isinstance(p, str) and (p != "fro" or dims is not None and len(dims) > 2):
        return matrix_norm(x, p, dims if dims is not None else tuple(range(x.ndim)), keepdim, dtype=dtype)
    return vector_norm(x, 2 if p in ("fro", None) else p, dims, keepdim, dtype=dtype)


class ReduceMethods:
    """The Tensor methods of this family (tensorlite.tensor.Tensor inherits them)."""
    __slots__ = ()

    # ---- reductions (the module functions of those names) --------------------------------
    sum, mean, max, min, amax, amin, argmax, argmin = sum, mean, max, min, amax, amin, argmax, argmin
    var, std, prod, logsumexp = var, std, prod_, logsumexp
    any, all, count_nonzero = any_, all_, count_nonzero

    norm = norm
