"""Writes through index tensors: scatter, scatter_reduce, index_copy, index_fill, index_put,
masked_scatter (each with its in-place form) and take_along_dim, with PyTorch's semantics and
gradients. `x[idx] = v` is tensor.py's _setitem, on the same _put."""
from __future__ import annotations


import numpy as np

from . import dtype as _dt
from ._core import is_scalar, norm_dim, same_device, scalar_tensor, wrap
from .autograd import attach as _attach, is_grad_enabled, no_grad, note_write
from .errors import ArgumentError, DTypeError, ShapeError, describe
from .layout import broadcast_shapes
from .tensor import (Tensor, _basic_index, _check_ids, _check_index_source, _check_scatter, _corner, _inplace,
                     _inplace_method, _put, _scalar_self, broadcast_to, floor_divide, gather, ones_like, tensor, where,
                     zeros_like)


METHODS = ("scatter", "scatter_", "scatter_reduce", "scatter_reduce_", "index_copy", "index_copy_", "index_fill",
           "index_fill_", "index_put", "index_put_", "masked_scatter", "masked_scatter_", "masked_select",
           "take_along_dim")


def _raw(x, dim, index, src, reduce):
    """The storage's scatter, unrecorded: x with src written (or reduced) at index along dim."""
    st = x._storage.scatter(x._layout, index._storage, index._layout, src._storage, src._layout, dim, reduce)
    return wrap(st, x.shape, x.dtype)


def _number_src(op, x, index, src):
    """src, or a number as a src of index's shape (a broadcast 0-d tensor of x's dtype)."""
    if isinstance(src, Tensor):
        return src
    if not is_scalar(src):
        raise DTypeError(f"{describe(op, self=x)}: src must be a tensor or a number, got {type(src).__name__}")
    return broadcast_to(scalar_tensor(src, x.dtype, x._device, op), index.shape)


@_scalar_self
def scatter(x: Tensor, dim: int, index: Tensor, src=None, value=None, *, reduce=None) -> Tensor:
    """x with src[i][j] (or value) written at [index[i][j]][j] for dim 0 (of duplicate indices one wins).

    >>> import tensorlite as tl; tl.zeros(4).scatter(0, tl.tensor([3, 0]), tl.tensor([1.0, 2.0])).tolist()
    [2.0, 0.0, 0.0, 1.0]
    """
    src = value if src is None else src
    if reduce is not None:  # PyTorch's older form of scatter_reduce
        if reduce not in ("add", "multiply"):
            raise ArgumentError(f"{describe('scatter', self=x)}: reduce must be 'add' or 'multiply', got {reduce!r}")
        return scatter_reduce(x, dim, index, _number_src("scatter", x, index, src),
                              "sum" if reduce == "add" else "prod")
    v = src if isinstance(src, Tensor) else None
    dim = _check_scatter("scatter", x, dim, index, v)
    out = _raw(x, dim, index, _number_src("scatter", x, index, src), None)
    return _attach(out, (x, v), lambda g: (g.scatter(dim, index, 0),
                                           None if v is None else _corner(g.gather(dim, index), v.shape)),
                   "scatter", (index,))


def _identity(reduce, dt):
    """The value that leaves `reduce`'s result as it is (include_self=False starts from it)."""
    if reduce in ("sum", "mean", "prod"):
        return int(reduce == "prod")
    high = reduce == "amin"
    if dt.is_floating_point:
        return float("inf") if high else float("-inf")
    return high if dt is _dt.bool_ else int(np.iinfo(dt.np).max if high else np.iinfo(dt.np).min)


@_scalar_self
def scatter_reduce(x: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, *, include_self=True) -> Tensor:
    """x with src reduced into [index[i][j]][j] for dim 0 by "sum", "prod", "mean", "amax" or "amin",
    x's own value among the reduced where include_self.

    >>> import tensorlite as tl; tl.tensor([1, 5]).scatter_reduce(0, tl.tensor([0, 0]), tl.tensor([4, 2]), "amax").tolist()
    [4, 5]
    """
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
        raise ArgumentError(f"{describe('scatter_reduce', self=x)}: reduce must be 'sum', 'prod', 'mean', 'amax' "
                            f"or 'amin', got {reduce!r}")
    dim = _check_scatter("scatter_reduce", x, dim, index, src)
    if reduce == "mean" and x.dtype is _dt.bool_:
        raise DTypeError(f"{describe('scatter_reduce', self=x)}: no mean of bool values (as PyTorch)")
    base = x if include_self else x.scatter(dim, index, _identity(reduce, x.dtype))
    if reduce in ("sum", "mean"):  # composed: their gradients are the ops'
        out = base.scatter_add(dim, index, src)
        if reduce == "sum":
            return out
        ones = ones_like(x)
        n = (ones if include_self else ones.scatter(dim, index, 0)).scatter_add(dim, index, ones_like(src))
        return out / n if x.dtype.is_floating_point else floor_divide(out, n)
    with no_grad():
        out = _raw(base, dim, index, src, reduce)
    src_in = src[tuple(slice(0, n) for n in index.shape)]  # like torch, only src's leading corner is read

    def grad(g):
        if reduce == "prod":  # PyTorch's: exclusive products, zeros of x and src handled apart
            xs = where(x == 0, 1, x)
            gx = g * xs.scatter_reduce(dim, index, src, "prod", include_self=include_self) / xs
            zero = src_in == 0
            single = zero & (zeros_like(x).scatter_add(dim, index, zero._cast(x.dtype)).gather(dim, index) == 1)
            rest = x.scatter_reduce(dim, index, where(single, 1, src_in), "prod", include_self=include_self)
            gs = where(single, (g * rest).gather(dim, index), (g * out).gather(dim, index) / where(zero, 1, src_in))
        else:  # amax / amin: shared evenly by the values equal to the result (x's too, as PyTorch)
            sx = (x == out)._cast(g.dtype)
            ss = (src_in == out.gather(dim, index))._cast(g.dtype)
            share = g / sx.scatter_add(dim, index, ss)
            gx, gs = sx * share, ss * share.gather(dim, index)
        return gx if include_self else gx.scatter(dim, index, 0), _corner(gs, src.shape)
    return _attach(out, (x, src), grad, "scatter_reduce", (x, src, out, index))


