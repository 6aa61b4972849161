"""The Tensor: a storage, a Layout and a dtype.

View ops build a new Layout over the same storage; every other op hands layouts to the
storage of the tensor's device (tensorlite.backend.BackendStorage) and wraps the fresh
storage it returns. Differentiable ops attach a backward closure (tensorlite.autograd).
"""
from __future__ import annotations

import builtins
import functools
import itertools
import numbers
from math import isfinite, prod
from typing import List, Sequence

import numpy as np

from . import amp as _amp, dlpack as _dlpack, dtype as _dt
from ._core import (MinMax, TensorBase, as_view, check_size, copy_of, dtype_of, fits, full_storage, grad_flag, ints, is_scalar,
                    norm_dim, norm_dims, opmath, resolve_device, same_device, scalar_tensor, shape_arg, sizes_arg, wrap,
                    register_tensor_class)
from .autograd import (attach as _attach, attach_many as _attach_many, backward as _backward, is_grad_enabled, no_grad,
                       note_write as _note_write, register_hook as _register_hook,
                       register_post_accumulate_grad_hook as _register_post_accumulate_grad_hook,
                       retain_grad as _retain_grad, retains_grad as _retains_grad)
from .backend import BackendDevice, ConvParams, Device, PoolParams
from .errors import ArgumentError, DTypeError, DeviceError, IndexOutOfRange, ShapeError, TensorliteError, describe
from .layout import Layout, broadcast_shapes
from .op_table import BINARY, BINARY_BY_NAME, FUSED, UNARY, UNARY_BY_NAME


def _infer_shape(shape, numel, op, x):
    if -1 not in shape and prod(shape) == numel and builtins.min(shape, default=0) >= 0:
        return shape if type(shape) is tuple else tuple(shape)  # the common case: nothing to infer
    shape = list(shape)
    if shape.count(-1) > 1:
        raise ShapeError(f"{describe(op, self=x)}: only one dimension can be -1, got {tuple(shape)}")
    if -1 in shape:
        rest = prod(s for s in shape if s != -1)
        if rest == 0 or numel % rest:
            raise ShapeError(f"{describe(op, self=x)}: cannot infer -1 in {tuple(shape)} for {numel} elements")
        shape[shape.index(-1)] = numel // rest
    if prod(shape) != numel or builtins.min(shape, default=0) < 0:
        raise ShapeError(f"{describe(op, self=x)}: shape {tuple(shape)} is invalid for {numel} elements")
    return tuple(shape)


def reshape(x: Tensor, *shape) -> Tensor:
    """A view when strides can express the new shape, else a contiguous copy."""
    shape = _infer_shape(shape_arg(shape, "reshape", x), x._layout.numel(), "reshape", x)
    lay = x._layout.reshape(shape)
    out = as_view(x, lay) if lay is not None else wrap(copy_of(x)._storage, shape, x.dtype)
    src = x._layout.shape
    return _attach(out, (x,), lambda g: (g.reshape(src),), "reshape")


def view(x: Tensor, *shape) -> Tensor:
    """Like reshape, but never copies: raises if strides cannot express the shape."""
    shape = _infer_shape(shape_arg(shape, "view", x), x.numel(), "view", x)
    if x._layout.reshape(shape) is None:
        raise ShapeError(f"{describe('view', self=x)}: strides {x.stride()} cannot be viewed as {shape}; "
                         "use reshape() (which copies) or .contiguous() first")
    return reshape(x, shape)


def permute(x: Tensor, *dims) -> Tensor:
    """A view with the dims reordered, as torch.permute.

    >>> import tensorlite as tl
    >>> tl.zeros(2, 3, 4).permute(2, 0, 1).shape
    (4, 2, 3)
    """
    dims = shape_arg(dims, "permute", x)
    nd = x.ndim
    normed = [norm_dim(d, nd, "permute", x) for d in dims]
    if sorted(normed) != list(range(nd)):
        raise ShapeError(f"{describe('permute', self=x)}: dims {dims} are not a permutation of {x.ndim} dims")
    inv = [normed.index(d) for d in range(nd)]
    return _attach(as_view(x, x._layout.permute(normed)), (x,), lambda g: (g.permute(inv),), "permute")


def transpose(x: Tensor, d0: int, d1: int) -> Tensor:
    """A view with dims d0 and d1 swapped, as torch.transpose.

    >>> import tensorlite as tl
    >>> tl.tensor([[1, 2], [3, 4]]).transpose(0, 1).tolist()
    [[1, 3], [2, 4]]
    """
    nd = len(x._layout.shape)
    if nd == 0:
        return x
    a, b = norm_dim(d0, nd, "transpose", x), norm_dim(d1, nd, "transpose", x)
    return _attach(as_view(x, x._layout.transpose(a, b)), (x,), lambda g: (g.transpose(a, b),), "transpose")


def _embed(g: Tensor, shape, dim: int, start: int, step: int = 1) -> Tensor:
    """Gradient of a (strided) narrow: g placed into zeros of `shape` along dim."""
    ids = arange(start, start + g.shape[dim] * step, step, device=g._device)
    return zeros(shape, dtype=g.dtype, device=g._device).index_add(dim, ids, g)


def narrow(x: Tensor, dim: int, start: int, length: int, step: int = 1) -> Tensor:
    """A view of `length` elements of dim from start, as torch.narrow (plus a `step`, which torch lacks).

    >>> import tensorlite as tl
    >>> tl.arange(6).narrow(0, 1, 3).tolist()
    [1, 2, 3]
    """
    dim = norm_dim(dim, x.ndim, "narrow", x, False)
    n = x.shape[dim]
    if type(start) is not int or type(length) is not int or type(step) is not int or step < 1:
        start, length = ints("narrow", "start", start, self=x), ints("narrow", "length", length, self=x)
        step = ints("narrow", "step", step, low=1, self=x)
    if start < 0:
        start += n
    if not (0 <= start <= n and length >= 0 and start + (length - 1) * step < n + (length == 0)):
        raise IndexOutOfRange(f"{describe('narrow', self=x)}: start {start}, length {length} out of range "
                              f"for dim {dim} of size {n}")
    shape = x.shape
    out = as_view(x, x._layout.narrow(dim, start, length, step))
    return _attach(out, (x,), lambda g: (_embed(g, shape, dim, start, step),), "narrow")


def select(x: Tensor, dim: int, index: int) -> Tensor:
    """A view of index `index` of dim, that dim removed, as torch.select.

    >>> import tensorlite as tl
    >>> tl.tensor([[1, 2], [3, 4]]).select(1, 0).tolist()
    [1, 3]
    """
    dim = norm_dim(dim, x.ndim, "select", x, False)
    n = x.shape[dim]
    index = index if type(index) is int else ints("select", "index", index, self=x)
    if not -n <= index < n:
        raise IndexOutOfRange(f"{describe('select', self=x)}: index {index} out of range for dim {dim} of size {n}")
    index %= n
    shape = x.shape
    out = as_view(x, x._layout.index(dim, index))
    return _attach(out, (x,), lambda g: (_embed(g.unsqueeze(dim), shape, dim, index),), "select")


def unsqueeze(x: Tensor, dim: int) -> Tensor:
    """A view with a size-1 dim inserted at dim, as torch.unsqueeze.

    >>> import tensorlite as tl
    >>> tl.zeros(2, 3).unsqueeze(1).shape
    (2, 1, 3)
    """
    dim = norm_dim(dim, x.ndim + 1, "unsqueeze", x)
    return _attach(as_view(x, x._layout.unsqueeze(dim)), (x,), lambda g: (g.squeeze(dim),), "unsqueeze")


def squeeze(x: Tensor, dim=None) -> Tensor:
    """A view without the size-1 dims (only those of dim, an int or a tuple, if given), as torch.squeeze.

    >>> import tensorlite as tl
    >>> tl.zeros(2, 1, 3, 1).squeeze().shape
    (2, 3)
    """
    dims = [d for d in norm_dims(dim, x.ndim, "squeeze", x, False) if x.shape[d] == 1] if x.ndim else []
    if not dims:
        return x
    shape = x.shape
    return _attach(as_view(x, x._layout.squeeze(dims)), (x,), lambda g: (g.reshape(shape),), "squeeze")


def _sum_to(g: Tensor, shape) -> Tensor:
    """Reduce a broadcast gradient back to `shape` (which may have more, size-1, leading dims)."""
    if g.shape == tuple(shape):
        return g
    if g.ndim < len(shape):
        g = g.reshape((1,) * (len(shape) - g.ndim) + g.shape)
    extra = g.ndim - len(shape)
    dims = tuple(range(extra)) + tuple(extra + i for i, n in enumerate(shape) if n == 1 and g.shape[extra + i] != 1)
    return (g.sum(dims, keepdim=True) if dims else g).reshape(shape)


def broadcast_to(x: Tensor, *shape) -> Tensor:
    """A view broadcast to shape (no copy), as torch.broadcast_to.

    >>> import tensorlite as tl
    >>> tl.tensor([1, 2]).broadcast_to(2, 2).tolist()
    [[1, 2], [1, 2]]
    """
    shape = shape_arg(shape, "broadcast_to", x)
    if shape == x.shape:
        return x
    lay = x._layout.broadcast_as(shape) if builtins.min(shape, default=0) >= 0 else None
    if lay is None:
        raise ShapeError(f"{describe('broadcast_to', self=x)}: cannot broadcast to {shape}")
    src = x.shape
    return _attach(as_view(x, lay), (x,), lambda g: (_sum_to(g, src),), "broadcast_to")


