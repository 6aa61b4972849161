"""Elementwise ops: the op table's unary and binary rows (tensorlite/op_table.py: one row per op,
its gradient beside it), comparisons, where, clamp, pow, division's variants, the is* tests,
lerp and the logical ops; and the Tensor operators and methods they are.
"""
from __future__ import annotations

import numbers
from typing import TYPE_CHECKING

import numpy as np

from .. import dtype as dtypes
from .._core import (TensorBase, check_size, is_exact_tensor, is_scalar, opmath, out_of_memory, same_device,
                     scalar_tensor, wrap)
from ..autograd import attach, no_grad
from ..errors import ArgumentError, DTypeError, ShapeError, describe
from ..layout import broadcast_shapes
from ..op_table import BINARY, BINARY_BY_NAME, FUSED, UNARY, UNARY_BY_NAME
from .creation import ones_like, tensor, zeros_like
from .inplace import inplace_method
from .views import sum_to

if TYPE_CHECKING:
    from ..tensor import Tensor


def coerce(op, a, b):
    """Two operands -> two tensors on one device with the promoted dtype (an ndarray becomes a
    tensor on the other operand's device; a numpy scalar is a Python scalar of its kind)."""
    if isinstance(a, np.ndarray) and isinstance(b, TensorBase):
        a = tensor(a, device=b._device)
    elif isinstance(b, np.ndarray) and isinstance(a, TensorBase):
        b = tensor(b, device=a._device)
    if is_scalar(b):
        if not isinstance(a, (TensorBase, list, tuple, np.ndarray)):
            raise DTypeError(f"{op}: unsupported operand types {type(a).__name__} and {type(b).__name__}")
        a = a if isinstance(a, TensorBase) else tensor(a)
        dt = dtypes.result_type_scalar(a.dtype, b.item() if isinstance(b, np.generic) else b)
        if isinstance(b, numbers.Integral) and dt.np.kind in "iu" and -2 ** 63 <= b < 2 ** 63:
            b = int(np.array(b, np.int64).astype(dt.np))  # an int64 operand wraps into dt, as PyTorch's
        return a._cast(dt), scalar_tensor(b, dt, a._device, op)
    if is_scalar(a):
        return coerce(op, b, a)[::-1]  # the scalar first: as above, the operands swapped back
    if not isinstance(a, TensorBase) or not isinstance(b, TensorBase):
        raise DTypeError(f"{op}: unsupported operand types {type(a).__name__} and {type(b).__name__}")
    same_device(op, lhs=a, rhs=b)
    if a.dtype is b.dtype:
        return a, b
    if (a.ndim == 0) != (b.ndim == 0):
        dt = dtypes.result_type_0d(b.dtype, a.dtype) if a.ndim == 0 else dtypes.result_type_0d(a.dtype, b.dtype)
    else:
        dt = dtypes.promote_types(a.dtype, b.dtype)
    return a._cast(dt), b._cast(dt)


def _broadcast_pair(op, a, b, dtype=None):
    """The result's shape (checked to fit the device: a broadcast may make it far larger than
    either operand) and the operands' layouts broadcast to it; dtype: the result's, else a's."""
    if a.shape == b.shape:
        return a.shape, a._layout, b._layout
    shape = broadcast_shapes(a.shape, b.shape)
    if shape is None:
        raise ShapeError(f"{describe(op, lhs=a, rhs=b)}: shapes do not broadcast")
    check_size(op, shape, dtype or a.dtype, a._device)
    return shape, a._layout.broadcast_as(shape), b._layout.broadcast_as(shape)


_AFFINE = {"add": lambda s, scalar_first: (1.0, s), "mul": lambda s, scalar_first: (s, 0.0),
           "sub": lambda s, scalar_first: (-1.0, s) if scalar_first else (1.0, -s)}


