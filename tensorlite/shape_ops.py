"""Ops that rearrange or combine tensors, and the basics of linear algebra (flip, roll, repeat,
tile, tril/triu, einsum, diagonal, mm, ...): each a composite of the views and ops of tensor.py,
so it runs on every device and autograd differentiates it through them."""
from __future__ import annotations

import builtins
import numbers
from math import prod

import numpy as np

from . import amp as _amp, dtype as _dt
from ._core import as_view, dims_arg, dtype_of, fail, ints, norm_dim, norm_dims, same_device, shape_arg
from .autograd import attach as _attach, attach_many as _attach_many, is_grad_enabled
from .custom_op import result, storage_and_layout
from .errors import ArgumentError, DTypeError, ShapeError
from .layout import Layout, broadcast_shapes
from .linalg import _cross, matrix_norm, vector_norm
from .tensor import (Tensor, _like, _tensor_list, arange, broadcast_to, cat, empty, full, index_select, matmul, mean,
                     narrow, ones, rand, randint, randn, stack, tensor, var, zeros)


METHODS = ("flip", "fliplr", "flipud", "roll", "repeat", "tile", "repeat_interleave", "tril", "triu", "diff", "outer",
           "ger", "movedim", "moveaxis", "swapaxes", "swapdims", "unbind", "t", "mm", "bmm", "dot", "vdot", "inner",
           "mv", "addmm", "baddbmm", "diag", "diagonal", "diag_embed", "trace", "cross", "kron", "rot90", "new_zeros",
           "new_ones", "new_full", "new_empty", "new_tensor", "type_as", "view_as", "reshape_as", "expand_as", "norm")


def _listed(op, tensors):
    """Tensors given as arguments or as one list or tuple of them (f(a, b) or f([a, b]))."""
    return _tensor_list(op, tensors[0] if len(tensors) == 1 and isinstance(tensors[0], (tuple, list)) else tensors)


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
    if isinstance(repeats, Tensor):
        if repeats.dtype.is_floating_point or repeats.dtype is _dt.bool_ or repeats.ndim > 1 or \
                repeats.numel() not in (1, n):
            fail(ShapeError, op, f"repeats must be an integer tensor of 0 or 1 dims with 1 or {n} elements",
                  input=x, repeats=repeats)
        same_device(op, input=x, repeats=repeats)
        reps = repeats.numpy().reshape(-1).astype(np.int64)
        if reps.size == 1 and n != 1:
            repeats = int(reps[0])
    else:
        reps = np.array([ints(op, "repeats", repeats, input=x)])
    if (reps < 0).any():
        fail(ArgumentError, op, "repeats must be non-negative", input=x)
    total = int(reps.sum()) * (n if reps.size == 1 else 1)
    if output_size is not None and output_size != total:
        fail(ArgumentError, op, f"output_size {output_size} is not the {total} elements the repeats give", input=x)
    if isinstance(repeats, Tensor):
        return index_select(x, d, tensor(np.repeat(np.arange(n), reps), device=x._device))
    r = int(reps[0])
    return _copied(broadcast_to(x.unsqueeze(d + 1), x.shape[:d + 1] + (r,) + x.shape[d + 1:]).flatten(d, d + 1), x)


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
    if not isinstance(x, Tensor) or x.ndim == 0:
        fail(ShapeError, "diff", "input must be a tensor of at least 1 dim", input=x)
    d = norm_dim(dim, x.ndim, "diff", x)
    n = ints("diff", "n", n, low=0, input=x)
    for name, t in (("prepend", prepend), ("append", append)):
        if t is not None and (not isinstance(t, Tensor) or t.ndim != x.ndim):
            fail(ShapeError, "diff", f"{name} must be a tensor with the dims of the input", input=x, **{name: t})
    x = cat([t for t in (prepend, x, append) if t is not None], d) if prepend is not None or append is not None else x
    for _ in range(n):
        k = builtins.max(x.shape[d] - 1, 0)
        hi, lo = narrow(x, d, x.shape[d] - k, k), narrow(x, d, 0, k)
        x = hi != lo if x.dtype is _dt.bool_ else hi - lo
    return x


