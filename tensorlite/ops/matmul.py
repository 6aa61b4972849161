"""Products and contractions: matmul (the one routing to the storage's matmul), mm, bmm, mv, dot,
vdot, inner, outer, addmm, baddbmm, einsum, tensordot, kron, cross, cdist.
"""
from __future__ import annotations

import builtins
import numbers
from math import prod
from typing import TYPE_CHECKING

from .. import amp
from .._core import TensorBase, check_size, fail, ints, norm_dim, out_of_memory, same_device, wrap
from ..autograd import attach, is_grad_enabled
from ..custom_op import result, storage_and_layout
from ..errors import ArgumentError, DTypeError, ShapeError, describe
from ..layout import broadcast_shapes
from .elementwise import coerce
from .joins import listed
from .linalg import cross_dim, vector_norm
from .shape import diagonal
from .views import broadcast_to, sum_to

if TYPE_CHECKING:
    from ..tensor import Tensor


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """PyTorch matmul: 1-D operands are promoted and squeezed, batch dims broadcast."""
    if not isinstance(a, TensorBase) or not isinstance(b, TensorBase):
        raise DTypeError(f"matmul: operands must be tensors, got {type(a).__name__} and {type(b).__name__}")
    same_device("matmul", lhs=a, rhs=b)
    a, b = amp.low_precision(a, b)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"{describe('matmul', lhs=a, rhs=b)}: both operands need at least 1 dim")
    if a.dtype is not b.dtype:
        a, b = coerce("matmul", a, b)
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    b2 = b.unsqueeze(-1) if b.ndim == 1 else b
    m, k = a2.shape[-2:]
    k2, n = b2.shape[-2:]
    batch = broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    if k != k2 or batch is None:
        raise ShapeError(f"{describe('matmul', lhs=a, rhs=b)}: shapes are not aligned for matrix product")
    check_size("matmul", batch + (m, n), a.dtype, a._device)  # (n, 1) @ (1, n) is n*n: refused before the backend
    bs = prod(batch)
    la = broadcast_to(a2, batch + (m, k)).reshape(bs, m, k)
    lb = broadcast_to(b2, batch + (k, n)).reshape(bs, k, n)
    try:
        st = la._storage.matmul(lb._storage, (bs, m, n, k), la._layout, lb._layout)
    except MemoryError as e:  # more than is free now (check_size allows up to the total)
        raise out_of_memory("matmul", batch + (m, n), a.dtype, a._device, e) from None
    out = wrap(st, batch + (m, n), a.dtype)
    if a.ndim == 1:
        out = out.squeeze(-2)
    if b.ndim == 1:
        out = out.squeeze(-1)
    if not a.dtype.is_floating_point:
        return out

    def grad(g):
        g2 = g.reshape(batch + (m, n))
        ga = sum_to(matmul(g2, b2.mT), a2.shape).reshape(a.shape)
        gb = sum_to(matmul(a2.mT, g2), b2.shape).reshape(b.shape)
        return ga, gb
    return attach(out, (a, b), grad, "matmul", (a, b))


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
    tensorlite.Size([2, 5])
    >>> tl.tensordot(tl.ones(3, 2), tl.ones(2, 3), dims=([0], [1])).shape
    tensorlite.Size([2, 2])"""
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
    return cross_dim(a, b, dim, "cross")


def _operands(op, ndims, **ts):
    """Check the operands of mm, bmm, mv, dot: tensors of these dims, one dtype, one device."""
    if not builtins.all(isinstance(t, TensorBase) for t in ts.values()):
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
    tensorlite.Size([2, 1, 1])"""
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
    if not isinstance(a, TensorBase) or not isinstance(b, TensorBase) or a.ndim != 1 or b.ndim != 1:
        fail(ShapeError, "outer", "expects two 1-d tensors", self=a, vec2=b)
    return a.reshape(-1, 1) * b


ger = outer


def _add_product(op, x, product, beta, alpha):
    if not isinstance(x, TensorBase) or broadcast_shapes(x.shape, product.shape) != product.shape:
        fail(ShapeError, op, f"input does not broadcast to the product's shape {tuple(product.shape)}", input=x)
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
    if beta == 1 and alpha == 1 and isinstance(x, TensorBase) and x.shape == (m, n) and k == mat2.shape[0] and \
            x.dtype is mat1.dtype and x.dtype.is_floating_point and x._device is mat1._device and \
            not (is_grad_enabled() and (x.requires_grad or mat1.requires_grad or mat2.requires_grad)) and \
            not amp.is_autocast_enabled():  # one storage op: a GPU adds x as its GEMV stores (a residual add)
        (xs, xl), (as_, al), (bs, bl) = (storage_and_layout(t) for t in (x, mat1, mat2))
        return result(as_.matmul_add(bs, (m, n, k), al, bl, xs, xl), (m, n), x.dtype)
    return _add_product("addmm", x, mm(mat1, mat2), beta, alpha)


def baddbmm(x: Tensor, batch1: Tensor, batch2: Tensor, *, beta=1, alpha=1) -> Tensor:
    """beta * x + alpha * bmm(batch1, batch2).

    >>> import tensorlite as tl
    >>> tl.baddbmm(tl.zeros(2, 1, 1), tl.ones(2, 1, 3), tl.ones(2, 3, 1)).flatten().tolist()
    [3.0, 3.0]"""
    return _add_product("baddbmm", x, bmm(batch1, batch2), beta, alpha)


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
    ops = listed("einsum", operands)
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


class MatmulMethods:
    """The Tensor methods of this family (tensorlite.tensor.Tensor inherits them)."""
    __slots__ = ()

    def __matmul__(self, other):
        """Matrix product (batched, broadcast), also Tensor.matmul, as torch.matmul.

        >>> import tensorlite as tl
        >>> (tl.tensor([[1, 2]]) @ tl.tensor([[3], [4]])).tolist()
        [[11]]
        """
        return matmul(self, other)

    def __rmatmul__(self, other):
        return matmul(other, self)

    matmul = __matmul__

    outer, ger, mm, bmm, dot, vdot, inner, mv, addmm = outer, ger, mm, bmm, dot, vdot, inner, mv, addmm
    baddbmm, cross, kron = baddbmm, cross, kron
