"""Views: a new Layout over the same storage (reshape, view, permute, transpose, narrow, select,
squeeze / unsqueeze, expand / broadcast_to, flatten, split, chunk, movedim, unbind, ...), and
sum_to, which sums a broadcast gradient back to its operand's shape.
"""
from __future__ import annotations

import builtins
import itertools
from math import prod
from typing import TYPE_CHECKING

from .._core import as_view, copy_of, dims_arg, fail, ints, norm_dim, norm_dims, shape_arg, wrap
from ..autograd import attach, attach_many
from ..errors import ArgumentError, IndexOutOfRange, ShapeError, describe
from .creation import arange, zeros
from .joins import cat, stack

if TYPE_CHECKING:
    from ..tensor import Tensor


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
    return attach(out, (x,), lambda g: (g.reshape(src),), "reshape")


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
    tensorlite.Size([4, 2, 3])
    """
    dims = shape_arg(dims, "permute", x)
    nd = x.ndim
    normed = [norm_dim(d, nd, "permute", x) for d in dims]
    if sorted(normed) != list(range(nd)):
        raise ShapeError(f"{describe('permute', self=x)}: dims {dims} are not a permutation of {x.ndim} dims")
    inv = [normed.index(d) for d in range(nd)]
    return attach(as_view(x, x._layout.permute(normed)), (x,), lambda g: (g.permute(inv),), "permute")


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
    return attach(as_view(x, x._layout.transpose(a, b)), (x,), lambda g: (g.transpose(a, b),), "transpose")


def embed(g: Tensor, shape, dim: int, start: int, step: int = 1) -> Tensor:
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
    return attach(out, (x,), lambda g: (embed(g, shape, dim, start, step),), "narrow")


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
    return attach(out, (x,), lambda g: (embed(g.unsqueeze(dim), shape, dim, index),), "select")


def unsqueeze(x: Tensor, dim: int) -> Tensor:
    """A view with a size-1 dim inserted at dim, as torch.unsqueeze.

    >>> import tensorlite as tl
    >>> tl.zeros(2, 3).unsqueeze(1).shape
    tensorlite.Size([2, 1, 3])
    """
    dim = norm_dim(dim, x.ndim + 1, "unsqueeze", x)
    return attach(as_view(x, x._layout.unsqueeze(dim)), (x,), lambda g: (g.squeeze(dim),), "unsqueeze")


def squeeze(x: Tensor, dim=None) -> Tensor:
    """A view without the size-1 dims (only those of dim, an int or a tuple, if given), as torch.squeeze.

    >>> import tensorlite as tl
    >>> tl.zeros(2, 1, 3, 1).squeeze().shape
    tensorlite.Size([2, 3])
    """
    dims = [d for d in norm_dims(dim, x.ndim, "squeeze", x, False) if x.shape[d] == 1] if x.ndim else []
    if not dims:
        return x
    shape = x.shape
    return attach(as_view(x, x._layout.squeeze(dims)), (x,), lambda g: (g.reshape(shape),), "squeeze")


def sum_to(g: Tensor, shape) -> Tensor:
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
    return attach(as_view(x, lay), (x,), lambda g: (sum_to(g, src),), "broadcast_to")


def expand(x: Tensor, *sizes) -> Tensor:
    """broadcast_to where -1 keeps a dim's size, as torch.Tensor.expand.

    >>> import tensorlite as tl
    >>> tl.zeros(3, 1).expand(-1, 4).shape
    tensorlite.Size([3, 4])
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
    tensorlite.Size([2, 12])
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
    tensorlite.Size([2, 3, 4])
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
    return tuple(attach_many(outs, (x,), grad, "split"))


