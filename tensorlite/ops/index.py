"""Indexing: x[i] and x[i] = v (basic and advanced), index_select, gather, the scatter family,
index_add / index_copy / index_fill / index_put, masked_scatter / masked_select, take_along_dim.
"""
from __future__ import annotations

import builtins
import functools
import numbers
from math import prod
from typing import TYPE_CHECKING

import numpy as np

from .. import dtype as dtypes
from .._core import TensorBase, check_value, fail, is_scalar, norm_dim, same_device, scalar_tensor, wrap
from ..autograd import attach, is_grad_enabled, no_grad, note_write
from ..errors import (ArgumentError, DTypeError, DeviceError, IndexOutOfRange, ShapeError, TensorliteError,
                      describe)
from ..layout import broadcast_shapes
from .creation import arange, ones, ones_like, tensor, zeros, zeros_like
from .elementwise import floor_divide, where
from .inplace import inplace, inplace_method, refuse_inplace_on_graph, snapshot, write
from .joins import stack
from .views import broadcast_to, flatten, narrow, permute, select, sum_to, unsqueeze

if TYPE_CHECKING:
    from ..tensor import Tensor


def repeat_ids(counts: Tensor, op: str, **operands) -> Tensor:
    """0, 1, ..., n - 1 (int64), each i repeated counts[i] times (counts: 1-D, integer or bool),
    built on counts' device; repeat_ids(mask) is the positions of mask's True elements (x[mask]'s
    ids). The running sums S of the counts, then for k = 1 .. S[-1] the first i with S[i] >= k (a
    binary search). One small host read, the result's size (with the least count: a negative one
    raises naming op and operands), as torch's sync; the counts themselves never leave the device."""
    n = counts.numel()
    if n == 0:
        return zeros(0, dtype=dtypes.int64, device=counts._device)
    direct = counts._storage.repeat_ids(counts._layout)  # cpu: in one step on the host
    if direct is not None:
        ids, total = direct
        if ids is None:
            fail(ArgumentError, op, "repeats must be non-negative", **operands)
        return wrap(ids, (total,))
    sums = counts.reshape(-1).cumsum(0)  # int64
    if counts.dtype.is_signed:
        total, least = stack((sums[-1], counts.amin()._cast(dtypes.int64))).tolist()
        if least < 0:
            fail(ArgumentError, op, "repeats must be non-negative", **operands)
    else:
        total = int(sums[-1].item())
    if total == 0:
        return zeros(0, dtype=dtypes.int64, device=counts._device)
    ks = ones(1, total, dtype=dtypes.int64, device=counts._device).cumsum(1)  # 1 .. total, made on the device
    # S[-1] = total is >= every k, so the first n - 1 sums give the same ids, and the search's
    # host-known bound (GpuStorage.value_range) is then n - 1: the gathers after need no error-flag read
    seq = sums[:n - 1].reshape(1, n - 1)
    return wrap(seq._storage.searchsorted(seq._layout, ks._storage, ks._layout, False), (total,))


def _index_tensor(i, x):
    if isinstance(i, TensorBase):
        if i._device is not x._device:
            raise DeviceError(f"{describe('__getitem__', self=x, index=i)}: index on another device")
        return i
    a = np.asarray(i)
    if a.dtype == np.bool_:
        return tensor(a, device=x._device)
    if a.dtype.kind not in "iu":
        raise IndexOutOfRange(f"{describe('__getitem__', self=x)}: unsupported index {i!r}")
    return tensor(a.astype(np.int64), device=x._device)


