"""The backend-swap harness shared by every test module.

- `device`: parametrized over every backend available here (`tl.backends.available()`);
  no case is generated for the others: the end of the run lists each with its reason,
  once. Ops run on `device` and are compared with a numpy reference computed on
  the host; since `cpu` itself is checked against numpy, GPU results are effectively
  checked against `cpu` with the same tolerances.
- `gpu_device`: the same without `cpu` (one skipped case naming the missing backends when
  no other device is available); `device_params` builds such params for other fixtures.
- `rng`: a numpy Generator seeded from the test's id, so inputs are fresh per test but
  a failure reproduces.
- `assert_close` / `tolerance`: per-dtype tolerances, widened for accumulations.
- `random_array`: random inputs of any dtype that are never all zeros.
- `on_cpu_and` / `assert_same`: a device's results against `cpu`'s, the reference, for tests
  that check semantics against PyTorch: only the cpu side is checked against it, where it is
  installed (`optional_torch`), so no device needs it (`needs_torch` skips a test that means
  nothing without it).
"""
from __future__ import annotations

import functools
import math
import zlib

import numpy as np
import pytest

import global_state
import tensorlite as tl
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


# Every registered backend -> True or the reason it cannot run here, probed once when this
# file is imported: by each xdist worker, which parametrizes over it, and by the controller,
# which reports it (pytest_terminal_summary). The answer depends only on the machine and the
# environment, so every process collects the same tests.
AVAILABILITY = dict(tl.backends.available())
AVAILABLE_DEVICES = [name for name, ok in AVAILABILITY.items() if ok is True]


def device_params(names):
    """Fixture params: those of `names` available here or, when none is, one param that
    skips naming them (an empty list would skip without saying what is missing)."""
    names = list(names)
    available = [n for n in names if AVAILABILITY.get(n) is True]
    if available:
        return available
    reason = f"needs {' or '.join(names)}: none is available here (the end of the run lists why)"
    return [pytest.param(None, id="unavailable", marks=pytest.mark.skip(reason=reason))]


@pytest.fixture(params=AVAILABLE_DEVICES)
def device(request):
    """Every device available here (cpu always is)."""
    return request.param


@pytest.fixture(params=device_params(n for n in AVAILABILITY if n != "cpu"))
def gpu_device(request):
    """Every device available here other than cpu."""
    return request.param


@pytest.fixture
def null_backend(tmp_path, monkeypatch):
    """A backend named "null" (a GpuDevice over the null platform, which runs nothing and
    counts device calls: backends/rocm/null.py), registered for one test."""
    from tensorlite import backend
    from tensorlite.backends.rocm.device import GpuDevice
    from tensorlite.backends.rocm.null import NullPlatform
    monkeypatch.setenv("TENSORLITE_CACHE_DIR", str(tmp_path))  # the null "code objects" stay out
    with backend.scoped_registry():
        backend.register("null", lambda i: GpuDevice(NullPlatform(), i))
        yield "null"


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject's addopts): one worker per CPU this process may run on (not the host's
    count, which a container's affinity mask may cut), at most one per 3 GiB of memory (a worker
    with PyTorch and the reference checkpoints loaded peaks near 2 GiB)."""
    import os
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # no sysconf (Windows): the CPUs alone
        return cpus
    return max(1, min(cpus, memory // (3 << 30)))


def pytest_terminal_summary(terminalreporter):
    """Each backend that no test ran on, once, with its reason (also under -q)."""
    missing = {name: why for name, why in AVAILABILITY.items() if why is not True}
    if missing:
        terminalreporter.write_sep("=", "backends not tested (unavailable here)")
        for name, why in missing.items():
            terminalreporter.write_line(f"{name}: {why}")


global_state.snapshot()  # the session's start: what every fuzz test must find


@pytest.fixture(autouse=True)
def _global_state_watch(request):
    """Notes which process-global settings each test leaves changed (tests/global_state.py); a fuzz
    test (fuzz_util.fuzz) first fails where one differs from the session's start, naming the test."""
    before = global_state.snapshot()
    if getattr(request.function, "needs_default_global_state", False):
        changed = global_state.changes_since_start(before)
        assert not changed, "a fuzz test runs on the settings a run of it alone has; now " + "; ".join(changed)
    yield
    global_state.note_changes(before, global_state.snapshot(), request.node.nodeid)


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


@functools.cache
def optional_torch():
    """The torch module where PyTorch is installed, else None (imported on first use only: most
    test modules never need it)."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def needs_torch(what):
    """Skip mark for a test that checks `what` against PyTorch itself and means nothing without it."""
    return pytest.mark.skipif(optional_torch() is None, reason=f"needs torch (PyTorch is not installed): checks {what}")


def assert_same(got, want, terms: int = 1, exact: bool = False, where: str = "result"):
    """`got`, a device's results, equals `want`, cpu's: tensors of the same dtype and shape whose
    values agree within `tolerance(dtype, terms)` (bit for bit when `exact`; integers and bools
    always), and numbers (NaN equals NaN), strings, None, tuples (named ones too), lists and
    dicts of them. `where` names the part that differs."""
    if isinstance(want, tl.Tensor):
        assert isinstance(got, tl.Tensor), f"{where}: a {type(got).__name__}, cpu's is a Tensor"
        try:
            if exact:
                assert got.dtype == want.dtype, f"dtype {got.dtype} != {want.dtype}"
                assert tuple(got.shape) == tuple(want.shape), f"shape {got.shape} != {want.shape}"
                as_wide = (lambda a: a.astype(np.float64)) if want.dtype.is_floating_point else np.asarray
                np.testing.assert_array_equal(as_wide(got.numpy()), as_wide(want.numpy()))
            else:
                assert_close(got, want.numpy(), want.dtype, terms)
        except AssertionError as e:
            raise AssertionError(f"{where} on {got.device} differs from cpu's: {e}") from None
    elif isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), f"{where}: keys {list(got)} != cpu's {list(want)}"
        for k in want:
            assert_same(got[k], want[k], terms, exact, f"{where}[{k!r}]")
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want), \
            f"{where}: {type(got).__name__} of {len(got)} != cpu's {type(want).__name__} of {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, terms, exact, f"{where}[{i}]")
    else:
        assert type(got) is type(want), f"{where}: {type(got).__name__} != cpu's {type(want).__name__}"
        np.testing.assert_array_equal(got, want, err_msg=f"{where} differs from cpu's")


def on_cpu_and(device, fn, torch_check=None, terms: int = 1, exact: bool = False):
    """`fn(dev)` runs tensorlite calls on device `dev` and returns what they gave; it runs on cpu,
    the reference, and on `device`, and the two must agree (assert_same). Where PyTorch is
    installed, `torch_check(cpu's result)` checks the reference against it first. Returns
    `device`'s result. Inputs are drawn before, outside `fn`: both runs must see the same."""
    want = fn("cpu")
    if torch_check is not None and optional_torch() is not None:
        torch_check(want)
    if device == "cpu":
        return want
    got = fn(device)
    assert_same(got, want, terms, exact)
    return got


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
    return a.data_ptr_id() == b.data_ptr_id()


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