def binary(op, a, b, name=None):
    row = BINARY_BY_NAME[op]
    if isinstance(a, TensorBase) and isinstance(b, TensorBase) and a.dtype is b.dtype and a._device is b._device \
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
            if is_exact_tensor(a) and type(b) in (int, float) and a.dtype.is_floating_point:
                return affine(a, *_AFFINE[op](b, False))
            if is_exact_tensor(b) and type(a) in (int, float) and b.dtype.is_floating_point:
                return affine(b, *_AFFINE[op](a, True))
        if not row.integers and (is_scalar(a) or is_scalar(b)):  # an int scalar must not wrap into int dtypes first
            a, b = (t._cast(dtypes.get_default_dtype()) if isinstance(t, TensorBase) and not t.dtype.is_floating_point
                    else t for t in (a, b))
        a, b = coerce(name, a, b)
        if not row.integers and not a.dtype.is_floating_point:  # true division, atan2: in float, as PyTorch
            a, b = a._cast(dtypes.get_default_dtype()), b._cast(dtypes.get_default_dtype())
        shape, la, lb = _broadcast_pair(name, a, b)
    try:
        out = wrap(a._storage.binary_impl(op, b._storage, la, lb), shape, a.dtype)
    except MemoryError as e:  # more than is free now (check_size allows up to the total)
        raise out_of_memory(name or op, shape, a.dtype, a._device, e) from None
    if not a.dtype.is_floating_point or not (a.requires_grad or b.requires_grad):
        return out  # what attach would return: nothing to record
    saves, grad = row.saves, row.grad
    res = out if 2 in saves else None  # see unary
    return attach(out, (a, b), lambda g: tuple(sum_to(gi, t.shape) for gi, t in zip(grad(g, a, b, res), (a, b))),
                  op, [(a, b, out)[i] for i in saves] if saves else ())


def compare(op, a, b):
    if not isinstance(b, (TensorBase, np.ndarray)) and not is_scalar(b):
        if op in ("eq", "ne"):
            return NotImplemented  # lets `t == None`, `t in list` fall back to identity
        raise DTypeError(f"{describe(op, self=a)}: cannot compare with a {type(b).__name__}")
    a, b = coerce(op, a, b)
    shape, la, lb = _broadcast_pair(op, a, b, dtypes.bool_)
    try:
        return wrap(a._storage.cmp(op, b._storage, la, lb), shape, dtypes.bool_)
    except MemoryError as e:  # more than is free now (check_size allows up to the total)
        raise out_of_memory(op, shape, dtypes.bool_, a._device, e) from None


def _fused_unary_grad(op, g, x):
    """g * op'(x) in one kernel (storage unary_backward; composite forms in tests)."""
    g = g if g.dtype is x.dtype else g._cast(x.dtype)
    return wrap(x._storage.unary_backward(op, x._layout, g._storage, g._layout), x.shape, x.dtype)


def unary(op, x):
    row = UNARY_BY_NAME[op]
    if not x.dtype.is_floating_point and not row.integers:
        x = x._cast(dtypes.get_default_dtype())
    try:
        out = wrap(x._storage.unary_impl(op, x._layout), x._layout.shape, x.dtype)
    except MemoryError as e:  # more than is free now (check_size allows up to the total)
        raise out_of_memory(op, x.shape, x.dtype, x._device, e) from None
    if row.grad is None or not x.requires_grad or not x.dtype.is_floating_point:
        return out  # what attach would return: nothing to record
    if row.grad == FUSED:
        return attach(out, (x,), lambda g: (_fused_unary_grad(op, g, x),), op, (x,))
    # the backward holds the output only where the gradient reads it: out's own node holding out is
    # a reference cycle, which only the garbage collector frees (a forward without backward)
    grad, res = row.grad, out if 1 in row.saves else None
    return attach(out, (x,), lambda g: (grad(g, x, res),), op, [(x, out)[i] for i in row.saves])


def affine(x: Tensor, mul: float, add: float) -> Tensor:
    """x * mul + add in one op, keeping x's dtype (candle's affine; torch has no such op).

    >>> import tensorlite as tl
    >>> tl.tensor([1.0, 2.0]).affine(2.0, 1.0).tolist()
    [3.0, 5.0]
    """
    out = wrap(x._storage.affine(x._layout, mul, add), x._layout.shape, x.dtype)
    return attach(out, (x,), lambda g: (g * mul,), "affine") if x.requires_grad else out


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """ELU: x where x > 0, else alpha * (exp(x) - 1), as torch.nn.functional.elu.

    >>> import tensorlite as tl
    >>> tl.tensor([1.0, 0.0]).elu().tolist()
    [1.0, 0.0]
    """
    out = wrap(x._storage.elu(x._layout, alpha), x.shape, x.dtype)
    return attach(out, (x,), lambda g: (g * where(x > 0, 1.0, out + alpha),), "elu", (x, out))


