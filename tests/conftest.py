"""The backend-swap harness shared by every test module.

- `device`: parametrized over every registered backend name; a backend that cannot run
  here is skipped with its own unavailability reason (from `tl.backends.available()`).
  Ops run on `device` and are compared with a numpy reference computed on the host;
  since `cpu` itself is checked against numpy, GPU results are effectively checked
  against `cpu` with the same tolerances.
- `rng`: a numpy Generator seeded from the test's id, so inputs are fresh per test but
  a failure reproduces.
- `assert_close` / `tolerance`: per-dtype tolerances, widened for accumulations.
- `random_array`: random inputs of any dtype that are never all zeros.
"""
from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

import tensorlite as tl
from tensorlite import backend as _backend_registry
from tensorlite import dtype as _dt

ALL_DTYPES = _dt.ALL
FLOAT_DTYPES = _dt.FLOATS
INT_DTYPES = _dt.INTEGERS

# (rtol, atol) for one rounding step of the dtype; `tolerance` widens them for sums.
_BASE_TOL = {
    "float64": (1e-10, 1e-12),
    "float32": (1e-5, 1e-6),
    "float16": (1e-2, 1e-3),
    "bfloat16": (1.6e-2, 1e-2),
}


def _registered_names():
    # available() also probes each backend; its answer is cached for the session so the
    # GPU libraries are probed once, and the reasons are reused by the skip.
    return list(_availability())


_AVAILABILITY = None


def _availability():
    global _AVAILABILITY
    if _AVAILABILITY is None:
        _AVAILABILITY = dict(_backend_registry.available())
    return _AVAILABILITY


@pytest.fixture(params=_registered_names())
def device(request):
    """Every registered device name; skipped with the backend's reason when unavailable."""
    name = request.param
    status = _availability()[name]
    if status is not True:
        pytest.skip(f"backend {name!r} unavailable: {status}")
    return name


@pytest.fixture
def rng(request):
    """A Generator seeded from the test id: fresh inputs per test, reproducible failures."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def tolerance(dtype, terms: int = 1):
    """(rtol, atol) for `dtype` after accumulating `terms` values of magnitude ~1.

    Rounding errors of a sum grow roughly like sqrt(terms); integer and bool are exact.
    """
    dtype = _dt.get(dtype)
    if not dtype.is_floating_point:
        return 0.0, 0.0
    rtol, atol = _BASE_TOL[dtype.name]
    scale = math.sqrt(max(terms, 1))
    return rtol * scale, atol * scale


def to_numpy(x):
    """numpy view of a Tensor / array / scalar (bf16 stays ml_dtypes.bfloat16)."""
    if isinstance(x, tl.Tensor):
        return x.numpy()
    return np.asarray(x)


def assert_close(actual, expected, dtype=None, terms: int = 1, check_dtype: bool = True):
    """Compare a Tensor with a numpy reference.

    `dtype` (default: the Tensor's) picks the tolerance; `terms` widens it for reductions.
    The Tensor's dtype must equal `dtype` when one is given and `check_dtype` is set.
    """
    if isinstance(actual, tl.Tensor):
        if dtype is not None and check_dtype:
            assert actual.dtype == _dt.get(dtype), f"dtype {actual.dtype} != expected {_dt.get(dtype)}"
        dtype = actual.dtype if dtype is None else dtype
    got = to_numpy(actual)
    expected = np.asarray(expected)
    assert tuple(got.shape) == tuple(expected.shape), f"shape {got.shape} != expected {expected.shape}"
    dtype = _dt.get(dtype if dtype is not None else got.dtype)
    if dtype.is_floating_point:
        rtol, atol = tolerance(dtype, terms)
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64),
                                   rtol=rtol, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, expected.astype(got.dtype))


def random_array(rng, shape, dtype, low=-2.0, high=2.0):
    """Random values of `dtype` (a tensorlite dtype) as a numpy array of dtype.np.

    Floats are uniform in [low, high); integers in [max(low, 0 if unsigned), high];
    bools are a fair coin. Never all zeros for a non-empty shape.
    """
    dtype = _dt.get(dtype)
    shape = tuple(shape)
    if dtype is _dt.bool_:
        a = rng.random(shape) < 0.5
        if a.size:
            a.flat[0] = True
        return a
    if dtype.is_floating_point:
        a = rng.uniform(low, high, size=shape)
        return a.astype(dtype.np)
    lo = int(math.floor(low)) if dtype.is_signed else max(int(math.floor(low)), 0)
    hi = max(int(math.ceil(high)), lo + 2)
    a = rng.integers(lo, hi, size=shape, endpoint=True)
    if a.size:
        a.flat[0] = hi  # never all zeros
    return a.astype(dtype.np)


def make_tensor(rng, shape, dtype, device, low=-2.0, high=2.0):
    """(tensor on device, the numpy array it was built from)."""
    a = random_array(rng, shape, dtype, low, high)
    return tl.tensor(a, dtype=dtype, device=device), a


def as_f64(a):
    """float64 copy of a numpy array (bf16/f16 references are computed in float64)."""
    return np.asarray(a).astype(np.float64)


def shares_storage(a, b) -> bool:
    """Whether two tensors read the same storage object (a view copies nothing)."""
    return a._storage is b._storage


def numpy_adam(p, grads, lr, betas, eps, wd, decoupled=True, amsgrad=False, maximize=False):
    """torch.optim.AdamW (decoupled) / Adam in float64 numpy: the parameter after each step."""
    b1, b2 = betas
    m = v = vmax = 0.0
    trajectory = []
    for t, g in enumerate(grads, start=1):
        g = -g if maximize else g
        if decoupled:
            p = p * (1 - lr * wd)
        else:
            g = g + wd * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        vmax = np.maximum(vmax, v)
        p = p - lr / (1 - b1 ** t) * m / (np.sqrt((vmax if amsgrad else v) / (1 - b2 ** t)) + eps)
        trajectory.append(p)
    return trajectory
