"""Sorting and searching: sort, argsort, topk, kthvalue, median, cumulative sums and products,
searchsorted, bucketize, unique, bincount, nonzero, multinomial; composites of the other
families' ops, so each runs on every device.
"""
from __future__ import annotations

import builtins
from math import prod

from .. import dtype as dtypes
from .._core import MinMax, TensorBase, dtype_of, ints, norm_dim, numpy_keywords, same_device, wrap
from ..autograd import attach
from ..errors import ArgumentError, DTypeError, IndexOutOfRange, ShapeError, describe
from ..generator import check_generator
from .creation import arange, rand, tensor, zeros
from .elementwise import where
from .index import repeat_ids
from .joins import cat, stack




def _tensor(op, x, name="input"):
    if not isinstance(x, TensorBase):
        raise DTypeError(f"{op}: {name} must be a tensor, got {type(x).__name__}")
    return x


def _along(x, d, fn):
    """fn(storage, layout with dim d of x last) -> storage(s) of that shape, as tensors with d back in place."""
    y = x.transpose(d, -1)
    outs = fn(y._storage, y._layout)
    res = [wrap(st, y.shape).transpose(d, -1) for st in (outs if isinstance(outs, tuple) else (outs,))]
    return res if isinstance(outs, tuple) else res[0]


def _scalar_as_1d(fn, x, *args, **kwargs):
    """fn on a 0-d x viewed as 1-d (dim 0 or -1 of a 0-d tensor is itself, as PyTorch); results back to 0-d."""
    out = fn(x.reshape(1), *args, **kwargs)
    back = [t.reshape(()) if isinstance(t, TensorBase) and t.numel() == 1 else t for t in
            (out if isinstance(out, tuple) else (out,))]
    return type(out)(*back) if isinstance(out, MinMax) else tuple(back) if isinstance(out, tuple) else back[0]


def _scatter_back(g, indices, d, shape):  # the gradient of values picked at `indices` along d
    return zeros(shape, dtype=g.dtype, device=g._device).scatter_add(d, indices, g)


def sort(input, dim=-1, descending=False, stable=False):
    """Values sorted along dim, and their indices; stable (ties keep their order), NaN the largest.

    >>> import tensorlite as tl
    >>> tl.tensor([3, 1, 2]).sort(descending=True).indices.tolist()
    [0, 2, 1]
    """
    x = _tensor("sort", input)
    if x.ndim == 0:
        return _scalar_as_1d(sort, x, norm_dim(dim, 0, "sort", x), descending)
    d = norm_dim(dim, x.ndim, "sort", x)
    values, indices = _along(x, d, lambda st, lay: st.sort(lay, bool(descending)))
    if x.dtype.is_floating_point:
        shape = x.shape
        attach(values, (x,), lambda g: (_scatter_back(g, indices, d, shape),), "sort", (indices,))
    return MinMax(values, indices)


def argsort(input, dim=-1, descending=False, stable=False):
    """The indices that sort input along dim (stable).

    >>> import tensorlite as tl
    >>> tl.argsort(tl.tensor([[2., 0., 1.]])).tolist()
    [[1, 2, 0]]
    """
    return sort(input, dim, descending, stable).indices


def msort(input):
    """input sorted along dim 0 (values only).

    >>> import tensorlite as tl
    >>> tl.msort(tl.tensor([[2, 0], [1, 3]])).tolist()
    [[1, 0], [2, 3]]
    """
    return sort(input, 0).values


def _k_of(op, x, d, k, low):
    n = x.shape[d]
    k = ints(op, "k", k, self=x)
    if not low <= k <= n:
        raise IndexOutOfRange(f"{describe(op, self=x)}: selected number k={k} out of range for a dim of size {n}")
    return k


