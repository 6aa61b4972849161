"""The cpu backend on several cores: numpy releases the GIL inside a ufunc's loop and a BLAS call,
so work cut into blocks runs side by side on tl.get_num_threads() threads."""
from __future__ import annotations

import os

import numpy as np

from tensorlite import threads

_pool = None  # (ThreadPoolExecutor, its size): remade when tl.set_num_threads asks for more threads


def _drop_pool():  # a forked child has the parent's pool object but none of its threads
    global _pool
    _pool = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drop_pool)


def in_parallel(tasks) -> None:
    """Run the callables `tasks` on tl.get_num_threads() threads: numpy releases the GIL inside a
    ufunc's loop (and a BLAS call), so formulas over separate blocks run side by side. numpy's BLAS
    runs on one thread meanwhile (each task's products on all would oversubscribe the cores). Each
    worker keeps the caller's numpy error settings (they are per thread); an exception in a task
    is raised here."""
    global _pool
    n = threads.get_num_threads()
    if len(tasks) < 2 or n < 2:
        for task in tasks:
            task()
        return
    if _pool is None or _pool[1] < n:
        from concurrent.futures import ThreadPoolExecutor
        if _pool is not None:
            _pool[0].shutdown(wait=False)
        _pool = (ThreadPoolExecutor(n, thread_name_prefix="tensorlite-cpu"), n)
    err = np.geterr()

    def run(task):
        with np.errstate(**err):
            task()
    with threads.blas_limited(1):
        for f in [_pool[0].submit(run, t) for t in tasks]:
            f.result()


def blockwise(fn, block=1 << 16):
    """fn (an elementwise formula of many numpy passes) over blocks of `block` elements that stay
    in cache (15-25% faster than whole arrays of a few MB). On several cores each takes a share of
    the blocks, 4x larger: the threads hand the GIL to each other between numpy calls, and longer
    calls make that rarer (a formula at 1M elements: 25-30% faster on 2 cores, 64k blocks: none)."""
    def run(x):
        n = threads.get_num_threads()
        step = block if n < 2 else 4 * block
        if x.size <= step:  # 1-d: a ufunc of a 0-d array returns a scalar, which `out=` refuses
            return fn(x.reshape(-1)).reshape(x.shape)
        flat = np.ascontiguousarray(x).reshape(-1)
        out = np.empty_like(flat)

        def blocks(lo, hi):  # one core's blocks: [lo, hi), a multiple of `step` apart
            def task():
                for i in range(lo, hi, step):
                    out[i:i + step] = fn(flat[i:i + step])
            return task
        n_blocks = -(-flat.size // step)
        bounds = [0] + [min(flat.size, -(-n_blocks * k // n) * step) for k in range(1, n + 1)]
        in_parallel([blocks(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo])
        return out.reshape(x.shape)
    return run


def batch_shares(b: int, work: int):
    """[lo, hi) batch ranges, one per core where the work (elements of the scores) pays for a thread:
    attention's many small GEMMs and row passes release the GIL, so halves of a batch run side by side."""
    n = min(b, threads.get_num_threads()) if work >= 1 << 18 else 1
    bounds = [b * i // n for i in range(n + 1)]
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo] or [(0, b)]
