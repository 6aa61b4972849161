"""Host-side cost of tiny ops through Tensor -> GpuStorage -> GpuDevice, without a GPU.

    python benchmarks/profile_dispatch.py [--iters 20000] [--profile] [--no-stub]

A null platform stands in for HIP/CUDA: allocation hands out fake addresses, copies do
nothing, kernels are not compiled. Launches go through a real C function with
cuLaunchKernel's signature that returns at once (built with `cc` into a temporary library;
without a compiler, or with --no-stub, a Python no-op stands in), called as the GPU
platforms call the driver: through the compiled launch shim where it is installed
(backends/rocm/launch_shim.py), else through cffi's ABI mode. What remains is the Python
work every GPU op pays, plus the call's own share, measured on any machine; `--device cuda`
times the same on a GPU, the driver's launch cost included; `--device cpu` times the cpu backend's
tiny ops (2x3 float32, single-threaded) against torch's CPU ops in the same process, and splits
`a + b` into the Tensor layer, the storage's share and numpy's ufunc call.

Besides the per-op table, `a + b` is split into stages by timing each layer on its own:
Tensor layer (op - storage), storage (binary_impl - launch: kernel lookup, output
allocation, layout packing, grid), launch (GpuDevice.launch - bare call: argument
packing, checks) and the bare call; with the shim, the bare call through ABI mode too.
With the launch queue (launch_shim.py, on where the shim is), the last stages are the put
into the queue, timed towards a no-op driver entry (the calling thread's share), and the
driver call that the worker thread makes per launch.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from tensorlite.backends.rocm.null import LAUNCH_DECL, NullPlatform


def _build_stub(workdir):
    """A shared library whose cuLaunchKernel returns 0 at once; None without a C compiler."""
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        return None
    src, lib = os.path.join(workdir, "stub.c"), os.path.join(workdir, "libstub.so")
    with open(src, "w") as f:
        f.write(LAUNCH_DECL.strip().rstrip(";") + " { return 0; }\n")
    try:
        subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", lib, src], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return lib


def null_device(stub_lib=None):
    from tensorlite.backends.rocm.device import GpuDevice
    return GpuDevice(NullPlatform(stub_lib), 0)


def _print_profile(fn, iters, sync=None):
    """The top functions by own time of a cProfile run of `iters` calls of fn (then sync)."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(iters):
        fn()
    prof.disable()
    if sync is not None:
        sync()
    pstats.Stats(prof).sort_stats("tottime").print_stats(15)