def power(x, e):
    if isinstance(e, TensorBase) or not is_scalar(e):
        return _pow_tensor(*coerce("pow", x, e))
    if not x.dtype.is_floating_point:
        if isinstance(e, numbers.Integral) and e >= 0:  # exact integer power by squaring
            out, base, k = ones_like(x), x, int(e)
            while k:
                out, base, k = (out * base if k & 1 else out), base * base, k >> 1
            return out
        x = x._cast(dtypes.get_default_dtype())
    e = float(e)
    out = wrap(x._storage.powf(x._layout, e), x.shape, x.dtype)
    # d/dx = e * x^(e-1), and 0 for e == 0 (PyTorch's: no 0 * inf at x = 0)
    return attach(out, (x,), lambda g: (g * e * x.pow(e - 1) if e else zeros_like(g),), "pow", (x,))


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
        return sum_to(dx, x.shape), sum_to(de, e.shape)
    return attach(out, (x, e), grad, "pow", (x, e, out))


def _pow_values(x, e):
    mag = where(e == 0, 1.0, (e * x.abs().log()).exp())
    odd_int = (e.floor() == e) & ((e * 0.5).floor() != e * 0.5)
    neg = x < 0
    out = where(neg & odd_int, -mag, mag)
    return where(neg & (e.floor() != e), float("nan"), out)


def rpower(x, base):
    return _pow_tensor(*coerce("pow", base, x))


def _division(op, a, b):
    """floor_divide's / remainder's operands coerced and cast to their opmath (integers to
    float64: exact below 2**53), and the result's dtype. Integer division by zero raises, as
    PyTorch does on the cpu (the host reads b)."""
    a, b = _nonzero_divisor(op, a, b)
    wide = opmath(a.dtype, dtypes.float64)
    return a._cast(wide), b._cast(wide), a.dtype


def _nonzero_divisor(op, a, b):
    """a and b coerced; an integer division by zero raises. A scalar divisor is checked as it is,
    a tensor one is read back (the host waits for the device)."""
    scalar = b if is_scalar(b) else None
    a, b = coerce(op, a, b)
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
    return binary("fmod", *_nonzero_divisor("fmod", a, b))


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
        return cond.nonzero(as_tuple=True)
    if x is None or y is None:
        raise ArgumentError("where: give both x and y, or neither (where(cond) is nonzero(cond, as_tuple=True))")
    if not isinstance(cond, TensorBase) or cond.dtype is not dtypes.bool_:
        raise DTypeError(f"where: condition must be a bool tensor, got "
                         f"{cond.dtype.name if isinstance(cond, TensorBase) else type(cond).__name__}")
    if is_scalar(x) and is_scalar(y):
        x = scalar_tensor(x, dtypes.result_type_scalar(dtypes.get(type(x)), y), cond._device)
    x, y = coerce("where", x, y)
    same_device("where", cond=cond, x=x, y=y)
    shape = broadcast_shapes(cond.shape, x.shape, y.shape)
    if shape is None:
        raise ShapeError(f"{describe('where', cond=cond, x=x, y=y)}: shapes do not broadcast")
    check_size("where", shape, x.dtype, x._device)
    lc, lx, ly = (t._layout.broadcast_as(shape) for t in (cond, x, y))
    try:
        out = wrap(cond._storage.where_cond(lc, x._storage, lx, y._storage, ly), shape, x.dtype)
    except MemoryError as e:  # more than is free now (check_size allows up to the total)
        raise out_of_memory("where", shape, x.dtype, x._device, e) from None
    if not x.dtype.is_floating_point:
        return out
    return attach(out, (x, y), lambda g: (sum_to(where(cond, g, 0.0), x.shape),
                                           sum_to(where(cond, 0.0, g), y.shape)), "where", (cond,))


def clamp(x: Tensor, min=None, max=None) -> Tensor:
    """x limited to [min, max] (either may be None or a tensor), as torch.clamp.

    >>> import tensorlite as tl
    >>> tl.tensor([-2, 0, 5]).clamp(-1, 3).tolist()
    [-1, 0, 3]
    """
    if min is None and max is None:
        raise ArgumentError(f"{describe('clamp', self=x)}: at least one of min and max must be given")
    out = x if min is None else binary("maximum", x, min, "clamp")
    return out if max is None else binary("minimum", out, max, "clamp")