def _basic_index(x: Tensor, idx):
    """x[idx] for the ints, slices, None and Ellipsis of idx (a view of x; a copy for negative steps)
    and idx's index tensors as [(the first dim of that result they index, tensor)]."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    idx = [_index_tensor(i, x) if isinstance(i, (TensorBase, list, np.ndarray, bool, np.bool_)) else i for i in idx]
    consumed = builtins.sum(i.ndim if isinstance(i, TensorBase) and i.dtype is dtypes.bool_ else
                   (0 if i is None or i is Ellipsis else 1) for i in idx)
    if consumed > x.ndim:
        raise IndexOutOfRange(f"{describe('__getitem__', self=x)}: too many indices ({consumed}) for {x.ndim} dims")
    if builtins.sum(i is Ellipsis for i in idx) > 1:
        raise IndexOutOfRange("__getitem__: an index can only have a single ellipsis")
    k = next((j for j, i in enumerate(idx) if i is Ellipsis), None)
    if k is not None:
        idx[k:k + 1] = [slice(None)] * (x.ndim - consumed)
    out, d, adv = x, 0, []
    for i in idx:
        if i is None:
            out, d = unsqueeze(out, d), d + 1
        elif isinstance(i, TensorBase):
            adv.append((d, i))
            d += i.ndim if i.dtype is dtypes.bool_ else 1
        elif isinstance(i, slice):
            try:
                start, stop, step = i.indices(out.shape[d])
            except (TypeError, ValueError) as e:  # a step of 0, bounds that are no integers
                raise (DTypeError if isinstance(e, TypeError) else ArgumentError)(
                    f"{describe('__getitem__', self=x)}: bad slice {i!r}: {e}") from None
            if step == 1 and start == 0 and stop == out.shape[d]:
                pass  # the whole dim (`:` and what `...` stands for): no view to take
            elif step > 0:
                out = narrow(out, d, start, len(range(start, stop, step)), step)
            else:
                out = out.index_select(d, arange(start, builtins.min(stop, start), step, device=x._device))
            d += 1
        elif isinstance(i, numbers.Integral) or (isinstance(i, np.generic) and np.issubdtype(type(i), np.integer)):
            out = select(out, d, int(i))
        else:
            raise IndexOutOfRange(f"{describe('__getitem__', self=x)}: unsupported index {i!r}")
    if out is x and x.ndim:  # only whole dims: still a new view, as PyTorch's x[:] is
        out = narrow(x, 0, 0, x.shape[0])
    return out, adv


def getitem(x: Tensor, idx):
    out, adv = _basic_index(x, idx)
    return _advanced_index(out, adv, x) if adv else out


def _adv_plan(out: Tensor, adv, x: Tensor, op: str):
    """The index tensors `adv` of x[idx] over `out`, idx's basic part, read as PyTorch does: a
    bool mask is the indices of its True elements over the dims it covers; the index tensors
    broadcast together; where they index non-adjacent dims, those dims go first. Returns
    (p, d0, k, shape, flat, undo, ids): p is out with each mask's dims made one and the k indexed
    dims moved to d0.., `shape` the indices' broadcast shape, flat their row-major linear index
    into those k dims (1-D; an out-of-range id makes it out of range too), undo(r) takes r of
    p's shape back to out's, ids [(index tensor, size of its dim)] for error messages."""
    shape0, dims, ids, nonneg, shift = out.shape, [], [], [], 0
    for d, i in adv:
        d -= shift  # the dims of the masks before it are one dim now
        nonneg.append(not i.dtype.is_signed)  # unsigned ids, or a mask's
        if i.dtype is dtypes.bool_:
            if i.shape != out.shape[d:d + i.ndim]:
                raise IndexOutOfRange(f"{describe(op, self=x, mask=i)}: mask shape does not match "
                                      f"dims {d}..{d + i.ndim - 1} of shape {tuple(out.shape)}")
            out, shift = flatten(out, d, d + i.ndim - 1) if i.ndim else unsqueeze(out, d), shift + i.ndim - 1
            i = repeat_ids(i.reshape(-1), op)
        elif i.dtype.is_floating_point:
            raise DTypeError(f"{describe(op, self=x, index=i)}: index tensors must be integer or bool")
        dims.append(d)
        ids.append(i)
    order = None
    if dims != list(range(dims[0], dims[0] + len(dims))):
        order = dims + [d for d in range(out.ndim) if d not in dims]
        out, dims = permute(out, order), list(range(len(dims)))
    shape = broadcast_shapes(*[t.shape for t in ids])
    if shape is None:
        raise ShapeError(f"{describe(op, self=x)}: index tensors of shapes {[tuple(t.shape) for t in ids]} do "
                         "not broadcast")
    sizes, flat, bad = out.shape[dims[0]:dims[0] + len(dims)], None, None
    for t, n, pos in zip(ids, sizes, nonneg):  # (no new ids where none can be negative: their bounds stay known)
        t = t if len(ids) == 1 and pos else t._cast(dtypes.int64)
        if len(ids) > 1:  # a bad id in one dim must not make an in-range linear index
            bad = (t < -n) | (t >= n) if bad is None else bad | (t < -n) | (t >= n)
        t = t if pos else where(t < 0, t + n, t)
        flat = t if flat is None else flat * n + t
    flat = broadcast_to(flat if bad is None else where(bad, prod(sizes), flat), shape).reshape(-1)

    def undo(r):
        return (r if order is None else permute(r, [order.index(d) for d in range(r.ndim)])).reshape(shape0)
    return out, dims[0], len(dims), shape, flat, undo, list(zip(ids, sizes))


def _index_error(op, x, ids):
    """IndexOutOfRange naming the first index tensor of ids [(tensor, dim size)] with a bad id."""
    for t, n in ids:
        a = t.numpy().astype(np.int64)
        bad = a[(a < -n) | (a >= n)]
        if bad.size:
            return IndexOutOfRange(f"{describe(op, self=x, index=t)}: index {bad.flat[0]} is out of bounds for a "
                                   f"dim of size {n}")
    return None


def _advanced_index(out: Tensor, adv, x: Tensor) -> Tensor:
    """out[index tensors adv] (see _adv_plan): a new tensor, not a view, as PyTorch's."""
    p, d0, k, shape, flat, _, ids = _adv_plan(out, adv, x, "__getitem__")
    try:
        res = flatten(p, d0, d0 + k - 1).index_select(d0, flat)
    except IndexOutOfRange as e:
        raise _index_error("__getitem__", x, ids) or e from None
    res = res.reshape(res.shape[:d0] + shape + res.shape[d0 + 1:])
    res._base = None
    return res


