"""Copying rearrangements: flip, roll, repeat, tile, repeat_interleave, tril / triu, diff, rot90,
and the diagonals (diagonal, diag, diag_embed, trace).
"""
from __future__ import annotations

import builtins
from typing import TYPE_CHECKING

from .. import dtype as dtypes
from .._core import TensorBase, as_view, dims_arg, fail, ints, norm_dim, norm_dims, same_device, shape_arg
from ..autograd import attach
from ..errors import ArgumentError, ShapeError
from ..layout import Layout
from .creation import arange, zeros
from .index import index_select, repeat_ids
from .joins import cat
from .views import broadcast_to, movedim, narrow

if TYPE_CHECKING:
    from ..tensor import Tensor




def _copied(out: Tensor, x: Tensor) -> Tensor:
    """out, or its copy where it is still (a view of) x: ops that PyTorch documents as copies."""
    return out.clone() if out._storage is x._storage else out


def flip(x: Tensor, dims, *more) -> Tensor:
    """Reverse the order of elements along `dims` (a copy, as torch.flip).

    >>> import tensorlite as tl
    >>> tl.tensor([[1, 2], [3, 4]]).flip(0, 1).tolist()
    [[4, 3], [2, 1]]"""
    dims = norm_dims(dims_arg(dims, more, "flip", x), x.ndim, "flip", x, False)
    out = x
    for d in dims:
        if x.shape[d] > 1:
            out = index_select(out, d, arange(x.shape[d] - 1, -1, -1, device=x._device))
    return _copied(out, x)


def fliplr(x: Tensor) -> Tensor:
    """Flip left-right (dim 1 of a tensor of at least 2 dims).

    >>> import tensorlite as tl
    >>> tl.tensor([[1, 2], [3, 4]]).fliplr().tolist()
    [[2, 1], [4, 3]]"""
    if x.ndim < 2:
        fail(ShapeError, "fliplr", "input must be at least 2-D", input=x)
    return flip(x, 1)


def flipud(x: Tensor) -> Tensor:
    """Flip up-down (dim 0 of a tensor of at least 1 dim).

    >>> import tensorlite as tl
    >>> tl.tensor([[1, 2], [3, 4]]).flipud().tolist()
    [[3, 4], [1, 2]]"""
    if x.ndim < 1:
        fail(ShapeError, "flipud", "input must be at least 1-D", input=x)
    return flip(x, 0)


def roll(x: Tensor, shifts, dims=None) -> Tensor:
    """Roll elements along `dims` by `shifts` (wrapping around); dims None rolls the flattened tensor.

    >>> import tensorlite as tl
    >>> tl.tensor([1, 2, 3, 4]).roll(1).tolist()
    [4, 1, 2, 3]"""
    shifts = dims_arg(shifts, (), "roll", x)
    if dims is None:
        if len(shifts) != 1:
            fail(ArgumentError, "roll", f"dims None takes one shift, got {shifts}", input=x)
        return roll(x.reshape(-1), shifts, 0).reshape(x.shape)
    dims = dims_arg(dims, (), "roll", x)
    if len(shifts) != len(dims):
        fail(ArgumentError, "roll", f"shifts {shifts} and dims {dims} must have the same length", input=x)
    out = x
    for s, d in zip(shifts, dims):
        d = norm_dim(d, x.ndim, "roll", x, False)
        n = x.shape[d]
        s = s % n if n else 0
        if s:
            out = cat([narrow(out, d, n - s, s), narrow(out, d, 0, n - s)], d)
    return _copied(out, x)


def repeat(x: Tensor, *sizes) -> Tensor:
    """Repeat the tensor `sizes[i]` times along dim i (torch.Tensor.repeat; more sizes than dims add dims).

    >>> import tensorlite as tl
    >>> tl.tensor([1, 2]).repeat(2, 2).tolist()
    [[1, 2, 1, 2], [1, 2, 1, 2]]"""
    sizes = shape_arg(sizes, "repeat", x)
    if len(sizes) < x.ndim or builtins.min(sizes, default=0) < 0:
        fail(ShapeError, "repeat", f"sizes {sizes} must be non-negative and at least one per dim", self=x)
    shape = (1,) * (len(sizes) - x.ndim) + x.shape
    pairs = [v for n in shape for v in (1, n)]  # (1, n0, 1, n1, ...) broadcast to (r0, n0, r1, n1, ...)
    out = broadcast_to(x.reshape(pairs), [v for r, n in zip(sizes, shape) for v in (r, n)])
    return _copied(out.reshape([r * n for r, n in zip(sizes, shape)]), x)


def tile(x: Tensor, dims, *more) -> Tensor:
    """repeat() with fewer sizes than dims allowed (ones are prepended), as torch.tile.

    >>> import tensorlite as tl
    >>> tl.tensor([1, 2]).tile(2).tolist()
    [1, 2, 1, 2]"""
    dims = dims_arg(dims, more, "tile", x)
    return repeat(x, (1,) * (x.ndim - len(dims)) + dims)