def movedim(x: Tensor, source, destination) -> Tensor:
    """Move dims `source` to positions `destination` (ints or sequences); the others keep their order.

    >>> import tensorlite as tl
    >>> tl.zeros(2, 3, 4).movedim(0, -1).shape
    (3, 4, 2)"""
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
    (3, 2)"""
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
    return tuple(_attach_many(outs, (x,), grad, "unbind"))


def t(x: Tensor) -> Tensor:
    """Transpose a tensor of at most 2 dims (0-d and 1-d tensors come back as they are).

    >>> import tensorlite as tl
    >>> tl.zeros(2, 3).t().shape
    (3, 2)"""
    if x.ndim > 2:
        fail(ShapeError, "t", f"expects a tensor of at most 2 dims, got {x.ndim}", self=x)
    return x.transpose(0, 1) if x.ndim == 2 else x


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


def _atleast(nd, tensors):
    single = len(tensors) == 1 and isinstance(tensors[0], Tensor)
    out = []
    for x in _listed(f"atleast_{nd}d", tensors):
        s = x.shape  # (n,) -> (1, n) or (1, n, 1); (m, n) -> (m, n, 1)
        s = s + (1,) if nd == 3 and len(s) == 2 else (1,) + (s or (1,)) + (1,) if nd == 3 else (1,) * (nd - len(s)) + s
        out.append(x if x.ndim >= nd else x.reshape(s))
    return out[0] if single else tuple(out)


def atleast_1d(*tensors):
    """Each tensor viewed with at least 1 dim (one tensor in, one out; several: a tuple).

    >>> import tensorlite as tl
    >>> tl.atleast_1d(tl.tensor(3)).shape
    (1,)"""
    return _atleast(1, tensors)


def atleast_2d(*tensors):
    """Each tensor viewed with at least 2 dims: (n,) becomes (1, n).

    >>> import tensorlite as tl
    >>> tl.atleast_2d(tl.zeros(3)).shape
    (1, 3)"""
    return _atleast(2, tensors)


def atleast_3d(*tensors):
    """Each tensor viewed with at least 3 dims: (n,) becomes (1, n, 1), (m, n) becomes (m, n, 1).

    >>> import tensorlite as tl
    >>> tl.atleast_3d(tl.zeros(2, 3)).shape
    (2, 3, 1)"""
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
    [(2, 3), (2, 3)]"""
    ts = _listed("broadcast_tensors", tensors)
    shape = broadcast_shapes(*[t.shape for t in ts])
    if shape is None:
        fail(ShapeError, "broadcast_tensors", "shapes do not broadcast", **{f"t{i}": t for i, t in enumerate(ts)})
    return tuple(broadcast_to(t, shape) for t in ts)


def meshgrid(*tensors, indexing: str = "ij"):
    """Coordinate grids of 1-d tensors: out[i] varies along dim i ('ij'), or 'xy' with the first two swapped.

    >>> import tensorlite as tl
    >>> [g.tolist() for g in tl.meshgrid(tl.tensor([1, 2]), tl.tensor([3, 4, 5]), indexing="ij")]
    [[[1, 1, 1], [2, 2, 2]], [[3, 4, 5], [3, 4, 5]]]"""
    ts = _listed("meshgrid", tensors)
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
    out = [broadcast_to(t.reshape((1,) * i + (-1,) + (1,) * (k - i - 1)), shape) for i, t in enumerate(ts)]
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


def kron(a: Tensor, b: Tensor) -> Tensor:
    """The Kronecker product: blocks a[i, j] * b.

    >>> import tensorlite as tl
    >>> tl.kron(tl.tensor([1, 2]), tl.tensor([1, 10])).tolist()
    [1, 10, 2, 20]"""
    nd = builtins.max(a.ndim, b.ndim)
    sa, sb = (1,) * (nd - a.ndim) + a.shape, (1,) * (nd - b.ndim) + b.shape
    out = a.reshape([v for n in sa for v in (n, 1)]) * b.reshape([v for n in sb for v in (1, n)])
    return out.reshape([x * y for x, y in zip(sa, sb)])