def _put(t: Tensor, adv, values, accumulate: bool, x: Tensor, op: str) -> Tensor:
    """A new tensor: t with `values` (t's dtype) written, or added, at t's index tensors `adv`
    (index_put's semantics: of duplicate indices one write wins). Differentiable."""
    p, d0, k, shape, flat, undo, ids = _adv_plan(t, adv, x, op)
    q = flatten(p, d0, d0 + k - 1)
    want = p.shape[:d0] + shape + p.shape[d0 + k:]
    v = values if isinstance(values, TensorBase) else scalar_tensor(values, t.dtype, t._device, op)
    same_device(op, self=x, values=v)
    while v.ndim > len(want) and v.shape[0] == 1:  # PyTorch drops leading size-1 dims of values
        v = v.reshape(v.shape[1:])
    if broadcast_shapes(v.shape, want) != want:
        raise ShapeError(f"{describe(op, self=x, values=v)}: values do not broadcast to the indexed shape "
                         f"{tuple(want)}")
    v = broadcast_to(v, want).reshape(q.shape[:d0] + flat.shape + q.shape[d0 + 1:])
    try:
        r = q.index_add(d0, flat, v) if accumulate else q.index_copy(d0, flat, v)
    except IndexOutOfRange as e:
        raise _index_error(op, x, ids) or e from None
    return undo(r.reshape(p.shape))


