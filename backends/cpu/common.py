"""What the cpu backend's modules share: numpy's error state, set per op (`quietly`); a view of a
storage's flat array through a layout (`strided`); the compute and accumulation dtypes; the host
allocator's tuning (done once, on import)."""
from __future__ import annotations

import ctypes
import os
import sys

import numpy as np
from numpy.lib.stride_tricks import as_strided

from tensorlite import dtype as dtypes
from tensorlite.errors import IndexOutOfRange
from tensorlite.layout import Layout


def _keep_freed_arrays():
    """Have glibc reuse freed arrays of up to 32 MiB (M_MMAP_THRESHOLD) and give free memory back to
    the OS only past 256 MiB (M_TRIM_THRESHOLD). By default an op's result of a few MB is often a
    fresh mmap whose pages fault in on first touch, which costs more than an elementwise op itself
    (the first-run benchmarks' steps: 10-50% faster). Skipped off glibc and where the user set these."""
    if not sys.platform.startswith("linux") or any(k in os.environ for k in ("MALLOC_MMAP_THRESHOLD_",
                                                                             "MALLOC_TRIM_THRESHOLD_")):
        return
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - glibc only (musl's mallopt does nothing)
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD (32 MiB is glibc's maximum)
        libc.mallopt(-1, 256 << 20)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


_keep_freed_arrays()
F32 = np.dtype(np.float32)
HALF_TYPES = (dtypes.float16, dtypes.bfloat16)

try:  # numpy >= 2 keeps its floating-point error settings in a context variable (np.errstate sets it)
    from numpy._core.umath import _extobj_contextvar as _ERRSTATE, _make_extobj  # noqa: PLC2701 - see quietly
    _IGNORE_ALL = _make_extobj(all="ignore")
except (ImportError, TypeError):  # numpy 1.x (or a numpy that changed them): the same through np.seterr
    class _SetErr:
        def set(self, value):
            return np.seterr(all="ignore")

        def reset(self, token):
            np.seterr(**token)
    _ERRSTATE, _IGNORE_ALL = _SetErr(), None
_SET_ERRSTATE, _RESET_ERRSTATE = _ERRSTATE.set, _ERRSTATE.reset  # bound once: quietly runs per op


def quietly(fn, *args):
    """fn(*args) with numpy's floating-point warnings off (overflow to inf, 0/0 to nan: the values
    are the answer, as on the GPU). Setting numpy's error state directly costs about a tenth of
    `with np.errstate(all="ignore")` (0.7 us), which was a tiny op's largest share."""
    token = _SET_ERRSTATE(_IGNORE_ALL)
    try:
        return fn(*args)
    finally:
        _RESET_ERRSTATE(token)


def strided(data: np.ndarray, layout: Layout, writeable: bool = False) -> np.ndarray:
    """A numpy view of `data` (flat) addressed by `layout`."""
    n = layout.numel()
    if n == 0:
        return np.empty(layout.shape, data.dtype)
    if layout.is_contiguous():  # most operands: a slice and a reshape, several times cheaper than as_strided
        end = layout.offset + n
        if end > data.size:
            raise IndexOutOfRange(f"layout {layout} addresses past the end of a storage of {data.size} elements")
        view = data[layout.offset:end].reshape(layout.shape)
        if not writeable:
            view.flags.writeable = False
        return view
    if layout.extent() > data.size:
        raise IndexOutOfRange(f"layout {layout} addresses past the end of a storage of "
                              f"{data.size} elements")
    base = data[layout.offset:]
    strides = tuple(s * data.itemsize for s in layout.strides)
    return as_strided(base, layout.shape, strides, writeable=writeable)


def accumulate_dtype(dt) -> np.dtype:
    """Type for sums of products (matmul, conv): halves in f32, integers in int64."""
    return dt.np if dt in (dtypes.float32, dtypes.float64) else (
        F32 if dt in HALF_TYPES else np.dtype(np.int64))


def row_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """sum(a * b) over the last dim, kept as a dim of 1: einsum's dot, without the product array
    (2x faster than (a * b).sum(-1) on rows of a few hundred)."""
    return np.einsum("...i,...i->...", a, b)[..., None]