def maximum(a, b):
    """Elementwise max of a and b (broadcast; NaN propagates), as torch.maximum.

    >>> import tensorlite as tl
    >>> tl.maximum(tl.tensor([1, 5]), tl.tensor([3, 2])).tolist()
    [3, 5]
    """
    return binary("maximum", a, b)


def minimum(a, b):
    """Elementwise min of a and b (broadcast; NaN propagates), as torch.minimum.

    >>> import tensorlite as tl
    >>> tl.minimum(tl.tensor([1, 5]), tl.tensor([3, 2])).tolist()
    [1, 2]
    """
    return binary("minimum", a, b)


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
    return x.abs() == np.inf if x.dtype.is_floating_point else zeros_like(x, dtype=dtypes.bool_)


def isposinf(x: Tensor) -> Tensor:
    """True where x is +inf.

    >>> import tensorlite as tl
    >>> tl.tensor([float("inf"), float("-inf")]).isposinf().tolist()
    [True, False]
    """
    return x == np.inf if x.dtype.is_floating_point else zeros_like(x, dtype=dtypes.bool_)


def isneginf(x: Tensor) -> Tensor:
    """True where x is -inf.

    >>> import tensorlite as tl
    >>> tl.tensor([float("inf"), float("-inf")]).isneginf().tolist()
    [False, True]
    """
    return x == -np.inf if x.dtype.is_floating_point else zeros_like(x, dtype=dtypes.bool_)


def isfinite_(x: Tensor) -> Tensor:  # tl.isfinite (math.isfinite keeps its name here)
    """True where x is neither NaN nor infinite.

    >>> import tensorlite as tl
    >>> tl.tensor([1.0, float("inf"), float("nan")]).isfinite().tolist()
    [True, False, False]
    """
    return x.abs() < np.inf if x.dtype.is_floating_point else ones_like(x, dtype=dtypes.bool_)


def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False) -> Tensor:
    """|input - other| <= atol + rtol * |other| elementwise (equal infinities are close).

    >>> import tensorlite as tl
    >>> tl.isclose(tl.tensor([1.0, 2.0]), tl.tensor([1.0 + 1e-9, 2.1])).tolist()
    [True, False]
    """
    if isinstance(input, TensorBase) and isinstance(other, TensorBase) and input.dtype is not other.dtype:
        raise DTypeError(f"{describe('isclose', self=input, other=other)}: expected both operands to have the "
                         "same dtype")
    a, b = coerce("isclose", input, other)
    with no_grad():
        close = a == b
        if a.dtype is not dtypes.bool_:
            wide = opmath(a.dtype, dtypes.float64)
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
        if isinstance(t, TensorBase) and not t.dtype.is_floating_point:
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
    a, b = coerce(f"logical_{op}", a, b)
    return binary(f"bitwise_{op}", a != 0, b != 0, f"logical_{op}")


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
    """x with `value` where the bool mask is True, as torch.masked_fill: x and the mask broadcast
    together (a mask of more dims gives the broadcast shape; masked_fill_ keeps x's).

    >>> import tensorlite as tl
    >>> tl.tensor([1, 2, 3]).masked_fill(tl.tensor([True, False, True]), 0).tolist()
    [0, 2, 0]
    >>> tl.tensor([1, 2]).masked_fill(tl.tensor([[True], [False]]), 0).tolist()
    [[0, 0], [1, 2]]
    """
    v = {"value": value} if isinstance(value, TensorBase) else {}
    if not isinstance(mask, TensorBase) or mask.dtype is not dtypes.bool_ or \
            not (is_scalar(value) or v and value.ndim == 0):
        raise DTypeError(f"{describe('masked_fill', self=x, mask=mask, **v)}: expected a bool mask and a number "
                         "or 0-d tensor value")
    same_device("masked_fill", self=x, mask=mask, **v)
    if broadcast_shapes(mask.shape, x.shape) is None:
        raise ShapeError(f"{describe('masked_fill', self=x, mask=mask)}: the mask and self do not broadcast")
    return where(mask, scalar_tensor(value, x.dtype, x._device, "masked_fill") if not v else value._cast(x.dtype), x)


