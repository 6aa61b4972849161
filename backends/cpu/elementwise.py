"""CpuStorage's elementwise ops: unary, binary, compare, where, casts, affine/powf/elu, unary
backward. A mixin (storage.py assembles CpuStorage)."""
from __future__ import annotations

import numpy as np

from tensorlite import dtype as dtypes, fused_unary, op_table
from tensorlite.errors import ArgumentError, unsupported_dtype

from .common import quietly
from .erf import erf
from .parallel import blockwise


def _mul_add(x, mul, add):
    out = np.multiply(x, mul)
    out += add
    return out


def _sigmoid(x):
    e = np.exp(-np.abs(x))  # never overflows
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(x.dtype)


# The elementwise ops come from the op table (tensorlite/op_table.py): numpy's function where
# the row names one; below, the ops numpy lacks, and the integer/bool forms where numpy's
# float form does not fit (numpy's floor of an integer is a float, its square of a bool an int).
def _fused(formula):
    """A fused unary's numpy formula (tensorlite/fused_unary.py: formula(x, ops)) over blocks, given
    this backend's float ops for what numpy lacks (erf, sigmoid)."""
    return blockwise(lambda x: formula(x, UNARY_FLOAT))  # UNARY_FLOAT: bound below, read at the call


_ZEROS = {}  # numpy dtype -> a 0-d zero of it, relu's other operand (a new one per call: 40% of a tiny relu)


def _relu(x):
    zero = _ZEROS.get(x.dtype)
    if zero is None:
        zero = _ZEROS[x.dtype] = np.zeros((), x.dtype)
    return np.maximum(x, zero)


_UNARY_NUMPY_LACKS = {
    "relu": _relu,
    "sigmoid": _sigmoid, "erf": blockwise(erf),
    **{u.name: _fused(u.cpu_forward) for u in fused_unary.UNARIES},
}
_IDENTITY = lambda x: x  # noqa: E731 - floor/ceil/round of integers
_UNARY_NONFLOAT = {"sqr": lambda x: x * x, "floor": _IDENTITY, "ceil": _IDENTITY, "round": _IDENTITY,
                   "trunc": _IDENTITY, "sign": lambda x: np.where(x > 0, 1, np.where(x < 0, -1, 0)).astype(x.dtype)}


def _unary_table(is_float: bool, is_bool: bool) -> dict:
    """op name -> numpy implementation, for the ops the op table defines on that dtype class."""
    table = {}
    for op in op_table.UNARY:
        if op_table.defined_for(op, is_float, is_bool):
            own = None if is_float else _UNARY_NONFLOAT.get(op.name)
            table[op.name] = own or op.numpy or _UNARY_NUMPY_LACKS[op.name]
    return table


UNARY_FLOAT, UNARY_INT, UNARY_BOOL = _unary_table(True, False), _unary_table(False, False), _unary_table(False, True)


# d op / dx for unary_backward (backend.UNARY_BACKWARD_OPS), on the compute dtype
UNARY_DERIVATIVE = {u.name: _fused(u.cpu_derivative) for u in fused_unary.UNARIES}
CMP = {op.name: op.numpy for op in op_table.COMPARE}


class ElementwiseOps:
    __slots__ = ()  # a mixin of CpuStorage (storage.py), which holds the data: self is a CpuStorage

    def affine(self, layout, mul, add):
        x = self._operand(layout, flat=True)
        if not self.dtype.is_floating_point:
            # integral coefficients stay exact (wrapping) in int64; others go through f64
            exact = float(mul).is_integer() and float(add).is_integer()
            x = x.astype(np.int64 if exact else np.float64)
            mul, add = (int(mul), int(add)) if exact else (mul, add)
        # one pass for a scale or a shift alone (x * s + 0 would also turn x * s = -0 into +0)
        if add == 0:
            return self._new(quietly(np.multiply, x, mul))
        return self._new(quietly(np.add, x, add) if mul == 1 else quietly(_mul_add, x, mul, add))

    def powf(self, layout, e):
        self._require_float("powf", layout)
        with np.errstate(all="ignore"):
            return self._new(np.power(self._read(layout, compute=True), e))

    def elu(self, layout, alpha):
        self._require_float("elu", layout)
        x = self._read(layout, compute=True)
        with np.errstate(all="ignore"):
            return self._new(np.where(x > 0, x, alpha * np.expm1(x)))

    def unary_impl(self, op, layout):
        dt = self.dtype
        table = UNARY_FLOAT if dt.is_floating_point else UNARY_BOOL if dt is dtypes.bool_ else UNARY_INT
        if op not in table:
            if op not in op_table.UNARY_BY_NAME:
                raise ArgumentError(f"unary_impl: unknown op {op!r}; expected one of {sorted(op_table.UNARY_BY_NAME)}")
            raise unsupported_dtype(op, self=(self, layout))
        out = quietly(table[op], self._operand(layout, flat=True))
        return type(self)(out, dt, self.device) if out.dtype is dt.np and out.ndim == 1 else self._new(out)

    def binary_impl(self, op, rhs, lhs_layout, rhs_layout):
        row = op_table.BINARY_BY_NAME.get(op)
        if row is None:
            raise ArgumentError(f"binary_impl: unknown op {op!r}; expected one of {sorted(op_table.BINARY_BY_NAME)}")
        if not op_table.defined_for(row, self.dtype.is_floating_point, self.dtype is dtypes.bool_):
            raise unsupported_dtype(op, lhs=(self, lhs_layout), rhs=(rhs, rhs_layout))
        a, b = self._whole(lhs_layout), rhs._whole(rhs_layout)  # flat, as _operand's; both, or both read
        if a is None or b is None or lhs_layout.shape != rhs_layout.shape:
            a, b = self._read(lhs_layout, compute=True), rhs._read(rhs_layout, compute=True)
        out = quietly(row.numpy, a, b)
        return type(self)(out, self.dtype, self.device) if out.dtype == self.dtype.np and out.ndim == 1 \
            else self._new(out)

    def cmp(self, op, rhs, lhs_layout, rhs_layout):
        a, b = self._read(lhs_layout, compute=True), rhs._read(rhs_layout, compute=True)
        return self._new(CMP[op](a, b), dtypes.bool_)

    def where_cond(self, layout, t, t_layout, f, f_layout):
        cond = self._read(layout)
        cond = cond if cond.dtype == np.bool_ else cond != 0
        return t._new(np.where(cond, t._read(t_layout), f._read(f_layout)))

    def to_dtype(self, layout, dtype):
        return self._new(self._read(layout), dtypes.get(dtype))

    def unary_backward(self, op, layout, grad, grad_layout):
        if op not in UNARY_DERIVATIVE:
            raise ArgumentError(f"unary_backward: op must be one of {sorted(UNARY_DERIVATIVE)}, got {op!r}")
        x, g = self._grad_read(f"{op}_backward", layout, grad, grad_layout)
        with np.errstate(all="ignore"):
            return self._new(g * UNARY_DERIVATIVE[op](x))
