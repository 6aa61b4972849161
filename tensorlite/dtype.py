"""Data types: one `DType` object per element type, with PyTorch-style promotion.

Each dtype carries its numpy dtype (the cpu backend's storage type; bf16 through
`ml_dtypes`) and candle's short name, which is also the suffix of GPU kernel entry
points (`badd_f32`, `softmax_bf16`).
"""
from __future__ import annotations

import math

import numpy as np

from .errors import DTypeError

try:  # bf16 on cpu needs ml_dtypes; everything else works without it.
    import ml_dtypes
    _BF16_NP = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is a declared dependency
    _BF16_NP = None


class DType:
    """A tensor element type (tl.float32, tl.int64, ...), as torch.dtype; `np` is its numpy dtype.

    >>> import tensorlite as tl
    >>> tl.float16.itemsize, tl.float16.is_floating_point
    (2, True)
    """
    __slots__ = ("name", "short", "np", "itemsize", "is_floating_point", "is_signed", "_rank")

    def __init__(self, name, short, np_dtype, is_float, is_signed, rank):
        self.name, self.short = name, short
        self.np = np_dtype
        self.itemsize = np_dtype.itemsize if np_dtype is not None else 2
        self.is_floating_point = is_float
        self.is_signed = is_signed
        self._rank = rank  # position in the promotion lattice within its kind

    def __repr__(self):
        return f"tensorlite.{self.name}"

    def __reduce__(self):  # pickle as the singleton
        return (_from_name, (self.name,))


bool_ = DType("bool", "bool", np.dtype(np.bool_), False, False, 0)
uint8 = DType("uint8", "u8", np.dtype(np.uint8), False, False, 1)
uint32 = DType("uint32", "u32", np.dtype(np.uint32), False, False, 2)
int8 = DType("int8", "i8", np.dtype(np.int8), False, True, 1)
int16 = DType("int16", "i16", np.dtype(np.int16), False, True, 2)
int32 = DType("int32", "i32", np.dtype(np.int32), False, True, 3)
int64 = DType("int64", "i64", np.dtype(np.int64), False, True, 4)
float16 = DType("float16", "f16", np.dtype(np.float16), True, True, 10)
bfloat16 = DType("bfloat16", "bf16", _BF16_NP, True, True, 10)
float32 = DType("float32", "f32", np.dtype(np.float32), True, True, 11)
float64 = DType("float64", "f64", np.dtype(np.float64), True, True, 12)

ALL = (float32, float16, bfloat16, float64, uint8, uint32, int64, bool_, int8, int16, int32)
FLOATS = (float32, float16, bfloat16, float64)
HALVES = (float16, bfloat16)  # the 16-bit floats: arithmetic in float32
INTEGERS = (uint8, uint32, int64, int8, int16, int32)
BY_NAME = {d.name: d for d in ALL}  # every name a dtype answers to: its name, short name and torch-style aliases
BY_NAME.update({d.short: d for d in ALL})
BY_NAME.update({"float": float32, "double": float64, "half": float16, "long": int64,
                 "short": int16, "int": int32})
_BY_PYTHON_TYPE = {bool: bool_, int: int64, float: float32}


def _from_name(name):
    return BY_NAME[name]


def get(x) -> DType:
    """Resolve a DType, a name ('float32', 'f32', 'bf16'), a numpy dtype or a Python type."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        if x in BY_NAME:
            return BY_NAME[x]
        raise DTypeError(f"unknown dtype name {x!r}; expected one of {sorted(d.name for d in ALL)}")
    if isinstance(x, type) and x in _BY_PYTHON_TYPE:
        return _BY_PYTHON_TYPE[x]
    try:
        npd = np.dtype(x)
    except TypeError:
        raise DTypeError(f"{x!r} is not a dtype; expected one of {sorted(d.name for d in ALL)}") from None
    if _BF16_NP is not None and npd == _BF16_NP:
        return bfloat16
    for d in ALL:
        if d.np == npd:
            return d
    # numpy types we do not store natively map to the nearest PyTorch-like choice
    if npd.kind == "i":
        return int64
    if npd.kind == "u":
        return int64 if npd.itemsize > 4 else uint32
    raise DTypeError(f"numpy dtype {npd} has no tensorlite equivalent")


def promote_types(a: DType, b: DType) -> DType:
    """PyTorch's promotion for the dtypes we have."""
    if a is b:
        return a
    if a.is_floating_point or b.is_floating_point:
        if a.is_floating_point and b.is_floating_point:
            if {a, b} == {float16, bfloat16}:
                return float32
            return a if a._rank >= b._rank else b
        return a if a.is_floating_point else b
    if a is bool_ or b is bool_:
        return b if a is bool_ else a
    if a.is_signed == b.is_signed:  # integers of one signedness: the wider
        return a if a._rank >= b._rank else b
    u, s = (a, b) if b.is_signed else (b, a)  # unsigned with signed: a signed type that holds both
    return int64 if u is uint32 else s if s.itemsize > 1 else int16


