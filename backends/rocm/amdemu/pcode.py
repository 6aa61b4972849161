"""AMD's per-instruction pseudocode, translated once into vectorised Python over numpy.

The instruction tables of PyPI's `tinygrad==0.14.0` carry, for every opcode, the pseudocode
text of AMD's ISA documents (`D0.u32 = S0.u32 + S1.u32`, `SCC = D0.u64 != 0ULL`,
`D0.u64[laneId] = S0.f32 < S1.f32`, if/elsif chains, loops with `break`). `compile_pcode`
parses that text with C's operator precedence and emits the source of one Python function
per opcode, in which every value is a `T`: a numpy array (one element per wave, or per wave
and lane) tagged with its pseudocode type (u/i/f and a width). Operators follow the
pseudocode's C rules: integer results are at least 32 bits wide and wrap at their width,
unsigned wins a tie, floats compute in their own width (f32 in float32, so each operation
rounds as the hardware's does).

Control flow is predicated, not branched: an `if` on a per-lane condition runs both arms
under a lane mask and each assignment merges under it; a `break` retires the lanes that
took it. Writes of one bit per lane (`VCC.u64[laneId] = ...`, a compare's `D0`) come back
as a `Lanes` value that the executor packs into the 64-bit mask of each wave.

What the translator cannot express (bit concatenations on the left, memory, whole-wave
register reads like `VGPR[lane][...]`, lambdas) raises `Untranslatable`; the executor
implements those few opcodes itself (executor.py), and an opcode that is in neither place
raises an error naming it: never a silent misexecution.

Known approximations, each deliberate: `fma` on f32 rounds the exact product plus the
addend in f64 and then to f32 (double rounding can differ from one rounding by an ulp in
rare ties); on f64 it rounds twice (product, then sum). Transcendentals (exp, log, sqrt,
rcp, sin, cos) are numpy's correctly-rounded-or-close results, where the hardware is
documented to 1 ulp.
"""
from __future__ import annotations

import math
import operator
import re

import numpy as np

from tensorlite.errors import BackendError


class Untranslatable(BackendError):
    """The pseudocode uses a construct the translator does not implement."""


# ---- typed values ------------------------------------------------------------------------

_FDT = {16: np.float16, 32: np.float32, 64: np.float64}
_UDT = {16: np.uint16, 32: np.uint32, 64: np.uint64}
_TYPES = {"u": "u", "i": "i", "b": "u", "f": "f"}


def _ty(name: str):
    """'u32' -> ('u', 32); 'f16' -> ('f', 16); 'bf16' -> ('bf', 16); 'b32' -> ('u', 32)."""
    if name.startswith("bf"):
        return "bf", int(name[2:])
    return _TYPES[name[0]], int(name[1:])


class Lanes:
    """One bit per lane written by the pseudocode (VCC.u64[laneId] = ...): bool array."""
    __slots__ = ("a",)

    def __init__(self, a):
        self.a = a


class T:
    """A typed value: `a` is a numpy array (uint64 for 'u', int64 for 'i', float16/32/64 for
    'f'), `k` the kind, `n` the width in bits (1 for booleans)."""
    __slots__ = ("a", "k", "n", "wide")

    def __init__(self, a, k, n, wide=None):
        self.a, self.k, self.n = a, k, n
        self.wide = wide  # a narrowing view's source bits: `S0.u32[63 : 32]` reads the register's high half

    # -- bit patterns ------------------------------------------------------------------
    def bits(self):
        """The value's bit pattern as uint64 (floats: their IEEE encoding)."""
        if self.k == "f":
            a = np.asarray(self.a, _FDT[self.n])
            return a.view(_UDT[self.n]).astype(np.uint64)
        if self.k == "i":
            return np.asarray(self.a, np.int64).astype(np.uint64)
        return np.asarray(self.a, np.uint64)

    def __getattr__(self, name):  # typed views: x.u32, x.f16, x.i64, x.b32, x.bf16 ...
        try:
            k, n = _ty(name)
        except (KeyError, ValueError, IndexError):
            raise AttributeError(name) from None
        return reinterpret(self, k, n)

    # -- arithmetic --------------------------------------------------------------------
    def __add__(self, o): return arith(self, o, "+")
    def __radd__(self, o): return arith(o, self, "+")
    def __sub__(self, o): return arith(self, o, "-")
    def __rsub__(self, o): return arith(o, self, "-")
    def __mul__(self, o): return arith(self, o, "*")
    def __rmul__(self, o): return arith(o, self, "*")
    def __truediv__(self, o): return arith(self, o, "/")
    def __rtruediv__(self, o): return arith(o, self, "/")
    def __mod__(self, o): return arith(self, o, "%")
    def __and__(self, o): return arith(self, o, "&")
    def __rand__(self, o): return arith(o, self, "&")
    def __or__(self, o): return arith(self, o, "|")
    def __ror__(self, o): return arith(o, self, "|")
    def __xor__(self, o): return arith(self, o, "^")
    def __rxor__(self, o): return arith(o, self, "^")
    def __lshift__(self, o): return shift(self, o, True)
    def __rlshift__(self, o): return shift(o, self, True)
    def __rshift__(self, o): return shift(self, o, False)
    def __rrshift__(self, o): return shift(o, self, False)
    def __pow__(self, o): return power(self, o)
    def __rpow__(self, o): return power(o, self)
    def __neg__(self): return neg(self)
    def __pos__(self): return self
    def __invert__(self): return T(norm(~self.bits(), self.k if self.k != "f" else "u", self.n), self.k, self.n)
    def __eq__(self, o): return compare(self, o, "==")
    def __ne__(self, o): return compare(self, o, "!=")
    def __lt__(self, o): return compare(self, o, "<")
    def __le__(self, o): return compare(self, o, "<=")
    def __gt__(self, o): return compare(self, o, ">")
    def __ge__(self, o): return compare(self, o, ">=")
    __hash__ = None

    def __getitem__(self, key):
        """x[hi : lo] (a bit field, 'u' of its width), x[i] (one bit), x[laneId] on Lanes."""
        if isinstance(key, slice):
            hi, lo = as_int(key.start), as_int(key.stop)
            if isinstance(hi, int) and isinstance(lo, int) and hi < lo:  # x[0 : 31]: bit reverse
                return bitreverse(self, lo - hi + 1)
            width = hi - lo + 1
            if not isinstance(width, int):
                raise Untranslatable("bit field of variable width")
            src = self.wide if self.wide is not None and np.any(np.asarray(hi) >= self.n) else self.bits()
            b = src >> np.uint64(lo) if isinstance(lo, int) else src >> np.asarray(lo, np.uint64)
            return T(b & np.uint64((1 << width) - 1) if width < 64 else b, "u", width)
        idx = key.a if isinstance(key, T) else key
        if isinstance(idx, np.ndarray):
            idx = idx.astype(np.uint64)
        else:
            idx = np.uint64(idx)
        return T((self.bits() >> idx) & np.uint64(1), "u", 1)

    def __bool__(self):
        raise Untranslatable("a lane-dependent value used where the translator needs a constant")

    def __repr__(self):
        return f"T({self.k}{self.n}, {self.a!r})"