def tensordot(a: Tensor, b: Tensor, dims=2) -> Tensor:
    """Sum of products over a's last `dims` dims and b's first (an int), or over the listed
    dims of each (two sequences), as torch.tensordot: one matmul of the two reshaped.

    >>> import tensorlite as tl
    >>> tl.tensordot(tl.ones(2, 3, 4), tl.ones(3, 4, 5)).shape
    (2, 5)
    >>> tl.tensordot(tl.ones(3, 2), tl.ones(2, 3), dims=([0], [1])).shape
    (2, 2)"""
    if isinstance(dims, (tuple, list)) and len(dims) == 2 and all(isinstance(d, (tuple, list)) for d in dims):
        da = [norm_dim(d, a.ndim, "tensordot", a) for d in dims[0]]
        db = [norm_dim(d, b.ndim, "tensordot", b) for d in dims[1]]
    else:
        k = ints("tensordot", "dims", dims, low=0)
        if k > builtins.min(a.ndim, b.ndim):
            fail(ShapeError, "tensordot", f"dims={k} exceeds the operands' dims", a=a, b=b)
        da, db = list(range(a.ndim - k, a.ndim)), list(range(k))
    if len(da) != len(db) or len(set(da)) != len(da) or len(set(db)) != len(db) or \
            any(a.shape[i] != b.shape[j] for i, j in zip(da, db)):
        fail(ShapeError, "tensordot", f"contracted dims {da} of a and {db} of b must pair up with equal sizes",
              a=a, b=b)
    free_a = [i for i in range(a.ndim) if i not in da]
    free_b = [j for j in range(b.ndim) if j not in db]
    k = prod(a.shape[i] for i in da)
    lhs = a.permute(free_a + da).reshape(-1, k)
    rhs = b.permute(db + free_b).reshape(k, -1)
    return (lhs @ rhs).reshape([a.shape[i] for i in free_a] + [b.shape[j] for j in free_b])


def cross(a: Tensor, b: Tensor, dim=None) -> Tensor:
    """The cross product of 3-vectors along dim (None: the first dim of size 3, as torch.cross).

    >>> import tensorlite as tl
    >>> tl.cross(tl.tensor([1, 0, 0]), tl.tensor([0, 1, 0])).tolist()
    [0, 0, 1]"""
    if dim is None:
        shape = broadcast_shapes(a.shape, b.shape) or ()
        dim = next((i for i, n in enumerate(shape) if n == 3), -1)
    return _cross(a, b, dim, "cross")


def _operands(op, ndims, **ts):
    """Check the operands of mm, bmm, mv, dot: tensors of these dims, one dtype, one device."""
    if not builtins.all(isinstance(t, Tensor) for t in ts.values()):
        fail(DTypeError, op, "operands must be tensors", **ts)
    if tuple(t.ndim for t in ts.values()) != ndims:
        fail(ShapeError, op, f"expects operands of {' and '.join(map(str, ndims))} dims", **ts)
    if len({t.dtype for t in ts.values()}) > 1:
        fail(DTypeError, op, "operands must have the same dtype", **ts)
    same_device(op, **ts)


def mm(a: Tensor, b: Tensor) -> Tensor:
    """The product of two matrices (2-d, one dtype; no broadcasting).

    >>> import tensorlite as tl
    >>> tl.mm(tl.tensor([[1, 2]]), tl.tensor([[3], [4]])).tolist()
    [[11]]"""
    _operands("mm", (2, 2), self=a, mat2=b)
    return matmul(a, b)


def bmm(a: Tensor, b: Tensor) -> Tensor:
    """Batched matrix products of (b, n, m) and (b, m, p) tensors (no broadcasting).

    >>> import tensorlite as tl
    >>> tl.bmm(tl.ones(2, 1, 3), tl.ones(2, 3, 1)).shape
    (2, 1, 1)"""
    _operands("bmm", (3, 3), self=a, mat2=b)
    if a.shape[0] != b.shape[0]:
        fail(ShapeError, "bmm", "batch sizes differ", self=a, mat2=b)
    return matmul(a, b)


def mv(a: Tensor, v: Tensor) -> Tensor:
    """Matrix-vector product.

    >>> import tensorlite as tl
    >>> tl.mv(tl.tensor([[1, 2], [3, 4]]), tl.tensor([1, 1])).tolist()
    [3, 7]"""
    _operands("mv", (2, 1), self=a, vec=v)
    return matmul(a, v)