def topk(input, k, dim=-1, largest=True, sorted=True):
    """The k largest (or smallest) values along dim, in order, and their indices.

    >>> import tensorlite as tl
    >>> tl.tensor([1, 5, 3, 4]).topk(2).values.tolist()
    [5, 4]
    """
    x = _tensor("topk", input)
    if x.ndim == 0:
        return _scalar_as_1d(topk, x, k, norm_dim(dim, 0, "topk", x), largest, sorted)
    d = norm_dim(dim, x.ndim, "topk", x)
    k = _k_of("topk", x, d, k, 0)
    values, indices = sort(x, d, descending=largest)
    return MinMax(values.narrow(d, 0, k), indices.narrow(d, 0, k))


def kthvalue(input, k, dim=-1, keepdim=False):
    """The k-th smallest value along dim (k from 1), and its index.

    >>> import tensorlite as tl
    >>> tl.tensor([4, 1, 3]).kthvalue(2).values.item()
    3
    """
    x = _tensor("kthvalue", input)
    if x.ndim == 0:
        return _scalar_as_1d(kthvalue, x, k, norm_dim(dim, 0, "kthvalue", x), keepdim)
    d = norm_dim(dim, x.ndim, "kthvalue", x)
    k = _k_of("kthvalue", x, d, k, 1)
    values, indices = sort(x, d)
    values, indices = values.narrow(d, k - 1, 1), indices.narrow(d, k - 1, 1)
    return MinMax(values, indices) if keepdim else MinMax(values.squeeze(d), indices.squeeze(d))