def expand(x: Tensor, *sizes) -> Tensor:
    """broadcast_to where -1 keeps a dim's size, as torch.Tensor.expand.

    >>> import tensorlite as tl
    >>> tl.zeros(3, 1).expand(-1, 4).shape
    (3, 4)
    """
    sizes = shape_arg(sizes, "expand", x)
    lead = len(sizes) - x.ndim
    if -1 in sizes[:builtins.max(lead, 0)]:
        raise ShapeError(f"{describe('expand', self=x)}: -1 (keep the size) is not allowed for a new leading dim, "
                         f"got {sizes}")
    shape = tuple(x.shape[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(sizes))
    return broadcast_to(x, shape)


def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Dims start_dim..end_dim merged into one (a view where the strides allow), as torch.flatten.

    >>> import tensorlite as tl
    >>> tl.zeros(2, 3, 4).flatten(1).shape
    (2, 12)
    """
    if x.ndim == 0:
        return x.reshape(1)
    s, e = norm_dim(start_dim, x.ndim, "flatten", x), norm_dim(end_dim, x.ndim, "flatten", x)
    if s > e:
        raise ArgumentError(f"{describe('flatten', self=x)}: start_dim {start_dim} comes after end_dim {end_dim}")
    return x.reshape(x.shape[:s] + (prod(x.shape[s:e + 1]),) + x.shape[e + 1:])


def unflatten(x: Tensor, dim: int, sizes) -> Tensor:
    """Dim `dim` split into `sizes` (one may be -1), as torch.unflatten.

    >>> import tensorlite as tl
    >>> tl.zeros(2, 12).unflatten(1, (3, -1)).shape
    (2, 3, 4)
    """
    dim = norm_dim(dim, x.ndim, "unflatten", x, False)
    sizes = _infer_shape(shape_arg((sizes,), "unflatten", x), x.shape[dim], "unflatten", x)
    return x.reshape(x.shape[:dim] + sizes + x.shape[dim + 1:])


def split(x: Tensor, split_size_or_sections, dim: int = 0):
    """Views of split_size_or_sections elements along dim (the last may be shorter), as torch.split.
    One autograd node for all of them, whose backward is one cat of their gradients (zeros for
    a view that got none), as torch's: not a zero-filled copy of x per view, summed.

    >>> import tensorlite as tl
    >>> [t.tolist() for t in tl.arange(5).split(2)]
    [[0, 1], [2, 3], [4]]
    """
    dim = norm_dim(dim, x.ndim, "split", x, False)
    n = x.shape[dim]
    if not isinstance(split_size_or_sections, (tuple, list)):
        step = ints("split", "split_size", split_size_or_sections, low=0 if n == 0 else 1, self=x)
        sizes = [builtins.min(step, n - i) for i in range(0, n, step)] if n else [0]
    else:
        sizes = list(shape_arg((split_size_or_sections,), "split", x))
        if builtins.sum(sizes) != n or builtins.min(sizes, default=0) < 0:
            raise ShapeError(f"{describe('split', self=x)}: sections {sizes} do not sum to {n} along dim {dim}")
    starts = itertools.accumulate(sizes, initial=0)
    outs = [as_view(x, x._layout.narrow(dim, start, s)) for start, s in zip(starts, sizes)]

    shapes = [o.shape for o in outs]  # not the outputs: the node outlives a backward (_READS_NO_TENSOR)

    def grad(gs):
        return (cat([zeros(s, dtype=x.dtype, device=x._device) if g is None else g for g, s in zip(gs, shapes)], dim),)
    return tuple(_attach_many(outs, (x,), grad, "split"))


def chunk(x: Tensor, chunks: int, dim: int = 0):
    """`chunks` views of (about) equal size along dim, as torch.chunk.

    >>> import tensorlite as tl
    >>> [t.tolist() for t in tl.arange(6).chunk(3)]
    [[0, 1], [2, 3], [4, 5]]
    """
    n = x.shape[norm_dim(dim, x.ndim, "chunk", x, False)]
    return split(x, builtins.max(-(-n // ints("chunk", "chunks", chunks, low=1, self=x)), 1), dim)


def _index_tensor(i, x):
    if isinstance(i, Tensor):
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
    idx = [_index_tensor(i, x) if isinstance(i, (Tensor, list, np.ndarray, bool, np.bool_)) else i for i in idx]
    consumed = builtins.sum(i.ndim if isinstance(i, Tensor) and i.dtype is _dt.bool_ else
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
        elif isinstance(i, Tensor):
            adv.append((d, i))
            d += i.ndim if i.dtype is _dt.bool_ else 1
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


def _getitem(x: Tensor, idx):
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
        if i.dtype is _dt.bool_:
            if i.shape != out.shape[d:d + i.ndim]:
                raise IndexOutOfRange(f"{describe(op, self=x, mask=i)}: mask shape does not match "
                                      f"dims {d}..{d + i.ndim - 1} of shape {out.shape}")
            nz = np.nonzero(i.numpy().reshape(-1))[0]
            out, shift = flatten(out, d, d + i.ndim - 1) if i.ndim else unsqueeze(out, d), shift + i.ndim - 1
            i = tensor(nz.astype(np.int64), device=x._device)
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
        raise ShapeError(f"{describe(op, self=x)}: index tensors of shapes {[t.shape for t in ids]} do not broadcast")
    sizes, flat, bad = out.shape[dims[0]:dims[0] + len(dims)], None, None
    for t, n, pos in zip(ids, sizes, nonneg):  # (no new ids where none can be negative: their bounds stay known)
        t = t if len(ids) == 1 and pos else t._cast(_dt.int64)
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
    v = values if isinstance(values, Tensor) else scalar_tensor(values, t.dtype, t._device, op)
    same_device(op, self=x, values=v)
    while v.ndim > len(want) and v.shape[0] == 1:  # PyTorch drops leading size-1 dims of values
        v = v.reshape(v.shape[1:])
    if broadcast_shapes(v.shape, want) != want:
        raise ShapeError(f"{describe(op, self=x, values=v)}: values do not broadcast to the indexed shape {want}")
    v = broadcast_to(v, want).reshape(q.shape[:d0] + flat.shape + q.shape[d0 + 1:])
    try:
        r = q.index_add(d0, flat, v) if accumulate else q.index_copy(d0, flat, v)
    except IndexOutOfRange as e:
        raise _index_error(op, x, ids) or e from None
    return undo(r.reshape(p.shape))


def _as_rows(lay: Layout):
    """(rows, row_len, row_stride) if lay addresses equally spaced contiguous rows."""
    pairs = [(n, s) for n, s in zip(lay.shape, lay.strides) if n != 1]
    inner, k = 1, len(pairs)
    while k and pairs[k - 1][1] == inner:
        inner *= pairs[k - 1][0]
        k -= 1
    outer = pairs[:k]
    if not outer:
        return 1, inner, inner
    for (n0, s0), (n1, s1) in zip(outer, outer[1:]):
        if s0 != n1 * s1:
            return None
    return prod(n for n, _ in outer), inner, outer[-1][1]


def _refuse_inplace_on_graph(x: Tensor, op: str):
    """The in-place writes autograd cannot record (PyTorch refuses the first too)."""
    if x._node is None and x.requires_grad:
        raise TensorliteError(f"{describe(op, self=x)}: a leaf tensor that requires grad cannot be modified in "
                              "place while gradients are recorded; do it under tl.no_grad(), or out of place")
    if x._base is not None:
        raise TensorliteError(f"{describe(op, self=x)}: in-place op on a view while gradients are recorded "
                              "(tensorlite does not rewrite the base's history, as PyTorch does); apply it to "
                              "the base tensor, or out of place")


def _before(x: Tensor, copy: bool) -> Tensor:
    """A stand-in for x as it is now, with x's history: the input an in-place op records
    before x takes the op's history. `copy`: with its own copy of x's values (the op's
    backward may read them after the write)."""
    t = wrap(copy_of(x)._storage, x.shape, x.dtype) if copy else as_view(x, x._layout)
    t.requires_grad, t._node, t._base, t._base_node = x.requires_grad, x._node, None, None
    return t


def _write(dst: Tensor, src, op: str) -> None:
    """dst's elements become src (a scalar, or a tensor broadcast to dst's shape and cast
    to its dtype), written through dst's layout; dst's storage version goes up."""
    lay = dst._layout
    if builtins.any(s == 0 and n > 1 for n, s in zip(lay.shape, lay.strides)):
        raise ShapeError(f"{describe(op, self=dst)}: more than one element of the written-to tensor refers to "
                         "a single memory location; clone() it first")
    if not isinstance(src, Tensor):
        if dst.numel():
            dst._storage.const_set(src, lay)
    elif dst.numel():
        rows = _as_rows(lay)
        if rows is not None and src._layout.shape == lay.shape and src.dtype is dst.dtype \
                and src._device is dst._device and src._storage is not dst._storage and src._layout.is_contiguous():
            _copy_rows(dst, src, rows)  # the common case (a KV cache's new positions): one copy, no views
        else:
            _write_converted(dst, src, op, rows)
    _note_write(dst._storage)


def _write_converted(dst: Tensor, src: Tensor, op: str, rows) -> None:
    """_write's general case: src broadcast and cast first, dst written in its memory order."""
    same_device(op, self=dst, src=src)
    lead = src.shape[:builtins.max(src.ndim - dst.ndim, 0)]
    if broadcast_shapes(src.shape[len(lead):], dst.shape) != dst.shape or builtins.any(n != 1 for n in lead):
        raise ShapeError(f"{describe(op, self=dst, src=src)}: src does not broadcast to the tensor's shape")
    with no_grad():
        if src.ndim > dst.ndim:  # leading size-1 dims beyond dst's (PyTorch drops them)
            src = src.reshape(src.shape[src.ndim - dst.ndim:])
        src = broadcast_to(src._cast(dst.dtype), dst.shape)
        if src._storage is dst._storage:  # overlapping memory: read it all before writing
            src = copy_of(src)
        if rows is None:  # not rows in dst's dim order (a transposed view): its memory order
            order = sorted(range(dst.ndim), key=lambda d: -dst._layout.strides[d])
            dst, src = permute(dst, order), permute(src, order)
            rows = _as_rows(dst._layout)
        _copy_rows(dst, src.contiguous(), rows)


def _copy_rows(dst: Tensor, src: Tensor, rows) -> None:
    """Contiguous src into dst as equally spaced rows (copy2d; rows = _as_rows(dst's layout)),
    dim 0 by dim 0 where dst's memory is not one such set (rows None)."""
    if rows is None:
        for i in range(dst.shape[0]):
            d = select(dst, 0, i)
            _copy_rows(d, select(src, 0, i), _as_rows(d._layout))
        return
    n, row_len, row_stride = rows
    src._storage.copy2d(dst._storage, n, row_len, row_len, row_stride, src._layout.offset, dst._layout.offset)


def _setitem(x: Tensor, idx, value, op="__setitem__"):
    """x[idx] = value, into x's memory (copy_ and fill_ are idx=...); through index tensors and
    masks as index_put_ (of duplicate indices one write wins). Recorded for autograd
    where x or value requires grad (PyTorch's CopySlices): x's history gets the incoming
    gradient with the written region zeroed, value the region's gradient."""
    target, adv = _basic_index(x.detach(), idx)
    if target._storage is not x._storage:
        raise IndexOutOfRange(f"{describe(op, self=x)}: assignment through negative steps is not supported "
                              "(nor is indexing with them in PyTorch)")
    v = value if isinstance(value, Tensor) else None
    if adv:  # the new values of the whole basic region, then written as a basic assignment
        with no_grad():
            m, val = adv[0][1], v._cast(x.dtype) if v is not None else scalar_tensor(value, x.dtype, x._device, op)
            if len(adv) == 1 and m.dtype is _dt.bool_ and m.shape == target.shape and val.ndim == 0:
                same_device(op, self=x, mask=m, value=val)
                value = where(m, val, target)  # x[mask] = number: no host read of the mask
            else:
                value = _put(target, adv, val, False, x, op)
    if not (is_grad_enabled() and (x.requires_grad or (v is not None and v.requires_grad))):
        _write(target, value, op)
        return x
    _refuse_inplace_on_graph(x, op)

    def grad(g):
        gx = g.clone()
        gx[idx] = 0
        wants = v is not None and v.requires_grad and v.dtype.is_floating_point
        return gx, _sum_to(g[idx], v.shape)._cast(v.dtype) if wants else None
    # the node first (it may refuse an input; the backward reads no values), then the write,
    # then x takes the node: an error leaves x's memory and history as they were
    node = _attach(_before(x, copy=False), (_before(x, copy=False), v), grad, op)._node
    _write(target, value, op)
    x._node, x.requires_grad = node, True
    return x


def _inplace(x: Tensor, op: str, fn, *args, **kwargs) -> Tensor:
    """x's memory becomes fn(x, *args, **kwargs) (PyTorch's in-place ops; views of x see it).
    Where gradients are recorded, fn runs on a stand-in for x as it was and x takes the result's
    history; tensors saved from x before are caught at backward by the version check."""
    recording = is_grad_enabled() and (x.requires_grad or builtins.any(
        getattr(a, "requires_grad", False) for a in (*args, *kwargs.values())))
    if recording:
        _refuse_inplace_on_graph(x, op)
    out = fn(_before(x, copy=True) if recording else x, *args, **kwargs)
    if out.shape != x.shape:
        raise ShapeError(f"{describe(op, self=x)}: the result's shape {out.shape} (after broadcasting) is not "
                         "the tensor's")
    if out.dtype is not x.dtype:  # PyTorch's rule: no float into an integer, nothing but bool into bool
        if (out.dtype.is_floating_point and not x.dtype.is_floating_point) or x.dtype is _dt.bool_:
            raise DTypeError(f"{describe(op, self=x)}: result type {out.dtype.name} can't be cast to the "
                             f"tensor's dtype {x.dtype.name} in place")
        out = out._cast(x.dtype)
    _write(x, out, op)
    if out._node is not None:
        x._node, x.requires_grad = out._node, True
    return x


def _inplace_method(name: str, fn):
    """The Tensor method `name` (add_, exp_, ...): fn(self, ...) in place (see _inplace)."""
    def method(self, *args, **kwargs):
        return _inplace(self, name, fn, *args, **kwargs)
    method.__name__, method.__qualname__ = name, f"Tensor.{name}"
    method.__doc__ = f"In-place {fn.__name__}: this tensor's memory becomes the result (its views see it)."
    return method


def _coerce(op, a, b):
    """Two operands -> two tensors on one device with the promoted dtype (an ndarray becomes a
    tensor on the other operand's device; a numpy scalar is a Python scalar of its kind)."""
    if isinstance(a, np.ndarray) and isinstance(b, Tensor):
        a = tensor(a, device=b._device)
    elif isinstance(b, np.ndarray) and isinstance(a, Tensor):
        b = tensor(b, device=a._device)
    if is_scalar(b):
        if not isinstance(a, (Tensor, list, tuple, np.ndarray)):
            raise DTypeError(f"{op}: unsupported operand types {type(a).__name__} and {type(b).__name__}")
        a = a if isinstance(a, Tensor) else tensor(a)
        dt = _dt.result_type_scalar(a.dtype, b.item() if isinstance(b, np.generic) else b)
        if isinstance(b, numbers.Integral) and dt.np.kind in "iu" and -2 ** 63 <= b < 2 ** 63:
            b = int(np.array(b, np.int64).astype(dt.np))  # an int64 operand wraps into dt, as PyTorch's
        return a._cast(dt), scalar_tensor(b, dt, a._device, op)
    if is_scalar(a):
        return _coerce(op, b, a)[::-1]  # the scalar first: as above, the operands swapped back
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise DTypeError(f"{op}: unsupported operand types {type(a).__name__} and {type(b).__name__}")
    same_device(op, lhs=a, rhs=b)
    if a.dtype is b.dtype:
        return a, b
    if (a.ndim == 0) != (b.ndim == 0):
        dt = _dt.result_type_0d(b.dtype, a.dtype) if a.ndim == 0 else _dt.result_type_0d(a.dtype, b.dtype)
    else:
        dt = _dt.promote_types(a.dtype, b.dtype)
    return a._cast(dt), b._cast(dt)


def _broadcast_pair(op, a, b):
    if a.shape == b.shape:
        return a.shape, a._layout, b._layout
    shape = broadcast_shapes(a.shape, b.shape)
    if shape is None:
        raise ShapeError(f"{describe(op, lhs=a, rhs=b)}: shapes do not broadcast")
    return shape, a._layout.broadcast_as(shape), b._layout.broadcast_as(shape)


_AFFINE = {"add": lambda s, scalar_first: (1.0, s), "mul": lambda s, scalar_first: (s, 0.0),
           "sub": lambda s, scalar_first: (-1.0, s) if scalar_first else (1.0, -s)}