def _us_per_call(fn, iters, sync=None, chunk=250):
    """(median, min, median with syncs) us per call over 5 runs of iters/5 calls, after a
    warm-up. With a real device (`sync` given) the calls run in chunks of `chunk` with the
    device synchronized between them and only the host's submission timed, so that a full
    launch queue never makes the host wait for the GPU; the third value includes the
    syncs (above the first when the GPU, not the host, sets the pace)."""
    for _ in range(200):
        fn()
    per_run = max(iters // 5, 1)
    host, wall = [], []
    for _ in range(5):
        if sync is None:
            t0 = time.perf_counter()
            for _ in range(per_run):
                fn()
            host.append((time.perf_counter() - t0) / per_run * 1e6)
            wall.append(host[-1])
            continue
        sync()
        total, done, w0 = 0.0, 0, time.perf_counter()
        while done < per_run:
            k = min(chunk, per_run - done)
            t0 = time.perf_counter()
            for _ in range(k):
                fn()
            total += time.perf_counter() - t0
            sync()
            done += k
        host.append(total / per_run * 1e6)
        wall.append((time.perf_counter() - w0) / per_run * 1e6)
    return sorted(host)[2], min(host), sorted(wall)[2]


def cpu_main(args) -> int:
    """The cpu backend's host cost per tiny op, against torch's where it is installed (same
    process, one thread), and `a + b` by layer: Tensor (op - storage), storage (binary_impl - the
    ufunc: layouts, error state, wrapping) and numpy's own call on the storages' arrays."""
    import gc
    import tensorlite as tl
    tl.set_num_threads(1)
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    x_np, y_np = (rng.standard_normal((2, 3), dtype=np.float32) for _ in range(2))
    libs = {"tensorlite": tl} if torch is None else {"tensorlite": tl, "torch": torch}
    cases = {}
    for name, lib in libs.items():
        a, b, g = lib.tensor(x_np), lib.tensor(y_np), lib.tensor(x_np, requires_grad=True)
        cases[name] = {"a + b": lambda a=a, b=b: a + b, "x.relu()": lambda a=a: a.relu(), "x * 2": lambda a=a: a * 2,
                       "x.exp()": lambda a=a: a.exp(), "a + b, a requires grad": lambda g=g, b=b: g + b,
                       "x.relu(), requires grad": lambda g=g: g.relu(), "a.sum()": lambda a=a: a.sum()}
    gc.collect()
    gc.freeze()
    print(f"host-side us per op on cpu (2x3 float32, one thread; {args.iters} iterations, median and min of 5 runs)")
    print(f"  {'':40s} {'tensorlite':>15s}" + ("" if torch is None else f" {'torch':>15s} {'ratio':>6s}"))
    for op in cases["tensorlite"]:
        got = [_us_per_call(cases[name][op], args.iters) for name in libs]
        line = f"  {op:40s} {got[0][0]:7.2f} {got[0][1]:7.2f}"
        if torch is not None:
            line += f" {got[1][0]:7.2f} {got[1][1]:7.2f} {got[0][0] / got[1][0]:6.2f}"
        print(line)
    a, b = tl.tensor(x_np), tl.tensor(y_np)
    sa, sb, la, lb = a._storage, b._storage, a._layout, b._layout
    layers = [("Tensor layer", lambda: a + b), ("storage (layouts, error state, wrap)",
                                                 lambda: sa.binary_impl("add", sb, la, lb)),
              ("numpy's np.add on the storages' arrays", lambda: np.add(sa.data, sb.data))]
    totals = [_us_per_call(fn, args.iters) for _, fn in layers] + [(0.0, 0.0, 0.0)]
    print("stages of `a + b` (each layer timed alone; its share is the difference to the next):")
    print(f"  {'whole op':40s} {totals[0][0]:7.2f} {totals[0][1]:7.2f}")
    for i, (stage, _) in enumerate(layers):
        print(f"  {stage:40s} {totals[i][0] - totals[i + 1][0]:7.2f} {totals[i][1] - totals[i + 1][1]:7.2f}")
    if args.profile:
        _print_profile(lambda: a + b, args.iters // 4)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--profile", action="store_true", help="print the top functions of a cProfile run")
    ap.add_argument("--no-stub", action="store_true", help="launch through a Python no-op, not a cffi call")
    ap.add_argument("--device", default=None,
                    help="time on a real GPU device instead ('cuda', 'rocm'): host submission cost per stage; "
                         "'cpu': the cpu backend's ops against torch's")
    args = ap.parse_args()
    if args.device == "cpu":
        return cpu_main(args)
    workdir = tempfile.mkdtemp(prefix="tl-null-")
    if args.device is None:
        os.environ.setdefault("TENSORLITE_CACHE_DIR", os.path.join(workdir, "cache"))
    import gc
    import tensorlite as tl
    from tensorlite import backend
    from tensorlite.backends.rocm.launch import grid_for, pack_strided

    if args.device is None:
        stub = None if args.no_stub else _build_stub(workdir)
        dev = null_device(stub)
        backend.register("null", lambda ordinal: dev)
        where, sync = "null", None
        how = "the compiled shim" if dev._launch_fn is not dev.platform.launch_function() else "cffi's ABI mode"
        launch = f"a no-op C cuLaunchKernel, called through {how}" if stub else \
            "a Python no-op (no C compiler or --no-stub)"
        print(f"host-side us per op (null runtime, launches through {launch}; {args.iters} iterations, "
              f"median and min of 5 runs):")
    else:
        dev = backend.get_device(args.device)
        dev.warmup()
        where, sync = args.device, dev.synchronize
        print(f"host-side us per op on {dev!r} (submission only, synchronized every 250 calls; "
              f"{args.iters} iterations, median and min of 5 runs; last column: median including the syncs):")
    rng = np.random.default_rng(0)
    a = tl.tensor(rng.standard_normal((64, 1024), dtype=np.float32)).to(where)
    b = tl.tensor(rng.standard_normal((64, 1024), dtype=np.float32)).to(where)
    w = tl.tensor(rng.standard_normal((1024, 64), dtype=np.float32)).to(where)
    cases = {
        "add 64x1024": lambda: a + b,
        "mul by scalar": lambda: a * 2.0,
        "exp": lambda: a.exp(),
        "cast f32->bf16": lambda: a.to(tl.bfloat16),
        "sum(dim=-1)": lambda: a.sum(-1),
        "transpose view + add": lambda: a.T + w,
        "matmul 64x1024 @ 1024x64": lambda: a @ w,
    }

    def show(name, t):
        print(f"  {name:40s} {t[0]:7.2f} {t[1]:7.2f}" + (f" {t[2]:7.2f}" if sync is not None else ""))

    # objects from imports and setup to the permanent generation: the full collections
    # they would cost land at random in the timed runs and only add noise
    gc.collect()
    gc.freeze()
    with tl.no_grad():
        for name, fn in cases.items():
            show(name, _us_per_call(fn, args.iters, sync))

        # stages of `a + b`: each layer timed on its own, the differences are its share
        sa, sb, la, lb = a._storage, b._storage, a._layout, b._layout
        n = la.numel()
        out = sa.binary_impl("add", sb, la, lb)
        kernel = dev.function("binary.hip", "badd_f32")
        pa, pb = pack_strided(la, lb)
        grid = grid_for(dev, n)
        launch_args = [("int64", n), ("bytes", pa), ("bytes", pb), ("ptr", sa.buffer.ptr),
                       ("ptr", sb.buffer.ptr), ("ptr", out.buffer.ptr)]
        dev.launch(kernel, grid, 256, launch_args)
        fn_raw, last = dev._launch_fn, dev._launch_last
        lay = kernel.layouts[threading.get_ident()]
        params, stream, handle = lay.params, dev.stream, kernel.handle
        abi = dev.platform.launch_function()
        shim = "compiled shim" if fn_raw is not abi else "cffi ABI mode"
        bare = (f"bare launch call ({shim} + driver)",
                lambda: fn_raw(handle, grid, 1, 1, 256, 1, 1, 0, stream, params, last))
        queue = dev._queue
        noop = None
        if queue is not None:
            # the launch queue (launch_shim.py): the calling thread puts each launch in a ring and a
            # worker thread calls the driver. Timed here towards a no-op driver entry, so that a tight
            # loop never waits for the worker; the driver call itself is the worker's share
            stub = _build_stub(workdir) if args.device is not None else None
            noop = dev.platform.ffi.dlopen(stub).cuLaunchKernel if stub else (last if args.device is None else None)
        layers = [
            ("Tensor layer", lambda: a + b),
            ("storage (lookup, alloc, layouts, grid)", lambda: sa.binary_impl("add", sb, la, lb)),
            ("launch (checks, packing)", lambda: dev.launch(kernel, grid, 256, launch_args)),
        ]
        if queue is None:
            layers.append(bare)
        else:
            put, ring = dev._put, queue.queue
            layers.append(("put in the launch queue", lambda: put(ring, handle, grid, 1, 1, 256, 1, 1, 0, stream,
                                                                  params, lay.nargs, lay.cbuf, lay.nbytes,
                                                                  dev._launch_last)))
        if noop is not None:
            dev._launch_last = dev.platform.ffi.cast("void*", noop)
        try:
            totals = [_us_per_call(fn, args.iters, sync) for _, fn in layers] + [(0.0, 0.0, 0.0)]
        finally:
            dev._launch_last = last
        print("stages of `add 64x1024` (each layer timed alone; its share is the difference to the next):")
        if queue is not None:
            print("  (launches through the launch queue"
                  + (", towards a no-op driver entry: the calling thread's share)" if noop is not None else
                     "; no C compiler for a no-op entry: loops may wait for the worker)"))
        show("whole op", totals[0])
        for i, (stage, _) in enumerate(layers):
            show(stage, tuple(x - y for x, y in zip(totals[i], totals[i + 1])))
        if queue is not None:
            show(f"the worker's driver call per launch ({shim})", _us_per_call(bare[1], args.iters, sync))
        if fn_raw is not abi:  # the same call through cffi's ABI mode, for comparison
            null = dev.platform.ffi.NULL
            show("bare launch call (cffi ABI mode + driver)",
                 _us_per_call(lambda: abi(handle, grid, 1, 1, 256, 1, 1, 0, stream, params, null), args.iters, sync))
        if args.profile:
            _print_profile(lambda: a + b, args.iters // 4, sync)
    return 0


if __name__ == "__main__":
    sys.exit(main())