def _median(x, op, dim, keepdim, skip_nan):
    if dim is None:
        flat = x.reshape(-1)
        if flat.numel() == 0:
            return tensor(float("nan"), dtype=x.dtype, device=x._device)
        return _median(flat, op, 0, False, skip_nan).values
    if x.ndim == 0:
        return _scalar_as_1d(_median, x, op, norm_dim(dim, 0, op, x), keepdim, skip_nan)
    d = norm_dim(dim, x.ndim, op, x)
    n = x.shape[d]
    if n == 0:
        raise IndexOutOfRange(f"{describe(op, self=x)}: cannot take the median of an empty dim {d}")
    values, indices = sort(x, d)
    nans = (x != x).sum(d, keepdim=True)  # NaNs sort last: the first of them, or the lower median of the rest
    # no integer //: it syncs
    half = ((n - 1 - nans).clamp(min=0)._cast(dtypes.float64) * 0.5).floor()._cast(dtypes.int64)
    pos = half if skip_nan else where(nans > 0, n - nans, (n - 1) // 2)
    values, indices = values.gather(d, pos), indices.gather(d, pos)
    return MinMax(values, indices) if keepdim else MinMax(values.squeeze(d), indices.squeeze(d))


@numpy_keywords
def median(input, dim=None, keepdim=False):
    """The lower median (NaN if the row has one); with dim: (values, indices).

    >>> import tensorlite as tl
    >>> tl.tensor([4., 1., 3., 2.]).median().item()
    2.0
    """
    return _median(_tensor("median", input), "median", dim, keepdim, False)


@numpy_keywords
def nanmedian(input, dim=None, keepdim=False):
    """The lower median of the values that are not NaN; with dim: (values, indices).

    >>> import tensorlite as tl
    >>> tl.tensor([4., float("nan"), 3., 2.]).nanmedian().item()
    3.0
    """
    return _median(_tensor("nanmedian", input), "nanmedian", dim, keepdim, True)


def _scan(op, x, d, reverse=False):
    """cumsum/cumprod along d of a tensor with at least one dim, differentiable."""
    out = _along(x, d, lambda st, lay: st.cumulative(op, lay, reverse))
    if not out.dtype.is_floating_point:
        return out
    if op == "sum":  # each input adds to every later output: the gradient is the reverse scan
        return attach(out, (x,), lambda g: (_scan("sum", g, d, not reverse),), "cumsum")
    return attach(out, (x,), lambda g: (_cumprod_grad(g, x, out, d, reverse),), "cumprod", (x, out))


def _cumprod_grad(g, x, out, d, reverse):
    # Before a row's first zero: sum_{j >= k} g_j out_j / x_k (out_j is 0 from that zero on).
    # At the first zero z: sum_{j >= z} g_j prod_{i <= j, i != z} x_i (the scan with x_z = 1).
    # After it every product keeps x_z: 0.
    zero = x == 0
    seen = _scan("sum", zero, d, reverse)
    before, first = seen == 0, zero & (seen == 1)
    g_before = _scan("sum", g * out, d, not reverse) / where(before, x, 1.0)
    g_first = _scan("sum", g * _scan("prod", where(first, 1.0, x), d, reverse), d, not reverse)
    return where(before, g_before, where(first, g_first, 0.0))


def _cumulative(x, op, dim, dtype):
    x = _tensor(op, x)
    if dtype is not None:
        x = x._cast(dtype_of(dtype, op=op))
    if x.ndim == 0:
        return _scalar_as_1d(_cumulative, x, op, norm_dim(dim, 0, op, x), None)
    return _scan(op[3:], x, norm_dim(dim, x.ndim, op, x))


@numpy_keywords
def cumsum(input, dim, dtype=None):
    """Running sum along dim (integers and bool sum in int64).

    >>> import tensorlite as tl
    >>> tl.tensor([1, 2, 3]).cumsum(0).tolist()
    [1, 3, 6]
    """
    return _cumulative(input, "cumsum", dim, dtype)


@numpy_keywords
def cumprod(input, dim, dtype=None):
    """Running product along dim (integers and bool multiply in int64).

    >>> import tensorlite as tl
    >>> tl.tensor([1, 2, 3]).cumprod(0).tolist()
    [1, 2, 6]
    """
    return _cumulative(input, "cumprod", dim, dtype)


def searchsorted(sorted_sequence, values, *, out_int32=False, right=False, side=None, sorter=None):
    """Where each value would go in sorted_sequence (its last dim) to keep it sorted.

    >>> import tensorlite as tl
    >>> tl.searchsorted(tl.tensor([1, 3, 5]), tl.tensor([3, 6]), right=True).tolist()
    [2, 3]
    """
    op = "searchsorted"
    s = _tensor(op, sorted_sequence, "sorted_sequence")
    if side is not None:
        if side not in ("left", "right") or (right and side == "left"):
            raise ArgumentError(f"{op}: side must be 'left' or 'right' and agree with right={right}, got {side!r}")
        right = side == "right"
    v = values if isinstance(values, TensorBase) else tensor(values, device=s._device)
    same_device(op, sorted_sequence=s, values=v)
    if sorter is not None:
        s = s.gather(-1, _tensor(op, sorter, "sorter"))
    if s.ndim == 0 or (s.ndim > 1 and s.shape[:-1] != v.shape[:-1]):
        raise ShapeError(f"{describe(op, sorted_sequence=s, values=v)}: sorted_sequence must be 1-D, or its leading "
                         "dims must match those of values")
    dt = dtypes.promote_types(s.dtype, v.dtype)
    s, v = s._cast(dt), v._cast(dt)
    s2 = s.reshape(prod(s.shape[:-1]), s.shape[-1])
    v2 = v.reshape(1, v.numel()) if s.ndim == 1 else v.reshape(prod(v.shape[:-1]), v.shape[-1])
    out = wrap(s2._storage.searchsorted(s2._layout, v2._storage, v2._layout, bool(right)), v2.shape).reshape(v.shape)
    if out_int32:
        return out._cast(dtype_of("int32", op=op))
    return out


def bucketize(input, boundaries, *, out_int32=False, right=False):
    """The bucket of each input value among 1-D boundaries (searchsorted with the operands swapped).

    >>> import tensorlite as tl
    >>> tl.bucketize(tl.tensor([0.5, 2.0, 9.0]), tl.tensor([1.0, 2.0, 4.0])).tolist()
    [0, 1, 3]
    """
    if not isinstance(boundaries, TensorBase) or boundaries.ndim != 1:
        raise ShapeError(f"bucketize: boundaries must be a 1-D tensor, got "
                         f"{tuple(boundaries.shape) if isinstance(boundaries, TensorBase) else repr(boundaries)}")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


def _unique(op, x, consecutive, return_inverse, return_counts, dim):
    x = _tensor(op, x)
    if dim is None:
        rows, perm = x.reshape(-1, 1), [0]
    else:
        d = norm_dim(dim, x.ndim, op, x, scalar_ok=False)
        perm = [d] + [i for i in range(x.ndim) if i != d]
        rows = x.permute(*perm)
        rows = rows.reshape(rows.shape[0], -1)
    n = rows.shape[0]
    order = arange(n, device=x._device)
    if not consecutive:  # rows in lexicographic order: stable sorts by each column, the last first
        for c in reversed(range(rows.shape[1])):
            order = order.index_select(0, sort(rows.select(1, c).index_select(0, order)).indices)
    s = rows.index_select(0, order).detach()
    change = (s.narrow(0, 1, n - 1) != s.narrow(0, 0, n - 1))._cast(dtypes.int64).sum(1) > 0 if n else s.sum(1) > 0
    first = cat([zeros(builtins.min(n, 1), dtype=dtypes.bool_, device=x._device) == 0, change])  # starts a group
    start = nonzero(first).select(1, 0)
    out = s.index_select(0, start)
    out = out.reshape(-1) if dim is None else out.reshape((-1,) + tuple(x.shape[i] for i in perm[1:])).permute(
        *sorted(range(x.ndim), key=perm.__getitem__))
    res = [out]
    if return_inverse:
        group = _scan("sum", first, 0) - 1 if n else order
        inverse = zeros(n, dtype=dtypes.int64, device=x._device).scatter_add(0, order, group)
        res.append(inverse.reshape(x.shape) if dim is None else inverse)
    if return_counts:
        res.append(cat([start.narrow(0, 1, start.shape[0] - 1), tensor([n], device=x._device)]) - start
                   if n else start)
    return res[0] if len(res) == 1 else tuple(res)


def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """The distinct values (or slices along dim) in ascending order; optionally the inverse and counts.

    >>> import tensorlite as tl
    >>> tl.tensor([3, 1, 3, 2]).unique().tolist()
    [1, 2, 3]
    """
    return _unique("unique", input, False, return_inverse, return_counts, dim)


def unique_consecutive(input, return_inverse=False, return_counts=False, dim=None):
    """The input with each run of equal consecutive values (or slices along dim) kept once.

    >>> import tensorlite as tl
    >>> tl.tensor([1, 1, 2, 1]).unique_consecutive().tolist()
    [1, 2, 1]
    """
    return _unique("unique_consecutive", input, True, return_inverse, return_counts, dim)


def bincount(input, weights=None, minlength=0):
    """How often each value 0..max occurs in a 1-D non-negative integer tensor (or the sum of its weights).

    >>> import tensorlite as tl
    >>> tl.tensor([0, 2, 2]).bincount().tolist()
    [1, 0, 2]
    """
    x = _tensor("bincount", input)
    minlength = ints("bincount", "minlength", minlength, low=0)
    if x.ndim != 1 or x.dtype.is_floating_point or x.dtype is dtypes.bool_:
        raise DTypeError(f"{describe('bincount', self=x)}: bincount only supports 1-d non-negative integral inputs")
    lo, hi = stack([x.min(), x.max()]).tolist() if x.numel() else (0, -1)
    if lo < 0:
        raise ArgumentError(f"{describe('bincount', self=x)}: bincount only supports 1-d non-negative integral "
                            f"inputs, got {lo}")
    if weights is None:
        w = zeros(x.shape, dtype=dtypes.int64, device=x._device) + 1
    else:
        w = _tensor("bincount", weights, "weights")
        if w.shape != x.shape:
            raise ShapeError(f"{describe('bincount', self=x, weights=w)}: weights must have the shape of input")
        w = w._cast(dtypes.float32 if w.dtype is dtypes.float32 else dtypes.float64)
    return zeros(builtins.max(hi + 1, minlength), dtype=w.dtype, device=x._device).scatter_add(0, x, w)


def nonzero(input, *, as_tuple=False):
    """Indices of the non-zero elements, one row per element (as_tuple: one tensor per dim). Reads the count.

    >>> import tensorlite as tl
    >>> tl.tensor([[0, 1], [2, 0]]).nonzero().tolist()
    [[0, 1], [1, 0]]
    """
    x = _tensor("nonzero", input)
    pos = repeat_ids((x != 0).reshape(-1), "nonzero")  # a device scan; the one host read is the count
    count = pos.numel()
    # each dim's coordinate of every element, picked at the positions (integer // and % would read their divisor)
    coords = [arange(size, device=x._device).reshape([-1 if i == d else 1 for i in range(x.ndim)])
              .broadcast_to(x.shape).reshape(-1).index_select(0, pos) for d, size in enumerate(x.shape)]
    if as_tuple:
        return tuple(coords) if x.ndim else (pos,)
    return stack(coords, 1) if x.ndim else zeros((count, 0), dtype=dtypes.int64, device=x._device)


def argwhere(input):
    """The indices of the non-zero elements, one row per element (nonzero()).

    >>> import tensorlite as tl
    >>> tl.argwhere(tl.tensor([0, 3, 4])).tolist()
    [[1], [2]]
    """
    return nonzero(input)


def multinomial(input, num_samples, replacement=False, *, generator=None):
    """num_samples category indices per row of (unnormalized) probabilities.

    >>> import tensorlite as tl
    >>> tl.tensor([0., 0., 1.]).multinomial(2, replacement=True).tolist()
    [2, 2]
    """
    op = "multinomial"
    p = _tensor(op, input)
    if not p.dtype.is_floating_point or p.ndim not in (1, 2):
        raise DTypeError(f"{describe(op, self=p)}: expected a 1-D or 2-D floating tensor of probabilities")
    check_generator(op, generator)
    k = ints(op, "num_samples", num_samples, low=1, self=p)
    rows = p.reshape(1, -1) if p.ndim == 1 else p
    n = rows.shape[-1]
    if not replacement and k > n:
        raise ArgumentError(f"{describe(op, self=p)}: cannot sample {k} > {n} categories without replacement")
    rows = rows.detach()._cast(dtypes.float32 if p.dtype.itemsize == 2 else p.dtype)
    bad = (rows < 0) | (rows != rows) | (rows.abs() == float("inf"))
    n_bad, least = stack([bad.sum()._cast(rows.dtype), rows.sum(-1).amin()]).tolist() if n else (0, 0.0)
    if n_bad:
        raise ArgumentError(f"{describe(op, self=p)}: probability tensor contains either inf, nan or element < 0")
    if least <= 0:
        raise ArgumentError(f"{describe(op, self=p)}: invalid multinomial distribution (sum of probabilities <= 0)")
    u = rand(rows.shape[0], k if replacement else n, dtype=rows.dtype, device=p._device, generator=generator)
    if replacement:  # inverse CDF: each uniform lands in one category's share of the running sum
        cdf = _scan("sum", rows, 1)
        out = searchsorted(cdf, u * cdf.narrow(1, n - 1, 1), right=True).clamp(max=n - 1)
    else:  # exponential race: the k smallest Exp(1) / p (largest log(u) / p) are the sample, in order
        out = topk(u.log() / rows, k, 1).indices
    return out.reshape(-1) if p.ndim == 1 else out


class SortMethods:
    """The Tensor methods of this family (tensorlite.tensor.Tensor inherits them)."""
    __slots__ = ()

    sort, argsort, msort, topk, kthvalue, median, nanmedian = sort, argsort, msort, topk, kthvalue, median, nanmedian
    cumsum, cumprod, unique, unique_consecutive, bincount = cumsum, cumprod, unique, unique_consecutive, bincount
    nonzero, argwhere, multinomial = nonzero, argwhere, multinomial