def as_int(x):
    if isinstance(x, T):
        if np.ndim(x.a) == 0:
            return int(x.a)
        return x.a.astype(np.int64)
    return x


def norm(a, k, n):
    """Wrap an integer array to width n: mask for 'u', sign-extend for 'i'."""
    if k == "u":
        a = np.asarray(a).astype(np.uint64) if np.asarray(a).dtype != np.uint64 else a
        return a if n >= 64 else a & np.uint64((1 << n) - 1)
    a = np.asarray(a).astype(np.int64) if np.asarray(a).dtype != np.int64 else a
    if n >= 64:
        return a
    s = np.int64(64 - n)
    return (a << s) >> s


def lit(v, k, n):
    """A literal of the pseudocode (`0x1LL`, `1'1U`, `2.0F`, `16'0.5`)."""
    if k == "f":
        return T(_FDT[n](v), "f", n)
    if k == "i":
        return T(norm(np.int64(v if -(1 << 63) <= v < (1 << 63) else v - (1 << 64)), "i", n), "i", n)
    return T(norm(np.uint64(v & ((1 << 64) - 1)), "u", n), "u", n)


def wrap(x):
    """Python numbers from the runtime (loop counters) as typed values."""
    if isinstance(x, T):
        return x
    if isinstance(x, bool):
        return T(np.uint64(x), "u", 1)
    if isinstance(x, int):
        return lit(x, "i", 32)
    if isinstance(x, float):
        return lit(x, "f", 64)
    raise Untranslatable(f"value {x!r}")


def reinterpret(x: T, k, n):
    """x.<type>: the low n bits of x's bit pattern read as that type."""
    if k == "bf":  # bf16 values compute as f32 (its upper half)
        return T(((x.bits() & np.uint64(0xFFFF)) << np.uint64(16)).astype(np.uint32).view(np.float32), "f", 32)
    if x.k == k and x.n == n:
        return x
    b = x.bits()
    if n < 64:
        b = b & np.uint64((1 << n) - 1)
    wide = x.bits() if n < x.n else None
    if k == "f":
        return T(b.astype(_UDT[n]).view(_FDT[n]), "f", n)
    if k == "i":
        return T(norm(b.astype(np.int64), "i", n), "i", n, wide)
    return T(b, "u", n, wide)


def convert(x, k, n):
    """Numeric conversion (C assignment/cast semantics) of x to kind k, width n."""
    x = wrap(x)
    if k == "bf":
        k, n = "f", 32
    if k == "f":  # float -> float rounds (overflow to inf is the conversion's result)
        with np.errstate(over="ignore"):
            return T(np.asarray(x.a).astype(_FDT[n]), "f", n)
    if x.k == "f":  # float -> int: truncate toward zero, saturate, NaN -> 0 (AMD's conversions)
        a = np.asarray(x.a, np.float64)
        lo, hi = (-(2.0 ** (n - 1)), 2.0 ** (n - 1) - 1) if k == "i" else (0.0, 2.0 ** n - 1)
        with np.errstate(invalid="ignore"):
            a = np.where(np.isnan(a), 0.0, np.clip(np.trunc(a), lo, hi))
        if k == "u" and n == 64:
            big = a >= 2.0 ** 63
            out = np.where(big, a - 2.0 ** 63, a).astype(np.int64).astype(np.uint64)
            return T(np.where(big, out + np.uint64(1 << 63), out), "u", 64)
        return T(norm(a.astype(np.int64), k, n), k, n)
    a = x.a if x.k == k else np.asarray(x.a).astype(np.int64 if k == "i" else np.uint64)
    return T(norm(a, k, n), k, n)


def cast(x, k, n):
    """N'T(x): integer and float casts convert numerically; an integer made a float by a
    cast is a bit pattern (`32'F(0xffc00000)` is a NaN encoding in AMD's pseudocode)."""
    x = wrap(x)
    if k == "f" and x.k != "f":
        return reinterpret(x, "f", n)
    if k == "u" and n > 64 or k == "i" and n > 64:
        raise Untranslatable(f"{n}-bit integers")
    return convert(x, k, n)


def _common(a: T, b: T):
    """C's usual arithmetic conversions, with integers promoted to at least 32 bits."""
    if a.k == "f" or b.k == "f":
        n = max(x.n for x in (a, b) if x.k == "f")
        return "f", n
    n = max(a.n, b.n, 32)
    unsigned = any(x.k == "u" and x.n == n for x in (a, b)) or (a.n < n and b.n < n and (a.k == "u" and a.n >= 32))
    return ("u" if unsigned else "i"), n


_FLOAT_ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": np.true_divide}
_INT_ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul, "&": operator.and_, "|": operator.or_,
              "^": operator.xor}  # / and % below: C's division


def arith(a, b, op):
    a, b = wrap(a), wrap(b)
    k, n = _common(a, b)
    x, y = convert(a, k, n).a, convert(b, k, n).a
    if k == "f":
        if op not in _FLOAT_ARITH:
            raise Untranslatable(f"float {op}")
        with np.errstate(all="ignore"):
            r = _FLOAT_ARITH[op](x, y)
        return T(np.asarray(r, _FDT[n]), "f", n)
    with np.errstate(all="ignore"):
        if op in _INT_ARITH:
            r = _INT_ARITH[op](x, y)
        elif op in "/%":
            safe = np.where(y == 0, 1, y).astype(x.dtype)
            if k == "i":  # C truncates toward zero
                q = np.abs(x) // np.abs(safe) * np.sign(x) * np.sign(safe)
                r = q if op == "/" else x - q * safe
            else:
                r = x // safe if op == "/" else x % safe
        else:
            raise Untranslatable(f"integer {op}")
    return T(norm(r, k, n), k, n)


