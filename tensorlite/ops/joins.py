"""Several tensors into one: cat, stack, hstack / vstack / dstack / column_stack, atleast_*d,
broadcast_tensors, meshgrid, cartesian_prod, foreach_to.
"""
from __future__ import annotations

import builtins
import functools
from math import prod
from typing import List, Sequence, TYPE_CHECKING

from .. import dtype as dtypes
from .._core import TensorBase, fail, norm_dim, same_device, wrap
from ..autograd import attach, attach_many
from ..errors import ArgumentError, DTypeError, ShapeError, describe
from ..layout import broadcast_shapes

if TYPE_CHECKING:
    from ..tensor import Tensor


def _tensor_list(op, tensors) -> list:  # cat's and stack's operand: a non-empty sequence of tensors
    tensors = list(tensors) if isinstance(tensors, (tuple, list)) else [tensors]
    if not tensors or not builtins.all(isinstance(t, TensorBase) for t in tensors):
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
    dt = functools.reduce(dtypes.promote_types, [t.dtype for t in tensors])
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
    return attach(wrap(dst, shape, dt), tuple(tensors), lambda g: g.split(sizes, dim), "cat")


def foreach_to(tensors: Sequence[Tensor], dtype) -> List[Tensor]:
    """[t.to(dtype) for t in tensors] in as few launches as the backend allows (the GPU
    backend: one per few dozen contiguous float tensors), differentiable as one node whose
    backward casts the gradients back the same way: mixed precision's per-step casts of
    every weight and weight gradient. Tensors already of `dtype` come back as they are."""
    dtype = dtypes.get(dtype)
    tensors = list(tensors)
    by_class = {}  # to_dtype_many takes storages of one class
    for i, t in enumerate(tensors):  # one pass: a mixed-precision step runs this for every weight, twice
        if not isinstance(t, TensorBase):
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
        attach_many([out[i] for i in diff], srcs, grad, "foreach_to")
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


def listed(op, tensors):
    """Tensors given as arguments or as one list or tuple of them (f(a, b) or f([a, b]))."""
    return _tensor_list(op, tensors[0] if len(tensors) == 1 and isinstance(tensors[0], (tuple, list)) else tensors)


def _atleast(nd, tensors):
    single = len(tensors) == 1 and isinstance(tensors[0], TensorBase)
    out = []
    for x in listed(f"atleast_{nd}d", tensors):
        s = x.shape  # (n,) -> (1, n) or (1, n, 1); (m, n) -> (m, n, 1)
        s = s + (1,) if nd == 3 and len(s) == 2 else (1,) + (s or (1,)) + (1,) if nd == 3 else (1,) * (nd - len(s)) + s
        out.append(x if x.ndim >= nd else x.reshape(s))
    return out[0] if single else tuple(out)


def atleast_1d(*tensors):
    """Each tensor viewed with at least 1 dim (one tensor in, one out; several: a tuple).

    >>> import tensorlite as tl
    >>> tl.atleast_1d(tl.tensor(3)).shape
    tensorlite.Size([1])"""
    return _atleast(1, tensors)


def atleast_2d(*tensors):
    """Each tensor viewed with at least 2 dims: (n,) becomes (1, n).

    >>> import tensorlite as tl
    >>> tl.atleast_2d(tl.zeros(3)).shape
    tensorlite.Size([1, 3])"""
    return _atleast(2, tensors)


def atleast_3d(*tensors):
    """Each tensor viewed with at least 3 dims: (n,) becomes (1, n, 1), (m, n) becomes (m, n, 1).

    >>> import tensorlite as tl
    >>> tl.atleast_3d(tl.zeros(2, 3)).shape
    tensorlite.Size([2, 3, 1])"""
    return _atleast(3, tensors)


def hstack(tensors) -> Tensor:
    """Join along dim 1 (dim 0 for 1-d tensors).

    >>> import tensorlite as tl
    >>> tl.hstack([tl.tensor([1, 2]), tl.tensor([3])]).tolist()
    [1, 2, 3]"""
    ts = atleast_1d(_tensor_list("hstack", tensors))
    return cat(ts, 0 if ts[0].ndim == 1 else 1)