def dot(a: Tensor, b: Tensor) -> Tensor:
    """The dot product of two 1-d tensors of one dtype and length (vdot is the same for real tensors).

    >>> import tensorlite as tl
    >>> tl.dot(tl.tensor([1, 2]), tl.tensor([3, 4])).item()
    11"""
    _operands("dot", (1, 1), self=a, tensor=b)
    return matmul(a, b)


vdot = dot


def inner(a: Tensor, b: Tensor) -> Tensor:
    """Sum of products over the last dims (a scalar operand multiplies).

    >>> import tensorlite as tl
    >>> tl.inner(tl.tensor([1, 2]), tl.tensor([3, 4])).item()
    11"""
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if a.shape[-1] != b.shape[-1]:
        fail(ShapeError, "inner", "the last dims differ", self=a, other=b)
    return matmul(a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1]).mT).reshape(a.shape[:-1] + b.shape[:-1])


def outer(a: Tensor, b: Tensor) -> Tensor:
    """The outer product of two 1-d tensors (ger is the same).

    >>> import tensorlite as tl
    >>> tl.outer(tl.tensor([1, 2]), tl.tensor([1, 10])).tolist()
    [[1, 10], [2, 20]]"""
    if not isinstance(a, Tensor) or not isinstance(b, Tensor) or a.ndim != 1 or b.ndim != 1:
        fail(ShapeError, "outer", "expects two 1-d tensors", self=a, vec2=b)
    return a.reshape(-1, 1) * b


ger = outer


def _add_product(op, x, product, beta, alpha):
    if not isinstance(x, Tensor) or broadcast_shapes(x.shape, product.shape) != product.shape:
        fail(ShapeError, op, f"input does not broadcast to the product's shape {product.shape}", input=x)
    out = product if alpha == 1 else product * alpha
    return out if beta == 0 else out + (x if beta == 1 else x * beta)  # beta 0 ignores input (NaN too)


def addmm(x: Tensor, mat1: Tensor, mat2: Tensor, *, beta=1, alpha=1) -> Tensor:
    """beta * x + alpha * (mat1 @ mat2); x broadcasts to the product's shape and is ignored where beta is 0.
    Without autograd, with beta = alpha = 1 and x of the product's float shape and dtype: one
    storage op (matmul_add), whose one-row GPU GEMV adds x as it stores (a residual add).

    >>> import tensorlite as tl
    >>> tl.addmm(tl.tensor([1, 1]), tl.tensor([[1, 2]]), tl.tensor([[3, 4], [5, 6]])).tolist()
    [[14, 17]]"""
    _operands("addmm", (2, 2), mat1=mat1, mat2=mat2)
    (m, k), n = mat1.shape, mat2.shape[1]
    if beta == 1 and alpha == 1 and isinstance(x, Tensor) and x.shape == (m, n) and k == mat2.shape[0] and \
            x.dtype is mat1.dtype and x.dtype.is_floating_point and x._device is mat1._device and \
            not (is_grad_enabled() and (x.requires_grad or mat1.requires_grad or mat2.requires_grad)) and \
            not _amp.is_autocast_enabled():  # one storage op: a GPU adds x as its GEMV stores (a residual add)
        (xs, xl), (as_, al), (bs, bl) = (storage_and_layout(t) for t in (x, mat1, mat2))
        return result(as_.matmul_add(bs, (m, n, k), al, bl, xs, xl), (m, n), x.dtype)
    return _add_product("addmm", x, mm(mat1, mat2), beta, alpha)


def baddbmm(x: Tensor, batch1: Tensor, batch2: Tensor, *, beta=1, alpha=1) -> Tensor:
    """beta * x + alpha * bmm(batch1, batch2).

    >>> import tensorlite as tl
    >>> tl.baddbmm(tl.zeros(2, 1, 1), tl.ones(2, 1, 3), tl.ones(2, 3, 1)).flatten().tolist()
    [3.0, 3.0]"""
    return _add_product("baddbmm", x, bmm(batch1, batch2), beta, alpha)


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
    return _attach(as_view(x, lay), (x,), lambda g: (_diag_fill(g, shape, offset, d1, d2),), "diagonal")


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