def category(d: DType) -> int:
    """bool < integer < floating: PyTorch lets 0-d tensors and scalars change only the category."""
    return 2 if d.is_floating_point else 0 if d is bool_ else 1


def result_type_scalar(t: DType, scalar) -> DType:
    """dtype of `tensor op python_scalar`: a scalar never widens within its kind."""
    kind = bool_ if isinstance(scalar, (bool, np.bool_)) else \
        int64 if isinstance(scalar, (int, np.integer)) else \
        get_default_dtype() if isinstance(scalar, (float, np.floating)) else None
    if kind is None:
        raise DTypeError(f"unsupported scalar {scalar!r} of type {type(scalar).__name__}")
    return t if category(t) >= category(kind) else kind


def result_type_0d(dimensioned: DType, zero_dim: DType) -> DType:
    """dtype of `tensor op 0-d tensor`: the 0-d operand matters only if of a higher category."""
    return dimensioned if category(dimensioned) >= category(zero_dim) else zero_dim


_default_float = float32


def get_default_dtype() -> DType:
    """The floating dtype that float data and factories get by default (float32), as torch.get_default_dtype.

    >>> import tensorlite as tl
    >>> tl.get_default_dtype()
    tensorlite.float32
    """
    return _default_float


def set_default_dtype(d) -> None:
    """Set the default floating dtype (a floating tl dtype or its name), as torch.set_default_dtype."""
    global _default_float
    d = get(d)
    if not d.is_floating_point:
        raise DTypeError(f"set_default_dtype: expected a floating dtype, got {d}")
    _default_float = d


def cast_array(x: np.ndarray, dt: DType) -> np.ndarray:
    """A numpy array as tensorlite dtype `dt`, by the casts every backend implements:
    float16/bfloat16 go through float32; to bool is `!= 0`; float -> integer truncates
    toward zero, float -> unsigned goes through int64 so that negative values wrap modulo
    2**bits (deterministic, unlike a direct C cast); integers wrap like numpy's astype."""
    target = dt.np
    if x.dtype == target:
        return x
    if x.dtype in (float16.np, bfloat16.np):
        x = x.astype(np.float32)  # bf16 <-> f16 and bf16 -> int are not all direct in ml_dtypes
    if dt is bool_:
        return x != 0
    with np.errstate(all="ignore"):
        if x.dtype.kind == "f" and not dt.is_floating_point:
            x = np.trunc(x)
            if not dt.is_signed:  # negative floats -> unsigned: wrap through int64
                x = x.astype(np.int64)
        return x.astype(target)


class finfo:
    """Machine limits of a floating dtype, as torch.finfo: bits, eps, max, min (the most
    negative finite value), tiny (= smallest_normal), resolution.

    >>> import tensorlite as tl
    >>> tl.finfo(tl.bfloat16).eps, tl.finfo(tl.float16).max
    (0.0078125, 65504.0)
    """

    def __init__(self, dtype=None):
        dt = get(dtype) if dtype is not None else get_default_dtype()
        if not dt.is_floating_point:
            raise DTypeError(f"finfo: {dt.name} is not a floating point dtype (tl.iinfo describes integers)")
        import ml_dtypes  # numpy's finfo does not know bfloat16; ml_dtypes' knows every float
        info = ml_dtypes.finfo(dt.np)
        self.dtype, self.bits = dt.name, int(info.bits)
        self.eps, self.max, self.min = float(info.eps), float(info.max), float(info.min)
        self.tiny = self.smallest_normal = float(info.smallest_normal)
        self.resolution = 10.0 ** -math.floor(-math.log10(self.eps))  # torch's: the decimal digits eps allows

    def __repr__(self):
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, eps={self.eps:g}, "
                f"smallest_normal={self.tiny:g}, tiny={self.tiny:g}, dtype={self.dtype})")


class iinfo:
    """Limits of an integer dtype, as torch.iinfo: bits, min, max.

    >>> import tensorlite as tl
    >>> tl.iinfo(tl.int32).max, tl.iinfo(tl.uint8).min
    (2147483647, 0)
    """

    def __init__(self, dtype):
        dt = get(dtype)
        if dt.is_floating_point or dt is bool_:
            raise DTypeError(f"iinfo: {dt.name} is not an integer dtype" +
                             (" (tl.finfo describes floats)" if dt.is_floating_point else ""))
        info = np.iinfo(dt.np)
        self.dtype, self.bits, self.min, self.max = dt.name, int(info.bits), int(info.min), int(info.max)

    def __repr__(self):
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"
