"""Smoke test of the GPU runtime on a real device (not part of the test suite).

    python benchmarks/smoke_gpu.py [--platform cuda] [--ordinal 0]

Opens the device, round-trips data of every dtype, compiles and launches a small kernel
(scalar and by-value struct arguments), checks strided-batched GEMM of every float dtype
against numpy (transposes, batch stride 0, alpha/beta), exercises the out-of-memory path
and the allocator's cache, and times launch overhead and a device-to-device copy with
device events. Prints one line per check and exits non-zero if any check fails.
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
import traceback

import numpy as np

from tensorlite import dtype as dtypes
from tensorlite.backends.rocm import compiler, open_device
from tensorlite.backends.rocm.device import Kernel
from tensorlite.errors import OutOfMemoryError

SMOKE_SOURCE = r"""
struct Params { long long n; float scale; int shift; double bias; };
extern "C" __global__ void smoke_axpb(const float* x, float* y, unsigned long long n, float a, double b) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = (float)(a * x[i] + b);
}
extern "C" __global__ void smoke_struct(const float* x, float* y, Params p) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.n) y[i] = x[i] * p.scale + (float)p.shift + (float)p.bias;
}
extern "C" __global__ void smoke_noop(float* y) { }
"""

RESULTS = []


def check(name):
    def deco(fn):
        def run(*a):
            t0 = time.perf_counter()
            try:
                detail = fn(*a)
                RESULTS.append((name, True))
                print(f"PASS {name} ({time.perf_counter() - t0:.2f}s){': ' + detail if detail else ''}", flush=True)
            except Exception:
                RESULTS.append((name, False))
                print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)
        return run
    return deco


def smoke_kernel(dev, name):
    image = compiler.compile_text(dev.platform, SMOKE_SOURCE, "smoke.hip", dev.arch)
    dev.activate()
    module = dev._modules.get("smoke.hip") or dev.platform.module_load(image)
    dev._modules["smoke.hip"] = module
    return Kernel(dev.platform.module_get_function(module, name), name, "smoke.hip")


def to_device(dev, array):
    buf = dev.alloc(array.nbytes)
    dev.htod(buf.ptr, np.ascontiguousarray(array))
    return buf


def from_device(dev, buf, shape, np_dtype):
    out = np.empty(shape, np_dtype)
    dev.dtoh(out, buf.ptr)
    return out


@check("open device and properties")
def t_open(dev):
    p = dev.props
    assert dev.arch.startswith("sm_") or dev.arch.startswith("gfx"), dev.arch
    assert p["total_memory"] > 0 and dev.warp_size in (32, 64) and p["multiprocessor_count"] > 0
    return (f"{p['name']} arch={dev.arch} warp={dev.warp_size} SMs={p['multiprocessor_count']} "
            f"mem={p['total_memory'] >> 20} MiB")


@check("host/device round trip, dtod, memset for every dtype")
def t_roundtrip(dev):
    rng = np.random.default_rng(0)
    for dt in dtypes.ALL:
        x = (rng.standard_normal(1001) * 100).astype(dt.np)
        buf = to_device(dev, x)
        assert from_device(dev, buf, x.shape, dt.np).tobytes() == x.tobytes(), dt.name
        other = dev.alloc(x.nbytes)
        dev.memset(other.ptr, 0xAB, x.nbytes)
        assert set(from_device(dev, other, (x.nbytes,), np.uint8).tolist()) == {0xAB}
        dev.dtod(other.ptr, buf.ptr, x.nbytes)
        assert from_device(dev, other, x.shape, dt.np).tobytes() == x.tobytes(), dt.name


@check("compile every kernels/*.hip for the device arch (parallel, cold cache), load the modules")
def t_compile_all(dev):
    sizes = dev.warmup()
    return ", ".join(f"{n} {s >> 10} KiB" for n, s in sizes.items())


@check("compile + launch (scalar args)")
def t_launch(dev):
    k = smoke_kernel(dev, "smoke_axpb")
    n = 100_003
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    xb, yb = to_device(dev, x), dev.alloc(4 * n)
    dev.memset(yb.ptr, 0xFF, 4 * n)  # poison: NaNs unless the kernel writes
    dev.launch(k, (n + 255) // 256, 256, [("ptr", xb.ptr), ("ptr", yb.ptr), ("uint64", n), ("float", 2.5),
                                          ("double", -1.25)])
    y = from_device(dev, yb, (n,), np.float32)
    np.testing.assert_allclose(y, (2.5 * x.astype(np.float64) - 1.25).astype(np.float32), rtol=1e-6, atol=1e-6)


@check("launch with a by-value struct")
def t_struct(dev):
    import struct
    k = smoke_kernel(dev, "smoke_struct")
    n = 5000
    x = np.arange(n, dtype=np.float32)
    xb, yb = to_device(dev, x), dev.alloc(4 * n)
    dev.memset(yb.ptr, 0xFF, 4 * n)
    params = struct.pack("<qfid", n, 0.5, 3, 0.25)  # {long long; float; int; double}: 24 bytes
    dev.launch(k, ((n + 127) // 128,), (128, 1, 1), [("ptr", xb.ptr), ("ptr", yb.ptr), ("bytes", params)])
    np.testing.assert_array_equal(from_device(dev, yb, (n,), np.float32), x * 0.5 + 3 + 0.25)


def _colmajor(flat, rows, cols, ld, offset):
    return flat[offset: offset + ld * cols].reshape(cols, ld)[:, :rows].T


@check("strided-batched GEMM vs numpy (f32 f64 f16 bf16, transposes, broadcast batch, alpha/beta)")
def t_gemm(dev):
    rng = np.random.default_rng(2)
    tol = {"float32": 1e-4, "float64": 1e-12, "float16": 2e-2, "bfloat16": 3e-2}
    done = 0
    for dt in dtypes.FLOATS:
        for ta, tb, stride_a_zero in ((False, False, False), (True, False, False), (False, True, True),
                                      (True, True, False)):
            m, n, k, batch = 37, 29, 45, 3
            lda, ldb, ldc = (k if ta else m) + 3, (n if tb else k) + 1, m + 2
            cols_a, cols_b = (m if ta else k), (k if tb else n)
            sa = 0 if stride_a_zero else lda * cols_a
            sb, sc = ldb * cols_b, ldc * n
            a = rng.standard_normal(lda * cols_a * (1 if stride_a_zero else batch)).astype(dt.np)
            b = rng.standard_normal(sb * batch).astype(dt.np)
            c0 = rng.standard_normal(sc * batch).astype(dt.np)
            ab, bb, cb = to_device(dev, a), to_device(dev, b), to_device(dev, c0)
            alpha, beta = 1.5, -0.5
            dev.blas.gemm_strided_batched(dt, ta, tb, m, n, k, ab.ptr, lda, sa, bb.ptr, ldb, sb, cb.ptr, ldc, sc,
                                          batch, alpha=alpha, beta=beta)
            c = from_device(dev, cb, c0.shape, dt.np).astype(np.float64)
            for i in range(batch):
                A = _colmajor(a.astype(np.float64), (k if ta else m), cols_a, lda, i * sa)
                B = _colmajor(b.astype(np.float64), (n if tb else k), cols_b, ldb, i * sb)
                A = A.T if ta else A
                B = B.T if tb else B
                C0 = _colmajor(c0.astype(np.float64), m, n, ldc, i * sc)
                ref = alpha * A @ B + beta * C0
                got = _colmajor(c, m, n, ldc, i * sc)
                err = np.abs(got - ref).max() / max(1.0, np.abs(ref).max())
                assert err < tol[dt.name], (dt.name, ta, tb, i, err)
                # padding rows between m and ldc must be untouched
                pad = c[i * sc: i * sc + sc].reshape(n, ldc)[:, m:]
                assert np.array_equal(pad, c0[i * sc: i * sc + sc].reshape(n, ldc)[:, m:].astype(np.float64))
            done += 1
    return f"{done} configurations"


@check("out of memory: cache freed and retried, then a clean error, device still usable")
def t_oom(dev):
    dev.synchronize()
    dev.empty_cache()
    free, total = dev.mem_get_info()
    # 1) a cached block of another size class is given back so that a big request fits
    first = dev.alloc(int(free * 0.55))
    del first  # cached, still reserved
    second = dev.alloc(int(free * 0.6))
    assert second.ptr
    del second
    # 2) an impossible request raises OutOfMemoryError naming the request and the stats
    try:
        dev.alloc(total * 2)
    except OutOfMemoryError as e:
        msg = str(e)
        assert str(total * 2) in msg and "allocated=" in msg and "peak=" in msg, msg
    else:
        raise AssertionError("no OutOfMemoryError")
    # 3) still usable
    x = np.arange(1000, dtype=np.float32)
    assert np.array_equal(from_device(dev, to_device(dev, x), x.shape, np.float32), x)
    return msg[:160]


@check("allocator reuse and stats")
def t_alloc(dev):
    dev.empty_cache()
    s0 = dev.memory_stats()
    a = dev.alloc(10_000)
    ptr = a.ptr
    del a
    b = dev.alloc(9_800)  # same 512-byte size class as 10_000
    assert b.ptr == ptr, "freed block not reused"
    s1 = dev.memory_stats()
    assert s1["allocated"] == s0["allocated"] + 10_240 and s1["num_cache_hits"] > s0["num_cache_hits"]
    return str(s1)


@check("timing: launch overhead and device-to-device copy bandwidth")
def t_timing(dev):
    k = smoke_kernel(dev, "smoke_noop")
    yb = dev.alloc(4)
    args = [("ptr", yb.ptr)]
    for _ in range(100):
        dev.launch(k, 1, 32, args)
    dev.synchronize()
    iters = 20000
    t0 = time.perf_counter()
    for _ in range(iters):
        dev.launch(k, 1, 32, args)
    dev.synchronize()
    us = (time.perf_counter() - t0) / iters * 1e6
    # the same launch straight through cffi, packed arguments prebuilt: the driver's share
    fn, params = dev._launch_fn, k.layouts[threading.get_ident()].params
    t0 = time.perf_counter()
    for _ in range(iters):
        fn(k.handle, 1, 1, 1, 32, 1, 1, 0, dev.stream, params, dev._launch_last)
    dev.synchronize()
    raw_us = (time.perf_counter() - t0) / iters * 1e6
    nbytes = 1 << 30
    src, dst = dev.alloc(nbytes), dev.alloc(nbytes)
    dev.memset(src.ptr, 1, nbytes)
    e0, e1 = dev.event(), dev.event()
    times = []
    for _ in range(10):
        e0.record()
        dev.dtod(dst.ptr, src.ptr, nbytes)
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_ms(e1))
    ms = float(np.median(times[2:]))
    return (f"launch {us:.2f} us/kernel via GpuDevice.launch, {raw_us:.2f} us bare driver call; "
            f"dtod copy {2 * nbytes / ms / 1e6:.0f} GB/s (read+write)")


@check("interop: torch in the same process")
def t_torch(dev):
    try:
        import torch
    except ImportError:
        return "torch not installed: skipped"
    x = torch.arange(10, device="cuda", dtype=torch.float32)
    assert float(x.sum()) == 45.0
    return f"torch {torch.__version__}"


@check("tensorlite tensors on the device (needs storage.py)")
def t_tensor(dev):
    import importlib.util
    import tensorlite as tl
    if importlib.util.find_spec("tensorlite.backends.rocm.storage") is None:
        return "backends/rocm/storage.py not written yet: skipped"
    x = tl.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    y = x.to(f"{dev.name}:{dev.ordinal}")
    z = (y + y).to("cpu").numpy()
    assert np.array_equal(z, 2 * np.arange(12, dtype=np.float32).reshape(3, 4))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--platform", default="cuda")
    ap.add_argument("--ordinal", type=int, default=0)
    args = ap.parse_args()
    dev = open_device(args.platform, args.ordinal)
    for t in (t_open, t_roundtrip, t_compile_all, t_launch, t_struct, t_gemm, t_alloc, t_oom, t_timing, t_torch,
              t_tensor):
        t(dev)
    failed = [n for n, ok in RESULTS if not ok]
    print(f"\n{len(RESULTS) - len(failed)} passed, {len(failed)} failed" + (f": {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