class ElementwiseMethods:
    """Tensor's operators and elementwise methods that take more than (self) or (self, other), or that are
    a module function of this file; the plain ones are OpTableMethods'."""
    __slots__ = ()

    # ---- operators (elementwise ones through the op table's rows, op_table.py) -----------
    def __add__(self, other):
        return binary("add", self, other)

    def __radd__(self, other):
        return binary("add", other, self)

    def __sub__(self, other):
        return binary("sub", self, other)

    def __rsub__(self, other):
        return binary("sub", other, self)

    def __mul__(self, other):
        """self * other (broadcast, promoted), also Tensor.mul, as torch.mul.

        >>> import tensorlite as tl
        >>> (tl.tensor([1, 2]) * 3).tolist()
        [3, 6]
        """
        return binary("mul", self, other)

    def __rmul__(self, other):
        return binary("mul", other, self)

    def __truediv__(self, other):
        """self / other: true division (integers give floats), also Tensor.div, as torch.div.

        >>> import tensorlite as tl
        >>> (tl.tensor([1, 2]) / 2).tolist()
        [0.5, 1.0]
        """
        return binary("div", self, other)

    def __rtruediv__(self, other):
        return binary("div", other, self)

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
        return power(self, exponent)

    __rpow__ = rpower

    def __neg__(self):
        return unary("neg", self)

    def __abs__(self):
        return unary("abs", self)

    def __pos__(self):
        return self

    def __eq__(self, other):
        """Elementwise self == other: a bool tensor, also Tensor.eq, as torch.eq.

        >>> import tensorlite as tl
        >>> (tl.tensor([1, 2]) == 2).tolist()
        [False, True]
        """
        return compare("eq", self, other)

    def __ne__(self, other):
        """Elementwise self != other: a bool tensor, also Tensor.ne, as torch.ne."""
        return compare("ne", self, other)

    __hash__ = object.__hash__  # by identity, as PyTorch's (a class defining __eq__ would otherwise lose it)

    def __lt__(self, other):
        """Elementwise self < other: a bool tensor, also Tensor.lt, as torch.lt."""
        return compare("lt", self, other)

    def __le__(self, other):
        """Elementwise self <= other: a bool tensor, also Tensor.le, as torch.le."""
        return compare("le", self, other)

    def __gt__(self, other):
        """Elementwise self > other: a bool tensor, also Tensor.gt, as torch.gt."""
        return compare("gt", self, other)

    def __ge__(self, other):
        """Elementwise self >= other: a bool tensor, also Tensor.ge, as torch.ge."""
        return compare("ge", self, other)

    # bitwise operators: integer and bool tensors (on bool: logical and / or / xor / not)
    def __and__(self, other):
        return binary("bitwise_and", self, other)

    def __or__(self, other):
        return binary("bitwise_or", self, other)

    def __xor__(self, other):
        return binary("bitwise_xor", self, other)

    def __invert__(self):
        return unary("bitwise_not", self)

    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__  # they commute

    def __lshift__(self, other):
        return binary("bitwise_left_shift", self, other)

    def __rshift__(self, other):
        return binary("bitwise_right_shift", self, other)

    def __rlshift__(self, other):  # other << self
        return binary("bitwise_left_shift", other, self)

    def __rrshift__(self, other):
        return binary("bitwise_right_shift", other, self)

    # ---- elementwise with arguments (the plain unary methods come from the op table) ----
    def add(self, other, alpha=1):
        """self + alpha * other (broadcast), as torch.add.

        >>> import tensorlite as tl
        >>> tl.tensor([1, 2]).add(tl.tensor([10, 20]), alpha=2).tolist()
        [21, 42]
        """
        return binary("add", self, other if alpha == 1 else other * alpha if is_scalar(other) else
                       binary("mul", other, alpha, "add"))

    def sub(self, other, alpha=1):
        """self - alpha * other (broadcast), as torch.sub.

        >>> import tensorlite as tl
        >>> tl.tensor([5, 5]).sub(tl.tensor([1, 2]), alpha=2).tolist()
        [3, 1]
        """
        return binary("sub", self, other if alpha == 1 else other * alpha if is_scalar(other) else
                       binary("mul", other, alpha, "sub"))

    def maximum(self, other):
        """Elementwise max with other, as torch.maximum (see tl.maximum)."""
        return maximum(self, other)

    def minimum(self, other):
        """Elementwise min with other, as torch.minimum (see tl.minimum)."""
        return minimum(self, other)

    # the named forms of the operators above
    mul, div, pow, floor_divide, remainder = __mul__, __truediv__, __pow__, __floordiv__, __mod__
    eq, ne, lt, le, gt, ge = __eq__, __ne__, __lt__, __le__, __gt__, __ge__
    isnan, isinf, isposinf, isneginf, isfinite = isnan, isinf, isposinf, isneginf, isfinite_
    isclose, allclose = isclose, allclose
    lerp, logical_not, logical_and, logical_or, logical_xor = lerp, logical_not, logical_and, logical_or, logical_xor

    clamp, clip, masked_fill, affine, elu = clamp, clamp, masked_fill, affine, elu

    def where(self, condition, other):
        """self where condition is True, else other, as torch.Tensor.where.

        >>> import tensorlite as tl
        >>> tl.tensor([1, 2]).where(tl.tensor([True, False]), 0).tolist()
        [1, 0]
        """
        return where(condition, self, other)

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
        info = dtypes.finfo(self.dtype)
        hi, lo = info.max if posinf is None else posinf, info.min if neginf is None else neginf
        x = where(self.isnan(), nan, self)
        return where(x == float("inf"), hi, where(x == float("-inf"), lo, x))

    clamp_min_ = inplace_method("clamp_min_", clamp_min)
    clamp_max_ = inplace_method("clamp_max_", clamp_max)
    add_, sub_ = inplace_method("add_", add), inplace_method("sub_", sub)
    mul_, div_ = inplace_method("mul_", __mul__), inplace_method("div_", __truediv__)
    pow_ = inplace_method("pow_", __pow__)
    floor_divide_ = inplace_method("floor_divide_", floor_divide)
    remainder_ = inplace_method("remainder_", remainder)
    clamp_ = inplace_method("clamp_", clamp)
    masked_fill_ = inplace_method("masked_fill_", masked_fill)
    __iand__, __ior__ = inplace_method("__iand__", __and__), inplace_method("__ior__", __or__)
    __ixor__ = inplace_method("__ixor__", __xor__)
    __ilshift__, __irshift__ = inplace_method("__ilshift__", __lshift__), inplace_method("__irshift__", __rshift__)
    clip_ = clamp_
    __iadd__, __isub__, __imul__, __itruediv__ = add_, sub_, mul_, div_
    __ifloordiv__, __imod__, __ipow__ = floor_divide_, remainder_, pow_
    lerp_, logical_not_ = inplace_method("lerp_", lerp), inplace_method("logical_not_", logical_not)
    logical_and_, logical_or_ = inplace_method("logical_and_", logical_and), inplace_method("logical_or_", logical_or)
    logical_xor_ = inplace_method("logical_xor_", logical_xor)