def _binary(op, a, b, name=None):
    row = BINARY_BY_NAME[op]
    if isinstance(a, Tensor) and isinstance(b, Tensor) and a.dtype is b.dtype and a._device is b._device \
            and (a.dtype.is_floating_point or row.integers):
        # the hot path (what _coerce would return unchanged): skip coercion, and the
        # broadcast layouts when the shapes already agree
        la, lb = a._layout, b._layout
        shape = la.shape
        if shape != lb.shape:
            shape, la, lb = _broadcast_pair(name or op, a, b)
    else:
        name = name or op
        # float tensor with a Python scalar: one affine launch instead of a 0-d tensor + binary op
        if op in _AFFINE:
            if type(a) is Tensor and type(b) in (int, float) and a.dtype.is_floating_point:
                return affine(a, *_AFFINE[op](b, False))
            if type(b) is Tensor and type(a) in (int, float) and b.dtype.is_floating_point:
                return affine(b, *_AFFINE[op](a, True))
        if not row.integers and (is_scalar(a) or is_scalar(b)):  # an int scalar must not wrap into int dtypes first
            a, b = (t._cast(_dt.get_default_dtype()) if isinstance(t, Tensor) and not t.dtype.is_floating_point
                    else t for t in (a, b))
        a, b = _coerce(name, a, b)
        if not row.integers and not a.dtype.is_floating_point:  # true division, atan2: in float, as PyTorch
            a, b = a._cast(_dt.get_default_dtype()), b._cast(_dt.get_default_dtype())
        shape, la, lb = _broadcast_pair(name, a, b)
    out = wrap(a._storage.binary_impl(op, b._storage, la, lb), shape, a.dtype)
    if not a.dtype.is_floating_point or not (a.requires_grad or b.requires_grad):
        return out  # what _attach would return: nothing to record
    return _attach(out, (a, b), lambda g: tuple(_sum_to(gi, t.shape) for gi, t in zip(row.grad(g, a, b, out), (a, b))),
                   op, [(a, b, out)[i] for i in row.saves])


def _cmp(op, a, b):
    if not isinstance(b, (Tensor, np.ndarray)) and not is_scalar(b):
        if op in ("eq", "ne"):
            return NotImplemented  # lets `t == None`, `t in list` fall back to identity
        raise DTypeError(f"{describe(op, self=a)}: cannot compare with a {type(b).__name__}")
    a, b = _coerce(op, a, b)
    shape, la, lb = _broadcast_pair(op, a, b)
    return wrap(a._storage.cmp(op, b._storage, la, lb), shape, _dt.bool_)


def _fused_unary_grad(op, g, x):
    """g * op'(x) in one kernel (storage unary_backward; composite forms in tests)."""
    g = g if g.dtype is x.dtype else g._cast(x.dtype)
    return wrap(x._storage.unary_backward(op, x._layout, g._storage, g._layout), x.shape, x.dtype)


def _unary(op, x):
    row = UNARY_BY_NAME[op]
    if not x.dtype.is_floating_point and not row.integers:
        x = x._cast(_dt.get_default_dtype())
    out = wrap(x._storage.unary_impl(op, x._layout), x.shape, x.dtype)
    if row.grad is None or not x.dtype.is_floating_point:
        return out
    if row.grad == FUSED:
        return _attach(out, (x,), lambda g: (_fused_unary_grad(op, g, x),), op, (x,))
    return _attach(out, (x,), lambda g: (row.grad(g, x, out),), op, [(x, out)[i] for i in row.saves])


def affine(x: Tensor, mul: float, add: float) -> Tensor:
    """x * mul + add in one op, keeping x's dtype (candle's affine; torch has no such op).

    >>> import tensorlite as tl
    >>> tl.tensor([1.0, 2.0]).affine(2.0, 1.0).tolist()
    [3.0, 5.0]
    """
    out = wrap(x._storage.affine(x._layout, mul, add), x.shape, x.dtype)
    return _attach(out, (x,), lambda g: (g * mul,), "affine")


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """ELU: x where x > 0, else alpha * (exp(x) - 1), as torch.nn.functional.elu.

    >>> import tensorlite as tl
    >>> tl.tensor([1.0, 0.0]).elu().tolist()
    [1.0, 0.0]
    """
    out = wrap(x._storage.elu(x._layout, alpha), x.shape, x.dtype)
    return _attach(out, (x,), lambda g: (g * where(x > 0, 1.0, out + alpha),), "elu", (x, out))


def _pow(x, e):
    if isinstance(e, Tensor) or not is_scalar(e):
        return _pow_tensor(*_coerce("pow", x, e))
    if not x.dtype.is_floating_point:
        if isinstance(e, numbers.Integral) and e >= 0:  # exact integer power by squaring
            out, base, k = ones_like(x), x, int(e)
            while k:
                out, base, k = (out * base if k & 1 else out), base * base, k >> 1
            return out
        x = x._cast(_dt.get_default_dtype())
    e = float(e)
    out = wrap(x._storage.powf(x._layout, e), x.shape, x.dtype)
    # d/dx = e * x^(e-1), and 0 for e == 0 (PyTorch's: no 0 * inf at x = 0)
    return _attach(out, (x,), lambda g: (g * e * x.pow(e - 1) if e else zeros_like(g),), "pow", (x,))


def _pow_tensor(x, e):
    """x ** e elementwise for tensors x, e (one of them broadcast), composed of primitives,
    with PyTorch's gradients: e * x^(e-1) (0 where e == 0) and x^e * log(x) (0 where x == 0
    and e >= 0), where differentiating the composite would give 0 * inf = nan at x = 0."""
    _broadcast_pair("pow", x, e)  # a shape error names pow, not a primitive of it
    if not x.dtype.is_floating_point:  # exact square-and-multiply over the exponent's bits
        if e.numel() and bool((e < 0).sum() > 0):
            raise ArgumentError(f"{describe('pow', self=x, exponent=e)}: integers to negative integer powers")
        out, base, k = ones_like(x), x, int(e.max().item()) if e.numel() else 0
        while k:
            out, base, e, k = where(e % 2 == 1, out * base, out), base * base, e // 2, k >> 1
        return out
    with no_grad():
        out = _pow_values(x, e)

    def grad(g):
        dx = where(e == 0, 0.0, g * e * _pow_values(x, e - 1))
        de = where((x == 0) & (e >= 0), 0.0, g * out * x.log())
        return _sum_to(dx, x.shape), _sum_to(de, e.shape)
    return _attach(out, (x, e), grad, "pow", (x, e, out))


def _pow_values(x, e):
    mag = where(e == 0, 1.0, (e * x.abs().log()).exp())
    odd_int = (e.floor() == e) & ((e * 0.5).floor() != e * 0.5)
    neg = x < 0
    out = where(neg & odd_int, -mag, mag)
    return where(neg & (e.floor() != e), float("nan"), out)


def _rpow(x, base):
    return _pow_tensor(*_coerce("pow", base, x))


def _division(op, a, b):
    """floor_divide's / remainder's operands coerced and cast to their opmath (integers to
    float64: exact below 2**53), and the result's dtype. Integer division by zero raises, as
    PyTorch does on the cpu (the host reads b)."""
    a, b = _nonzero_divisor(op, a, b)
    wide = opmath(a.dtype, _dt.float64)
    return a._cast(wide), b._cast(wide), a.dtype


def _nonzero_divisor(op, a, b):
    """a and b coerced; an integer division by zero raises. A scalar divisor is checked as it is,
    a tensor one is read back (the host waits for the device)."""
    scalar = b if is_scalar(b) else None
    a, b = _coerce(op, a, b)
    _broadcast_pair(op, a, b)
    if not b.dtype.is_floating_point and b.numel() and (
            scalar == 0 if scalar is not None else bool((b == 0).sum() > 0)):
        raise ArgumentError(f"{describe(op, lhs=a, rhs=b)}: integer division by zero")
    return a, b


def fmod(a, b):
    """The truncating remainder a - b * trunc(a / b) (C's fmod): the sign follows the dividend.

    >>> import tensorlite as tl
    >>> tl.tensor([-3, 3]).fmod(2).tolist()
    [-1, 1]
    """
    return _binary("fmod", *_nonzero_divisor("fmod", a, b))


def floor_divide(a, b):
    """floor(a / b)."""
    a, b, dt = _division("floor_divide", a, b)
    return (a / b).floor()._cast(dt)


def remainder(a, b):
    """a - b * floor(a / b): the sign follows the divisor, as Python and PyTorch."""
    a, b, dt = _division("remainder", a, b)
    return (a - (a / b).floor() * b)._cast(dt)


def where(cond: Tensor, x=None, y=None) -> Tensor:
    """cond ? x : y with broadcasting; x or y may be Python scalars. where(cond) alone is
    nonzero(cond, as_tuple=True), as torch.where.

    >>> import tensorlite as tl
    >>> c = tl.tensor([True, False, True])
    >>> tl.where(c, 1.0, -1.0).tolist(), [t.tolist() for t in tl.where(c)]
    ([1.0, -1.0, 1.0], [[0, 2]])
    """
    if x is None and y is None:
        return _sorting.nonzero(cond, as_tuple=True)
    if x is None or y is None:
        raise ArgumentError("where: give both x and y, or neither (where(cond) is nonzero(cond, as_tuple=True))")
    if not isinstance(cond, Tensor) or cond.dtype is not _dt.bool_:
        raise DTypeError(f"where: condition must be a bool tensor, got "
                         f"{cond.dtype.name if isinstance(cond, Tensor) else type(cond).__name__}")
    if is_scalar(x) and is_scalar(y):
        x = scalar_tensor(x, _dt.result_type_scalar(_dt.get(type(x)), y), cond._device)
    x, y = _coerce("where", x, y)
    same_device("where", cond=cond, x=x, y=y)
    shape = broadcast_shapes(cond.shape, x.shape, y.shape)
    if shape is None:
        raise ShapeError(f"{describe('where', cond=cond, x=x, y=y)}: shapes do not broadcast")
    lc, lx, ly = (t._layout.broadcast_as(shape) for t in (cond, x, y))
    out = wrap(cond._storage.where_cond(lc, x._storage, lx, y._storage, ly), shape, x.dtype)
    if not x.dtype.is_floating_point:
        return out
    return _attach(out, (x, y), lambda g: (_sum_to(where(cond, g, 0.0), x.shape),
                                           _sum_to(where(cond, 0.0, g), y.shape)), "where", (cond,))


def clamp(x: Tensor, min=None, max=None) -> Tensor:
    """x limited to [min, max] (either may be None or a tensor), as torch.clamp.

    >>> import tensorlite as tl
    >>> tl.tensor([-2, 0, 5]).clamp(-1, 3).tolist()
    [-1, 0, 3]
    """
    if min is None and max is None:
        raise ArgumentError(f"{describe('clamp', self=x)}: at least one of min and max must be given")
    out = x if min is None else _binary("maximum", x, min, "clamp")
    return out if max is None else _binary("minimum", out, max, "clamp")


def maximum(a, b):
    """Elementwise max of a and b (broadcast; NaN propagates), as torch.maximum.

    >>> import tensorlite as tl
    >>> tl.maximum(tl.tensor([1, 5]), tl.tensor([3, 2])).tolist()
    [3, 5]
    """
    return _binary("maximum", a, b)


def minimum(a, b):
    """Elementwise min of a and b (broadcast; NaN propagates), as torch.minimum.

    >>> import tensorlite as tl
    >>> tl.minimum(tl.tensor([1, 5]), tl.tensor([3, 2])).tolist()
    [1, 2]
    """
    return _binary("minimum", a, b)


def isnan(x: Tensor) -> Tensor:
    """True where x is NaN.

    >>> import tensorlite as tl
    >>> tl.tensor([1.0, float("nan")]).isnan().tolist()
    [False, True]
    """
    return x != x


def isinf(x: Tensor) -> Tensor:
    """True where x is +inf or -inf.

    >>> import tensorlite as tl
    >>> tl.tensor([1.0, float("-inf")]).isinf().tolist()
    [False, True]
    """
    return x.abs() == np.inf if x.dtype.is_floating_point else zeros_like(x, dtype=_dt.bool_)


def isposinf(x: Tensor) -> Tensor:
    """True where x is +inf.

    >>> import tensorlite as tl
    >>> tl.tensor([float("inf"), float("-inf")]).isposinf().tolist()
    [True, False]
    """
    return x == np.inf if x.dtype.is_floating_point else zeros_like(x, dtype=_dt.bool_)


def isneginf(x: Tensor) -> Tensor:
    """True where x is -inf.

    >>> import tensorlite as tl
    >>> tl.tensor([float("inf"), float("-inf")]).isneginf().tolist()
    [False, True]
    """
    return x == -np.inf if x.dtype.is_floating_point else zeros_like(x, dtype=_dt.bool_)


def isfinite_(x: Tensor) -> Tensor:  # tl.isfinite (math.isfinite keeps its name here)
    """True where x is neither NaN nor infinite.

    >>> import tensorlite as tl
    >>> tl.tensor([1.0, float("inf"), float("nan")]).isfinite().tolist()
    [True, False, False]
    """
    return x.abs() < np.inf if x.dtype.is_floating_point else ones_like(x, dtype=_dt.bool_)


def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False) -> Tensor:
    """|input - other| <= atol + rtol * |other| elementwise (equal infinities are close).

    >>> import tensorlite as tl
    >>> tl.isclose(tl.tensor([1.0, 2.0]), tl.tensor([1.0 + 1e-9, 2.1])).tolist()
    [True, False]
    """
    if isinstance(input, Tensor) and isinstance(other, Tensor) and input.dtype is not other.dtype:
        raise DTypeError(f"{describe('isclose', self=input, other=other)}: expected both operands to have the same dtype")
    a, b = _coerce("isclose", input, other)
    with no_grad():
        close = a == b
        if a.dtype is not _dt.bool_:
            wide = opmath(a.dtype, _dt.float64)
            a, b = a._cast(wide), b._cast(wide)
            d = (a - b).abs()
            close = close | ((d <= b.abs() * rtol + atol) & (d < np.inf))  # an infinite error is never close
        return close | (isnan(a) & isnan(b)) if equal_nan else close


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool:
    """Whether every element of input is close to other's (see isclose).

    >>> import tensorlite as tl
    >>> tl.allclose(tl.tensor([1.0, 2.0]), tl.tensor([1.0, 2.0 + 1e-7]))
    True
    """
    return bool(isclose(input, other, rtol, atol, equal_nan).all())