@_scalar_self
def index_copy(x: Tensor, dim: int, index: Tensor, source: Tensor) -> Tensor:
    """x with source[.., i, ..] written at x[.., index[i], ..] along dim (of duplicate indices one wins).

    >>> import tensorlite as tl; tl.zeros(3).index_copy(0, tl.tensor([2, 0]), tl.tensor([1.0, 2.0])).tolist()
    [2.0, 0.0, 1.0]
    """
    dim, index = _check_index_source("index_copy", x, dim, index, source)
    wide = broadcast_to(index.reshape([-1 if d == dim else 1 for d in range(x.ndim)]), source.shape)
    return _attach(_raw(x, dim, wide, source, None), (x, source),
                   lambda g: (g.index_fill(dim, index, 0), g.index_select(dim, index)), "index_copy", (index,))


def index_fill(x: Tensor, dim: int, index: Tensor, value) -> Tensor:
    """x with value (a number or a 0-d tensor) at x[.., index[i], ..] along dim.

    >>> import tensorlite as tl; tl.zeros(2, 2).index_fill(1, tl.tensor([1]), 5.0).tolist()
    [[0.0, 5.0], [0.0, 5.0]]
    """
    v = value if isinstance(value, Tensor) else None
    if not (is_scalar(value) or v is not None and v.ndim == 0):
        raise DTypeError(f"{describe('index_fill', self=x)}: value must be a number or a 0-d tensor")
    dim = _check_ids("index_fill", index, x, dim, **({"value": v} if v is not None else {}))
    index = index.reshape(-1)
    shape = x.shape[:dim] + (index.numel(),) + x.shape[dim + 1:] if x.ndim else ()
    with no_grad():
        val = v._cast(x.dtype) if v is not None else scalar_tensor(value, x.dtype, x._device, "index_fill")
        out = index_copy(x, dim, index, broadcast_to(val, shape))

    def grad(g):
        gx = g.index_fill(dim, index, 0)
        return gx, (g - gx).sum()._cast(v.dtype) if v is not None and v.requires_grad else None
    return _attach(out, (x, v), grad, "index_fill", (index,))


def index_put(x: Tensor, indices, values, accumulate: bool = False) -> Tensor:
    """x with values written (or added, accumulate) at x[indices], a tuple of index tensors (None: a whole dim).

    >>> import tensorlite as tl; tl.zeros(3).index_put((tl.tensor([0, 0]),), tl.tensor([1.0, 2.0]), True).tolist()
    [3.0, 0.0, 0.0]
    """
    if not isinstance(indices, (tuple, list)) or not indices or \
            not all(i is None or isinstance(i, Tensor) for i in indices):
        raise DTypeError(f"{describe('index_put', self=x)}: indices must be a tuple of tensors (or None)")
    if isinstance(values, Tensor) and values.dtype is not x.dtype:
        raise DTypeError(f"{describe('index_put', self=x, values=values)}: values must have the dtype of self")
    target, adv = _basic_index(x, tuple(slice(None) if i is None else i for i in indices))
    if not adv:
        raise ArgumentError(f"{describe('index_put', self=x)}: indices must hold at least one tensor")
    return _put(target, adv, values, accumulate, x, "index_put")