def setitem(x: Tensor, idx, value, op="__setitem__"):
    """x[idx] = value, into x's memory (copy_ and fill_ are idx=...); through index tensors and
    masks as index_put_ (of duplicate indices one write wins). Recorded for autograd
    where x or value requires grad (PyTorch's CopySlices): x's history gets the incoming
    gradient with the written region zeroed, value the region's gradient."""
    target, adv = _basic_index(x.detach(), idx)
    if target._storage is not x._storage:
        raise IndexOutOfRange(f"{describe(op, self=x)}: assignment through negative steps is not supported "
                              "(nor is indexing with them in PyTorch)")
    if is_scalar(value):  # x[0] = 1j, x_int[0] = nan or 10**30: refused, as by full()
        check_value(describe(op, self=x), value, x.dtype)
    elif not isinstance(value, TensorBase):  # a list or an array: written as the tensor of x's dtype it makes
        try:
            value = tensor(value, dtype=x.dtype, device=x._device)
        except TensorliteError as e:  # x[0] = "a", a ragged list: named as this op's refusal
            raise type(e)(f"{describe(op, self=x)}: cannot assign a {type(value).__name__}: {e}") from None
    v = value if isinstance(value, TensorBase) else None
    if adv:  # the new values of the whole basic region, then written as a basic assignment
        with no_grad():
            m, val = adv[0][1], v._cast(x.dtype) if v is not None else scalar_tensor(value, x.dtype, x._device, op)
            if len(adv) == 1 and m.dtype is dtypes.bool_ and m.shape == target.shape and val.ndim == 0:
                same_device(op, self=x, mask=m, value=val)
                value = where(m, val, target)  # x[mask] = number: no host read of the mask
            else:
                value = _put(target, adv, val, False, x, op)
    if not (is_grad_enabled() and (x.requires_grad or (v is not None and v.requires_grad))):
        write(target, value, op)
        return x
    refuse_inplace_on_graph(x, op)

    def grad(g):
        gx = g.clone()
        gx[idx] = 0
        wants = v is not None and v.requires_grad and v.dtype.is_floating_point
        return gx, sum_to(g[idx], v.shape)._cast(v.dtype) if wants else None
    # the node first (it may refuse an input; the backward reads no values), then the write,
    # then x takes the node: an error leaves x's memory and history as they were
    node = attach(snapshot(x, copy=False), (snapshot(x, copy=False), v), grad, op)._node
    write(target, value, op)
    x._node, x.requires_grad = node, True
    return x


def _check_ids(op, ids, x, dim, **more):  # the checks of the index ops' operands; dim in [0, x.ndim)
    if not isinstance(ids, TensorBase) or ids.dtype not in (dtypes.int64, dtypes.uint32, dtypes.uint8) or \
            not builtins.all(isinstance(t, TensorBase) for t in more.values()):
        raise DTypeError(f"{describe(op, self=x, index=ids, **more)}: index must be an int64, uint32 or uint8 tensor"
                         f"{' and ' + ', '.join(more) + ' a tensor' if more else ''}")
    same_device(op, self=x, index=ids, **more)
    return norm_dim(dim, x.ndim, op, x)


def _check_scatter(op, x, dim, index, src=None):  # scatter's operands, PyTorch's rules; dim in [0, x.ndim)
    more = {"src": src} if src is not None else {}
    dim = _check_ids(op, index, x, dim, **more)
    if more and src.dtype is not x.dtype:
        raise DTypeError(f"{describe(op, self=x, index=index, **more)}: src must have the dtype of self")
    if index.ndim != x.ndim or builtins.any(i > n for j, (i, n) in enumerate(zip(index.shape, x.shape)) if j != dim) \
            or more and (src.ndim != x.ndim or builtins.any(i > n for i, n in zip(index.shape, src.shape))):
        raise ShapeError(f"{describe(op, self=x, index=index, **more)}: index must have self's number of dims and "
                         "sizes no larger than src's, nor than self's outside `dim`")
    return dim


def _check_index_source(op, x, dim, index, source):  # index_add's, index_copy's operands: (dim, 1-D index)
    dim = _check_ids(op, index, x, dim, source=source)
    index = index.reshape(1) if index.ndim == 0 else index
    expect = x.shape[:dim] + (index.numel(),) + x.shape[dim + 1:]
    if source.dtype is not x.dtype:
        raise DTypeError(f"{describe(op, self=x, index=index, source=source)}: source must have the dtype of self")
    if index.ndim != 1 or source.shape != expect:
        raise ShapeError(f"{describe(op, self=x, index=index, source=source)}: expected a 1-D index and a source of "
                         f"shape {tuple(expect)}")
    return dim, index


def _corner(t: Tensor, shape) -> Tensor:
    """t in the leading corner of zeros of `shape` (the gradient of a src larger than index)."""
    if t.shape == tuple(shape):
        return t
    out = zeros(shape, dtype=t.dtype, device=t._device)
    out[tuple(slice(0, n) for n in t.shape)] = t
    return out


