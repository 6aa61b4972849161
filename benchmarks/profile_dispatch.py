"""Host-side cost of tiny ops through Tensor -> GpuStorage -> GpuDevice, without a GPU.

    python benchmarks/profile_dispatch.py [--iters 20000] [--profile]

A null platform stands in for HIP/CUDA: allocation hands out fake addresses, copies and
launches do nothing, kernels are not compiled. What remains is exactly the Python work
that every GPU op pays before the driver call, so it can be measured and profiled on any
machine. (On a GPU, add the driver's launch cost: benchmarks/smoke_gpu.py measures it.)
"""
from __future__ import annotations

import argparse
import cProfile
import itertools
import os
import pstats
import sys
import tempfile
import time

import numpy as np


def null_device():
    from tensorlite.backends.rocm import PlatformBase
    from tensorlite.backends.rocm.device import GpuDevice

    class NullPlatform(PlatformBase):
        name, runtime_name = "null", "no runtime"
        CALLS = {"launch": "null"}

        def __init__(self):
            super().__init__()
            self._addresses = itertools.count(1 << 20, 1 << 20)

        def init(self):
            return 1

        def device_properties(self, ordinal):
            return {"name": "null", "arch": "null", "warp_size": 32, "multiprocessor_count": 132,
                    "total_memory": 1 << 40, "max_threads_per_block": 1024}

        def activate(self, ordinal):
            pass

        def malloc(self, nbytes):
            return next(self._addresses)

        def free(self, ptr):
            pass

        def htod_async(self, *a):
            pass

        dtoh_async = dtod_async = memset_d8_async = event_record = event_synchronize = htod_async

        def stream_create(self):
            return None

        stream_synchronize = event_destroy = free

        def event_create(self):
            return None

        def module_load(self, image):
            return None

        def module_get_function(self, module, name):
            return name

        def launch_function(self):
            return lambda *args: 0

        def rtc_version(self):
            return "null 0"

        def rtc_options(self, arch):
            return []

        def rtc_compile(self, source, name, headers, options):
            return b"null"

        def blas_create(self, stream, workspace_ptr=0, workspace_bytes=0):
            return None

        def blas_gemm(self, *args):
            pass

    return GpuDevice(NullPlatform(), 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--profile", action="store_true", help="print the top functions of a cProfile run")
    args = ap.parse_args()
    os.environ.setdefault("TENSORLITE_CACHE_DIR", tempfile.mkdtemp(prefix="tl-null-cache-"))
    import tensorlite as tl
    from tensorlite import backend

    dev = null_device()
    backend.register("null", lambda ordinal: dev)
    rng = np.random.default_rng(0)
    a = tl.tensor(rng.standard_normal((64, 1024), dtype=np.float32)).to("null")
    b = tl.tensor(rng.standard_normal((64, 1024), dtype=np.float32)).to("null")
    w = tl.tensor(rng.standard_normal((1024, 64), dtype=np.float32)).to("null")
    cases = {
        "add 64x1024": lambda: a + b,
        "mul by scalar": lambda: a * 2.0,
        "exp": lambda: a.exp(),
        "cast f32->bf16": lambda: a.to(tl.bfloat16),
        "sum(dim=-1)": lambda: a.sum(-1),
        "transpose view + add": lambda: a.T + w,
        "matmul 64x1024 @ 1024x64": lambda: a @ w,
    }
    print(f"host-side us per op (null runtime, {args.iters} iterations, median of 5):")
    with tl.no_grad():
        for name, fn in cases.items():
            for _ in range(200):
                fn()
            runs = []
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(args.iters // 5):
                    fn()
                runs.append((time.perf_counter() - t0) / (args.iters // 5) * 1e6)
            print(f"  {name:28s} {sorted(runs)[2]:7.2f}")
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(args.iters // 4):
                a + b
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    return 0


if __name__ == "__main__":
    sys.exit(main())
