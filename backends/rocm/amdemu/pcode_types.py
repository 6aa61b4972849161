"""The values AMD's translated pseudocode computes with (pcode.py emits the code): `T`, a numpy array
tagged with its pseudocode type (u/i/f and a width), whose operators follow the pseudocode's C
rules (integer results at least 32 bits wide and wrapping at their width, unsigned winning a tie,
floats in their own width); `Lanes`, one bit per lane; and the predicated assignment of an `if`
on a per-lane condition (`store`, `merge`, `set_lane` under a lane mask)."""
from __future__ import annotations

import operator

import numpy as np

from tensorlite.errors import BackendError


class Untranslatable(BackendError):
    """The pseudocode uses a construct the translator does not implement."""


# ---- typed values ------------------------------------------------------------------------

FLOAT_DTYPE = {16: np.float16, 32: np.float32, 64: np.float64}
UINT_DTYPE = {16: np.uint16, 32: np.uint32, 64: np.uint64}
_TYPES = {"u": "u", "i": "i", "b": "u", "f": "f"}


def parse_type(name: str):
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
            a = np.asarray(self.a, FLOAT_DTYPE[self.n])
            return a.view(UINT_DTYPE[self.n]).astype(np.uint64)
        if self.k == "i":
            return np.asarray(self.a, np.int64).astype(np.uint64)
        return np.asarray(self.a, np.uint64)

    def __getattr__(self, name):  # typed views: x.u32, x.f16, x.i64, x.b32, x.bf16 ...
        try:
            k, n = parse_type(name)
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
        return T(FLOAT_DTYPE[n](v), "f", n)
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
        return T(b.astype(UINT_DTYPE[n]).view(FLOAT_DTYPE[n]), "f", n)
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
            return T(np.asarray(x.a).astype(FLOAT_DTYPE[n]), "f", n)
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


def common_type(a: T, b: T):
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
    k, n = common_type(a, b)
    x, y = convert(a, k, n).a, convert(b, k, n).a
    if k == "f":
        if op not in _FLOAT_ARITH:
            raise Untranslatable(f"float {op}")
        with np.errstate(all="ignore"):
            r = _FLOAT_ARITH[op](x, y)
        return T(np.asarray(r, FLOAT_DTYPE[n]), "f", n)
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
    return T(np.asarray(r).astype(FLOAT_DTYPE[n]), "f", n)


def neg(x):
    x = wrap(x)
    if x.k == "f":
        return T(-np.asarray(x.a), "f", x.n)
    k, n = ("i", max(x.n, 32)) if x.k == "i" or x.n < 32 else ("u", x.n)
    return T(norm(-convert(x, k, n).a if k == "i" else (np.uint64(0) - convert(x, k, n).a), k, n), k, n)


def compare(a, b, op):
    a, b = wrap(a), wrap(b)
    k, n = common_type(a, b)
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
    k, n = (a.k, a.n) if (a.k, a.n) == (b.k, b.n) else common_type(a, b)
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
        k, n = parse_type(ty)
        if k == "bf":
            v32 = convert(value, "f", 32)
            v = f32_to_bf16_bits(np.asarray(v32.a, np.float32))
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


def f32_to_bf16_bits(a):
    """float32 array -> its bfloat16 bits (uint64), rounded to nearest even; a NaN stays a (quiet) NaN."""
    u = a.view(np.uint32).astype(np.uint64)
    rounded = (u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    return np.where(np.isnan(a), (u >> np.uint64(16)) | np.uint64(0x40), rounded) & np.uint64(0xFFFF)