def shift(a, b, left):
    a, b = wrap(a), wrap(b)
    if a.k == "f":
        raise Untranslatable("shift of a float")
    n = max(a.n, 32)
    k = a.k
    x = convert(a, k, n).a
    s = np.asarray(as_int(b) if not isinstance(b, T) else b.bits().astype(np.int64))
    big = s >= 64
    s = np.where(big, 0, s)
    if left:
        r = np.left_shift(x, s.astype(x.dtype))
        r = np.where(big, np.zeros_like(r), r)
    else:
        r = np.right_shift(x, s.astype(x.dtype))
        r = np.where(big, (x >> (x.dtype.type(63))) if k == "i" else np.zeros_like(r), r)
    return T(norm(r, k, n), k, n)


def power(a, b):
    a, b = wrap(a), wrap(b)
    if a.k != "f":
        raise Untranslatable("integer power")
    n = a.n
    with np.errstate(all="ignore"):
        r = np.ldexp(np.ones_like(np.asarray(a.a, np.float64)), np.clip(convert(b, "i", 32).a, -2000, 2000)) \
            if np.all(np.asarray(a.a) == 2.0) else np.power(np.asarray(a.a, np.float64), np.asarray(b.a, np.float64))
    return T(np.asarray(r).astype(_FDT[n]), "f", n)


def neg(x):
    x = wrap(x)
    if x.k == "f":
        return T(-np.asarray(x.a), "f", x.n)
    k, n = ("i", max(x.n, 32)) if x.k == "i" or x.n < 32 else ("u", x.n)
    return T(norm(-convert(x, k, n).a if k == "i" else (np.uint64(0) - convert(x, k, n).a), k, n), k, n)


def compare(a, b, op):
    a, b = wrap(a), wrap(b)
    k, n = _common(a, b)
    x, y = convert(a, k, n).a, convert(b, k, n).a
    with np.errstate(invalid="ignore"):
        r = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
             ">": np.greater, ">=": np.greater_equal}[op](x, y)
    return T(np.asarray(r).astype(np.uint64), "u", 1)


def truth(x):
    """A condition as a bool array (or numpy bool scalar)."""
    if isinstance(x, Lanes):
        return x.a
    if isinstance(x, (bool, int)):
        return np.bool_(x)
    if x.k == "f":
        return np.asarray(x.a) != 0
    return np.asarray(x.a) != 0


def land(a, b):
    return T((truth(a) & truth(b)).astype(np.uint64), "u", 1)


def lor(a, b):
    return T((truth(a) | truth(b)).astype(np.uint64), "u", 1)


def lnot(a):
    return T((~truth(a)).astype(np.uint64), "u", 1)


def select(c, a, b):
    """c ? a : b with both arms typed alike (C's conversions)."""
    a, b = wrap(a), wrap(b)
    k, n = (a.k, a.n) if (a.k, a.n) == (b.k, b.n) else _common(a, b)
    return T(np.where(truth(c), convert(a, k, n).a, convert(b, k, n).a), k, n)


def concat(*parts):
    """{ a, b, ... }: the fields side by side, the first the most significant."""
    out, width = None, 0
    for p in reversed([wrap(p) for p in parts]):
        b = p.bits()
        out = b if out is None else out | (b << np.uint64(width))
        width += p.n
    if width > 64:
        raise Untranslatable(f"{width}-bit concatenation")
    return T(out, "u", width)


def bitreverse(x, width):
    b = x.bits()
    out = np.zeros_like(b)
    for i in range(width):
        out |= ((b >> np.uint64(i)) & np.uint64(1)) << np.uint64(width - 1 - i)
    return T(out, "u", width)


# ---- predicated assignment ---------------------------------------------------------------

def merge(mask, new, old):
    """new where the lane mask is set, else old (mask None: everywhere)."""
    if mask is None or old is None and np.all(mask):
        return new
    if isinstance(new, Lanes) or isinstance(old, Lanes):
        o = old.a if isinstance(old, Lanes) else np.zeros_like(np.asarray(truth(new)))
        return Lanes(np.where(mask, truth(new), o))
    if old is None:
        old = T(np.zeros_like(np.asarray(new.a)), new.k, new.n)
    if old.k != new.k or old.n != new.n:
        old = reinterpret(old, new.k, new.n) if old.k == "u" else convert(old, new.k, new.n)
    return T(np.where(mask, new.a, old.a), new.k, new.n)


def store(old, ty, value, mask, hi=None, lo=None):
    """`X.ty = value` / `X[hi : lo].ty = value` / `X[hi : lo] = value`: the register or local
    X after the write. Registers hold bit patterns ('u'); a typed store converts the value
    numerically to the type and places its bits, keeping X's other bits."""
    if ty is None:  # untyped: a local takes the value's type; a bit field takes its bits
        if hi is None:
            return merge(mask, wrap(value), old)
        v = wrap(value).bits()
    else:
        k, n = _ty(ty)
        if k == "bf":
            v32 = convert(value, "f", 32)
            v = _f32_to_bf16_bits(np.asarray(v32.a, np.float32))
            n = 16
        else:
            v = convert(value, k, n).bits()
            if n < 64:
                v = v & np.uint64((1 << n) - 1)
        if hi is None:
            if old is None or (old.k == k and old.n == n) or old.k == "f":
                new = reinterpret(T(v, "u", n), k if k != "bf" else "u", n)
                return merge(mask, new, old)
            lo, hi = 0, n - 1
    lo, hi = as_int(lo), as_int(hi)
    width = hi - lo + 1
    fmask = ((1 << width) - 1) << lo
    if old is None:
        old_bits, on = np.zeros_like(v), max(hi + 1, 32)
    else:
        old_bits, on = old.bits(), max(old.n, hi + 1)
    keep = np.uint64(((1 << 64) - 1) ^ fmask)
    new_bits = (old_bits & keep) | ((v & np.uint64((1 << width) - 1)) << np.uint64(lo))
    return merge(mask, T(new_bits, "u", on), old if old is None or old.k == "u" else T(old.bits(), "u", on))