def _subscripts(term, nd, i, fail):
    """A term's labels, one per dim: letters, and -k..-1 for the dims an ellipsis covers."""
    head, dots, tail = term.partition("...")
    if "." in head + tail or not (head + tail).isalpha() and head + tail:
        fail(f"invalid subscripts {term!r} (letters and at most one '...')", ArgumentError)
    k = nd - len(head) - len(tail)
    if k < 0 or (k and not dots):
        fail(f"operand {i} has {nd} dims, which the subscripts {term!r} do not match")
    return list(head) + list(range(-k, 0)) + list(tail)


def einsum(equation: str, *operands) -> Tensor:
    """Sums of products over labelled dims (torch.einsum: 'ij,jk->ik', implicit output, '...',
    repeated labels as diagonals); pairs contract left to right as one matmul or product each.

    >>> import tensorlite as tl
    >>> a = tl.tensor([[1, 2], [3, 4]])
    >>> tl.einsum('ij,jk->ik', a, a).tolist(), tl.einsum('ii', a).item()
    ([[7, 10], [15, 22]], 5)"""
    ops = _listed("einsum", operands)
    named = {f"t{i}": t for i, t in enumerate(ops)}

    def refuse(msg, cls=ShapeError):
        fail(cls, "einsum", msg, equation=equation, **named)
    if not isinstance(equation, str):
        refuse("the equation must be a string (the sublist form is not supported)", DTypeError)
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ops):
        refuse(f"{len(terms)} subscripts for {len(ops)} operands", ArgumentError)
    if len({t.dtype for t in ops}) > 1:
        refuse("operands must have the same dtype", DTypeError)
    same_device("einsum", **named)
    labels, sizes, everything = [], {}, []
    for i, (term, x) in enumerate(zip(terms, ops)):
        ls = _subscripts(term, x.ndim, i, refuse)
        everything += ls
        for l, n in zip(ls, x.shape):
            prev = sizes.setdefault(l, n)
            if 1 not in (n, prev) and n != prev:
                refuse(f"subscript {l} has size {n} in operand {i}, which does not broadcast with size {prev}")
            sizes[l] = n if prev == 1 else prev
        while len(set(ls)) < len(ls):  # a repeated label: take that diagonal (it becomes the last dim)
            j = next(j for j, l in enumerate(ls) if ls.index(l) != j)
            a = ls.index(ls[j])
            if ops[i].shape[a] != ops[i].shape[j]:
                refuse(f"subscript {ls[j]} is repeated in operand {i} for dims of sizes {ops[i].shape[a]} and "
                     f"{ops[i].shape[j]}")
            ops[i] = diagonal(ops[i], 0, a, j)
            ls = [l for k, l in enumerate(ls) if k not in (a, j)] + [ls[j]]
        labels.append(ls)
    if arrow:
        ell = builtins.max([-l for l in everything if isinstance(l, int)], default=0)
        out = _subscripts(rhs, len(rhs) - 3 + ell if "..." in rhs else len(rhs), "out", refuse)
        if len(set(out)) < len(out) or builtins.any(l not in everything for l in out):
            refuse(f"output subscripts {rhs!r} must be distinct and appear in an input", ArgumentError)
    else:  # implicit: the ellipsis dims, then the labels that appear once, in alphabetical order
        once = [l for l in everything if everything.count(l) == 1 and isinstance(l, str)]
        out = sorted({l for l in everything if isinstance(l, int)}) + sorted(once)
    acc, la = ops[0], labels[0]
    for i in range(1, len(ops) + 1):
        later = set(out).union(*labels[i + 1:]) if i < len(ops) else set(out)
        b, lb = (ops[i], labels[i]) if i < len(ops) else (None, [])
        acc, la = _contract(acc, la, b, lb, later)
    order = [la.index(l) for l in out]
    return acc.permute(order) if order != sorted(order) else acc


