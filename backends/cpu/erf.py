"""erf on the cpu backend: float32 by a float32 polynomial (erf_f32), float64 by scipy where it is
installed, else math.erf per element (erf_fallback)."""
from __future__ import annotations

import math

import numpy as np

from .common import F32

_MATH_ERF = np.frompyfunc(math.erf, 1, 1)


def erf_fallback(x) -> np.ndarray:
    """float64 erf of an array of any shape by math.erf per element (~100 ns each): what
    the cpu backend uses when scipy is not installed."""
    # frompyfunc gives an object array, or a bare Python float for 0-d input
    return np.asarray(_MATH_ERF(x), dtype=np.float64)


_erf_f64 = None


# erf on float32 in float32 arithmetic (within 2 ulp of the rounded float64 erf; 3x faster than
# scipy's float64 erf): erf(x) = x * P(x^2) for |x| < 1, 1 - exp(Q(|x|)) for 1 <= |x| <= 4 (erf
# rounds to 1 past that). Least-squares fits to erf(x)/x (relative) and log(erfc(x)) (erfc-weighted).
_ERF_P = tuple(np.float32(c) for c in (7.843558e-05, -0.00080038223, 0.005187146, -0.026852868, 0.11283551,
                                        -0.3761262, 1.1283791))
_ERF_Q = tuple(-np.float32(c) for c in (2.1832097e-05, -0.00044308635, 0.0042134183, -0.025232673, 0.10845819,
                                         0.63318205, 1.1295981, -0.00019236625))


def _horner(coefs, t, out):
    np.multiply(t, coefs[0], out=out)
    out += coefs[1]
    for c in coefs[2:]:
        out *= t
        out += c
    return out


def erf_f32(x: np.ndarray) -> np.ndarray:
    """erf of a C-contiguous float32 array, computed in float32 (NaN stays NaN, erf(-0) = -0). The
    polynomial of |x| < 1 runs over every element, the exp of 1 <= |x| only over those (a gather and
    a scatter): GELU's inputs mostly lie below 1, so this is half the passes of both over all."""
    flat = x.reshape(-1)
    a = np.abs(flat)
    t = a * a
    with np.errstate(over="ignore", invalid="ignore"):  # |x| >= 1 overflows here; replaced below
        y = _horner(_ERF_P, t, np.empty_like(t))
        y *= a  # NaN propagates
    big = np.flatnonzero(a >= 1)
    if big.size:
        u = np.minimum(a[big], np.float32(4))
        y[big] = np.subtract(np.float32(1), np.exp(_horner(_ERF_Q, u, np.empty_like(u))))
    bits = y.view(np.int32)
    bits |= np.bitwise_and(flat.view(np.int32), np.int32(-2 ** 31), out=a.view(np.int32))  # erf's sign: x's
    return y.reshape(x.shape)


def erf(x):
    """erf of x's (compute) dtype: erf_f32 on float32; float64 by scipy's vectorised erf when
    scipy is installed (optional), else erf_fallback."""
    global _erf_f64
    if x.dtype == F32:
        return erf_f32(np.asarray(x, order="C"))  # C order for the sign-bit view; 0-d stays 0-d
    if _erf_f64 is None:
        try:
            from scipy.special import erf as _erf_f64
        except ImportError:
            _erf_f64 = erf_fallback
    return _erf_f64(x.astype(np.float64)).astype(x.dtype)