def vstack(tensors) -> Tensor:
    """Join along dim 0, 1-d tensors as rows.

    >>> import tensorlite as tl
    >>> tl.vstack([tl.tensor([1, 2]), tl.tensor([3, 4])]).tolist()
    [[1, 2], [3, 4]]"""
    return cat(atleast_2d(_tensor_list("vstack", tensors)), 0)


row_stack = vstack


def dstack(tensors) -> Tensor:
    """Join along dim 2 (depth), after atleast_3d.

    >>> import tensorlite as tl
    >>> tl.dstack([tl.tensor([1, 2]), tl.tensor([3, 4])]).tolist()
    [[[1, 3], [2, 4]]]"""
    return cat(atleast_3d(_tensor_list("dstack", tensors)), 2)


def column_stack(tensors) -> Tensor:
    """Join as columns: 0-d and 1-d tensors become (n, 1) columns, then join along dim 1.

    >>> import tensorlite as tl
    >>> tl.column_stack([tl.tensor([1, 2]), tl.tensor([3, 4])]).tolist()
    [[1, 3], [2, 4]]"""
    return cat([t.reshape(-1, 1) if t.ndim < 2 else t for t in _tensor_list("column_stack", tensors)], 1)


def broadcast_tensors(*tensors):
    """The tensors broadcast to one shape (views).

    >>> import tensorlite as tl
    >>> [t.shape for t in tl.broadcast_tensors(tl.zeros(2, 1), tl.zeros(3))]
    [tensorlite.Size([2, 3]), tensorlite.Size([2, 3])]"""
    ts = listed("broadcast_tensors", tensors)
    shape = broadcast_shapes(*[t.shape for t in ts])
    if shape is None:
        fail(ShapeError, "broadcast_tensors", "shapes do not broadcast", **{f"t{i}": t for i, t in enumerate(ts)})
    return tuple(t.broadcast_to(shape) for t in ts)


def meshgrid(*tensors, indexing: str = "ij"):
    """Coordinate grids of 1-d tensors: out[i] varies along dim i ('ij'), or 'xy' with the first two swapped.

    >>> import tensorlite as tl
    >>> [g.tolist() for g in tl.meshgrid(tl.tensor([1, 2]), tl.tensor([3, 4, 5]), indexing="ij")]
    [[[1, 1, 1], [2, 2, 2]], [[3, 4, 5], [3, 4, 5]]]"""
    ts = listed("meshgrid", tensors)
    named = {f"t{i}": t for i, t in enumerate(ts)}
    if indexing not in ("ij", "xy"):
        fail(ArgumentError, "meshgrid", f"indexing must be 'ij' or 'xy', got {indexing!r}", **named)
    if builtins.any(t.ndim > 1 or t.dtype is not ts[0].dtype for t in ts):
        fail(ShapeError, "meshgrid", "expects 0-d or 1-d tensors of one dtype", **named)
    same_device("meshgrid", **named)
    swap = indexing == "xy" and len(ts) > 1
    if swap:
        ts[0], ts[1] = ts[1], ts[0]
    shape, k = tuple(t.numel() for t in ts), len(ts)
    out = [t.reshape((1,) * i + (-1,) + (1,) * (k - i - 1)).broadcast_to(shape) for i, t in enumerate(ts)]
    if swap:
        out[0], out[1] = out[1], out[0]
    return tuple(out)


def cartesian_prod(*tensors) -> Tensor:
    """The cartesian product of 1-d tensors, one row per combination (one tensor comes back as it is).

    >>> import tensorlite as tl
    >>> tl.cartesian_prod(tl.tensor([1, 2]), tl.tensor([3, 4])).tolist()
    [[1, 3], [1, 4], [2, 3], [2, 4]]"""
    ts = _tensor_list("cartesian_prod", tensors)
    if builtins.any(t.ndim != 1 for t in ts):
        fail(ShapeError, "cartesian_prod", "expects 1-d tensors", **{f"t{i}": t for i, t in enumerate(ts)})
    return ts[0] if len(ts) == 1 else stack([g.reshape(-1) for g in meshgrid(*ts, indexing="ij")], 1)