def lerp(input: Tensor, end, weight) -> Tensor:
    """input + weight * (end - input); weight a number or a tensor.

    >>> import tensorlite as tl
    >>> tl.lerp(tl.tensor([0.0, 2.0]), tl.tensor([4.0, 4.0]), 0.5).tolist()
    [2.0, 3.0]
    """
    for name, t in (("input", input), ("end", end), ("weight", weight)):
        if isinstance(t, Tensor) and not t.dtype.is_floating_point:
            raise DTypeError(f"{describe('lerp', **{name: t})}: expected a floating dtype")
    return input + weight * (end - input)


def logical_not(x: Tensor) -> Tensor:
    """True where x is zero (any dtype; a bool result).

    >>> import tensorlite as tl
    >>> tl.tensor([0, 3]).logical_not().tolist()
    [True, False]
    """
    return x == 0


def _logical(op, a, b):
    """logical_<op> of operands of any dtypes (nonzero is True): a bool result."""
    a, b = _coerce(f"logical_{op}", a, b)
    return _binary(f"bitwise_{op}", a != 0, b != 0, f"logical_{op}")


def logical_and(input, other) -> Tensor:
    """input and other elementwise, nonzero being True.

    >>> import tensorlite as tl
    >>> tl.tensor([0, 1, 2]).logical_and(tl.tensor([1, 1, 0])).tolist()
    [False, True, False]
    """
    return _logical("and", input, other)


def logical_or(input, other) -> Tensor:
    """input or other elementwise, nonzero being True.

    >>> import tensorlite as tl
    >>> tl.tensor([0, 1, 0]).logical_or(tl.tensor([0, 0, 3])).tolist()
    [False, True, True]
    """
    return _logical("or", input, other)


def logical_xor(input, other) -> Tensor:
    """input xor other elementwise, nonzero being True.

    >>> import tensorlite as tl
    >>> tl.tensor([0, 1, 2]).logical_xor(tl.tensor([1, 1, 0])).tolist()
    [True, False, True]
    """
    return _logical("xor", input, other)


# x with value where mask (a bool tensor broadcast to x's shape) is True; value is a number or a
# 0-d tensor (PyTorch)
def masked_fill(x: Tensor, mask: Tensor, value) -> Tensor:
    """x with `value` where the bool mask (broadcast to x) is True, as torch.masked_fill.

    >>> import tensorlite as tl
    >>> tl.tensor([1, 2, 3]).masked_fill(tl.tensor([True, False, True]), 0).tolist()
    [0, 2, 0]
    """
    v = {"value": value} if isinstance(value, Tensor) else {}
    if not isinstance(mask, Tensor) or mask.dtype is not _dt.bool_ or not (is_scalar(value) or v and value.ndim == 0):
        raise DTypeError(f"{describe('masked_fill', self=x, mask=mask, **v)}: expected a bool mask and a number "
                         "or 0-d tensor value")
    same_device("masked_fill", self=x, mask=mask, **v)
    if broadcast_shapes(mask.shape, x.shape) != x.shape:
        raise ShapeError(f"{describe('masked_fill', self=x, mask=mask)}: mask does not broadcast to self's shape")
    return where(mask, scalar_tensor(value, x.dtype, x._device, "masked_fill") if not v else value._cast(x.dtype), x)


def _reduce(op, x, dim, keepdim, name):
    dims = norm_dims(dim, x.ndim, name, x)
    if x.ndim == 0:
        return _reduce(op, x.reshape(1), 0, True, name).reshape(())
    kept = tuple(1 if i in dims else n for i, n in enumerate(x.shape))
    out = wrap(x._storage.reduce_op(op, x._layout, dims), kept, None)
    if not keepdim:
        out = as_view(out, out._layout.squeeze(dims))
    return out


def sum(x: Tensor, dim=None, keepdim=False, dtype=None) -> Tensor:
    """Sum over dim (an int, a tuple; every dim if None); integers and bools sum in int64, as torch.sum.

    >>> import tensorlite as tl
    >>> tl.tensor([[1, 2], [3, 4]]).sum(0).tolist()
    [4, 6]
    """
    if dtype is not None:
        x = x._cast(dtype_of(dtype, op="sum"))
    elif not x.dtype.is_floating_point and x.dtype is not _dt.int64:
        x = x._cast(_dt.int64)  # bool/u8/u32 sums count in int64, as PyTorch
    out = _reduce("sum", x, dim, keepdim, "sum")
    if not x.dtype.is_floating_point:
        return out
    dims, shape = norm_dims(dim, x.ndim, "sum", x), x.shape

    def grad(g):  # g with the summed dims kept (as size 1), broadcast back to x's shape
        kept = g if keepdim else g.reshape(tuple(1 if i in dims else n for i, n in enumerate(shape)))
        return (broadcast_to(kept, shape),)
    return _attach(out, (x,), grad, "sum")


def mean(x: Tensor, dim=None, keepdim=False) -> Tensor:
    """Mean over dim (an int, a tuple; every dim if None), as torch.mean (integer input gives a float).

    >>> import tensorlite as tl
    >>> tl.tensor([[1.0, 2.0], [3.0, 4.0]]).mean(1).tolist()
    [1.5, 3.5]
    """
    dt = opmath(x.dtype, _dt.get_default_dtype())
    n = prod(x.shape[d] for d in norm_dims(dim, x.ndim, "mean", x))
    out = sum(x._cast(dt), dim, keepdim) * (1.0 / n if n else float("nan"))
    return out._cast(x.dtype) if x.dtype.is_floating_point else out


def any_(x: Tensor, dim=None, keepdim=False) -> Tensor:
    """Whether any element (over dim, an int or a tuple; every dim if None) is nonzero: bool.

    >>> import tensorlite as tl
    >>> tl.tensor([[0, 1], [0, 0]]).any(1).tolist()
    [True, False]
    """
    return _reduce("sum", (x != 0)._cast(_dt.int64), dim, keepdim, "any") > 0


def all_(x: Tensor, dim=None, keepdim=False) -> Tensor:
    """Whether every element (over dim, an int or a tuple; every dim if None) is nonzero: bool.

    >>> import tensorlite as tl
    >>> tl.tensor([[1, 2], [0, 3]]).all(1).tolist()
    [True, False]
    """
    return _reduce("sum", (x == 0)._cast(_dt.int64), dim, keepdim, "all") == 0


def count_nonzero(x: Tensor, dim=None) -> Tensor:
    """The number of nonzero elements (over dim, an int or a tuple; every dim if None): int64.

    >>> import tensorlite as tl
    >>> tl.tensor([[0, 1], [2, 3]]).count_nonzero(0).tolist()
    [1, 2]
    """
    return _reduce("sum", (x != 0)._cast(_dt.int64), dim, False, "count_nonzero")


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
        out = _attach(out, (x,), grad, op, (x, out))
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
        _attach(values, (x,), grad, op, (idx,))
    return MinMax(values, idx)


def max(x, dim=None, keepdim=False):
    """max() -> scalar tensor; max(dim) -> (values, indices); max(x, other) -> maximum."""
    if isinstance(dim, Tensor):
        return maximum(x, dim)
    return _minmax("max", x, dim, keepdim)


def min(x, dim=None, keepdim=False):
    """min() the smallest element; min(dim) (values, indices); min(x, other) minimum, as torch.min.

    >>> import tensorlite as tl
    >>> tl.tensor([[3, 1], [2, 4]]).min(1).indices.tolist()
    [1, 0]
    """
    if isinstance(dim, Tensor):
        return minimum(x, dim)
    return _minmax("min", x, dim, keepdim)


def amax(x, dim=None, keepdim=False):
    """The largest values over dim (an int or a tuple; every dim if None), as torch.amax.

    >>> import tensorlite as tl
    >>> tl.tensor([[3, 1], [2, 4]]).amax(0).tolist()
    [3, 4]
    """
    return _amaxmin("max", x, dim, keepdim, "amax")


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


def argmax(x, dim=None, keepdim=False):
    """Index of the largest element (of the flattened tensor if dim is None), as torch.argmax.

    >>> import tensorlite as tl
    >>> tl.tensor([[3, 1], [2, 4]]).argmax(1).tolist()
    [0, 1]
    """
    return _arg("argmax", x, dim, keepdim)


def argmin(x, dim=None, keepdim=False):
    """Index of the smallest element (of the flattened tensor if dim is None), as torch.argmin.

    >>> import tensorlite as tl
    >>> tl.tensor([[3, 1], [2, 4]]).argmin(1).tolist()
    [1, 0]
    """
    return _arg("argmin", x, dim, keepdim)


def var(x, dim=None, keepdim=False, correction=1, unbiased=None):
    """Variance over dim with Bessel's correction (correction=1) by default, as torch.var.

    >>> import tensorlite as tl
    >>> tl.tensor([1.0, 3.0, 5.0]).var().item()
    4.0
    """
    if unbiased is not None:
        correction = int(unbiased)
    dt = opmath(x.dtype, _dt.get_default_dtype())
    n = prod(x.shape[d] for d in norm_dims(dim, x.ndim, "var", x))
    xs = x._cast(dt)
    c = xs - mean(xs, dim, keepdim=True)
    out = sum(c * c, dim, keepdim) * (1.0 / builtins.max(n - correction, 0) if n > correction else float("nan"))
    return out._cast(x.dtype) if x.dtype.is_floating_point else out


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
    return _attach(out, (v,), lambda g: (where(out == 0, 0.0, g / (out * 2)),), "std", (out,))


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
    if not x.dtype.is_floating_point and x.dtype is not _dt.int64:
        x = x._cast(_dt.int64)
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


def logsumexp(x, dim=None, keepdim=False):
    """log(sum(exp(x))) over dim, computed stably, as torch.logsumexp.

    >>> import tensorlite as tl
    >>> round(tl.tensor([0.0, 0.0]).logsumexp(0).item(), 4)
    0.6931
    """
    if not x.dtype.is_floating_point:
        x = x._cast(_dt.get_default_dtype())
    dims = norm_dims(dim, x.ndim, "logsumexp", x)
    if any(x.shape[d] == 0 for d in dims):
        m = zeros((1,) * x.ndim, dtype=x.dtype, device=x._device)
    else:
        m = amax(x.detach(), dims, keepdim=True)
        m = where(m.abs() == float("inf"), 0.0, m)
    out = (x - m).exp().sum(dims, keepdim=True).log() + m
    return out if keepdim else squeeze(out, dims)


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """PyTorch matmul: 1-D operands are promoted and squeezed, batch dims broadcast."""
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise DTypeError(f"matmul: operands must be tensors, got {type(a).__name__} and {type(b).__name__}")
    same_device("matmul", lhs=a, rhs=b)
    a, b = _amp.low_precision(a, b)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"{describe('matmul', lhs=a, rhs=b)}: both operands need at least 1 dim")
    if a.dtype is not b.dtype:
        a, b = _coerce("matmul", a, b)
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    b2 = b.unsqueeze(-1) if b.ndim == 1 else b
    m, k = a2.shape[-2:]
    k2, n = b2.shape[-2:]
    batch = broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    if k != k2 or batch is None:
        raise ShapeError(f"{describe('matmul', lhs=a, rhs=b)}: shapes are not aligned for matrix product")
    bs = prod(batch)
    la = broadcast_to(a2, batch + (m, k)).reshape(bs, m, k)
    lb = broadcast_to(b2, batch + (k, n)).reshape(bs, k, n)
    st = la._storage.matmul(lb._storage, (bs, m, n, k), la._layout, lb._layout)
    out = wrap(st, batch + (m, n), a.dtype)
    if a.ndim == 1:
        out = out.squeeze(-2)
    if b.ndim == 1:
        out = out.squeeze(-1)
    if not a.dtype.is_floating_point:
        return out

    def grad(g):
        g2 = g.reshape(batch + (m, n))
        ga = _sum_to(matmul(g2, b2.mT), a2.shape).reshape(a.shape)
        gb = _sum_to(matmul(a2.mT, g2), b2.shape).reshape(b.shape)
        return ga, gb
    return _attach(out, (a, b), grad, "matmul", (a, b))


