"""The elementwise op table: one row per op, the single place an elementwise op is declared.

Everything else is derived from these rows:
- the storage contract's op lists (backend.UNARY_OPS, BINARY_OPS, CMP_OPS, UNARY_BACKWARD_OPS);
- the Tensor methods and `tensorlite.<name>` functions (tensor.py, __init__.py), with PyTorch's names;
- the autograd rule of each op (`grad`);
- the cpu backend's implementation (`numpy`, or a function of backends/cpu/elementwise.py where numpy has none);
- the GPU kernel entry points u<op>_<dtype>, b<op>_<dtype>, <op>_<dtype> (backends/rocm/kernel_table.py),
  per dtype class (`integers`, `bools`).

Adding a unary op: a row here; its cpu function in backends/cpu/elementwise.py if numpy lacks it; its
device function and entry in kernels/unary.hip. A fused unary (its backward one kernel) is a
unit of tensorlite/fused_unary.py, whose row here is `_fused_row(unit)`.

`grad(g, x, out)` returns dL/dx of a unary op (`g * f'(x)`, from the input x or the
output out); `grad(g, a, b, out)` returns (dL/da, dL/db) of a binary op before the
broadcast is summed away. FUSED: the backend's unary_backward computes g * f'(x) in one
kernel (the fused unary's unit). None: the op is piecewise constant (no gradient flows).
`saves` is derived from `grad`: which of its value arguments the formula reads, the tensors
autograd saves for it (as PyTorch's codegen derives them from derivatives.yaml's formulas).
"""
from __future__ import annotations

import dis
from dataclasses import dataclass, field
from typing import Callable, Optional, Tuple, Union

import numpy as np

from . import fused_unary

FUSED = "fused"          # grad: storage.unary_backward(op) computes g * f'(x) in one pass
_TWO_OVER_SQRT_PI = 1.1283791670955126
_LN2, _LN10 = 0.6931471805599453, 2.302585092994046


def _arguments_read(grad, names: Tuple[str, ...]) -> Tuple[int, ...]:
    """Positions in `names` of the arguments that the function `grad` reads (its own body's
    loads; a name used only in a nested generator reaches it through a closure load)."""
    if not callable(grad):
        return (0,) if grad == FUSED else ()  # FUSED: unary_backward reads the input x
    loads = set()
    for ins in dis.get_instructions(grad):
        if "FAST" in ins.opname or "DEREF" in ins.opname or "CLOSURE" in ins.opname:
            loads.update(ins.argval if isinstance(ins.argval, tuple) else (ins.argval,))
    return tuple(i for i, name in enumerate(names) if name in loads)


@dataclass(frozen=True)
class Unary:
    name: str                          # contract op (unary_impl) and kernel entry u<name>_<dtype>
    method: str                        # Tensor method / tensorlite function (PyTorch's name)
    grad: Union[Callable, str, None]   # (g, x, out) -> dx, FUSED, or None (piecewise constant)
    numpy: Optional[Callable] = None   # the cpu implementation; None: backends/cpu/elementwise.py defines it
    integers: bool = False             # defined on integer dtypes (else integers are cast to float first)
    bools: bool = False                # ... and on bool
    floats: bool = True                # ... and on floating dtypes (False: bitwise ops)
    top_level: bool = True             # also tensorlite.<method>(x) (False: PyTorch has it in nn.functional only)
    saves: Tuple[int, ...] = field(init=False)  # which of (x, out) grad reads

    def __post_init__(self):
        object.__setattr__(self, "saves", _arguments_read(self.grad, ("x", "out")))


@dataclass(frozen=True)
class Binary:
    name: str                          # contract op (binary_impl) and kernel entry b<name>_<dtype>
    method: str
    grad: Optional[Callable]           # (g, a, b, out) -> (da, db); None: no gradient (bitwise ops)
    numpy: Callable
    integers: bool = True              # False: the Tensor casts integer operands to the default float
    bools: bool = False
    floats: bool = True
    method_too: bool = True            # also Tensor.<method> and tensorlite.<method> (False: a fused op
    #                                    PyTorch lacks, reached through nn.functional only)
    saves: Tuple[int, ...] = field(init=False)  # which of (a, b, out) grad reads

    def __post_init__(self):
        object.__setattr__(self, "saves", _arguments_read(self.grad, ("a", "b", "out")))


