"""tl.linalg's functions (tensorlite/linalg.py is the public namespace): vector and matrix norms,
cross, vecdot; composites of the other families' ops, with PyTorch's gradients.
"""
from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING

from .._core import TensorBase, dtype_of, norm_dim, norm_dims, opmath
from ..autograd import attach, no_grad
from ..errors import ArgumentError, DTypeError, ShapeError, describe
from ..layout import broadcast_shapes
from .creation import tensor, zeros_like
from .elementwise import where
from .views import broadcast_to

if TYPE_CHECKING:
    from ..tensor import Tensor




def p_norm(x: Tensor, p, dim, keepdim=True) -> Tensor:
    """||x||_p over dim (an int, a tuple, None: all), with PyTorch's gradient (0 where the norm
    is 0, where the composite's would be 0 * inf; ties of the inf norms share it evenly)."""
    dims = norm_dims(dim, x.ndim, "vector_norm", x)
    kept = dict(dim=dims, keepdim=True)
    with no_grad():
        a = x.abs()
        if x.numel() == 0:
            norm = zeros_like(a.sum(**kept))
        elif math.isinf(p):
            norm = a.amax(**kept) if p > 0 else a.amin(**kept)
        elif p == 0:
            norm = (x != 0).sum(**kept)._cast(x.dtype)
        else:  # p = 1, 2 without pow (sqrt is correctly rounded, a GPU's pow is not)
            norm = a.sum(**kept) if p == 1 else (x * x).sum(**kept).sqrt() if p == 2 else \
                (a ** p).sum(**kept) ** (1.0 / p)

    def grad(g):  # from x and the recorded output, so that create_graph differentiates it again
        if p == 0:
            return (zeros_like(x),)
        a, n = x.abs(), out
        if math.isinf(p):
            hit = ((a == n) | (a != a))._cast(x.dtype)
            return (x.sign() * hit * (g / hit.sum(**kept)),)
        if p < 1:  # |x|^(p-1) is inf at 0, where the gradient is 0
            return (where(x == 0, 0.0, x.sign() * a ** (p - 1)) * (g * n ** (1 - p)),)
        d = x.sign() if p == 1 else x / n if p == 2 else x.sign() * a ** (p - 1) / n ** (p - 1)
        return (where(n == 0, 0.0, g * d),)
    out = attach(norm, (x,), grad, "vector_norm", (x, norm))
    return out if keepdim or x.ndim == 0 else out.squeeze(dims)


def _float_input(op, x, dtype):
    if not isinstance(x, TensorBase):
        raise DTypeError(f"{op}: expected a tensor, got {type(x).__name__}")
    x = x if dtype is None else x._cast(dtype_of(dtype, op=op))
    if not x.dtype.is_floating_point:
        raise DTypeError(f"{describe(op, input=x)}: expected a floating point input (or dtype=)")
    return x


def vector_norm(x: Tensor, ord=2, dim=None, keepdim=False, *, dtype=None) -> Tensor:
    """The vector ord-norm over dim (None: all elements): ord a number, inf (max |x|), -inf (min |x|)
    or 0 (the count of nonzeros); 16-bit floats are summed in float32.

    >>> import tensorlite as tl
    >>> tl.linalg.vector_norm(tl.tensor([3.0, -4.0])).item(), tl.linalg.vector_norm(tl.tensor([3.0, -4.0]), 1).item()
    (5.0, 7.0)"""
    x = _float_input("linalg.vector_norm", x, dtype)
    if not isinstance(ord, numbers.Real) or isinstance(ord, bool):
        raise ArgumentError(f"{describe('linalg.vector_norm', input=x)}: ord must be a number, got {ord!r}")
    dims = norm_dims(dim, x.ndim, "linalg.vector_norm", x)
    if ord in (math.inf, -math.inf) and any(x.shape[d] == 0 for d in dims) or x.numel() == 0 and ord < 0:
        raise ShapeError(f"{describe('linalg.vector_norm', input=x)}: the {ord} norm of an empty set is undefined")
    wide = opmath(x.dtype, x.dtype)
    return p_norm(x._cast(wide), float(ord), dim, keepdim)._cast(x.dtype)


