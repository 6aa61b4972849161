"""The functions AMD's pseudocode calls (isNAN, fma, ldexp, the conversions f32_to_u32 ..., the
min/max families), by name in FUNCTIONS, and the named constants and tests the translator turns
`DENORM`, `+0.0` and `-0.0` into; all over the typed values of pcode_types.py."""
from __future__ import annotations

import numpy as np

from .pcode_types import FLOAT_DTYPE, T, Untranslatable, as_int, common_type, convert, lit, norm, parse_type, \
    reinterpret, wrap


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
    return T(m.astype(FLOAT_DTYPE[x.n]), "f", x.n)


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
    return T(r.astype(FLOAT_DTYPE[n]), "f", n)


def _unary_float(fn):
    def f(x):
        x = _flt(x)
        with np.errstate(all="ignore"):
            return T(np.asarray(fn(np.asarray(x.a, np.float64))).astype(FLOAT_DTYPE[x.n]), "f", x.n)
    return f


f_floor, f_trunc = _unary_float(np.floor), _unary_float(np.trunc)
f_sqrt, f_log2 = _unary_float(np.sqrt), _unary_float(np.log2)
f_sin, f_cos = _unary_float(np.sin), _unary_float(np.cos)


def f_fract(x):
    x = _flt(x)
    with np.errstate(all="ignore"):
        return T((x.a - np.floor(x.a)).astype(FLOAT_DTYPE[x.n]), "f", x.n)


def f_is_even(x):
    x = _flt(x)
    with np.errstate(invalid="ignore"):
        return T((np.fmod(np.asarray(x.a, np.float64), 2.0) == 0).astype(np.uint64), "u", 1)


def f_ldexp(x, e):
    x = _flt(x)
    with np.errstate(all="ignore"):
        r = np.ldexp(np.asarray(x.a, np.float64), np.clip(convert(e, "i", 32).a, -4000, 4000))
    return T(r.astype(FLOAT_DTYPE[x.n]), "f", x.n)


def f_pow(a, b):
    a, b = _flt(a), wrap(b)
    with np.errstate(all="ignore"):
        r = np.power(np.asarray(a.a, np.float64), np.asarray(convert(b, "f", 64).a))
    return T(r.astype(FLOAT_DTYPE[a.n]), "f", a.n)


def _cvt(k, n):
    return lambda x: convert(x, k, n)


def _minmax(is_max):
    def f(a, b):
        a, b = wrap(a), wrap(b)
        k, n = common_type(a, b)
        x, y = convert(a, k, n).a, convert(b, k, n).a
        if k == "f":  # IEEE mode: a NaN operand yields the other operand
            with np.errstate(invalid="ignore"):
                r = (np.fmax if is_max else np.fmin)(x, y)
            return T(r.astype(FLOAT_DTYPE[n]), "f", n)
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
            FUNCTIONS[f"{_src}_to_{_dst}"] = _cvt(*parse_type(_dst))
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


DENORM = None
PZERO, NZERO = lit(0.0, "f", 64), lit(-0.0, "f", 64)


def is_zero(x, negative):
    x = _flt(wrap(x))
    return T(((np.asarray(x.a) == 0) & (np.signbit(x.a) == negative)).astype(np.uint64), "u", 1)


def is_denorm(x):
    x = _flt(wrap(x))
    e = f_exponent(x).a
    return T(((e == 0) & (np.asarray(x.a) != 0)).astype(np.uint64), "u", 1)