def repeat_interleave(x: Tensor, repeats=None, dim=None, *, output_size=None) -> Tensor:
    """Repeat each element `repeats` times (an int, or one per element as a tensor) along dim
    (None: of the flattened tensor); repeat_interleave(repeats_tensor) gives the indices.

    >>> import tensorlite as tl
    >>> tl.tensor([1, 2]).repeat_interleave(2).tolist()
    [1, 1, 2, 2]"""
    op = "repeat_interleave"
    if repeats is None:  # torch.repeat_interleave(repeats): x is the repeats
        return repeat_interleave(arange(x.numel(), device=x._device), x, 0, output_size=output_size)
    if dim is None:
        x, dim = x.reshape(-1), 0
    d = norm_dim(dim, x.ndim, op, x)
    if x.ndim == 0:
        x = x.reshape(1)
    n = x.shape[d]
    if isinstance(repeats, TensorBase):
        if repeats.dtype.is_floating_point or repeats.dtype is dtypes.bool_ or repeats.ndim > 1 or \
                repeats.numel() not in (1, n):
            fail(ShapeError, op, f"repeats must be an integer tensor of 0 or 1 dims with 1 or {n} elements",
                  input=x, repeats=repeats)
        same_device(op, input=x, repeats=repeats)
        if repeats.numel() == 1:  # one count for every element: read it (the output's size)
            repeats = repeats.reshape(()).item()
        else:  # one count each: the ids on the device, one read of their number
            ids = repeat_ids(repeats, op, input=x)
            _check_output_size(op, x, output_size, ids.numel())
            return index_select(x, d, ids)
    r = ints(op, "repeats", repeats, input=x)
    if r < 0:
        fail(ArgumentError, op, "repeats must be non-negative", input=x)
    _check_output_size(op, x, output_size, r * n)
    return _copied(broadcast_to(x.unsqueeze(d + 1), x.shape[:d + 1] + (r,) + x.shape[d + 1:]).flatten(d, d + 1), x)


def _check_output_size(op, x, output_size, total):
    if output_size is not None and output_size != total:
        fail(ArgumentError, op, f"output_size {output_size} is not the {total} elements the repeats give", input=x)


def _tri(op, x, diagonal, lower):
    if x.ndim < 2:
        fail(ShapeError, op, "input must have at least 2 dims", input=x)
    k = ints(op, "diagonal", diagonal, input=x)
    m, n = x.shape[-2:]
    above = arange(n, device=x._device) - arange(m, device=x._device).reshape(m, 1)  # column - row
    return x.masked_fill(above > k if lower else above < k, 0)


def tril(x: Tensor, diagonal: int = 0) -> Tensor:
    """The lower triangle of the last two dims (on and below the diagonal-th diagonal); zeros elsewhere.

    >>> import tensorlite as tl
    >>> tl.ones(2, 2, dtype=tl.int64).tril().tolist()
    [[1, 0], [1, 1]]"""
    return _tri("tril", x, diagonal, True)


def triu(x: Tensor, diagonal: int = 0) -> Tensor:
    """The upper triangle of the last two dims (on and above the diagonal-th diagonal); zeros elsewhere.

    >>> import tensorlite as tl
    >>> tl.ones(2, 2, dtype=tl.int64).triu().tolist()
    [[1, 1], [0, 1]]"""
    return _tri("triu", x, diagonal, False)


def diff(x: Tensor, n: int = 1, dim: int = -1, prepend=None, append=None) -> Tensor:
    """The n-th forward difference along dim (of prepend, x, append joined); bool: x[i+1] != x[i].

    >>> import tensorlite as tl
    >>> tl.tensor([1, 4, 9, 16]).diff().tolist()
    [3, 5, 7]"""
    if not isinstance(x, TensorBase) or x.ndim == 0:
        fail(ShapeError, "diff", "input must be a tensor of at least 1 dim", input=x)
    d = norm_dim(dim, x.ndim, "diff", x)
    n = ints("diff", "n", n, low=0, input=x)
    for name, t in (("prepend", prepend), ("append", append)):
        if t is not None and (not isinstance(t, TensorBase) or t.ndim != x.ndim):
            fail(ShapeError, "diff", f"{name} must be a tensor with the dims of the input", input=x, **{name: t})
    x = cat([t for t in (prepend, x, append) if t is not None], d) if prepend is not None or append is not None else x
    for _ in range(n):
        k = builtins.max(x.shape[d] - 1, 0)
        hi, lo = narrow(x, d, x.shape[d] - k, k), narrow(x, d, 0, k)
        x = hi != lo if x.dtype is dtypes.bool_ else hi - lo
    return x


