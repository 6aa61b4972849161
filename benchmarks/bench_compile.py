"""Cold and warm compile times of one kernel family through compiler.py (no GPU needed).

    python benchmarks/bench_compile.py [--platform rocm] [--arch gfx90a] [--family where.hip] [--reps 3]

cold: a fresh cache directory and an empty memory cache (the compiler runs); warm-disk: the
entry on disk, the memory cache emptied (a new process's first use); warm-memory: both
caches hold it. Each repetition runs both ways, interleaved: `child` (the default: hiprtc and
NVRTC compile in a child process, compile_worker.py) and `in-process`
(TENSORLITE_COMPILE_ISOLATION=0, the compile path before the child). Medians of --reps runs,
in milliseconds; the host's other load shows in the spread.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from tensorlite.backends.rocm import compile_worker, compiler, get_platform


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--platform", default="rocm")
    ap.add_argument("--arch", default="gfx90a")
    ap.add_argument("--family", default="where.hip")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    compile_once = lambda: compiler.compile_source(args.platform, args.family, args.arch)  # noqa: E731
    get_platform(args.platform).rtc_version()  # the library loaded before any timing
    times = {}
    for _ in range(args.reps):
        for mode, isolation in (("child", "1"), ("in-process", "0")):
            os.environ[compile_worker.ISOLATION_ENV] = isolation
            with tempfile.TemporaryDirectory() as root:
                os.environ["TENSORLITE_CACHE_DIR"] = root
                compiler.clear_memory_cache()
                times.setdefault((mode, "cold"), []).append(timed(compile_once))
                compiler.clear_memory_cache()
                times.setdefault((mode, "warm-disk"), []).append(timed(compile_once))
                times.setdefault((mode, "warm-memory"), []).append(timed(compile_once))
    for (mode, case), ms in times.items():
        print(f"{args.platform} {args.arch} {args.family} {mode:10} {case:11}: median {statistics.median(ms):9.3f} ms "
              f"(runs {', '.join(f'{m:.3f}' for m in ms)})")

if __name__ == "__main__":
    main()