def _row_methods(row, method):
    """{method name: method, its in-place name: the in-place form} for one row of the op table."""
    method.__name__, method.__qualname__ = row.method, f"Tensor.{row.method}"
    method.__doc__ = f"Elementwise {row.method}, as PyTorch's (the row {row.name!r} of tensorlite/op_table.py)."
    return {row.method: method, f"{row.method}_": inplace_method(f"{row.method}_", method)}


def _unary_method(row):
    def method(self):
        return unary(row.name, self)
    return _row_methods(row, method)


def _binary_method(row):  # the module function of that name where there is one: fmod's divisor check
    fn = globals().get(row.method)

    def method(self, other):
        return fn(self, other) if fn else binary(row.name, self, other)
    return _row_methods(row, method)


def _table_methods(spelled_out):
    """Tensor.exp, Tensor.exp_, Tensor.reciprocal, ...: two methods per row of the op table (a
    binary row's only where `spelled_out`, ElementwiseMethods, does not define its method)."""
    methods = {"__slots__": (), "__doc__": "Tensor's methods made from the rows of tensorlite/op_table.py."}
    for row in UNARY:
        methods.update(_unary_method(row))
    for row in BINARY:
        if row.method_too and row.method not in spelled_out and row.method not in methods:
            methods.update(_binary_method(row))
    methods["fix"], methods["fix_"] = methods["trunc"], methods["trunc_"]  # PyTorch's alias
    return methods


OpTableMethods = type("OpTableMethods", (), _table_methods(vars(ElementwiseMethods)))