def _check_ids(op, ids, x, dim, **more):  # the checks of the index ops' operands; dim in [0, x.ndim)
    if not isinstance(ids, Tensor) or ids.dtype not in (_dt.int64, _dt.uint32, _dt.uint8) or \
            not builtins.all(isinstance(t, Tensor) for t in more.values()):
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
                         f"shape {expect}")
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
        if not (isinstance(x, Tensor) and x.ndim == 0 and isinstance(index, Tensor)):
            return fn(x, dim, index, *args, **kwargs)
        norm_dim(dim, 0, fn.__name__, x)
        if fn.__name__ != "gather" and index.numel() != 1:
            raise ShapeError(f"{describe(fn.__name__, self=x, index=index)}: an index into a 0-d tensor must have "
                             f"exactly one value, got {index.numel()}")
        flat = {k: a.reshape(-1) if isinstance(a, Tensor) else a for k, a in enumerate(args)}
        out = fn(x.reshape(1), 0, index.reshape(-1), *flat.values(),
                 **{k: a.reshape(-1) if isinstance(a, Tensor) else a for k, a in kwargs.items()})
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
    return _attach(out, (x,), lambda g: (zeros(src, dtype=g.dtype, device=g._device).index_add(dim, index, g),),
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
    return _attach(out, (x,), lambda g: (zeros(src, dtype=g.dtype, device=g._device).scatter_add(dim, index, g),),
                   "gather", (index,))


@_scalar_self
def scatter_add(x: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """x with src[i][j] added at [index[i][j]][j] for dim 0 (duplicate indices accumulate).

    >>> import tensorlite as tl; tl.zeros(3).scatter_add(0, tl.tensor([0, 2, 0]), tl.ones(3)).tolist()
    [2.0, 0.0, 1.0]
    """
    dim = _check_scatter("scatter_add", x, dim, index, src)
    st = x._storage.scatter_add(x._layout, index._storage, index._layout, src._storage, src._layout, dim)
    return _attach(wrap(st, x.shape, x.dtype), (x, src), lambda g: (g, _corner(g.gather(dim, index), src.shape)),
                   "scatter_add", (index,))


@_scalar_self
def index_add(x: Tensor, dim: int, index: Tensor, source: Tensor, alpha=1) -> Tensor:
    """x with alpha * source[.., i, ..] added at x[.., index[i], ..] along dim (duplicates accumulate).

    >>> import tensorlite as tl; tl.zeros(3).index_add(0, tl.tensor([2, 2]), tl.tensor([1.0, 2.0])).tolist()
    [0.0, 0.0, 3.0]
    """
    source = source * alpha if alpha != 1 and isinstance(source, Tensor) else source
    dim, index = _check_index_source("index_add", x, dim, index, source)
    st = x._storage.index_add(x._layout, index._storage, index._layout, source._storage, source._layout, dim)
    return _attach(wrap(st, x.shape, x.dtype), (x, source), lambda g: (g, g.index_select(dim, index)),
                   "index_add", (index,))


def _tensor_list(op, tensors) -> list:  # cat's and stack's operand: a non-empty sequence of tensors
    tensors = list(tensors) if isinstance(tensors, (tuple, list)) else [tensors]
    if not tensors or not builtins.all(isinstance(t, Tensor) for t in tensors):
        raise (ArgumentError if not tensors else DTypeError)(
            f"{op}: expected a non-empty sequence of tensors, got {[type(t).__name__ for t in tensors]}")
    return tensors


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """The tensors joined along an existing dim, as torch.cat.

    >>> import tensorlite as tl
    >>> tl.cat([tl.tensor([1, 2]), tl.tensor([3])]).tolist()
    [1, 2, 3]
    """
    tensors = _tensor_list("cat", tensors)
    first = tensors[0]
    named = {f"t{i}": t for i, t in enumerate(tensors)}
    if first.ndim == 0:
        raise ShapeError(f"{describe('cat', **named)}: zero-dimensional tensors cannot be concatenated; use stack")
    dim = norm_dim(dim, first.ndim, "cat", first)
    same_device("cat", **named)
    dt = functools.reduce(_dt.promote_types, [t.dtype for t in tensors])
    if any(t.ndim != first.ndim or t.shape[:dim] + t.shape[dim + 1:] != first.shape[:dim] + first.shape[dim + 1:]
           for t in tensors):
        raise ShapeError(f"{describe('cat', **named)}: shapes must match except in dim {dim}")
    tensors = [t._cast(dt).contiguous() for t in tensors]
    sizes = [t.shape[dim] for t in tensors]
    shape = first.shape[:dim] + (builtins.sum(sizes),) + first.shape[dim + 1:]
    dst = first._device.alloc_uninit(shape, dt)
    rows, inner, off, pieces = prod(shape[:dim]), prod(shape[dim + 1:]), 0, []
    for t, s in zip(tensors, sizes):
        if t.numel():
            pieces.append((t._storage, t._layout.offset, off, s * inner))
        off += s * inner
    if rows == 1:  # each piece is a run of the output: copied together (one launch on GPUs)
        dst.copy_runs(pieces)
    else:
        for st, src_offset, dst_offset, n in pieces:
            st.copy2d(dst, rows, n, n, shape[dim] * inner, src_offset, dst_offset)
    return _attach(wrap(dst, shape, dt), tuple(tensors), lambda g: split(g, sizes, dim), "cat")


def foreach_to(tensors: Sequence[Tensor], dtype) -> List[Tensor]:
    """[t.to(dtype) for t in tensors] in as few launches as the backend allows (the GPU
    backend: one per few dozen contiguous float tensors), differentiable as one node whose
    backward casts the gradients back the same way: mixed precision's per-step casts of
    every weight and weight gradient. Tensors already of `dtype` come back as they are."""
    dtype = _dt.get(dtype)
    tensors = list(tensors)
    by_class = {}  # to_dtype_many takes storages of one class
    for i, t in enumerate(tensors):  # one pass: a mixed-precision step runs this for every weight, twice
        if not isinstance(t, Tensor):
            raise DTypeError(f"foreach_to: element {i} is a {type(t).__name__}, expected a Tensor")
        if t.dtype is not dtype:
            by_class.setdefault(type(t._storage), []).append(i)
    out = list(tensors)
    for cls, idx in by_class.items():
        results = cls.to_dtype_many([(tensors[i]._storage, tensors[i]._layout) for i in idx], dtype)
        for i, st in zip(idx, results):
            out[i] = wrap(st, tensors[i]._layout.shape, dtype)
    diff = [i for i, t in enumerate(tensors) if t.dtype is not dtype and t.dtype.is_floating_point
            and dtype.is_floating_point]
    if diff:
        srcs = [tensors[i] for i in diff]

        def grad(grads):  # each back to its input's dtype, batched by that dtype
            res = list(grads)
            for src_dtype in dict.fromkeys(t.dtype for t in srcs):
                ks = [k for k, g in enumerate(grads) if g is not None and srcs[k].dtype is src_dtype]
                for k, g in zip(ks, foreach_to([grads[k] for k in ks], src_dtype)):
                    res[k] = g
            return res
        _attach_many([out[i] for i in diff], srcs, grad, "foreach_to")
    return out


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """The equal-shaped tensors joined along a new dim, as torch.stack.

    >>> import tensorlite as tl
    >>> tl.stack([tl.tensor([1, 2]), tl.tensor([3, 4])], 1).tolist()
    [[1, 3], [2, 4]]
    """
    tensors = _tensor_list("stack", tensors)
    if any(t.shape != tensors[0].shape for t in tensors):
        raise ShapeError(f"{describe('stack', **{f't{i}': t for i, t in enumerate(tensors)})}: shapes must be equal")
    d = norm_dim(dim, tensors[0].ndim + 1, "stack", tensors[0])
    return cat([t.unsqueeze(d) for t in tensors], d)


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
    if not isinstance(x, Tensor) or not isinstance(w, Tensor):
        raise DTypeError(f"{describe(op, input=x, weight=w)}: input and weight must be tensors")
    same_device(op, input=x, weight=w)
    if x.ndim != nd + 2 or w.ndim != nd + 2:
        raise ShapeError(f"{describe(op, input=x, weight=w)}: expected {nd + 2}-D input and weight")
    ops = dict(input=x, weight=w)
    groups = ints(op, "groups", groups, low=1, **ops)
    cin = w.shape[0] if transposed else w.shape[1] * groups
    if x.shape[1] != cin or w.shape[0] % groups or w.shape[0] < groups or builtins.min(w.shape[2:]) < 1:
        raise ShapeError(f"{describe(op, **ops)}: channels do not match (groups={groups}), or a kernel size is 0")
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
    x, w, bias = _amp.low_precision(x, w, bias)
    x, p = _conv_params(op, x, w, nd, stride, padding, dilation, groups, output_padding, transposed)
    groups = p.groups
    spatial = p.out_size(x.shape[2:], w.shape[2:], transposed)
    if builtins.min(spatial) <= 0:
        raise ShapeError(f"{describe(op, input=x, weight=w)}: output size {spatial} is not positive")
    cout = w.shape[1] * groups if transposed else w.shape[0]
    check_size(op, (x.shape[0], cout) + spatial, x.dtype, x._device)
    if x.numel() and cout:
        st = getattr(x._storage, op)(x._layout, w._storage, w._layout, p)
    else:  # nothing to compute (no batch, no channels): no kernel is launched
        st = x._device.zeros((x.shape[0], cout) + spatial, x.dtype)
    out = wrap(st, (x.shape[0], cout) + spatial, x.dtype)

    def grad(g):
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
    out = _attach(out, (x, w), grad, op, (x, w))
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
    (1, 1, 4, 4)
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
    (1, 4, 6, 6)
    """
    return _conv("conv_transpose2d", input, weight, bias, 2, stride, padding, dilation, groups, output_padding)


def _pad2d(x, p, value):  # x (b, c, h, w) with p = (ph, pw) entries of value on each side
    for d, n in ((3, p[1]), (2, p[0])):
        if n:
            side = full(x.shape[:d] + (n,) + x.shape[d + 1:], value, dtype=x.dtype, device=x._device)
            x = cat([side, x, side], d)
    return x


def _pool(op, x, kernel_size, stride, padding, dilation=1, count_include_pad=True, ceil_mode=False):
    if not isinstance(x, Tensor) or x.ndim != 4:
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
        taken = zeros(g.shape, dtype=_dt.bool_, device=g._device) if is_max else None
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
                part = _embed(where(hit, g, 0.0) if is_max else gw, padded[:3] + (ow,), 2, h0, p.stride[0])
                gp = gp + _embed(part, padded, 3, w0, p.stride[1])
        return (gp[:, :, p.padding[0]:p.padding[0] + x.shape[2], p.padding[1]:p.padding[1] + x.shape[3]],)
    return _attach(out, (x,), grad, op, (x, out))


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
    if not isinstance(x, Tensor) or x.ndim != 4 or builtins.min(x.shape[2:]) < 1:
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
    check_size(op, x.shape[:2] + (oh, ow), x.dtype, x._device)
    h, w = x.shape[2:]
    out = wrap(x._storage.upsample_nearest2d(x._layout, oh, ow) if x.numel() else
                x._device.zeros(x.shape[:2] + (oh, ow), x.dtype), x.shape[:2] + (oh, ow), x.dtype)

    def grad(g):
        ih = tensor((np.arange(oh) * h // oh).astype(np.int64), device=g._device)
        iw = tensor((np.arange(ow) * w // ow).astype(np.int64), device=g._device)
        gh = zeros(x.shape[:2] + (h, ow), dtype=g.dtype, device=g._device).index_add(2, ih, g)
        return (zeros(x.shape, dtype=g.dtype, device=g._device).index_add(3, iw, gh),)
    return _attach(out, (x,), grad, "upsample_nearest2d")


def tensor(data, dtype=None, device=None, requires_grad=False) -> Tensor:
    """A new tensor holding a copy of `data` (nested lists, numbers, numpy arrays, tensors)."""
    if isinstance(data, Tensor):
        out = data.detach().to(device)  # device None: to() returns it as it is
        out = out._cast(dtype_of(dtype)) if dtype is not None else out
        out = copy_of(out) if out._storage is data._storage else out
    else:
        try:
            arr = np.asarray(data)
        except ValueError as e:  # ragged nesting
            raise ShapeError(f"tensor: cannot make a tensor of {type(data).__name__} data: {e}") from None
        if dtype is not None:
            dt = dtype_of(dtype)
        elif arr.dtype == np.float64 and not isinstance(data, (np.ndarray, np.generic)):
            dt = _dt.get_default_dtype()  # Python floats default to float32, as PyTorch
        elif arr.dtype.kind == "O":
            raise DTypeError(f"tensor: cannot infer a dtype from {type(data).__name__} data")
        else:
            dt = dtype_of(arr.dtype)
        # an int that does not fit raises (PyTorch: overflow), never wraps
        if arr.dtype.kind in "iu" and dt.np.kind in "iu" and arr.dtype != dt.np and arr.size and not (
                fits(int(arr.min()), dt) and fits(int(arr.max()), dt)):
            raise ArgumentError(f"tensor: values {int(arr.min())}..{int(arr.max())} do not fit {dt.name}")
        arr = arr.astype(dt.np, order="C", copy=False)  # (np.ascontiguousarray would make a 0-d array 1-d)
        dev = resolve_device(device)
        out = wrap(dev.from_cpu(arr.reshape(-1)), arr.shape, dt)
    out.requires_grad = grad_flag("tensor", out.dtype, requires_grad)
    return out


def _unpickle(cls, data, dtype, device, requires_grad):  # Tensor.__reduce__'s inverse (a Parameter stays one)
    t = tensor(data, dtype, device, requires_grad)
    return t if cls is Tensor else cls(t, requires_grad)


def from_numpy(a: np.ndarray, device=None) -> Tensor:
    """A tensor with a copy of `a`, keeping its dtype (float64 stays float64)."""
    return tensor(a, dtype=_dt.get(a.dtype), device=device)


def _filled(op, shape, value, dtype, device, requires_grad):
    dev = resolve_device(device)
    check_size(op, shape, dtype, dev)
    out = wrap(full_storage(op, dev, shape, value, dtype) if value is not None else dev.alloc_uninit(shape, dtype), shape,
                dtype)
    out.requires_grad = grad_flag(op, dtype, requires_grad)
    return out


def zeros(*sizes, size=None, dtype=None, device=None, requires_grad=False):
    """A tensor of zeros (the default float dtype unless given), as torch.zeros.

    >>> import tensorlite as tl
    >>> tl.zeros(2, 3).shape
    (2, 3)
    """
    return _filled("zeros", sizes_arg("zeros", sizes, size), 0, dtype_of(dtype, op="zeros"), device, requires_grad)


def ones(*sizes, size=None, dtype=None, device=None, requires_grad=False):
    """A tensor of ones (the default float dtype unless given), as torch.ones.

    >>> import tensorlite as tl
    >>> tl.ones(2, dtype=tl.int64).tolist()
    [1, 1]
    """
    return _filled("ones", sizes_arg("ones", sizes, size), 1, dtype_of(dtype, op="ones"), device, requires_grad)


def empty(*sizes, size=None, dtype=None, device=None, requires_grad=False):
    """An uninitialised tensor (its values are arbitrary), as torch.empty.

    >>> import tensorlite as tl
    >>> tl.empty(2, 3).shape
    (2, 3)
    """
    return _filled("empty", sizes_arg("empty", sizes, size), None, dtype_of(dtype, op="empty"), device, requires_grad)


def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    """A tensor of shape `size` filled with fill_value (dtype from the value unless given), as torch.full.

    >>> import tensorlite as tl
    >>> tl.full((2,), 7).tolist()
    [7, 7]
    """
    return _filled("full", shape_arg((size,), "full"), fill_value, dtype_of(dtype, fill_value, "full"), device,
                   requires_grad)


def _like(fn, x, *args, dtype=None, device=None, requires_grad=False):
    dtype = x.dtype if dtype is None else dtype_of(dtype, op=f"{fn.__name__}_like")
    return fn(x.shape, *args, dtype=dtype, device=device or x._device, requires_grad=requires_grad)


def zeros_like(x, **kw):
    """zeros of x's shape, dtype and device (unless given), as torch.zeros_like.

    >>> import tensorlite as tl
    >>> tl.zeros_like(tl.tensor([1, 2])).tolist()
    [0, 0]
    """
    return _like(zeros, x, **kw)


def ones_like(x, **kw):
    """ones of x's shape, dtype and device (unless given), as torch.ones_like.

    >>> import tensorlite as tl
    >>> tl.ones_like(tl.tensor([1, 2])).tolist()
    [1, 1]
    """
    return _like(ones, x, **kw)


def empty_like(x, **kw):
    """An uninitialised tensor of x's shape, dtype and device (unless given), as torch.empty_like.

    >>> import tensorlite as tl
    >>> tl.empty_like(tl.zeros(2, 3)).shape
    (2, 3)
    """
    return _like(empty, x, **kw)


def full_like(x, fill_value, **kw):
    """fill_value in x's shape, dtype and device (unless given), as torch.full_like.

    >>> import tensorlite as tl
    >>> tl.full_like(tl.tensor([1, 2]), 5).tolist()
    [5, 5]
    """
    return _like(full, x, fill_value, **kw)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    """start, start + step, ... below end (int64 if all are integers), as torch.arange.

    >>> import tensorlite as tl
    >>> tl.arange(1, 7, 2).tolist()
    [1, 3, 5]
    """
    if end is None:
        start, end = 0, start
    if not all(isinstance(v, numbers.Real) and isfinite(v) for v in (start, end, step)) or step == 0 or \
            (end - start) * step < 0:
        raise ArgumentError(f"arange: start, end, step {(start, end, step)} must be finite numbers, the step "
                            "nonzero and of the sign of end - start")
    is_int = all(isinstance(v, numbers.Integral) for v in (start, end, step))
    dt = dtype_of(dtype, 0 if is_int else 0.0, "arange")
    dev = resolve_device(device)
    check_size("arange", (int(-((start - end) // step)),), dt, dev)  # the length, before numpy builds it
    vals = np.arange(start, end, step, dtype=np.int64 if is_int else np.float64)
    return tensor(vals.astype(dt.np), dtype=dt, device=dev, requires_grad=requires_grad)


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False):
    """`steps` evenly spaced values from start to end inclusive, as torch.linspace.

    >>> import tensorlite as tl
    >>> tl.linspace(0, 1, 5).tolist()
    [0.0, 0.25, 0.5, 0.75, 1.0]
    """
    dt, dev = dtype_of(dtype, 0.0, "linspace"), resolve_device(device)
    if not all(isinstance(v, numbers.Real) for v in (start, end)):
        raise DTypeError(f"linspace: start and end must be real numbers, got {(start, end)}")
    steps = check_size("linspace", (ints("linspace", "steps", steps),), dt, dev)[0]
    return tensor(np.linspace(float(start), float(end), steps), dtype=dt, device=dev, requires_grad=requires_grad)


def eye(n, m=None, dtype=None, device=None, requires_grad=False):
    """An n x m (m = n by default) identity matrix, as torch.eye.

    >>> import tensorlite as tl
    >>> tl.eye(2).tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    dt, dev = dtype_of(dtype, 0.0, "eye"), resolve_device(device)
    shape = check_size("eye", (ints("eye", "n", n), ints("eye", "m", n if m is None else m)), dt, dev)
    return tensor(np.eye(*shape), dtype=dt, device=dev, requires_grad=requires_grad)


def _random(op, draw, size, dtype, device, requires_grad):  # rand / randn: the device's `draw` on [0, 1) / N(0, 1)
    dt, shape, dev = dtype_of(dtype, 0.0, op), shape_arg(size, op), resolve_device(device)
    if not dt.is_floating_point:
        raise DTypeError(f"{op}: expected a floating dtype, got {dt.name}")
    out = wrap(getattr(dev, draw)(check_size(op, shape, dt, dev), dt, 0.0, 1.0), shape, dt)
    out.requires_grad = requires_grad
    return out


def rand(*sizes, size=None, dtype=None, device=None, requires_grad=False):
    """Uniform on [0, 1) from the device's counter-based generator (see manual_seed)."""
    return _random("rand", "rand_uniform", sizes_arg("rand", sizes, size), dtype, device, requires_grad)


def randn(*sizes, size=None, dtype=None, device=None, requires_grad=False):
    """Standard normal samples from the device's counter-based generator (see manual_seed), as torch.randn.

    >>> import tensorlite as tl
    >>> tl.randn(2, 3).shape
    (2, 3)
    """
    return _random("randn", "rand_normal", sizes_arg("randn", sizes, size), dtype, device, requires_grad)


def randint(low, high=None, size=(), dtype=None, device=None):
    """Integers uniform on [low, high), drawn in float64 so every value is reachable."""
    if high is None or isinstance(high, (tuple, list)):  # randint(high), randint(high, size)
        low, high, size = 0, low, (size if high is None else high)
    low, high = ints("randint", "low", low), ints("randint", "high", high)
    if high <= low:
        raise ArgumentError(f"randint: empty range [{low}, {high})")
    dev, dt = resolve_device(device), dtype_of(dtype, 0, "randint")
    shape = check_size("randint", shape_arg((size,), "randint"), _dt.float64, dev)
    u = wrap(dev.rand_uniform(shape, _dt.float64, 0.0, 1.0), shape, _dt.float64)
    v = (u * float(high - low)).floor()._cast(_dt.int64) + int(low)
    v = minimum(v, high - 1)  # guards the u -> 1.0 rounding edge
    return v._cast(dt) if dtype is not None else v


def randperm(n, dtype=None, device=None, requires_grad=False):
    """A random permutation of 0..n-1 (int64), as torch.randperm: the order of n uniform
    float64 draws, made on the device.

    >>> import tensorlite as tl
    >>> sorted(tl.randperm(5).tolist())
    [0, 1, 2, 3, 4]
    """
    n = ints("randperm", "n", n, low=0)
    dev, dt = resolve_device(device), dtype_of(dtype, 0, "randperm")
    if requires_grad:
        raise ArgumentError("randperm: an integer tensor cannot require grad")
    u = wrap(dev.rand_uniform((n,), _dt.float64, 0.0, 1.0), (n,), _dt.float64)
    out = u.argsort()
    return out._cast(dt) if dtype is not None else out


class Tensor(TensorBase):
    """A storage, a Layout (shape, strides, offset) and a dtype on one device.

    Methods and operators are defined here, most as the module functions of the same names;
    the plain elementwise methods (exp, sigmoid, ...) and their in-place forms (exp_, ...)
    are one per row of op_table.UNARY, added below the class."""
    __slots__ = ()  # the data model's slots are TensorBase's (tensorlite/_core.py)
    __array_priority__ = 1000  # numpy defers `ndarray op Tensor` to us

    def __init__(self, *a, **k):
        raise TypeError("create tensors with tl.tensor(...), tl.zeros(...), ... not Tensor(...)")

    # ---- attributes -----------------------------------------------------------------
    @property
    def shape(self):
        """The sizes of the dims, a tuple (torch's is a torch.Size, a tuple subclass).

        >>> import tensorlite as tl
        >>> tl.zeros(2, 3).shape
        (2, 3)
        """
        return self._layout.shape

    def size(self, dim=None):
        """The shape, or the size of dim `dim`, as torch.Tensor.size.

        >>> import tensorlite as tl
        >>> tl.zeros(2, 3).size(-1)
        3
        """
        return self.shape if dim is None else self.shape[norm_dim(dim, self.ndim, "size", self, False)]

    @property
    def device(self) -> Device:
        """The device, a tl.device: the device's name ('cpu', 'cuda:0', ...) as a str with
        torch.device's .type and .index.

        >>> import tensorlite as tl
        >>> d = tl.zeros(1, device='cpu').device
        >>> d, d.type, d == 'cpu'
        (device(type='cpu'), 'cpu', True)
        """
        return Device(self._device)

    @property
    def is_cuda(self) -> bool:
        """Whether the tensor is on a `cuda` device, as torch.Tensor.is_cuda.

        >>> import tensorlite as tl
        >>> tl.zeros(1).is_cuda
        False
        """
        return self._device.name == "cuda"

    @property
    def is_cpu(self) -> bool:
        """Whether the tensor is on the `cpu` device, as torch.Tensor.is_cpu.

        >>> import tensorlite as tl
        >>> tl.zeros(1).is_cpu
        True
        """
        return self._device.name == "cpu"

    @property
    def ndim(self) -> int:
        """The number of dims, as torch.Tensor.ndim.

        >>> import tensorlite as tl
        >>> tl.zeros(2, 3).ndim
        2
        """
        return len(self._layout.shape)

    def dim(self) -> int:
        """The number of dims, as torch.Tensor.dim."""
        return self.ndim

    def stride(self, dim=None):
        """The strides in elements, or that of dim `dim`, as torch.Tensor.stride.

        >>> import tensorlite as tl
        >>> tl.zeros(2, 3).stride()
        (3, 1)
        """
        s = self._layout.strides
        return s if dim is None else s[norm_dim(dim, self.ndim, "stride", self, False)]

    def numel(self) -> int:
        """The number of elements, as torch.Tensor.numel.

        >>> import tensorlite as tl
        >>> tl.zeros(2, 3).numel()
        6
        """
        return self._layout.numel()

    def is_contiguous(self) -> bool:
        """Whether the layout is row-major without gaps, as torch.Tensor.is_contiguous.

        >>> import tensorlite as tl
        >>> tl.zeros(2, 3).mT.is_contiguous()
        False
        """
        return self._layout.is_contiguous()

    def element_size(self) -> int:
        """Bytes per element, as torch.Tensor.element_size.

        >>> import tensorlite as tl
        >>> tl.zeros(1, dtype=tl.float16).element_size()
        2
        """
        return self.dtype.itemsize

    @property
    def is_leaf(self) -> bool:
        """Whether no autograd op made this tensor (a user-made tensor), as torch.Tensor.is_leaf.

        >>> import tensorlite as tl
        >>> (tl.ones(1, requires_grad=True) * 2).is_leaf
        False
        """
        return self._node is None

    @property
    def grad_fn(self):
        """The autograd Node that made this tensor (its `name`, its `inputs`), None for a leaf."""
        return self._node

    @property
    def is_floating_point(self):
        """Whether the dtype is floating: a property here, a method in torch.

        >>> import tensorlite as tl
        >>> tl.tensor([1]).is_floating_point
        False
        """
        return self.dtype.is_floating_point

    @property
    def _version(self) -> int:
        """How many in-place writes this tensor's storage has had (shared by its views)."""
        return self._storage.version

    def data_ptr_id(self):
        """Identity of the underlying storage (views share it)."""
        return id(self._storage)

    # ---- host interop ---------------------------------------------------------------
    def __reduce__(self):  # pickle, copy.deepcopy: host data, dtype, device name, requires_grad
        return _unpickle, (type(self), self.numpy(), self.dtype, str(self._device), self.requires_grad)

    def numpy(self) -> np.ndarray:
        """A host copy (waits for the device). bf16 comes back as ml_dtypes.bfloat16."""
        return self._storage.to_cpu(self._layout)

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    __dlpack__, __dlpack_device__ = _dlpack.to_dlpack, _dlpack.device_of  # shared memory (tensorlite/dlpack.py)

    def data_ptr(self) -> int:
        """The address of the first element (host or device memory).

        >>> import tensorlite as tl
        >>> x = tl.zeros(4, device="cpu")
        >>> x[1:].data_ptr() - x.data_ptr() == x.element_size()
        True
        """
        return self._storage.addr(self._layout.offset)

    def item(self):
        """The value of a one-element tensor as a Python number, as torch.Tensor.item.

        >>> import tensorlite as tl
        >>> tl.tensor([[2.5]]).item()
        2.5
        """
        if self.numel() != 1:
            raise ShapeError(f"{describe('item', self=self)}: only one-element tensors convert to a Python scalar")
        v = self.numpy().reshape(-1)[0]
        return v.item() if self.dtype is not _dt.bfloat16 else float(v)

    def tolist(self):
        """The values as nested Python lists (a number for a 0-d tensor), as torch.Tensor.tolist.

        >>> import tensorlite as tl
        >>> tl.tensor([[1, 2]]).tolist()
        [[1, 2]]
        """
        a = self.numpy()
        return (a.astype(np.float32) if self.dtype is _dt.bfloat16 else a).tolist()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self.dtype.is_floating_point:
            raise DTypeError(f"{describe('__index__', self=self)}: only integer tensors can be used as an index")
        return int(self.item())

    def __bool__(self):
        if self.numel() != 1:
            raise ShapeError(f"{describe('__bool__', self=self)}: the truth value of a tensor with more "
                             "than one element is ambiguous")
        return bool(self.item())

    def __len__(self):
        if self.ndim == 0:
            raise DTypeError(f"{describe('len', self=self)}: len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __format__(self, spec):
        """A one-element tensor formats as its number (f"{loss:.4f}"), as torch's; others as repr."""
        if spec and self.numel() == 1:
            return format(self.item(), spec)
        return object.__format__(self, spec) if spec else repr(self)

    def __repr__(self):
        a = self.numpy().astype(np.float32) if self.dtype is _dt.bfloat16 else self.numpy()
        body = np.array2string(a, separator=", ", prefix="tensor(", threshold=200, edgeitems=3)
        extra = [f"shape={self.shape}", f"dtype={self.dtype.name}", f"device='{self.device}'"] + (
            ["requires_grad=True"] if self.requires_grad else [])
        return f"tensor({body}, {', '.join(extra)})"

    # ---- autograd -------------------------------------------------------------------
    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Add d(self)/d(leaf) (times `gradient`) to each leaf's .grad; see tl.autograd.backward.

        >>> import tensorlite as tl
        >>> x = tl.tensor([1.0, 2.0], requires_grad=True)
        >>> (x * x).sum().backward(); x.grad.tolist()
        [2.0, 4.0]
        """
        _backward(self, gradient, retain_graph, create_graph, inputs)

    def register_hook(self, hook):
        """hook(grad) runs when this tensor's gradient is computed and may return a replacement;
        returns a handle whose remove() unregisters it.

        >>> import tensorlite as tl
        >>> x = tl.tensor([1.0, 2.0], requires_grad=True)
        >>> h = x.register_hook(lambda g: g * 10)
        >>> x.sum().backward(); x.grad.tolist()
        [10.0, 10.0]
        """
        return _register_hook(self, hook)

    def register_post_accumulate_grad_hook(self, hook):
        """hook(self) runs after a backward has added its gradient to this leaf's .grad (as
        torch's; distributed data parallel starts its all-reduces here); returns a handle.
        See tensorlite.autograd.register_post_accumulate_grad_hook."""
        return _register_post_accumulate_grad_hook(self, hook)

    def retain_grad(self):
        """Keep .grad for this non-leaf tensor in later backward passes (leaves have it anyway).

        >>> import tensorlite as tl
        >>> y = tl.tensor([1.0, 2.0], requires_grad=True) * 2
        >>> y.retain_grad(); (y * y).sum().backward(); y.grad.tolist()
        [4.0, 8.0]
        """
        _retain_grad(self)

    @property
    def retains_grad(self) -> bool:
        """Whether retain_grad() was called on this non-leaf tensor."""
        return _retains_grad(self)

    def detach(self) -> "Tensor":
        """The same storage and layout, out of the graph (in-place changes show in both)."""
        t = as_view(self, self._layout)
        t._base = t._base_node = None  # not a view: it keeps nothing of self's graph alive
        return t

    def requires_grad_(self, flag=True):
        """Set requires_grad in place (floating dtypes only) and return self, as torch's.

        >>> import tensorlite as tl
        >>> tl.zeros(2).requires_grad_().requires_grad
        True
        """
        self.requires_grad = grad_flag("requires_grad_", self.dtype, flag)
        return self

    def _set_data(self, other: "Tensor"):
        """Swap in another tensor's storage and layout (optimizers' parameter update)."""
        if other.shape != self.shape or other.dtype is not self.dtype or other._device is not self._device:
            raise ShapeError(f"{describe('data=', self=self, other=other)}: shape, dtype and device must match")
        self._storage, self._layout = other._storage, other._layout

    data = property(detach, _set_data)  # x.data: x detached; x.data = y: _set_data

    # ---- conversion -----------------------------------------------------------------
    def to(self, *args, dtype=None, device=None, non_blocking=False, copy=False) -> "Tensor":
        """to(device), to(dtype), to(device, dtype), to(other tensor) (its dtype and device) or
        keyword forms, as torch.Tensor.to: self itself where nothing changes, unless copy.
        non_blocking is accepted (a copy between devices is ordered on the device either way).

        >>> import tensorlite as tl
        >>> tl.tensor([1, 2]).to(tl.zeros(1, dtype=tl.float64)).dtype
        tensorlite.float64
        """
        if dtype is None and device is None and len(args) == 1 and type(args[0]) is _dt.DType and not copy:
            return self._cast(args[0])  # the mixed-precision hot path: one cast per weight per step
        if len(args) == 1 and isinstance(args[0], Tensor):  # to(other): other's dtype and device, as torch's
            dtype, device, args = dtype or args[0].dtype, device or args[0]._device, ()
        for a in args:  # a string that names no dtype, or a BackendDevice, is a device
            if not isinstance(a, (str, BackendDevice)) or a in _dt._BY_NAME:
                dtype = a
            else:
                device = a
        out = self
        if device is not None:
            try:
                dev = resolve_device(device)
            except DeviceError as e:
                raise type(e)(f"{describe('to', self=self)}: {e}; nor is {device!r} a dtype "
                              f"({sorted(_dt._BY_NAME)})") from None
            if dev is not out._device:
                src_dev = out._device
                moved = wrap(dev.from_cpu(np.ascontiguousarray(out.numpy())), out.shape, out.dtype)
                out = _attach(moved, (out,), lambda g: (g.to(src_dev),), "to(device)")
        if dtype is not None:
            out = out._cast(dtype_of(dtype, op="to"))
        return out.clone() if copy and out is self else out

    def _cast(self, dtype) -> "Tensor":
        if dtype is self.dtype:
            return self
        src = self.dtype
        out = wrap(self._storage.to_dtype(self._layout, dtype), self._layout.shape, dtype)
        if dtype.is_floating_point and src.is_floating_point:
            return _attach(out, (self,), lambda g: (g._cast(src),), "cast")
        return out

    def type(self, dtype):
        """A cast to dtype (a tl dtype or its name; torch's also takes type strings).

        >>> import tensorlite as tl
        >>> tl.tensor([1.5]).type(tl.int64).tolist()
        [1]
        """
        return self._cast(dtype_of(dtype, op="type"))

    float = functools.partialmethod(_cast, _dt.float32)
    half = functools.partialmethod(_cast, _dt.float16)
    bfloat16 = functools.partialmethod(_cast, _dt.bfloat16)
    double = functools.partialmethod(_cast, _dt.float64)
    long = functools.partialmethod(_cast, _dt.int64)
    int = functools.partialmethod(_cast, _dt.int32)
    short = functools.partialmethod(_cast, _dt.int16)
    char = functools.partialmethod(_cast, _dt.int8)
    bool = functools.partialmethod(_cast, _dt.bool_)
    cpu = functools.partialmethod(to, "cpu")

    def cuda(self, ordinal=0):
        """self.to('cuda:<ordinal>'), as torch.Tensor.cuda."""
        return self.to(f"cuda:{ordinal}")

    def contiguous(self) -> "Tensor":
        """self if already contiguous, else a row-major copy, as torch.Tensor.contiguous.

        >>> import tensorlite as tl
        >>> tl.zeros(2, 3).mT.contiguous().stride()
        (2, 1)
        """
        if self._layout.is_contiguous():
            return self
        return _attach(copy_of(self), (self,), lambda g: (g,), "contiguous")

    def clone(self) -> "Tensor":
        """A copy with its own storage, in the graph (gradients flow back), as torch.Tensor.clone.

        >>> import tensorlite as tl
        >>> tl.tensor([1, 2]).clone().tolist()
        [1, 2]
        """
        return _attach(copy_of(self), (self,), lambda g: (g,), "clone")

    # ---- operators (elementwise ones through the op table's rows, op_table.py) -----------
    def __add__(self, other):
        return _binary("add", self, other)

    def __radd__(self, other):
        return _binary("add", other, self)

    def __sub__(self, other):
        return _binary("sub", self, other)

    def __rsub__(self, other):
        return _binary("sub", other, self)

    def __mul__(self, other):
        """self * other (broadcast, promoted), also Tensor.mul, as torch.mul.

        >>> import tensorlite as tl
        >>> (tl.tensor([1, 2]) * 3).tolist()
        [3, 6]
        """
        return _binary("mul", self, other)

    def __rmul__(self, other):
        return _binary("mul", other, self)

    def __truediv__(self, other):
        """self / other: true division (integers give floats), also Tensor.div, as torch.div.

        >>> import tensorlite as tl
        >>> (tl.tensor([1, 2]) / 2).tolist()
        [0.5, 1.0]
        """
        return _binary("div", self, other)

    def __rtruediv__(self, other):
        return _binary("div", other, self)

    def __floordiv__(self, other):
        """self // other rounded down (floor), also Tensor.floor_divide, as torch.floor_divide.

        >>> import tensorlite as tl
        >>> (tl.tensor([-3, 3]) // 2).tolist()
        [-2, 1]
        """
        return floor_divide(self, other)

    def __rfloordiv__(self, other):
        return floor_divide(other, self)

    def __mod__(self, other):
        """self % other with the divisor's sign (Python's), also Tensor.remainder, as torch.remainder.

        >>> import tensorlite as tl
        >>> (tl.tensor([-3, 3]) % 2).tolist()
        [1, 1]
        """
        return remainder(self, other)

    def __rmod__(self, other):
        return remainder(other, self)

    def __pow__(self, exponent):
        """self ** exponent (a number or a tensor), also Tensor.pow, as torch.pow.

        >>> import tensorlite as tl
        >>> (tl.tensor([2, 3]) ** 2).tolist()
        [4, 9]
        """
        return _pow(self, exponent)

    __rpow__ = _rpow

    def __matmul__(self, other):
        """Matrix product (batched, broadcast), also Tensor.matmul, as torch.matmul.

        >>> import tensorlite as tl
        >>> (tl.tensor([[1, 2]]) @ tl.tensor([[3], [4]])).tolist()
        [[11]]
        """
        return matmul(self, other)

    def __rmatmul__(self, other):
        return matmul(other, self)

    def __neg__(self):
        return _unary("neg", self)

    def __abs__(self):
        return _unary("abs", self)

    def __pos__(self):
        return self

    def __eq__(self, other):
        """Elementwise self == other: a bool tensor, also Tensor.eq, as torch.eq.

        >>> import tensorlite as tl
        >>> (tl.tensor([1, 2]) == 2).tolist()
        [False, True]
        """
        return _cmp("eq", self, other)

    def __ne__(self, other):
        """Elementwise self != other: a bool tensor, also Tensor.ne, as torch.ne."""
        return _cmp("ne", self, other)

    __hash__ = object.__hash__  # by identity, as PyTorch's (a class defining __eq__ would otherwise lose it)

    def __lt__(self, other):
        """Elementwise self < other: a bool tensor, also Tensor.lt, as torch.lt."""
        return _cmp("lt", self, other)

    def __le__(self, other):
        """Elementwise self <= other: a bool tensor, also Tensor.le, as torch.le."""
        return _cmp("le", self, other)

    def __gt__(self, other):
        """Elementwise self > other: a bool tensor, also Tensor.gt, as torch.gt."""
        return _cmp("gt", self, other)

    def __ge__(self, other):
        """Elementwise self >= other: a bool tensor, also Tensor.ge, as torch.ge."""
        return _cmp("ge", self, other)

    # bitwise operators: integer and bool tensors (on bool: logical and / or / xor / not)
    def __and__(self, other):
        return _binary("bitwise_and", self, other)

    def __or__(self, other):
        return _binary("bitwise_or", self, other)

    def __xor__(self, other):
        return _binary("bitwise_xor", self, other)

    def __invert__(self):
        return _unary("bitwise_not", self)

    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__  # they commute

    # ---- views: a new Layout over the same storage (the module functions of those names) ---
    reshape, view, permute, transpose, narrow, select, unsqueeze = (
        reshape, view, permute, transpose, narrow, select, unsqueeze)
    squeeze, broadcast_to, expand, flatten, unflatten, split, chunk = (
        squeeze, broadcast_to, expand, flatten, unflatten, split, chunk)
    __getitem__ = _getitem

    @property
    def T(self):
        """The dims reversed, as torch.Tensor.T.

        >>> import tensorlite as tl
        >>> tl.zeros(2, 3, 4).T.shape
        (4, 3, 2)
        """
        return self.permute(tuple(reversed(range(self.ndim))))

    @property
    def mT(self):
        """The last two dims swapped (a batch of transposed matrices), as torch.Tensor.mT.

        >>> import tensorlite as tl
        >>> tl.zeros(5, 2, 3).mT.shape
        (5, 3, 2)
        """
        return self.transpose(-2, -1)

    # real dtypes only: the conjugate transposes are the transposes
    H = property(lambda self: self.T, doc="The conjugate transpose of a matrix (the transpose: real dtypes), as "
                                          "torch.Tensor.H.")
    mH = property(lambda self: self.mT, doc="The conjugate transpose of a batch of matrices, as torch.Tensor.mH.")

    def pin_memory(self):
        """A copy in host memory, as torch.Tensor.pin_memory (tensorlite's host copies need no
        pinning: this is the copy PyTorch makes); cpu tensors only.

        >>> import tensorlite as tl
        >>> tl.ones(2).pin_memory().is_pinned()
        False
        """
        if self._device.name != "cpu":
            raise DeviceError(f"{describe('pin_memory', self=self)}: only cpu tensors can be pinned")
        return self.clone()

    def is_pinned(self) -> bool:
        """False: tensorlite keeps no page-locked host memory (see pin_memory)."""
        return False

    def __setitem__(self, idx, value):
        _setitem(self, idx, value)

    # ---- reductions (the module functions of those names) --------------------------------
    sum, mean, max, min, amax, amin, argmax, argmin = sum, mean, max, min, amax, amin, argmax, argmin
    var, std, prod, logsumexp = var, std, prod_, logsumexp
    any, all, count_nonzero = any_, all_, count_nonzero

    # ---- elementwise with arguments (the plain unary methods come from the op table) ----
    def add(self, other, alpha=1):
        """self + alpha * other (broadcast), as torch.add.

        >>> import tensorlite as tl
        >>> tl.tensor([1, 2]).add(tl.tensor([10, 20]), alpha=2).tolist()
        [21, 42]
        """
        return _binary("add", self, other if alpha == 1 else other * alpha if is_scalar(other) else
                       _binary("mul", other, alpha, "add"))

    def sub(self, other, alpha=1):
        """self - alpha * other (broadcast), as torch.sub.

        >>> import tensorlite as tl
        >>> tl.tensor([5, 5]).sub(tl.tensor([1, 2]), alpha=2).tolist()
        [3, 1]
        """
        return _binary("sub", self, other if alpha == 1 else other * alpha if is_scalar(other) else
                       _binary("mul", other, alpha, "sub"))

    def maximum(self, other):
        """Elementwise max with other, as torch.maximum (see tl.maximum)."""
        return maximum(self, other)

    def minimum(self, other):
        """Elementwise min with other, as torch.minimum (see tl.minimum)."""
        return minimum(self, other)

    # the named forms of the operators above
    mul, div, pow, floor_divide, remainder = __mul__, __truediv__, __pow__, __floordiv__, __mod__
    eq, ne, lt, le, gt, ge = __eq__, __ne__, __lt__, __le__, __gt__, __ge__
    matmul = __matmul__
    isnan, isinf, isposinf, isneginf, isfinite, isclose, allclose = isnan, isinf, isposinf, isneginf, isfinite_, isclose, allclose
    lerp, logical_not, logical_and, logical_or, logical_xor = lerp, logical_not, logical_and, logical_or, logical_xor

    clamp, clip, masked_fill, affine, elu = clamp, clamp, masked_fill, affine, elu

    def where(self, condition, other):
        """self where condition is True, else other, as torch.Tensor.where.

        >>> import tensorlite as tl
        >>> tl.tensor([1, 2]).where(tl.tensor([True, False]), 0).tolist()
        [1, 0]
        """
        return where(condition, self, other)

    # ---- indexing (the module functions of those names) -----------------------------------
    index_select, gather, scatter_add, index_add = index_select, gather, scatter_add, index_add

    # ---- in-place (PyTorch's trailing underscore): the tensor's memory changes, its views see it
    def copy_(self, src):
        """Copy src (broadcast, cast) into this tensor's memory, as torch.Tensor.copy_.

        >>> import tensorlite as tl
        >>> tl.zeros(2, dtype=tl.int64).copy_(tl.tensor([3, 4])).tolist()
        [3, 4]
        """
        return _setitem(self, Ellipsis, src, "copy_")

    def fill_(self, value):
        """Every element becomes value, in place, as torch.Tensor.fill_.

        >>> import tensorlite as tl
        >>> tl.zeros(2).fill_(3).tolist()
        [3.0, 3.0]
        """
        return _setitem(self, Ellipsis, value, "fill_")

    def zero_(self):
        """Every element becomes 0, in place, as torch.Tensor.zero_."""
        return _setitem(self, Ellipsis, 0, "zero_")

    def normal_(self, mean=0.0, std=1.0):
        """Every element becomes a N(mean, std) sample, in place, as torch.Tensor.normal_
        (drawn on the tensor's device, seeded by tl.manual_seed).

        >>> import tensorlite as tl
        >>> tl.zeros(3).normal_(5.0, 0.0).tolist()
        [5.0, 5.0, 5.0]
        """
        self._check_random_fill("normal_")
        return _setitem(self, Ellipsis, randn(self.shape, dtype=self.dtype, device=self._device) * std + mean,
                        "normal_")

    def uniform_(self, a=0.0, b=1.0, **bounds):
        """Every element becomes a U(a, b) sample, in place, as torch.Tensor.uniform_ (whose
        keyword names, `from` and `to`, are taken too).

        >>> import tensorlite as tl
        >>> x = tl.zeros(1000).uniform_(-2, 2)
        >>> bool(x.min() >= -2) and bool(x.max() < 2)
        True
        """
        a, b = bounds.pop("from", a), bounds.pop("to", b)
        if bounds:
            raise ArgumentError(f"uniform_: unexpected arguments {sorted(bounds)}")
        self._check_random_fill("uniform_")
        return _setitem(self, Ellipsis, rand(self.shape, dtype=self.dtype, device=self._device) * (b - a) + a,
                        "uniform_")

    def exponential_(self, lambd=1.0):
        """Every element becomes an Exp(lambd) sample (-log(1 - u) / lambd), in place, as
        torch.Tensor.exponential_.

        >>> import tensorlite as tl
        >>> bool(tl.zeros(1000).exponential_(2.0).min() >= 0)
        True
        """
        if not lambd > 0:
            raise ArgumentError(f"{describe('exponential_', self=self)}: lambd must be positive, got {lambd}")
        self._check_random_fill("exponential_")
        u = rand(self.shape, dtype=_dt.float32 if self.dtype in _dt.HALVES else self.dtype,
                 device=self._device)
        return _setitem(self, Ellipsis, (1.0 - u).log() * (-1.0 / lambd), "exponential_")

    def _check_random_fill(self, op):
        if not self.dtype.is_floating_point:
            raise DTypeError(f"{describe(op, self=self)}: random samples of a floating dtype only")

    def bernoulli(self, p=None):
        """1 with probability p (default: this tensor's values), else 0, in this tensor's dtype, as
        torch.bernoulli / torch.Tensor.bernoulli.

        >>> import tensorlite as tl
        >>> tl.tensor([0.0, 1.0]).bernoulli().tolist()
        [0.0, 1.0]
        """
        if not self.dtype.is_floating_point:
            raise DTypeError(f"{describe('bernoulli', self=self)}: probabilities of a floating dtype only")
        if p is not None and not 0.0 <= float(p) <= 1.0:
            raise ArgumentError(f"{describe('bernoulli', self=self)}: p must be in [0, 1], got {p}")
        probs = self.detach() if p is None else float(p)
        return (rand(self.shape, dtype=self.dtype, device=self._device) < probs)._cast(self.dtype)

    def clamp_min(self, min):
        """clamp(min=min), as torch.Tensor.clamp_min."""
        return clamp(self, min=min)

    def clamp_max(self, max):
        """clamp(max=max), as torch.Tensor.clamp_max."""
        return clamp(self, max=max)

    def nan_to_num(self, nan=0.0, posinf=None, neginf=None):
        """NaN, +inf and -inf replaced (by 0 and the dtype's largest and lowest finite values by
        default), as torch.nan_to_num.

        >>> import tensorlite as tl
        >>> tl.tensor([float('nan'), float('inf'), 1.0]).nan_to_num(posinf=9.0).tolist()
        [0.0, 9.0, 1.0]
        """
        if not self.dtype.is_floating_point:
            return self.clone()
        info = _dt.finfo(self.dtype)
        hi, lo = info.max if posinf is None else posinf, info.min if neginf is None else neginf
        x = where(self.isnan(), nan, self)
        return where(x == float("inf"), hi, where(x == float("-inf"), lo, x))

    def softmax(self, dim, dtype=None):
        """F.softmax(self, dim, dtype), as torch.Tensor.softmax."""
        from .nn import functional as F
        return F.softmax(self, dim, dtype=dtype)

    def log_softmax(self, dim, dtype=None):
        """F.log_softmax(self, dim, dtype), as torch.Tensor.log_softmax."""
        from .nn import functional as F
        return F.log_softmax(self, dim, dtype=dtype)

    @property
    def nbytes(self) -> int:
        """numel * itemsize, as torch.Tensor.nbytes."""
        return self.numel() * self.itemsize

    @property
    def itemsize(self) -> int:
        """Bytes per element, as torch.Tensor.itemsize."""
        return self.dtype.itemsize

    def storage_offset(self) -> int:
        """The first element's offset in the storage, in elements, as torch.Tensor.storage_offset.

        >>> import tensorlite as tl
        >>> tl.zeros(2, 3)[1].storage_offset()
        3
        """
        return self._layout.offset

    def detach_(self):
        """Take this tensor out of the graph in place (it no longer requires grad), as
        torch.Tensor.detach_; a view refuses (detach() it instead)."""
        if self._base is not None:
            raise TensorliteError(f"{describe('detach_', self=self)}: can't detach views in-place; use detach()")
        self._node, self.requires_grad = None, False
        return self

    clamp_min_ = _inplace_method("clamp_min_", clamp_min)
    clamp_max_ = _inplace_method("clamp_max_", clamp_max)
    add_, sub_ = _inplace_method("add_", add), _inplace_method("sub_", sub)
    mul_, div_ = _inplace_method("mul_", __mul__), _inplace_method("div_", __truediv__)
    pow_ = _inplace_method("pow_", __pow__)
    floor_divide_ = _inplace_method("floor_divide_", floor_divide)
    remainder_ = _inplace_method("remainder_", remainder)
    clamp_ = _inplace_method("clamp_", clamp)
    masked_fill_ = _inplace_method("masked_fill_", masked_fill)
    index_add_ = _inplace_method("index_add_", index_add)
    scatter_add_ = _inplace_method("scatter_add_", scatter_add)
    __iand__, __ior__ = _inplace_method("__iand__", __and__), _inplace_method("__ior__", __or__)
    __ixor__ = _inplace_method("__ixor__", __xor__)
    clip_ = clamp_
    __iadd__, __isub__, __imul__, __itruediv__ = add_, sub_, mul_, div_
    __ifloordiv__, __imod__, __ipow__ = floor_divide_, remainder_, pow_
    lerp_, logical_not_ = _inplace_method("lerp_", lerp), _inplace_method("logical_not_", logical_not)
    logical_and_, logical_or_ = _inplace_method("logical_and_", logical_and), _inplace_method("logical_or_", logical_or)
    logical_xor_ = _inplace_method("logical_xor_", logical_xor)


def _unary_methods(row):
    """Tensor.<method> and its in-place form Tensor.<method>_ for one row of the op table."""
    def method(self):
        return _unary(row.name, self)
    method.__name__, method.__qualname__ = row.method, f"Tensor.{row.method}"
    method.__doc__ = f"Elementwise {row.method}, as PyTorch's (the row {row.name!r} of tensorlite/op_table.py)."
    setattr(Tensor, row.method, method)
    setattr(Tensor, f"{row.method}_", _inplace_method(f"{row.method}_", method))


def _binary_methods(row):
    """Tensor.<method>(other) and Tensor.<method>_ for a binary row the class does not spell out
    (the module function of that name where there is one: fmod's divisor check)."""
    fn = globals().get(row.method)

    def method(self, other):
        return fn(self, other) if fn else _binary(row.name, self, other)
    method.__name__, method.__qualname__ = row.method, f"Tensor.{row.method}"
    method.__doc__ = f"Elementwise {row.method}, as PyTorch's (the row {row.name!r} of tensorlite/op_table.py)."
    setattr(Tensor, row.method, method)
    setattr(Tensor, f"{row.method}_", _inplace_method(f"{row.method}_", method))


for _row in UNARY:  # Tensor.exp, Tensor.exp_, Tensor.reciprocal, ...: two methods per row of the op table
    _unary_methods(_row)
for _row in BINARY:
    if _row.method_too and not hasattr(Tensor, _row.method):
        _binary_methods(_row)
Tensor.fix, Tensor.fix_ = Tensor.trunc, Tensor.trunc_  # PyTorch's alias
register_tensor_class(Tensor)

# the old private names of the helpers now public in tensorlite._core, for tensorlite.nn until it imports them
# from there (to be removed then)
_ints, _shape_arg = ints, shape_arg

# Ops whose functions live in the modules beside this one (they import this module, so they
# come last): each module's METHODS names the functions that are also Tensor methods.
from . import indexing as _indexing, shape_ops as _shape_ops, sorting as _sorting  # noqa: E402


for _module in (_shape_ops, _sorting, _indexing):
    for _name in _module.METHODS:
        setattr(Tensor, _name, getattr(_module, _name))