def _scalar_self(fn):
    """PyTorch's index ops take a 0-d self as one element along dim 0 (0-d index, src: one id, one value)."""
    @functools.wraps(fn)
    def op(x, dim, index, *args, **kwargs):
        if not (isinstance(x, TensorBase) and x.ndim == 0 and isinstance(index, TensorBase)):
            return fn(x, dim, index, *args, **kwargs)
        norm_dim(dim, 0, fn.__name__, x)
        if fn.__name__ != "gather" and index.numel() != 1:
            raise ShapeError(f"{describe(fn.__name__, self=x, index=index)}: an index into a 0-d tensor must have "
                             f"exactly one value, got {index.numel()}")
        flat = {k: a.reshape(-1) if isinstance(a, TensorBase) else a for k, a in enumerate(args)}
        out = fn(x.reshape(1), 0, index.reshape(-1), *flat.values(),
                 **{k: a.reshape(-1) if isinstance(a, TensorBase) else a for k, a in kwargs.items()})
        return out.reshape(index.shape if fn.__name__ == "gather" else ())
    return op


@_scalar_self
def index_select(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """The entries of x along dim at index (1-D, or 0-d: one entry, the dim kept).

    >>> import tensorlite as tl; tl.tensor([[1, 2], [3, 4]]).index_select(0, tl.tensor([1, 1])).tolist()
    [[3, 4], [3, 4]]
    """
    dim = _check_ids("index_select", index, x, dim)
    if index.ndim != 1:
        if index.ndim == 0:
            return index_select(x, dim, index.reshape(1))
        raise ShapeError(f"{describe('index_select', self=x, index=index)}: index must be 1-D")
    shape = x.shape[:dim] + (index.shape[0],) + x.shape[dim + 1:]
    out = wrap(x._storage.index_select(index._storage, x._layout, index._layout, dim), shape, x.dtype)
    src = x.shape
    return attach(out, (x,), lambda g: (zeros(src, dtype=g.dtype, device=g._device).index_add(dim, index, g),),
                   "index_select", (index,))


@_scalar_self
def gather(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """out[i][j] = x[index[i][j]][j] for dim 0 (torch.gather).

    >>> import tensorlite as tl; tl.tensor([[1, 2], [3, 4]]).gather(1, tl.tensor([[1], [0]])).tolist()
    [[2], [3]]
    """
    dim = _check_scatter("gather", x, dim, index)
    out = wrap(x._storage.gather(x._layout, index._storage, index._layout, dim), index.shape, x.dtype)
    src = x.shape
    return attach(out, (x,), lambda g: (zeros(src, dtype=g.dtype, device=g._device).scatter_add(dim, index, g),),
                   "gather", (index,))


@_scalar_self
def scatter_add(x: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """x with src[i][j] added at [index[i][j]][j] for dim 0 (duplicate indices accumulate).

    >>> import tensorlite as tl; tl.zeros(3).scatter_add(0, tl.tensor([0, 2, 0]), tl.ones(3)).tolist()
    [2.0, 0.0, 1.0]
    """
    dim = _check_scatter("scatter_add", x, dim, index, src)
    st = x._storage.scatter_add(x._layout, index._storage, index._layout, src._storage, src._layout, dim)
    return attach(wrap(st, x.shape, x.dtype), (x, src), lambda g: (g, _corner(g.gather(dim, index), src.shape)),
                   "scatter_add", (index,))


@_scalar_self
def index_add(x: Tensor, dim: int, index: Tensor, source: Tensor, alpha=1) -> Tensor:
    """x with alpha * source[.., i, ..] added at x[.., index[i], ..] along dim (duplicates accumulate).

    >>> import tensorlite as tl; tl.zeros(3).index_add(0, tl.tensor([2, 2]), tl.tensor([1.0, 2.0])).tolist()
    [0.0, 0.0, 3.0]
    """
    source = source * alpha if alpha != 1 and isinstance(source, TensorBase) else source
    dim, index = _check_index_source("index_add", x, dim, index, source)
    st = x._storage.index_add(x._layout, index._storage, index._layout, source._storage, source._layout, dim)
    return attach(wrap(st, x.shape, x.dtype), (x, source), lambda g: (g, g.index_select(dim, index)),
                   "index_add", (index,))




def _raw(x, dim, index, src, reduce):
    """The storage's scatter, unrecorded: x with src written (or reduced) at index along dim."""
    st = x._storage.scatter(x._layout, index._storage, index._layout, src._storage, src._layout, dim, reduce)
    return wrap(st, x.shape, x.dtype)


def _number_src(op, x, index, src):
    """src, or a number as a src of index's shape (a broadcast 0-d tensor of x's dtype)."""
    if isinstance(src, TensorBase):
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
    v = src if isinstance(src, TensorBase) else None
    dim = _check_scatter("scatter", x, dim, index, v)
    out = _raw(x, dim, index, _number_src("scatter", x, index, src), None)
    return attach(out, (x, v), lambda g: (g.scatter(dim, index, 0),
                                           None if v is None else _corner(g.gather(dim, index), v.shape)),
                   "scatter", (index,))


def _identity(reduce, dt):
    """The value that leaves `reduce`'s result as it is (include_self=False starts from it)."""
    if reduce in ("sum", "mean", "prod"):
        return int(reduce == "prod")
    high = reduce == "amin"
    if dt.is_floating_point:
        return float("inf") if high else float("-inf")
    return high if dt is dtypes.bool_ else int(np.iinfo(dt.np).max if high else np.iinfo(dt.np).min)


@_scalar_self
def scatter_reduce(x: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, *, include_self=True) -> Tensor:
    """x with src reduced into [index[i][j]][j] for dim 0 by "sum", "prod", "mean", "amax" or "amin",
    x's own value among the reduced where include_self.

    >>> import tensorlite as tl
    >>> tl.tensor([1, 5]).scatter_reduce(0, tl.tensor([0, 0]), tl.tensor([4, 2]), "amax").tolist()
    [4, 5]
    """
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
        raise ArgumentError(f"{describe('scatter_reduce', self=x)}: reduce must be 'sum', 'prod', 'mean', 'amax' "
                            f"or 'amin', got {reduce!r}")
    dim = _check_scatter("scatter_reduce", x, dim, index, src)
    if reduce == "mean" and x.dtype is dtypes.bool_:
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
    return attach(out, (x, src), grad, "scatter_reduce", (x, src, out, index))


@_scalar_self
def index_copy(x: Tensor, dim: int, index: Tensor, source: Tensor) -> Tensor:
    """x with source[.., i, ..] written at x[.., index[i], ..] along dim (of duplicate indices one wins).

    >>> import tensorlite as tl; tl.zeros(3).index_copy(0, tl.tensor([2, 0]), tl.tensor([1.0, 2.0])).tolist()
    [2.0, 0.0, 1.0]
    """
    dim, index = _check_index_source("index_copy", x, dim, index, source)
    wide = broadcast_to(index.reshape([-1 if d == dim else 1 for d in range(x.ndim)]), source.shape)
    return attach(_raw(x, dim, wide, source, None), (x, source),
                   lambda g: (g.index_fill(dim, index, 0), g.index_select(dim, index)), "index_copy", (index,))


def index_fill(x: Tensor, dim: int, index: Tensor, value) -> Tensor:
    """x with value (a number or a 0-d tensor) at x[.., index[i], ..] along dim.

    >>> import tensorlite as tl; tl.zeros(2, 2).index_fill(1, tl.tensor([1]), 5.0).tolist()
    [[0.0, 5.0], [0.0, 5.0]]
    """
    v = value if isinstance(value, TensorBase) else None
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
    return attach(out, (x, v), grad, "index_fill", (index,))


def index_put(x: Tensor, indices, values, accumulate: bool = False) -> Tensor:
    """x with values written (or added, accumulate) at x[indices], a tuple of index tensors (None: a whole dim).

    >>> import tensorlite as tl; tl.zeros(3).index_put((tl.tensor([0, 0]),), tl.tensor([1.0, 2.0]), True).tolist()
    [3.0, 0.0, 0.0]
    """
    if not isinstance(indices, (tuple, list)) or not indices or \
            not all(i is None or isinstance(i, TensorBase) for i in indices):
        raise DTypeError(f"{describe('index_put', self=x)}: indices must be a tuple of tensors (or None)")
    if isinstance(values, TensorBase) and values.dtype is not x.dtype:
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
    if not (isinstance(mask, TensorBase) and mask.dtype is dtypes.bool_ and isinstance(source, TensorBase)):
        raise DTypeError(f"{describe('masked_scatter', self=x)}: expected a bool mask tensor and a source tensor")
    if source.dtype is not x.dtype:
        raise DTypeError(f"{describe('masked_scatter', self=x, source=source)}: source must have the dtype of self")
    same_device("masked_scatter", self=x, mask=mask, source=source)
    if broadcast_shapes(mask.shape, x.shape) != x.shape:
        raise ShapeError(f"{describe('masked_scatter', self=x, mask=mask)}: mask does not broadcast to self's shape")
    at = repeat_ids(broadcast_to(mask, x.shape).reshape(-1), "masked_scatter")  # on the device; reads the count
    if source.numel() < at.numel():
        raise ShapeError(f"{describe('masked_scatter', self=x, mask=mask, source=source)}: source has fewer "
                         f"elements than mask's {at.numel()} True values")
    flat = x.reshape(-1).index_copy(0, at, source.reshape(-1)[:at.numel()])
    return flat.reshape(x.shape)


def masked_select(x: Tensor, mask: Tensor) -> Tensor:
    """The elements of x where mask (x and mask broadcast together) is True, as a 1-d tensor, as
    torch.masked_select (on the device; the one host read is the count, as x[mask]'s).

    >>> import tensorlite as tl; tl.masked_select(tl.tensor([[1, 2], [3, 4]]), tl.tensor([True, False])).tolist()
    [1, 3]
    """
    if not (isinstance(mask, TensorBase) and mask.dtype is dtypes.bool_):
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
    if not isinstance(indices, TensorBase):
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


scatter_, scatter_reduce_ = inplace_method("scatter_", scatter), inplace_method("scatter_reduce_", scatter_reduce)
index_fill_ = inplace_method("index_fill_", index_fill)


def index_copy_(x: Tensor, dim: int, index: Tensor, source: Tensor) -> Tensor:
    """In-place index_copy: x[.., index[i], ..] = source[.., i, ..] along dim.

    Where no gradient is recorded and x is contiguous, only the indexed elements are written
    (the storage's scatter_set: one kernel on a GPU, what a KV cache's per-token write costs).

    >>> import tensorlite as tl; x = tl.zeros(3); x.index_copy_(0, tl.tensor([2]), tl.tensor([5.0])).tolist()
    [0.0, 0.0, 5.0]
    """
    recording = is_grad_enabled() and (x.requires_grad or getattr(source, "requires_grad", False))
    if recording or not isinstance(source, TensorBase) or not x._layout.is_contiguous() or x.ndim == 0:
        return inplace(x, "index_copy_", index_copy, dim, index, source)
    dim, index = _check_index_source("index_copy_", x, dim, index, source)
    wide = broadcast_to(index.reshape([-1 if d == dim else 1 for d in range(x.ndim)]), source.shape)
    x._storage.scatter_set(x._layout, wide._storage, wide._layout, source._storage, source._layout, dim)
    note_write(x._storage)
    return x
index_put_ = inplace_method("index_put_", index_put)
masked_scatter_ = inplace_method("masked_scatter_", masked_scatter)


class IndexMethods:
    """The Tensor methods of this family (tensorlite.tensor.Tensor inherits them)."""
    __slots__ = ()

    __getitem__ = getitem
    def __setitem__(self, idx, value):
        setitem(self, idx, value)

    # ---- indexing (the module functions of those names) -----------------------------------
    index_select, gather, scatter_add, index_add = index_select, gather, scatter_add, index_add

    index_add_ = inplace_method("index_add_", index_add)
    scatter_add_ = inplace_method("scatter_add_", scatter_add)
    scatter, scatter_, scatter_reduce, scatter_reduce_ = scatter, scatter_, scatter_reduce, scatter_reduce_
    index_copy, index_copy_, index_fill, index_fill_ = index_copy, index_copy_, index_fill, index_fill_
    index_put, index_put_, masked_scatter, masked_scatter_ = index_put, index_put_, masked_scatter, masked_scatter_
    masked_select, take_along_dim = masked_select, take_along_dim