def matrix_norm(A: Tensor, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None) -> Tensor:
    """The matrix norm over the 2 dims `dim`: 'fro', or inf / -inf (max / min row sum of |A|), 1 / -1
    (max / min column sum); 'nuc', 2 and -2 need singular values, which tensorlite does not have.

    >>> import tensorlite as tl
    >>> tl.linalg.matrix_norm(tl.tensor([[1.0, -2.0], [3.0, 4.0]]), 1).item()
    6.0"""
    A = _float_input("linalg.matrix_norm", A, dtype)
    op = describe("linalg.matrix_norm", input=A)
    dims = tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)
    if len(dims) != 2 or A.ndim < 2:
        raise ShapeError(f"{op}: expects a 2-tuple dim and an input of at least 2 dims, got dim={dim}")
    d0, d1 = (norm_dim(d, A.ndim, "linalg.matrix_norm", A) for d in dims)
    if d0 == d1:
        raise ArgumentError(f"{op}: the two dims must differ, got {dim}")
    if ord == "fro":
        return vector_norm(A, 2, (d0, d1), keepdim)
    if ord in ("nuc", 2, -2):
        raise ArgumentError(f"{op}: ord={ord!r} needs a singular value decomposition, which tensorlite does not "
                            "have; 'fro', inf, -inf, 1 and -1 are supported")
    if ord not in (math.inf, -math.inf, 1, -1) or isinstance(ord, bool):
        raise ArgumentError(f"{op}: ord must be 'fro', 'nuc', inf, -inf, 1, -1, 2 or -2, got {ord!r}")
    summed, over = (d1, d0) if abs(ord) == math.inf else (d0, d1)
    if A.shape[over] == 0:
        raise ShapeError(f"{op}: the {ord} norm of an empty matrix is undefined")
    s = A._cast(opmath(A.dtype, A.dtype)).abs().sum(summed, keepdim=True)
    out = (s.amax(over, keepdim=True) if ord > 0 else s.amin(over, keepdim=True))._cast(A.dtype)
    return out if keepdim else out.squeeze((d0, d1))


def norm(A: Tensor, ord=None, dim=None, keepdim=False, *, dtype=None) -> Tensor:
    """torch.linalg.norm: a vector norm over 1 dim (or all, ord None), a matrix norm over 2; with ord
    given and dim None, A must be 1-d or 2-d.

    >>> import tensorlite as tl
    >>> tl.linalg.norm(tl.tensor([[3.0, 0.0], [0.0, 4.0]])).item()
    5.0"""
    dims = None if dim is None else tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)
    if dims is not None and len(dims) not in (1, 2):
        raise ArgumentError(f"{describe('linalg.norm', input=A)}: dim must have 1 or 2 dims, got {dim}")
    if ord is None:
        return vector_norm(A, 2, dims, keepdim, dtype=dtype)
    if dims is None:
        if getattr(A, "ndim", None) not in (1, 2):
            raise ShapeError(f"{describe('linalg.norm', input=A)}: with ord given and dim None, A must be 1-d or 2-d")
        dims = tuple(range(A.ndim))
    if len(dims) == 1:
        return vector_norm(A, ord, dims, keepdim, dtype=dtype)
    return matrix_norm(A, ord, dims, keepdim, dtype=dtype)


def cross_dim(a: Tensor, b: Tensor, dim, op) -> Tensor:
    if not isinstance(a, TensorBase) or not isinstance(b, TensorBase):
        raise DTypeError(f"{op}: operands must be tensors, got {type(a).__name__} and {type(b).__name__}")
    shape = broadcast_shapes(a.shape, b.shape)
    if shape is None or not shape:
        raise ShapeError(f"{describe(op, input=a, other=b)}: shapes do not broadcast to at least 1 dim")
    d = norm_dim(dim, len(shape), op, a, False)
    if shape[d] != 3:
        raise ShapeError(f"{describe(op, input=a, other=b)}: dim {dim} must have size 3")
    if a.dtype is not b.dtype:
        raise DTypeError(f"{describe(op, input=a, other=b)}: operands must have the same dtype")
    a, b = broadcast_to(a, shape), broadcast_to(b, shape)
    i1, i2 = tensor([1, 2, 0], device=a._device), tensor([2, 0, 1], device=a._device)
    return a.index_select(d, i1) * b.index_select(d, i2) - a.index_select(d, i2) * b.index_select(d, i1)


def cross(input: Tensor, other: Tensor, *, dim: int = -1) -> Tensor:
    """The cross product of 3-vectors along dim (operands broadcast).

    >>> import tensorlite as tl
    >>> tl.linalg.cross(tl.tensor([0, 1, 0]), tl.tensor([0, 0, 1])).tolist()
    [1, 0, 0]"""
    return cross_dim(input, other, dim, "linalg.cross")


def vecdot(x: Tensor, y: Tensor, *, dim: int = -1) -> Tensor:
    """The dot products of the vectors along dim (operands broadcast).

    >>> import tensorlite as tl
    >>> tl.linalg.vecdot(tl.tensor([[1.0, 2.0], [3.0, 4.0]]), tl.tensor([1.0, 1.0])).tolist()
    [3.0, 7.0]"""
    if not all(isinstance(t, TensorBase) and t.dtype.is_floating_point for t in (x, y)):
        raise DTypeError(f"{describe('linalg.vecdot', x=x, y=y)}: expected floating point tensors")
    return (x * y).sum(dim)