@dataclass(frozen=True)
class Compare:
    name: str                          # contract op (cmp) and kernel entry <name>_<dtype>; every dtype
    numpy: Callable


def _fused_row(unit: fused_unary.FusedUnary) -> Unary:
    """The row of a fused unary (its formulas, kernels and second derivative: its unit)."""
    return Unary(unit.name, unit.method, FUSED, top_level=unit.top_level)


UNARY: Tuple[Unary, ...] = (
    Unary("exp", "exp", lambda g, x, out: g * out, np.exp),
    Unary("log", "log", lambda g, x, out: g / x, np.log),
    Unary("sin", "sin", lambda g, x, out: g * x.cos(), np.sin),
    Unary("cos", "cos", lambda g, x, out: -g * x.sin(), np.cos),
    Unary("tanh", "tanh", lambda g, x, out: g * (1 - out * out), np.tanh),
    Unary("abs", "abs", lambda g, x, out: g * x.sign(), np.abs, integers=True, bools=True),
    Unary("neg", "neg", lambda g, x, out: -g, np.negative, integers=True),
    Unary("recip", "reciprocal", lambda g, x, out: -g * out * out, np.reciprocal),
    Unary("sqr", "square", lambda g, x, out: g * x * 2, np.square, integers=True, bools=True),
    Unary("sqrt", "sqrt", lambda g, x, out: g / (out * 2), np.sqrt),
    _fused_row(fused_unary.GELU_TANH),
    _fused_row(fused_unary.GELU_ERF),
    Unary("erf", "erf", lambda g, x, out: g * (-(x * x)).exp() * _TWO_OVER_SQRT_PI),
    Unary("relu", "relu", lambda g, x, out: g * (x > 0), integers=True, bools=True),
    _fused_row(fused_unary.SILU),
    Unary("floor", "floor", None, np.floor, integers=True, bools=True),
    Unary("ceil", "ceil", None, np.ceil, integers=True, bools=True),
    Unary("round", "round", None, np.round, integers=True, bools=True),  # half to even, as PyTorch
    Unary("sign", "sign", None, np.sign, integers=True, bools=True),
    Unary("sigmoid", "sigmoid", lambda g, x, out: g * out * (1 - out)),
    Unary("trunc", "trunc", None, np.trunc, integers=True, bools=True),
    Unary("log1p", "log1p", lambda g, x, out: g / (x + 1), np.log1p),
    Unary("expm1", "expm1", lambda g, x, out: g * (out + 1), np.expm1),
    Unary("log2", "log2", lambda g, x, out: g / (x * _LN2), np.log2),
    Unary("log10", "log10", lambda g, x, out: g / (x * _LN10), np.log10),
    Unary("exp2", "exp2", lambda g, x, out: g * out * _LN2, np.exp2),
    Unary("tan", "tan", lambda g, x, out: g * (1 + out * out), np.tan),
    Unary("atan", "atan", lambda g, x, out: g / (x * x + 1), np.arctan),
    Unary("asin", "asin", lambda g, x, out: g * (1 - x * x).rsqrt(), np.arcsin),
    Unary("acos", "acos", lambda g, x, out: -g * (1 - x * x).rsqrt(), np.arccos),
    Unary("sinh", "sinh", lambda g, x, out: g * x.cosh(), np.sinh),
    Unary("cosh", "cosh", lambda g, x, out: g * x.sinh(), np.cosh),
    Unary("asinh", "asinh", lambda g, x, out: g * (x * x + 1).rsqrt(), np.arcsinh),
    Unary("acosh", "acosh", lambda g, x, out: g * (x * x - 1).rsqrt(), np.arccosh),
    Unary("atanh", "atanh", lambda g, x, out: g / (1 - x * x), np.arctanh),
    Unary("rsqrt", "rsqrt", lambda g, x, out: g * out * out * out * -0.5, lambda x: np.reciprocal(np.sqrt(x))),
    Unary("frac", "frac", lambda g, x, out: g, lambda x: x - np.trunc(x)),
    Unary("bitwise_not", "bitwise_not", None, np.invert, integers=True, bools=True, floats=False),
)