def _contract(a, la, b, lb, keep):
    """a (labels la) times b (labels lb; None: a alone), summed over the labels not in `keep`."""
    gone = [d for d, l in enumerate(la) if l not in keep and l not in lb]  # summed first, before any product
    if gone:
        a, la = a.sum(gone), [l for d, l in enumerate(la) if d not in gone]
    if b is None:
        return a, la
    b, lb = _contract(b, lb, None, [], keep | set(la))
    sa, sb = dict(zip(la, a.shape)), dict(zip(lb, b.shape))
    sz = {**sa, **sb, **{l: n if sb[l] == 1 else sb[l] for l, n in sa.items() if l in sb}}  # size-1 dims broadcast
    batch = [l for l in la if l in lb and l in keep]
    inner = [l for l in la if l in lb and l not in keep]
    left, right = [l for l in la if l not in lb], [l for l in lb if l not in la]
    pa = broadcast_to(a, [sz[l] for l in la]).permute([la.index(l) for l in batch + left + inner])
    pb = broadcast_to(b, [sz[l] for l in lb]).permute([lb.index(l) for l in batch + inner + right])
    nb, nl, nr = ([sz[l] for l in ls] for ls in (batch, left, right))
    if not inner:  # no sum: a broadcast product
        out = pa.reshape(nb + nl + [1] * len(nr)) * pb.reshape(nb + [1] * len(nl) + nr)
    else:
        k = prod(sz[l] for l in inner)
        out = matmul(pa.reshape(prod(nb), prod(nl), k), pb.reshape(prod(nb), k, prod(nr))).reshape(nb + nl + nr)
    return out, batch + left + right


def _new(fn, x, size, *args, dtype=None, device=None, requires_grad=False):
    return fn(shape_arg(size, fn.__name__), *args, dtype=x.dtype if dtype is None else dtype,
              device=device or x._device, requires_grad=requires_grad)


def new_zeros(x: Tensor, *size, **kw) -> Tensor:
    """Zeros with x's dtype and device (unless given).

    >>> import tensorlite as tl
    >>> tl.ones(1, dtype=tl.int64).new_zeros(2).tolist()
    [0, 0]"""
    return _new(zeros, x, size, **kw)


def new_ones(x: Tensor, *size, **kw) -> Tensor:
    """Ones with x's dtype and device (unless given).

    >>> import tensorlite as tl
    >>> tl.zeros(1).new_ones(2).tolist()
    [1.0, 1.0]"""
    return _new(ones, x, size, **kw)


def new_empty(x: Tensor, *size, **kw) -> Tensor:
    """An uninitialized tensor with x's dtype and device (unless given).

    >>> import tensorlite as tl
    >>> tl.zeros(1).new_empty(2, 3).shape
    (2, 3)"""
    return _new(empty, x, size, **kw)


def new_full(x: Tensor, size, fill_value, **kw) -> Tensor:
    """`fill_value` everywhere, with x's dtype and device (unless given).

    >>> import tensorlite as tl
    >>> tl.zeros(1, dtype=tl.int64).new_full((2,), 7).tolist()
    [7, 7]"""
    return _new(full, x, (size,), fill_value, **kw)


def new_tensor(x: Tensor, data, dtype=None, device=None, requires_grad=False) -> Tensor:
    """A copy of `data` with x's dtype and device (unless given).

    >>> import tensorlite as tl
    >>> tl.zeros(1, dtype=tl.int64).new_tensor([1.7]).tolist()
    [1]"""
    return tensor(data, x.dtype if dtype is None else dtype, device or x._device, requires_grad)


def type_as(x: Tensor, other: Tensor) -> Tensor:
    """x cast to other's dtype.

    >>> import tensorlite as tl
    >>> tl.tensor([1.5]).type_as(tl.tensor([1])).tolist()
    [1]"""
    return x.to(other.dtype)


def view_as(x: Tensor, other: Tensor) -> Tensor:
    """x.view(other.shape).

    >>> import tensorlite as tl
    >>> tl.zeros(6).view_as(tl.zeros(2, 3)).shape
    (2, 3)"""
    return x.view(other.shape)


def reshape_as(x: Tensor, other: Tensor) -> Tensor:
    """x.reshape(other.shape).

    >>> import tensorlite as tl
    >>> tl.zeros(6).reshape_as(tl.zeros(3, 2)).shape
    (3, 2)"""
    return x.reshape(other.shape)


