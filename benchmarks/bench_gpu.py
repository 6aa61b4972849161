"""tensorlite vs PyTorch on the same GPU, in one process (a benchmark, not a test).

    python benchmarks/bench_gpu.py [--device cuda] [--reps 7] [--json out.json]

Each case runs the same op on the same data in both frameworks: warm-up first (kernels
compiled and loaded, allocator caches filled), then `reps` timed repetitions of `iters`
calls; the median repetition is reported. GPU work is timed with device events on each
framework's own stream (torch.cuda.Event; tensorlite's GpuDevice.event); the tiny-op
dispatch case is timed on the host (perf_counter around many calls, synchronized at both
ends), because there the host is the bottleneck being measured.

Cases (targets from issue 4): tiny-op dispatch (64x1024 add, us/op; target <= torch);
elementwise add / mul / cast f32->bf16 at 64M elements (GB/s and % of a measured
device-to-device copy; target >= 90%); sum and max over 64M f32; GEMM 4096^3 in f32 and
bf16 (TFLOP/s; target >= 0.95x torch). f32 GEMM runs without TF32 in both (torch's
default, and cuBLAS's CUBLAS_COMPUTE_32F). The table is printed last.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np


def _median_ms(record_start, record_end, sync_end, elapsed, fn, iters, reps, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, end = record_start(), None
        for _ in range(iters):
            fn()
        end = record_end()
        sync_end(end)
        times.append(elapsed(start, end) / iters)
    return statistics.median(times)


def time_torch(torch, fn, iters, reps, warmup=3):
    def rec():
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e
    return _median_ms(rec, rec, lambda e: e.synchronize(), lambda a, b: a.elapsed_time(b), fn, iters, reps, warmup)


def time_tl(dev, fn, iters, reps, warmup=3):
    return _median_ms(lambda: dev.event().record(), lambda: dev.event().record(), lambda e: e.synchronize(),
                      lambda a, b: a.elapsed_ms(b), fn, iters, reps, warmup)


def host_us_per_call(fn, sync, iters, reps, warmup=200):
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        times.append((time.perf_counter() - t0) / iters * 1e6)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--elements", type=int, default=64 * 2 ** 20)
    ap.add_argument("--gemm", type=int, default=4096)
    ap.add_argument("--json", default=None, help="also write the rows as JSON here")
    args = ap.parse_args()

    import torch
    import tensorlite as tl

    dev = tl.backend.get_device(args.device)
    tdev = "cuda"  # torch's name for the NVIDIA device (ROCm builds of torch use it too)
    print(f"tensorlite {tl.__version__} on {dev!r}; torch {torch.__version__} on {torch.cuda.get_device_name()}",
          flush=True)
    t0 = time.perf_counter()
    dev.warmup()  # every kernel family compiled (disk cache) and loaded before timing
    print(f"kernels ready in {time.perf_counter() - t0:.1f}s", flush=True)
    reps, n = args.reps, args.elements
    rows = []

    def row(name, unit, tl_value, torch_value, higher_is_better=True, copy_gbs=None, note=""):
        ratio = (tl_value / torch_value) if higher_is_better else (torch_value / tl_value)
        r = {"case": name, "unit": unit, "tensorlite": tl_value, "torch": torch_value,
             "ratio_vs_torch": ratio, "note": note}
        if copy_gbs:
            r["tl_pct_of_copy"] = 100 * tl_value / copy_gbs
            r["torch_pct_of_copy"] = 100 * torch_value / copy_gbs
        rows.append(r)
        print(f"  {name}: tensorlite {tl_value:.3f} {unit}, torch {torch_value:.3f} {unit}, "
              f"ratio {ratio:.2f}", flush=True)

    rng = np.random.default_rng(0)

    def pair(shape, dtype=np.float32):
        host = rng.standard_normal(shape, dtype=np.float32).astype(dtype)
        return tl.tensor(host).to(args.device), torch.from_numpy(host).to(tdev)

    def check(name, tl_out, torch_out, tol):
        a = tl_out.float().numpy().astype(np.float64) if hasattr(tl_out, "numpy") else tl_out
        b = torch_out.float().cpu().numpy().astype(np.float64)
        err = float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b)))))
        if not err <= tol:
            print(f"  WARNING {name}: tensorlite and torch differ (rel. max error {err:.2e} > {tol})", flush=True)

    with tl.no_grad(), torch.no_grad():
        # ---- tiny-op dispatch --------------------------------------------------------
        a_tl, a_t = pair((64, 1024))
        b_tl, b_t = pair((64, 1024))
        check("tiny add", a_tl + b_tl, a_t + b_t, 1e-6)
        us_tl = host_us_per_call(lambda: a_tl + b_tl, dev.synchronize, 5000, reps)
        us_t = host_us_per_call(lambda: a_t + b_t, torch.cuda.synchronize, 5000, reps)
        row("dispatch: add 64x1024 f32", "us/op", us_tl, us_t, higher_is_better=False)
        del a_tl, b_tl, a_t, b_t

        # ---- bandwidth reference: device-to-device copy ---------------------------------
        x_tl, x_t = pair((n,))
        y_tl, y_t = pair((n,))
        nbytes = 4 * n
        src, dst = dev.alloc(nbytes), dev.alloc(nbytes)
        dev.memset(src.ptr, 0x3F, nbytes)
        ms_copy_tl = time_tl(dev, lambda: dev.dtod(dst.ptr, src.ptr, nbytes), 10, reps)
        out_t = torch.empty_like(x_t)
        ms_copy_t = time_torch(torch, lambda: out_t.copy_(x_t), 10, reps)
        copy_gbs = max(2 * nbytes / ms_copy_tl / 1e6, 2 * nbytes / ms_copy_t / 1e6)
        row("d2d copy 64M f32 (read+write)", "GB/s", 2 * nbytes / ms_copy_tl / 1e6, 2 * nbytes / ms_copy_t / 1e6,
            note="tensorlite: cuMemcpyDtoDAsync; torch: copy_")
        del src, dst, out_t

        # ---- elementwise -------------------------------------------------------------
        for name, f_tl, f_t, moved in (
                ("add 64M f32", lambda: x_tl + y_tl, lambda: x_t + y_t, 12 * n),
                ("mul 64M f32", lambda: x_tl * y_tl, lambda: x_t * y_t, 12 * n),
                ("cast 64M f32->bf16", lambda: x_tl.to(tl.bfloat16), lambda: x_t.to(torch.bfloat16), 6 * n)):
            check(name, f_tl(), f_t(), 1e-2 if "bf16" in name else 1e-6)
            ms_tl, ms_t = time_tl(dev, f_tl, 10, reps), time_torch(torch, f_t, 10, reps)
            row(name, "GB/s", moved / ms_tl / 1e6, moved / ms_t / 1e6, copy_gbs=copy_gbs)

        # ---- reductions --------------------------------------------------------------
        for name, f_tl, f_t in (("sum 64M f32", lambda: x_tl.sum(), lambda: x_t.sum()),
                                ("max 64M f32", lambda: x_tl.max(), lambda: x_t.max())):
            check(name, f_tl(), f_t(), 1e-4)
            ms_tl, ms_t = time_tl(dev, f_tl, 10, reps), time_torch(torch, f_t, 10, reps)
            row(name, "GB/s", 4 * n / ms_tl / 1e6, 4 * n / ms_t / 1e6, copy_gbs=copy_gbs)
        del x_tl, y_tl, x_t, y_t

        # ---- GEMM --------------------------------------------------------------------
        g = args.gemm
        flops = 2 * g ** 3
        torch.backends.cuda.matmul.allow_tf32 = False  # torch's default, stated explicitly
        for dt_name in ("float32", "bfloat16"):
            p_tl, p_t = pair((g, g))
            q_tl, q_t = pair((g, g))
            if dt_name == "bfloat16":
                p_tl, q_tl = p_tl.to(tl.bfloat16), q_tl.to(tl.bfloat16)
                p_t, q_t = p_t.to(torch.bfloat16), q_t.to(torch.bfloat16)
            check(f"gemm {dt_name}", p_tl @ q_tl, p_t @ q_t, 2e-2 if dt_name == "bfloat16" else 1e-4)
            ms_tl = time_tl(dev, lambda: p_tl @ q_tl, 5, reps)
            ms_t = time_torch(torch, lambda: p_t @ q_t, 5, reps)
            row(f"gemm {g}^3 {dt_name}", "TFLOP/s", flops / ms_tl / 1e9, flops / ms_t / 1e9)
            del p_tl, q_tl, p_t, q_t

    print(f"\nmemory: {dev.memory_stats()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": repr(dev), "torch": torch.__version__, "rows": rows}, f, indent=1)
    print("\n| case | unit | tensorlite | torch | ratio (>=1: tensorlite as fast or faster) | % of d2d copy (tl / torch) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        pct = (f"{r['tl_pct_of_copy']:.0f}% / {r['torch_pct_of_copy']:.0f}%" if "tl_pct_of_copy" in r else "")
        print(f"| {r['case']} | {r['unit']} | {r['tensorlite']:.2f} | {r['torch']:.2f} | "
              f"{r['ratio_vs_torch']:.2f} | {pct} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