def rot90(x: Tensor, k: int = 1, dims=(0, 1)) -> Tensor:
    """Rotate by 90 degrees k times in the plane of dims, from the first towards the second.

    >>> import tensorlite as tl
    >>> tl.tensor([[1, 2], [3, 4]]).rot90().tolist()
    [[2, 4], [1, 3]]"""
    dims = dims_arg(dims, (), "rot90", x)
    if len(dims) != 2 or x.ndim < 2:
        fail(ShapeError, "rot90", f"expects 2 dims and an input of at least 2 dims, got dims {dims}", input=x)
    d0, d1 = (norm_dim(d, x.ndim, "rot90", x) for d in dims)
    if d0 == d1:
        fail(ArgumentError, "rot90", f"the two dims must differ, got {dims}", input=x)
    k = ints("rot90", "k", k, input=x) % 4
    if k in (0, 2):
        return flip(x, (d0, d1)) if k else x.clone()
    return flip(x, d1 if k == 1 else d0).transpose(d0, d1)


def _diag_fill(v: Tensor, shape, offset: int, d1: int, d2: int) -> Tensor:
    """zeros of `shape` with v (the other dims of shape in order, then the diagonal) on the
    offset-th diagonal of dims d1, d2: diagonal's gradient and diag_embed, out of place."""
    rest = [shape[d] for d in range(len(shape)) if d not in (d1, d2)]
    n1, n2 = shape[d1], shape[d2]
    out = zeros(rest + [n1 * n2], dtype=v.dtype, device=v._device)
    if v.shape[-1]:
        start = offset if offset >= 0 else -offset * n2
        out = out.index_add(-1, arange(start, start + v.shape[-1] * (n2 + 1), n2 + 1, device=v._device), v)
    return movedim(out.reshape(rest + [n1, n2]), (-2, -1), (d1, d2))


def diagonal(x: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """A view of the offset-th diagonal of dims dim1, dim2 (removed; the diagonal is the last dim).

    >>> import tensorlite as tl
    >>> tl.tensor([[1, 2], [3, 4]]).diagonal().tolist()
    [1, 4]"""
    d1, d2 = (norm_dim(d, x.ndim, "diagonal", x, False) for d in (dim1, dim2))
    if d1 == d2:
        fail(ArgumentError, "diagonal", f"dim1 and dim2 must differ, got {dim1} and {dim2}", input=x)
    offset = ints("diagonal", "offset", offset, input=x)
    (n1, n2), (s1, s2) = (x.shape[d1], x.shape[d2]), (x.stride(d1), x.stride(d2))
    n = builtins.max(builtins.min(n1, n2 - offset) if offset >= 0 else builtins.min(n1 + offset, n2), 0)
    start = (offset * s2 if offset >= 0 else -offset * s1) if n else 0
    keep = [d for d in range(x.ndim) if d not in (d1, d2)]
    lay = Layout(tuple(x.shape[d] for d in keep) + (n,), tuple(x.stride(d) for d in keep) + (s1 + s2,),
                 x._layout.offset + start)
    shape = x.shape
    return attach(as_view(x, lay), (x,), lambda g: (_diag_fill(g, shape, offset, d1, d2),), "diagonal")


def diag_embed(x: Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """Tensors whose offset-th diagonals (of dims dim1, dim2 of the result) are x's last dim.

    >>> import tensorlite as tl
    >>> tl.diag_embed(tl.tensor([1, 2])).tolist()
    [[1, 0], [0, 2]]"""
    if x.ndim == 0:
        fail(ShapeError, "diag_embed", "input must have at least 1 dim", input=x)
    d1, d2 = (norm_dim(d, x.ndim + 1, "diag_embed", x) for d in (dim1, dim2))
    if d1 == d2:
        fail(ArgumentError, "diag_embed", f"dim1 and dim2 must differ, got {dim1} and {dim2}", input=x)
    offset = ints("diag_embed", "offset", offset, input=x)
    rest, n = iter(x.shape[:-1]), x.shape[-1] + abs(offset)
    return _diag_fill(x, [n if d in (d1, d2) else next(rest) for d in range(x.ndim + 1)], offset, d1, d2)


def diag(x: Tensor, diagonal: int = 0) -> Tensor:
    """1-d in: a matrix with x on its diagonal-th diagonal; 2-d in: a copy of that diagonal.

    >>> import tensorlite as tl
    >>> tl.diag(tl.tensor([[1, 2], [3, 4]]), 1).tolist()
    [2]"""
    if x.ndim not in (1, 2):
        fail(ShapeError, "diag", "input must be 1-d or 2-d", input=x)
    return diag_embed(x, diagonal) if x.ndim == 1 else x.diagonal(diagonal).clone()


def trace(x: Tensor) -> Tensor:
    """The sum of the main diagonal of a 2-d tensor (integers sum in int64).

    >>> import tensorlite as tl
    >>> tl.tensor([[1, 2], [3, 4]]).trace().item()
    5"""
    if x.ndim != 2:
        fail(ShapeError, "trace", "input must be 2-d", input=x)
    return diagonal(x).sum()


class ShapeMethods:
    """The Tensor methods of this family (tensorlite.tensor.Tensor inherits them)."""
    __slots__ = ()

    flip, fliplr, flipud, roll, repeat, tile = flip, fliplr, flipud, roll, repeat, tile
    repeat_interleave, tril, triu, diff, diag, diagonal = repeat_interleave, tril, triu, diff, diag, diagonal
    diag_embed, trace, rot90 = diag_embed, trace, rot90