def chunk(x: Tensor, chunks: int, dim: int = 0):
    """`chunks` views of (about) equal size along dim, as torch.chunk.

    >>> import tensorlite as tl
    >>> [t.tolist() for t in tl.arange(6).chunk(3)]
    [[0, 1], [2, 3], [4, 5]]
    """
    n = x.shape[norm_dim(dim, x.ndim, "chunk", x, False)]
    return split(x, builtins.max(-(-n // ints("chunk", "chunks", chunks, low=1, self=x)), 1), dim)


def movedim(x: Tensor, source, destination) -> Tensor:
    """Move dims `source` to positions `destination` (ints or sequences); the others keep their order.

    >>> import tensorlite as tl
    >>> tl.zeros(2, 3, 4).movedim(0, -1).shape
    tensorlite.Size([3, 4, 2])"""
    src, dst = dims_arg(source, (), "movedim", x), dims_arg(destination, (), "movedim", x)
    src = [norm_dim(d, x.ndim, "movedim", x) for d in src]
    dst = [norm_dim(d, x.ndim, "movedim", x) for d in dst]
    if len(src) != len(dst) or len(set(src)) != len(src) or len(set(dst)) != len(dst):
        fail(ArgumentError, "movedim", f"source {source} and destination {destination} must be as many "
              "distinct dims", input=x)
    if x.ndim == 0:
        return x
    order = [None] * x.ndim
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(d for d in range(x.ndim) if d not in src)
    return x.permute([o if o is not None else next(rest) for o in order])


moveaxis = movedim


def swapaxes(x: Tensor, axis0: int, axis1: int) -> Tensor:
    """transpose(axis0, axis1) (NumPy's name; swapdims is the same).

    >>> import tensorlite as tl
    >>> tl.zeros(2, 3).swapaxes(0, 1).shape
    tensorlite.Size([3, 2])"""
    return x.transpose(axis0, axis1)


swapdims = swapaxes


def unbind(x: Tensor, dim: int = 0):
    """The slices along dim, as a tuple of views (their gradient is one stack).

    >>> import tensorlite as tl
    >>> [t.tolist() for t in tl.tensor([[1, 2], [3, 4]]).unbind(1)]
    [[1, 3], [2, 4]]"""
    d = norm_dim(dim, x.ndim, "unbind", x, False)
    outs = [as_view(x, x._layout.index(d, i)) for i in range(x.shape[d])]

    shape = outs[0].shape if outs else None  # not the outputs: the node outlives a backward (_READS_NO_TENSOR)

    def grad(gs):  # (only called where there are slices)
        zero = zeros(shape, dtype=x.dtype, device=x._device)
        return (stack([zero if g is None else g for g in gs], d),)
    return tuple(attach_many(outs, (x,), grad, "unbind"))


def t(x: Tensor) -> Tensor:
    """Transpose a tensor of at most 2 dims (0-d and 1-d tensors come back as they are).

    >>> import tensorlite as tl
    >>> tl.zeros(2, 3).t().shape
    tensorlite.Size([3, 2])"""
    if x.ndim > 2:
        fail(ShapeError, "t", f"expects a tensor of at most 2 dims, got {x.ndim}", self=x)
    return x.transpose(0, 1) if x.ndim == 2 else x


def view_as(x: Tensor, other: Tensor) -> Tensor:
    """x.view(other.shape).

    >>> import tensorlite as tl
    >>> tl.zeros(6).view_as(tl.zeros(2, 3)).shape
    tensorlite.Size([2, 3])"""
    return x.view(other.shape)


def reshape_as(x: Tensor, other: Tensor) -> Tensor:
    """x.reshape(other.shape).

    >>> import tensorlite as tl
    >>> tl.zeros(6).reshape_as(tl.zeros(3, 2)).shape
    tensorlite.Size([3, 2])"""
    return x.reshape(other.shape)


def expand_as(x: Tensor, other: Tensor) -> Tensor:
    """x.expand(other.shape).

    >>> import tensorlite as tl
    >>> tl.zeros(1, 3).expand_as(tl.zeros(2, 3)).shape
    tensorlite.Size([2, 3])"""
    return x.expand(other.shape)


class ViewMethods:
    """Tensor's view methods: a new Layout over the same storage."""
    __slots__ = ()

    # ---- views: a new Layout over the same storage (the module functions of those names) ---
    reshape, view, permute, transpose, narrow, select, unsqueeze = (
        reshape, view, permute, transpose, narrow, select, unsqueeze)
    squeeze, broadcast_to, expand, flatten, unflatten, split, chunk = (
        squeeze, broadcast_to, expand, flatten, unflatten, split, chunk)
    @property
    def T(self):
        """The dims reversed, as torch.Tensor.T.

        >>> import tensorlite as tl
        >>> tl.zeros(2, 3, 4).T.shape
        tensorlite.Size([4, 3, 2])
        """
        return self.permute(tuple(reversed(range(self.ndim))))

    @property
    def mT(self):
        """The last two dims swapped (a batch of transposed matrices), as torch.Tensor.mT.

        >>> import tensorlite as tl
        >>> tl.zeros(5, 2, 3).mT.shape
        tensorlite.Size([5, 3, 2])
        """
        return self.transpose(-2, -1)

    # real dtypes only: the conjugate transposes are the transposes
    H = property(lambda self: self.T, doc="The conjugate transpose of a matrix (the transpose: real dtypes), as "
                                          "torch.Tensor.H.")
    mH = property(lambda self: self.mT, doc="The conjugate transpose of a batch of matrices, as torch.Tensor.mH.")

    # the module functions of the same names
    movedim, moveaxis, swapaxes, swapdims, unbind, t = movedim, moveaxis, swapaxes, swapdims, unbind, t
    view_as, reshape_as, expand_as = view_as, reshape_as, expand_as