def masked_scatter(x: Tensor, mask: Tensor, source: Tensor) -> Tensor:
    """x with source's elements, in order, where mask (broadcast to x's shape) is True.

    >>> import tensorlite as tl; tl.zeros(3).masked_scatter(tl.tensor([True, False, True]), tl.ones(2)).tolist()
    [1.0, 0.0, 1.0]
    """
    if not (isinstance(mask, Tensor) and mask.dtype is _dt.bool_ and isinstance(source, Tensor)):
        raise DTypeError(f"{describe('masked_scatter', self=x)}: expected a bool mask tensor and a source tensor")
    if source.dtype is not x.dtype:
        raise DTypeError(f"{describe('masked_scatter', self=x, source=source)}: source must have the dtype of self")
    same_device("masked_scatter", self=x, mask=mask, source=source)
    if broadcast_shapes(mask.shape, x.shape) != x.shape:
        raise ShapeError(f"{describe('masked_scatter', self=x, mask=mask)}: mask does not broadcast to self's shape")
    at = np.flatnonzero(broadcast_to(mask, x.shape).numpy())  # the mask is read on the host, as x[mask]'s
    if source.numel() < at.size:
        raise ShapeError(f"{describe('masked_scatter', self=x, mask=mask, source=source)}: source has fewer "
                         f"elements than mask's {at.size} True values")
    flat = x.reshape(-1).index_copy(0, tensor(at, device=x._device), source.reshape(-1)[:at.size])
    return flat.reshape(x.shape)


def masked_select(x: Tensor, mask: Tensor) -> Tensor:
    """The elements of x where mask (x and mask broadcast together) is True, as a 1-d tensor, as
    torch.masked_select (the mask is read on the host, as x[mask]'s).

    >>> import tensorlite as tl; tl.masked_select(tl.tensor([[1, 2], [3, 4]]), tl.tensor([True, False])).tolist()
    [1, 3]
    """
    if not (isinstance(mask, Tensor) and mask.dtype is _dt.bool_):
        raise DTypeError(f"{describe('masked_select', self=x)}: mask must be a bool tensor")
    same_device("masked_select", self=x, mask=mask)
    shape = broadcast_shapes(x.shape, mask.shape)
    if shape is None:
        raise ShapeError(f"{describe('masked_select', self=x, mask=mask)}: shapes do not broadcast")
    return broadcast_to(x, shape)[broadcast_to(mask, shape)]


def take_along_dim(x: Tensor, indices: Tensor, dim=None) -> Tensor:
    """x's values at indices along dim (of the flattened x where dim is None); x and indices
    broadcast outside dim.

    >>> import tensorlite as tl; tl.take_along_dim(tl.tensor([[10, 30], [40, 20]]), tl.tensor([[1], [0]]), 1).tolist()
    [[30], [40]]
    """
    if not isinstance(indices, Tensor):
        raise DTypeError(f"{describe('take_along_dim', self=x)}: indices must be a tensor")
    if dim is None:
        return gather(x.reshape(-1), 0, indices.reshape(-1))
    d = norm_dim(dim, x.ndim, "take_along_dim", x)
    if x.ndim != indices.ndim:
        raise ShapeError(f"{describe('take_along_dim', self=x, indices=indices)}: input and indices must have the "
                         "same number of dims")
    shape = broadcast_shapes(x.shape[:d] + (1,) + x.shape[d + 1:], indices.shape[:d] + (1,) + indices.shape[d + 1:])
    if shape is None:
        raise ShapeError(f"{describe('take_along_dim', self=x, indices=indices)}: shapes do not broadcast outside "
                         f"dim {d}")
    return gather(broadcast_to(x, shape[:d] + x.shape[d:d + 1] + shape[d + 1:]), d,
                  broadcast_to(indices, shape[:d] + indices.shape[d:d + 1] + shape[d + 1:]))


scatter_, scatter_reduce_ = _inplace_method("scatter_", scatter), _inplace_method("scatter_reduce_", scatter_reduce)
index_fill_ = _inplace_method("index_fill_", index_fill)


def index_copy_(x: Tensor, dim: int, index: Tensor, source: Tensor) -> Tensor:
    """In-place index_copy: x[.., index[i], ..] = source[.., i, ..] along dim.

    Where no gradient is recorded and x is contiguous, only the indexed elements are written
    (the storage's scatter_set: one kernel on a GPU, what a KV cache's per-token write costs).

    >>> import tensorlite as tl; x = tl.zeros(3); x.index_copy_(0, tl.tensor([2]), tl.tensor([5.0])).tolist()
    [0.0, 0.0, 5.0]
    """
    recording = is_grad_enabled() and (x.requires_grad or getattr(source, "requires_grad", False))
    if recording or not isinstance(source, Tensor) or not x._layout.is_contiguous() or x.ndim == 0:
        return _inplace(x, "index_copy_", index_copy, dim, index, source)
    dim, index = _check_index_source("index_copy_", x, dim, index, source)
    wide = broadcast_to(index.reshape([-1 if d == dim else 1 for d in range(x.ndim)]), source.shape)
    x._storage.scatter_set(x._layout, wide._storage, wide._layout, source._storage, source._layout, dim)
    note_write(x._storage)
    return x
index_put_ = _inplace_method("index_put_", index_put)
masked_scatter_ = _inplace_method("masked_scatter_", masked_scatter)