def _silu_mul_grad(g, a, b):
    s = a.sigmoid()
    return g * b * s * (1 + a * (1 - s)), g * a * s


BINARY: Tuple[Binary, ...] = (
    Binary("add", "add", lambda g, a, b, out: (g, g), np.add, bools=True),
    Binary("sub", "sub", lambda g, a, b, out: (g, -g), np.subtract),
    Binary("mul", "mul", lambda g, a, b, out: (g * b, g * a), np.multiply, bools=True),
    # integers divide as floats (PyTorch's true division): the Tensor casts them first
    Binary("div", "div", lambda g, a, b, out: (g / b, -g * out / b), np.true_divide, integers=False),
    Binary("maximum", "maximum", lambda g, a, b, out: (g * (a >= b), g * (a < b)), np.maximum, bools=True),
    Binary("minimum", "minimum", lambda g, a, b, out: (g * (a <= b), g * (a > b)), np.minimum, bools=True),
    Binary("atan2", "atan2", lambda g, a, b, out: (g * b / (a * a + b * b), -g * a / (a * a + b * b)),
           np.arctan2, integers=False),
    # truncating remainder (C's fmod); integer division by zero is refused by the Tensor
    Binary("fmod", "fmod", lambda g, a, b, out: (g, -g * (a / b).trunc()), np.fmod),
    Binary("hypot", "hypot", lambda g, a, b, out: (g * a / out, g * b / out), np.hypot, integers=False),
    # silu(a) * b in one pass (Llama's gated MLP: F.silu_mul(gate, up)); not a PyTorch op
    Binary("silu_mul", "silu_mul", lambda g, a, b, out: _silu_mul_grad(g, a, b),
           lambda a, b: a / (1 + np.exp(-a)) * b, integers=False, method_too=False),
    Binary("bitwise_and", "bitwise_and", None, np.bitwise_and, bools=True, floats=False),
    Binary("bitwise_or", "bitwise_or", None, np.bitwise_or, bools=True, floats=False),
    Binary("bitwise_xor", "bitwise_xor", None, np.bitwise_xor, bools=True, floats=False),
    # integers only, as PyTorch; a count < 0 or >= the width gives 0 (>>: the sign), as numpy and PyTorch
    Binary("bitwise_left_shift", "bitwise_left_shift", None, np.left_shift, floats=False),
    Binary("bitwise_right_shift", "bitwise_right_shift", None, np.right_shift, floats=False),
)

COMPARE: Tuple[Compare, ...] = (
    Compare("eq", np.equal), Compare("ne", np.not_equal), Compare("lt", np.less),
    Compare("le", np.less_equal), Compare("gt", np.greater), Compare("ge", np.greater_equal),
)

UNARY_BY_NAME = {op.name: op for op in UNARY}
BINARY_BY_NAME = {op.name: op for op in BINARY}
# the ops that are tensorlite functions too, tl.<name>(x, ...) = x.<name>(...) (tensorlite/__init__.py)
FUNCTIONS: Tuple[str, ...] = (*(op.method for op in UNARY if op.top_level),
                              *(op.method for op in BINARY if op.method_too), *(op.name for op in COMPARE))


def defined_for(op: Union[Unary, Binary], is_float: bool, is_bool: bool) -> bool:
    """Whether `op` has an implementation (and a kernel) for a dtype of that class."""
    return op.floats if is_float else op.bools if is_bool else op.integers