def expand_as(x: Tensor, other: Tensor) -> Tensor:
    """x.expand(other.shape).

    >>> import tensorlite as tl
    >>> tl.zeros(1, 3).expand_as(tl.zeros(2, 3)).shape
    (2, 3)"""
    return x.expand(other.shape)


def _random_like(fn, x, dtype=None, **kw):
    op = f"{fn.__name__}_like"
    dt = x.dtype if dtype is None else dtype_of(dtype, op=op)
    if not dt.is_floating_point:
        fail(DTypeError, op, f"expected a floating dtype, got {dt.name}", input=x)
    return _like(fn, x, dtype=dt, **kw)


def rand_like(x: Tensor, **kw) -> Tensor:
    """rand with x's shape, dtype and device (unless given).

    >>> import tensorlite as tl
    >>> tl.rand_like(tl.zeros(2, 3)).shape
    (2, 3)"""
    return _random_like(rand, x, **kw)


def randn_like(x: Tensor, **kw) -> Tensor:
    """randn with x's shape, dtype and device (unless given).

    >>> import tensorlite as tl
    >>> tl.randn_like(tl.zeros(2, 3)).shape
    (2, 3)"""
    return _random_like(randn, x, **kw)


def randint_like(x: Tensor, low=0, high=None, *, dtype=None, device=None) -> Tensor:
    """Integers uniform on [low, high) with x's shape, dtype and device (unless given).

    >>> import tensorlite as tl
    >>> tl.randint_like(tl.zeros(3, dtype=tl.int64), 1, 2).tolist()
    [1, 1, 1]"""
    low, high = (0, low) if high is None else (low, high)
    return randint(low, high, x.shape, dtype=x.dtype if dtype is None else dtype, device=device or x._device)


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """`data` itself when it is a tensor of that dtype and device (else converted); other data is copied.

    >>> import tensorlite as tl
    >>> x = tl.zeros(2); tl.as_tensor(x) is x
    True"""
    return data.to(dtype=dtype, device=device) if isinstance(data, Tensor) else tensor(data, dtype, device)


def is_tensor(obj) -> bool:
    """Whether obj is a tensorlite Tensor.

    >>> import tensorlite as tl
    >>> tl.is_tensor(tl.zeros(1)), tl.is_tensor([1])
    (True, False)"""
    return isinstance(obj, Tensor)


def numel(x: Tensor) -> int:
    """The number of elements.

    >>> import tensorlite as tl
    >>> tl.numel(tl.zeros(2, 3))
    6"""
    return x.numel()


def var_mean(x: Tensor, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """(var, mean) over dim, as torch.var_mean (correction 1 unless given; unbiased=False is 0).

    >>> import tensorlite as tl
    >>> [t.item() for t in tl.var_mean(tl.tensor([1.0, 3.0]))]
    [2.0, 2.0]"""
    if isinstance(dim, bool):  # var_mean(x, unbiased)
        dim, unbiased = None, dim
    c = correction if correction is not None else 1 if unbiased is None else int(unbiased)
    return var(x, dim, keepdim, c), mean(x, dim, keepdim)


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


def cdist(x1: Tensor, x2: Tensor, p: float = 2.0, compute_mode=None) -> Tensor:
    """The p-norm distances between the rows of x1 (..., P, M) and of x2 (..., R, M): (..., P, R).

    >>> import tensorlite as tl
    >>> tl.cdist(tl.tensor([[0.0, 0.0]]), tl.tensor([[3.0, 4.0], [0.0, 1.0]])).tolist()
    [[5.0, 1.0]]"""
    if x1.ndim < 2 or x2.ndim < 2 or x1.shape[-1] != x2.shape[-1]:
        fail(ShapeError, "cdist", "expects (..., P, M) and (..., R, M) tensors", x1=x1, x2=x2)
    if not isinstance(p, numbers.Real) or p < 0:
        fail(ArgumentError, "cdist", f"p must be a non-negative number, got {p!r}", x1=x1, x2=x2)
    return vector_norm(x1.unsqueeze(-2) - x2.unsqueeze(-3), p, -1)
