"""tl.set_num_threads / tl.get_num_threads, as torch's: how many threads the `cpu` backend's work
uses. That is numpy's BLAS (the backend's matmuls, convolutions and attention products) and the
backend's own pool (formulas in blocks over the cores, attention by shares of the batch:
backends/cpu/parallel.py). The default is OMP_NUM_THREADS where it is set (as torch reads it), else the
cores this process may run on, at most 8; numpy's BLAS keeps its own default (its environment
variables) until set_num_threads is called.

numpy's BLAS is reached through threadpoolctl where it is installed (any BLAS numpy links), else
through OpenBLAS's own `openblas_set_num_threads` (what numpy's wheels bundle), looked up in the
OpenBLAS libraries this process has loaded; with neither, only the pool follows the setting.
"""
from __future__ import annotations

import contextlib
import ctypes
import os

from ._core import ints


def _default_threads() -> int:
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return min(cores, 8)


_THREADS = [_default_threads()]
_BLAS = []  # [(get, set)] for each BLAS library numpy uses, found at first use (_blas)


def get_num_threads() -> int:
    """The threads the cpu backend uses (its BLAS and its own pool), as torch.get_num_threads.

    >>> import tensorlite as tl
    >>> tl.get_num_threads() >= 1
    True
    """
    return _THREADS[0]


def set_num_threads(n: int) -> None:
    """Use n threads (n >= 1) for the cpu backend's work, numpy's BLAS included, as torch.set_num_threads.

    >>> import tensorlite as tl
    >>> before = tl.get_num_threads()
    >>> tl.set_num_threads(1)
    >>> tl.get_num_threads()
    1
    >>> tl.set_num_threads(before)
    """
    n = ints("set_num_threads", "the number of threads", n, low=1)
    _THREADS[0] = n
    for _, set_threads in _blas():
        set_threads(n)


def blas_threads() -> list:
    """The thread count of each BLAS library numpy uses (empty where none can be reached)."""
    return [get() for get, _ in _blas()]


@contextlib.contextmanager
def blas_limited(n: int):
    """numpy's BLAS on at most n threads inside the block, back as it was after: the backend's pool
    runs its shares' products with one BLAS thread each (n shares of n threads would oversubscribe)."""
    libs = _blas()
    before = [get() for get, _ in libs]
    for (_, set_threads), was in zip(libs, before):
        if was > n:
            set_threads(n)
    try:
        yield
    finally:
        for (_, set_threads), was in zip(libs, before):
            if was > n:
                set_threads(was)


def _blas():
    if not _BLAS:
        _BLAS.append(_threadpoolctl_libs() or _openblas_libs())
    return _BLAS[0]


def _threadpoolctl_libs():
    try:  # (numpy is loaded: tensorlite imports it first, and threadpoolctl sees loaded libraries only)
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return []
    return [(lib.get_num_threads, lib.set_num_threads)
            for lib in ThreadpoolController().select(user_api="blas").lib_controllers]


_OPENBLAS_SYMBOLS = (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),  # numpy >= 2
                     ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
                     ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
                     ("openblas_get_num_threads", "openblas_set_num_threads"))


def _openblas_libs():
    """(get, set) of each OpenBLAS library loaded in this process (numpy's; Linux's /proc/self/maps
    lists them), by the symbols OpenBLAS exports under its builds' prefixes and suffixes."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split(None, 5)[-1].strip() for line in f if "openblas" in line.lower()}
    except OSError:
        return []
    out = []
    for path in sorted(p for p in paths if os.path.isfile(p)):
        try:
            lib = ctypes.CDLL(path)  # already loaded: the same handle, nothing runs again
        except OSError:
            continue
        for get_name, set_name in _OPENBLAS_SYMBOLS:
            get, setter = getattr(lib, get_name, None), getattr(lib, set_name, None)
            if get is not None and setter is not None:
                get.restype, get.argtypes, setter.restype, setter.argtypes = ctypes.c_int, [], None, [ctypes.c_int]
                out.append((get, setter))
                break
    return out