def set_lane(old, value, mask):
    """X.u64[laneId] = value: this lane's bit of a wave mask."""
    bit = (truth(value) if not isinstance(value, T) or value.n == 1
           else (np.asarray(wrap(value).bits()) & np.uint64(1)) != 0)
    return merge(mask, Lanes(bit), old if isinstance(old, Lanes) else None)


def mand(m, c):
    c = np.asarray(c, bool)
    return c if m is None else (m & c)


def mandnot(m, c):
    c = np.asarray(c, bool)
    return ~c if m is None else (m & ~c)


def mor(a, b):
    if a is None:
        return b
    return a | b


def any_set(m):
    return True if m is None else bool(np.any(m))


# ---- the pseudocode's functions ------------------------------------------------------------

def _f32_to_bf16_bits(a):
    u = a.view(np.uint32).astype(np.uint64)
    rounded = (u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    return np.where(np.isnan(a), (u >> np.uint64(16)) | np.uint64(0x40), rounded) & np.uint64(0xFFFF)


def _flt(x):
    x = wrap(x)
    if x.k != "f":
        raise Untranslatable("float function of an integer")
    return x


def f_isnan(x): return T(np.isnan(_flt(x).a).astype(np.uint64), "u", 1)


def _quiet_bit(x):
    n = x.n
    return np.uint64(1 << {16: 9, 32: 22, 64: 51}[n])


def f_is_signal_nan(x):
    x = _flt(x)
    return T((np.isnan(x.a) & ((x.bits() & _quiet_bit(x)) == 0)).astype(np.uint64), "u", 1)


def f_is_quiet_nan(x):
    x = _flt(x)
    return T((np.isnan(x.a) & ((x.bits() & _quiet_bit(x)) != 0)).astype(np.uint64), "u", 1)


def f_cvt_to_quiet_nan(x):
    x = _flt(x)
    return reinterpret(T(x.bits() | _quiet_bit(x), "u", x.n), "f", x.n)


def f_abs(x):
    x = wrap(x)
    if x.k == "f":
        return T(np.abs(x.a), "f", x.n)
    return T(norm(np.abs(convert(x, "i", max(x.n, 32)).a), "i", max(x.n, 32)), "i", max(x.n, 32))


def f_sign(x):
    x = _flt(x)
    return T((x.bits() >> np.uint64(x.n - 1)) & np.uint64(1), "u", 1)


_EXP = {16: (10, 0x1F), 32: (23, 0xFF), 64: (52, 0x7FF)}


def f_exponent(x):
    x = _flt(x)
    shift_, m = _EXP[x.n]
    return T(((x.bits() >> np.uint64(shift_)) & np.uint64(m)).astype(np.int64), "i", 32)


def f_mantissa(x):
    """frexp's mantissa in [0.5, 1)."""
    x = _flt(x)
    m, _ = np.frexp(x.a)
    return T(m.astype(_FDT[x.n]), "f", x.n)


def f_signext(x):
    x = wrap(x)
    return convert(x if x.k == "i" else reinterpret(x, "i", x.n), "i", 64)


def f_signext_from_bit(x, bit):
    x, b = wrap(x), as_int(bit)
    v = convert(x, "i", 64).a
    b = np.asarray(b, np.int64)
    s = np.where(b == 0, 0, 64 - b)
    out = np.where(b == 0, 0, (v << s) >> s)
    return T(norm(out, "i", x.n), "i", x.n)


def f_fma(a, b, c):
    a, b, c = _flt(a), _flt(b), _flt(c)
    n = a.n
    with np.errstate(all="ignore"):
        r = np.asarray(a.a, np.float64) * np.asarray(b.a, np.float64) + np.asarray(c.a, np.float64)
    return T(r.astype(_FDT[n]), "f", n)


def _unary_float(fn):
    def f(x):
        x = _flt(x)
        with np.errstate(all="ignore"):
            return T(np.asarray(fn(np.asarray(x.a, np.float64))).astype(_FDT[x.n]), "f", x.n)
    return f


f_floor, f_trunc = _unary_float(np.floor), _unary_float(np.trunc)
f_sqrt, f_log2 = _unary_float(np.sqrt), _unary_float(np.log2)
f_sin, f_cos = _unary_float(np.sin), _unary_float(np.cos)


def f_fract(x):
    x = _flt(x)
    with np.errstate(all="ignore"):
        return T((x.a - np.floor(x.a)).astype(_FDT[x.n]), "f", x.n)


def f_is_even(x):
    x = _flt(x)
    with np.errstate(invalid="ignore"):
        return T((np.fmod(np.asarray(x.a, np.float64), 2.0) == 0).astype(np.uint64), "u", 1)


def f_ldexp(x, e):
    x = _flt(x)
    with np.errstate(all="ignore"):
        r = np.ldexp(np.asarray(x.a, np.float64), np.clip(convert(e, "i", 32).a, -4000, 4000))
    return T(r.astype(_FDT[x.n]), "f", x.n)


def f_pow(a, b):
    a, b = _flt(a), wrap(b)
    with np.errstate(all="ignore"):
        r = np.power(np.asarray(a.a, np.float64), np.asarray(convert(b, "f", 64).a))
    return T(r.astype(_FDT[a.n]), "f", a.n)


def _cvt(k, n):
    return lambda x: convert(x, k, n)


def _minmax(is_max):
    def f(a, b):
        a, b = wrap(a), wrap(b)
        k, n = _common(a, b)
        x, y = convert(a, k, n).a, convert(b, k, n).a
        if k == "f":  # IEEE mode: a NaN operand yields the other operand
            with np.errstate(invalid="ignore"):
                r = (np.fmax if is_max else np.fmin)(x, y)
            return T(r.astype(_FDT[n]), "f", n)
        return T((np.maximum if is_max else np.minimum)(x, y), k, n)
    return f


def f_ff1_b64(x):
    b = wrap(x).bits()
    low = b & (np.uint64(0) - b)  # the lowest set bit
    with np.errstate(divide="ignore"):
        idx = np.where(b == 0, -1, np.log2(np.where(low == 0, 1, low).astype(np.float64)).astype(np.int64))
    return T(idx, "i", 32)


def f_bitcount(x):
    b = wrap(x).bits()
    c = np.zeros(np.shape(b), np.int64)
    for i in range(64):
        c += ((b >> np.uint64(i)) & np.uint64(1)).astype(np.int64)
    return T(c, "i", 32)


def _int_to_int(k, n, fk, fn):
    return lambda x: convert(reinterpret(wrap(x), fk, fn), k, n)


FUNCTIONS = {
    "isNAN": f_isnan, "isSignalNAN": f_is_signal_nan, "isQuietNAN": f_is_quiet_nan,
    "cvtToQuietNAN": f_cvt_to_quiet_nan, "abs": f_abs, "sign": f_sign, "exponent": f_exponent,
    "mantissa": f_mantissa, "signext": f_signext, "signext_from_bit": f_signext_from_bit,
    "fma": f_fma, "floor": f_floor, "trunc": f_trunc, "sqrt": f_sqrt, "log2": f_log2,
    "sin": f_sin, "cos": f_cos, "fract": f_fract, "isEven": f_is_even, "ldexp": f_ldexp,
    "pow": f_pow, "s_ff1_i32_b64": f_ff1_b64, "s_ff1_i32_b32": f_ff1_b64, "bitCount": f_bitcount,
    "nop": lambda: None,
}
for _src in ("f16", "f32", "f64", "u32", "i32", "u16", "i16"):
    for _dst in ("f16", "f32", "f64", "u32", "i32", "u16", "i16", "u8"):
        if _src != _dst:
            FUNCTIONS[f"{_src}_to_{_dst}"] = _cvt(*_ty(_dst))
FUNCTIONS["bf16_to_f32"] = lambda x: convert(wrap(x), "f", 32)
FUNCTIONS["f32_to_bf16"] = lambda x: convert(wrap(x), "bf", 16)
for _n in (8, 16):
    FUNCTIONS[f"i{_n}_to_i32"] = _int_to_int("i", 32, "i", _n)
    FUNCTIONS[f"u{_n}_to_u32"] = _int_to_int("u", 32, "u", _n)
for _kind in ("f", "i", "u"):
    for _w in ("16", "32"):
        _t = _kind + _w
        FUNCTIONS[f"v_max_{_t}"] = _minmax(True)
        FUNCTIONS[f"v_min_{_t}"] = _minmax(False)
        FUNCTIONS[f"v_max3_{_t}"] = (lambda f: lambda a, b, c: f(f(a, b), c))(_minmax(True))
        FUNCTIONS[f"v_min3_{_t}"] = (lambda f: lambda a, b, c: f(f(a, b), c))(_minmax(False))


def _minmax_num(is_max):
    """gfx12's v_max_num/v_min_num (IEEE 754-2019 maximumNumber): a NaN operand yields the
    other one, and +0 counts as greater than -0."""
    plain = _minmax(is_max)

    def f(a, b):
        r = plain(a, b)
        if r.k != "f":
            return r
        x, y = (convert(wrap(v), "f", r.n).a for v in (a, b))
        both_zero = (x == 0) & (y == 0)
        signed = (np.signbit(x) & np.signbit(y)) if is_max else (np.signbit(x) | np.signbit(y))
        zero = np.where(signed, -0.0, 0.0).astype(r.a.dtype)
        return T(np.where(both_zero, zero, r.a), "f", r.n)
    return f


for _w in ("16", "32", "64"):  # the pseudocode of V_MAX3_NUM_F32 and its kin calls these
    for _is_max, _name in ((True, "max"), (False, "min")):
        FUNCTIONS[f"v_{_name}_num_f{_w}"] = _minmax_num(_is_max)
        FUNCTIONS[f"v_{_name}3_num_f{_w}"] = (lambda f: lambda a, b, c: f(f(a, b), c))(_minmax_num(_is_max))


# ---- parsing -----------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<cast>\d+'[UIFB](?=\())
  | (?P<tdecl>\d+'[UIFB](?![0-9a-fA-Fx.(]))
  | (?P<sized>\d+'-?(?:0x[0-9a-fA-F]+|\d+\.\d+|\d+)[UIF]?)
  | (?P<float>\d+\.\d+(?:[eE][-+]?\d+)?F?)
  | (?P<hex>0x[0-9a-fA-F]+(?:ULL|LL|U|L)?)
  | (?P<int>\d+(?:ULL|LL|U|L)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\*\*|<<=|>>=|<<|>>|<=|>=|==|!=|<>|&&|\|\||\+=|-=|\*=|\|=|&=|\^=|[-+*/%&|^~!<>?:=()\[\]{},.;])
""", re.VERBOSE)


def _tokens(text):
    text = re.sub(r"//[^\n]*", "", text)
    out, pos, depth = [], 0, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise Untranslatable(f"cannot tokenize at {text[pos:pos + 20]!r}")
        pos = m.end()
        kind = m.lastgroup
        if kind == "ws":
            if "\n" in m.group() and depth == 0:  # inside parentheses a line break continues the expression
                out.append(("nl", "\n"))
            continue
        if kind == "op" and m.group() in "()":
            depth += 1 if m.group() == "(" else -1
        out.append((kind, m.group()))
    out.append(("eof", ""))
    return out


def _int_literal(tok):
    t = tok.rstrip("UL")  # C's integer suffixes U, L, UL, LL, ULL (no hex digit is U or L)
    v = int(t, 16) if t.lower().startswith("0x") else int(t)
    if tok.endswith("ULL"):
        return f"R.lit({v}, 'u', 64)"
    if tok.endswith("LL"):
        return f"R.lit({v}, 'i', 64)"
    if tok.endswith("U"):
        return f"R.lit({v}, 'u', 32)"
    return f"R.lit({v}, 'i', 32)" if v < (1 << 31) else f"R.lit({v}, 'u', {32 if v < (1 << 32) else 64})"


_BINARY = {  # C precedence (higher binds tighter)
    "||": 1, "&&": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6, "<>": 6,
    "<": 7, "<=": 7, ">": 7, ">=": 7, "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "%": 10,
    "**": 11,
}
_SPECIAL = {  # named constants
    "INF": "R.lit(float('inf'), 'f', 64)", "NAN": "R.lit(float('nan'), 'f', 64)",
    "PI": f"R.lit({math.pi!r}, 'f', 64)",
    # results on under/overflow in round-to-nearest mode (the mode kernels run in)
    "UNDERFLOW_F32": "R.lit(0.0, 'f', 32)", "OVERFLOW_F32": "R.lit(float('inf'), 'f', 32)",
    "UNDERFLOW_F64": "R.lit(0.0, 'f', 64)", "OVERFLOW_F64": "R.lit(float('inf'), 'f', 64)",
    "MAX_FLOAT_F32": f"R.lit({float(np.finfo(np.float32).max)!r}, 'f', 32)",
}


class _Parser:
    def __init__(self, text, vector, regs):
        self.toks = _tokens(text)
        self.i = 0
        self.vector = vector
        self.regs = regs          # register names the executor provides
        self.used, self.assigned, self.locals = set(), set(), set()
        self.lines = []
        self.depth = 1
        self.loop = 0
        self.tmp = 0

    # -- token helpers -----------------------------------------------------------------
    def peek(self, k=0):
        return self.toks[self.i + k]

    def next(self):
        t = self.toks[self.i]
        self.i += 1
        return t

    def accept(self, value):
        if self.peek()[1] == value:
            self.i += 1
            return True
        return False

    def expect(self, value):
        t = self.next()
        if t[1] != value:
            raise Untranslatable(f"expected {value!r}, got {t[1]!r}")

    def skip_nl(self):
        while self.peek()[0] == "nl" or self.peek()[1] == ";":
            self.i += 1

    def emit(self, line):
        self.lines.append("    " * self.depth + line)

    def fresh(self, base):
        self.tmp += 1
        return f"_{base}{self.tmp}"

    # -- names ---------------------------------------------------------------------------
    def var(self, name):
        if name in self.regs:
            self.used.add(name)
            return name
        if name in _SPECIAL:
            return _SPECIAL[name]
        if name in ("DENORM",):
            return "R.DENORM"
        if name == "WAVE_MODE":
            self.used.add("WAVE_MODE")
            return "WAVE_MODE"
        if name in self.locals:
            return "l_" + name
        if name in FUNCTIONS or name in ("VGPR", "SGPR", "MEM", "HW_REGISTERS", "lambda", "LDS", "VSKIP"):
            raise Untranslatable(f"uses {name}")
        if re.fullmatch(r"[a-z][A-Za-z0-9_]*|[A-Z][a-z][A-Za-z0-9]*", name):  # a local first read
            raise Untranslatable(f"local {name!r} read before assignment")
        raise Untranslatable(f"unknown name {name!r}")

    # -- expressions ---------------------------------------------------------------------
    def expr(self, prec=0):
        left = self.unary()
        while True:
            t = self.peek()
            if t[1] == "?" and prec == 0:
                self.next()
                a = self.expr(0)
                self.expect(":")
                b = self.expr(0)
                left = f"R.select({left}, {a}, {b})"
                continue
            p = _BINARY.get(t[1])
            if t[0] != "op" or p is None or p <= prec:
                return left
            self.next()
            right = self.expr(p if t[1] != "**" else p - 1)  # ** is right-associative
            op = t[1]
            if op == "&&":
                left = f"R.land({left}, {right})"
            elif op == "||":
                left = f"R.lor({left}, {right})"
            elif op == "<>":
                left = f"R.compare({left}, {right}, '!=')"
            elif op in ("==", "!=", "<", "<=", ">", ">="):
                if "R.DENORM" in (left, right):
                    other = right if left == "R.DENORM" else left
                    left = f"R.is_denorm({other})" if op == "==" else f"R.lnot(R.is_denorm({other}))"
                elif {left, right} & {"R.PZERO", "R.NZERO"} and op in ("==", "!="):
                    # `x == +0.0` / `x == -0.0` in AMD's pseudocode tell the zeros apart
                    zero, other = (left, right) if left in ("R.PZERO", "R.NZERO") else (right, left)
                    test = f"R.is_zero({other}, {zero == 'R.NZERO'})"
                    left = test if op == "==" else f"R.lnot({test})"
                else:
                    left = f"R.compare({left}, {right}, {op!r})"
            else:
                left = f"({left} {op} {right})"

    def unary(self):
        t = self.peek()
        if t[1] == "-":
            self.next()
            e = self.unary()
            return "R.NZERO" if e.startswith("R.lit(0.0,") else f"R.neg({e})"
        if t[1] == "+":
            self.next()
            e = self.unary()
            return "R.PZERO" if e.startswith("R.lit(0.0,") else e
        if t[1] == "!":
            self.next()
            return f"R.lnot({self.unary()})"
        if t[1] == "~":
            self.next()
            return f"(~R.wrap({self.unary()}))"
        return self.postfix(self.primary())

    def postfix(self, e):
        while True:
            t = self.peek()
            if t[1] == "." and self.peek(1)[0] == "name":
                self.next()
                name = self.next()[1]
                if name in ("IEEE",) and e == "WAVE_MODE":
                    e = "WAVE_MODE_IEEE"
                    continue
                try:
                    _ty(name)
                except (KeyError, ValueError, IndexError):
                    raise Untranslatable(f"field .{name}") from None
                if e.startswith("R.lit(float("):  # +INF.f32, NAN.f32
                    e = f"R.convert({e}, {_ty(name)[0]!r}, {_ty(name)[1]})"
                elif e == "R.DENORM":
                    pass
                else:
                    e = f"R.wrap({e}).{name}"
            elif t[1] == "[":
                self.next()
                a = self.expr()
                if self.accept(":"):
                    b = self.expr()
                    self.expect("]")
                    e = f"R.wrap({e})[{a}:{b}]"
                else:
                    self.expect("]")
                    e = f"R.wrap({e})[{a}]"
            else:
                return e

    def primary(self):
        kind, tok = self.next()
        if kind == "op" and tok == "(":
            e = self.expr()
            self.expect(")")
            return e
        if kind == "op" and tok == "{":  # { hi, lo }: bit concatenation
            parts = [self.expr()]
            while self.accept(","):
                parts.append(self.expr())
            self.expect("}")
            return f"R.concat({', '.join(parts)})"
        if kind == "cast":
            n, k = tok.split("'")
            self.expect("(")
            e = self.expr()
            self.expect(")")
            k = {"U": "u", "I": "i", "F": "f", "B": "u"}[k]
            return f"R.cast({e}, {k!r}, {int(n)})"
        if kind == "sized":
            n, v = tok.split("'")
            n = int(n)
            k = "u"
            if v.endswith(("U", "I", "F")):
                k = {"U": "u", "I": "i", "F": "f"}[v[-1]]
                v = v[:-1]
            if "." in v:
                return f"R.lit({float(v)!r}, 'f', {n})"
            iv = int(v, 16) if "0x" in v.lower() else int(v)
            return f"R.lit({iv}, {k!r}, {n})"
        if kind == "float":
            return f"R.lit({float(tok.rstrip('F'))!r}, 'f', {32 if tok.endswith('F') else 64})"
        if kind in ("hex", "int"):
            return _int_literal(tok)
        if kind == "name":
            if self.peek()[1] == "(" and tok not in self.regs:
                fn = FUNCTIONS.get(tok)
                if fn is None:
                    raise Untranslatable(f"function {tok}()")
                self.next()
                args = []
                if not self.accept(")"):
                    while True:
                        args.append(self.expr())
                        if self.accept(")"):
                            break
                        self.expect(",")
                return f"R.FUNCTIONS[{tok!r}]({', '.join(args)})"
            if tok == "laneId":
                self.used.add("laneId")
                return "laneId"
            if tok in ("i",) and self.loop:
                return "R.wrap(l_i)"
            return self.var(tok)
        raise Untranslatable(f"unexpected {tok!r}")

    # -- statements ----------------------------------------------------------------------
    def block(self, enders):
        while True:
            self.skip_nl()
            t = self.peek()
            if t[0] == "eof" or t[1] in enders:
                return t[1]
            self.statement()

    def statement(self):
        t = self.peek()
        if t[1] == "if":
            return self.if_stmt()
        if t[1] == "for":
            return self.for_stmt()
        if t[1] == "declare":
            self.next()
            name = self.next()[1]
            self.expect(":")
            kind, tok = self.next()
            if kind != "tdecl":
                raise Untranslatable("declare")
            n, k = tok.split("'")
            if self.peek()[1] == "[":
                raise Untranslatable("declared array")
            self.locals.add(name)
            k = {"B": "u", "U": "u", "I": "i", "F": "f"}.get(k, "u")
            if k == "f":
                self.emit(f"l_{name} = R.lit(0.0, 'f', {int(n)})")
            else:
                self.emit(f"l_{name} = R.lit(0, {k!r}, {int(n)})")
            return
        if t[1] == "break":
            self.next()
            if not self.loop:
                raise Untranslatable("break outside a loop")
            self.emit("_brk = R.mor(_brk, _m if _m is not None else True)")
            self.emit("_m = R.mand(_m, False)")
            return
        if t[0] == "name" and self.peek(1)[1] == "(":  # a call statement: nop()
            self.expr()
            return
        self.assignment()

    def if_stmt(self):
        saved = self.fresh("m")
        rem = self.fresh("r")
        self.emit(f"{saved} = _m")
        self.emit(f"{rem} = _m")
        while True:
            self.next()  # if / elsif
            cond = self.expr()
            self.expect("then")
            c = self.fresh("c")
            self.emit(f"{c} = R.truth({cond})")
            self.emit(f"_m = R.mand({rem}, {c})")
            self.emit(f"{rem} = R.mandnot({rem}, {c})")
            self.emit("if R.any_set(_m):")
            self.depth += 1
            self.emit("pass")
            end = self.block(("elsif", "else", "endif"))
            self.depth -= 1
            if end == "elsif":
                continue
            if end == "else":
                self.next()
                self.emit(f"_m = {rem}")
                self.emit("if R.any_set(_m):")
                self.depth += 1
                self.emit("pass")
                self.block(("endif",))
                self.depth -= 1
            self.expect("endif")
            break
        self.emit(f"_m = {saved}" if not self.loop
                  else f"_m = R.mandnot({saved}, _brk) if _brk is not None else {saved}")

    def for_stmt(self):
        self.next()
        var = self.next()[1]
        if var != "i":
            raise Untranslatable("loop variable other than i")
        self.expect("in")
        lo = self.expr()
        self.expect(":")
        hi = self.expr()
        self.expect("do")
        saved = self.fresh("m")
        self.emit(f"{saved} = _m")
        self.emit("_brk = None")
        self.emit(f"for l_i in range(R.as_int({lo}), R.as_int({hi}) + 1):")
        self.depth += 1
        self.emit(f"_m = R.mandnot({saved}, _brk) if _brk is not None else {saved}")
        self.emit("if not R.any_set(_m): break")
        self.loop += 1
        self.block(("endfor",))
        self.loop -= 1
        self.depth -= 1
        self.expect("endfor")
        self.emit(f"_m = {saved}")

    def assignment(self):
        kind, name = self.next()
        if kind != "name":
            raise Untranslatable(f"assignment to {name!r}")
        if name in ("MEM", "VGPR", "SGPR", "LDS", "HW_REGISTERS"):
            raise Untranslatable(f"writes {name}")
        ty = hi = lo = None
        lane = False
        while True:
            if self.peek()[1] == "." and self.peek(1)[0] == "name":
                self.next()
                ty = self.next()[1]
                continue
            if self.peek()[1] == "[":
                self.next()
                a = self.expr()
                if self.accept(":"):
                    b = self.expr()
                    hi, lo = a, b
                else:
                    if a != "laneId":
                        raise Untranslatable("indexed assignment other than [laneId]")
                    lane = True
                self.expect("]")
                continue
            break
        op = self.next()[1]
        if op not in ("=", "+=", "-=", "*=", "|=", "&=", "^="):
            raise Untranslatable(f"assignment operator {op!r}")
        value = self.expr()
        is_reg = name in self.regs
        if not is_reg and name not in self.locals:
            if op != "=" or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise Untranslatable(f"compound assignment to new local {name}")
            self.locals.add(name)
            target, old = "l_" + name, "None"
        else:
            target = name if is_reg else "l_" + name
            old = target
            if is_reg:
                self.used.add(name)
                self.assigned.add(name)
        if op != "=":
            cur = target
            if ty:
                cur = f"R.wrap({cur}).{ty}"
            if hi is not None:
                cur = f"R.wrap({target})[{hi}:{lo}]" + (f".{ty}" if ty else "")
            value = f"({cur} {op[0]} {value})"
        lane_reg = (is_reg and name in ("VCC", "D0", "EXEC") and self.vector
                    and (lane or (name == "VCC" and ty is None and hi is None)))
        if lane or lane_reg:
            if not (lane_reg or lane):
                raise Untranslatable("lane write to a non-mask")
            self.emit(f"{target} = R.set_lane({old}, {value}, _m)")
            return
        self.emit(f"{target} = R.store({old}, {ty!r}, {value}, _m, {hi if hi is not None else 'None'}, "
                  f"{lo if lo is not None else 'None'})")


DENORM = None
PZERO, NZERO = lit(0.0, "f", 64), lit(-0.0, "f", 64)


def is_zero(x, negative):
    x = _flt(wrap(x))
    return T(((np.asarray(x.a) == 0) & (np.signbit(x.a) == negative)).astype(np.uint64), "u", 1)


def is_denorm(x):
    x = _flt(wrap(x))
    e = f_exponent(x).a
    return T(((e == 0) & (np.asarray(x.a) != 0)).astype(np.uint64), "u", 1)


_LAMBDA = re.compile(r"^(\w+) = lambda\(([\w, ]*)\) \((.*?)\);[ \t]*$", re.M | re.S)


def _expand_lambdas(text: str) -> str:
    """RDNA3's `NAME = lambda(a, b) (expr);` definitions inlined at each `NAME(x, y)` call
    (a macro: the parameters replaced by the argument texts, parenthesised)."""
    while True:
        m = _LAMBDA.search(text)
        if m is None:
            return text
        fname, params, body = m.group(1), [p.strip() for p in m.group(2).split(",") if p.strip()], m.group(3)
        text = text[:m.start()] + text[m.end():]
        out, pos = [], 0
        for call in re.finditer(rf"\b{fname}\(", text):
            if call.start() < pos:
                continue
            depth, i, args, start = 1, call.end(), [], call.end()
            while depth:
                ch = text[i]
                depth += (ch == "(") - (ch == ")")
                if (ch == "," and depth == 1) or depth == 0:
                    args.append(text[start:i].strip())
                    start = i + 1
                i += 1
            if len(args) != len(params):
                raise Untranslatable(f"{fname} called with {len(args)} arguments, defined with {len(params)}")
            expr = body
            for p_, a in zip(params, args):
                expr = re.sub(rf"\b{p_}\b", lambda _m, a=a: f"({a})", expr)
            out.append(text[pos:call.start()] + "(" + " ".join(expr.split()) + ")")
            pos = i
        text = "".join(out) + text[pos:]


def translate(name: str, text: str, vector: bool, regs) -> str:
    """Python source of `def op(E)` for one opcode's pseudocode. E maps register names to
    values; the function updates E in place with what the pseudocode assigns. `vector`:
    a VALU opcode (VCC and compare results are per-lane bits)."""
    # `A = B = value` (V_CMPX: EXEC and D0 take one result) as two assignments of one value
    text = re.sub(r"^(\S+) = (\S+) = (.*?)(;?)$", r"_chain = \3;\n\1 = _chain;\n\2 = _chain\4", text, flags=re.M)
    text = _expand_lambdas(text)
    p = _Parser(text, vector, set(regs))
    p.emit("_m = None")
    p.emit("_brk = None")
    p.block(())
    body = p.lines
    head = [f"def op(E):  # {name}"]
    for r in sorted(p.used):
        if r == "WAVE_MODE":
            head.append("    WAVE_MODE_IEEE = E['WAVE_MODE_IEEE']")
        else:
            head.append(f"    {r} = E.get({r!r})")
    tail = [f"    E[{r!r}] = {r}" for r in sorted(p.assigned)]
    return "\n".join(head + body + tail + ["    return E"]), frozenset(p.assigned), frozenset(p.used)


# Where AMD's pseudocode leaves a result implicit, the statement that makes it explicit
# (V_DIV_SCALE passes its operand through unless a case scales it).
PRELUDE = {"V_DIV_SCALE_F32": "D0.f32 = S0.f32;\n", "V_DIV_SCALE_F64": "D0.f64 = S0.f64;\n"}
_CACHE = {}
REGS = ("S0", "S1", "S2", "S3", "D0", "D1", "SCC", "VCC", "EXEC", "PC", "SIMM16", "SIMM32", "M0", "laneId",
        "OPSEL", "OPSEL_HI", "SRC0", "VDST", "EXECZ", "VCCZ")


def compile_pcode(name: str, text: str, vector: bool):
    """The function for one opcode (cached by name and text); Untranslatable if the
    pseudocode uses what the translator does not implement."""
    key = (name, text, vector)
    fn = _CACHE.get(key)
    if fn is None:
        try:
            src, assigned, used = translate(name, PRELUDE.get(name, "") + text, vector, REGS)
            ns = {"R": _RUNTIME}
            exec(compile(src, f"<pcode {name}>", "exec"), ns)
            fn = ns["op"]
            fn.source, fn.assigned, fn.used = src, assigned, used
        except Untranslatable as e:
            fn = e
        _CACHE[key] = fn
    if isinstance(fn, Untranslatable):
        raise Untranslatable(f"{name}: {fn}")
    return fn


class _Runtime:
    """The namespace generated code calls (R.*)."""


_RUNTIME = _Runtime()
for _n in ("lit", "wrap", "cast", "convert", "select", "land", "lor", "lnot", "compare", "truth", "store",
           "set_lane", "merge", "concat", "mand", "mandnot", "mor", "any_set", "as_int", "neg", "is_denorm", "is_zero",
           "PZERO", "NZERO", "FUNCTIONS", "DENORM"):
    setattr(_RUNTIME, _n, globals()[_n])
