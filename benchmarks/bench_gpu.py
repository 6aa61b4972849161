"""tensorlite vs PyTorch on the same GPU, in one process (a benchmark, not a test).

    python benchmarks/bench_gpu.py [--device cuda] [--reps 7] [--cases all] [--json out.json]
    python benchmarks/bench_gpu.py --device cpu --smoke       # tiny sizes on the host: a dry run

Each case runs the same op on the same data in both frameworks: warm-up first (kernels
compiled and loaded, allocator caches filled), then `reps` timed repetitions of `iters`
calls; the median repetition is reported. GPU work is timed with device events on each
framework's own stream (torch.cuda.Event; tensorlite's GpuDevice.event), each repetition
queued behind a short lead of device work (LEAD_BYTES below says why); the tiny-op
dispatch case and the training step are timed on the host (perf_counter around many calls,
synchronized at both ends), because there the host is part of what is measured. With
`--device cpu` every case uses host timers (and torch on the CPU): numbers from such a run
only show that the script works.

Case groups (--cases, comma-separated; 'all' = dispatch + core + nn, 'nn' = the issue-5 groups):
  dispatch  issue 4: tiny-op dispatch (64x1024 add, us/op; target <= torch), the two
         frameworks' repetitions alternated (a drift of the host's speed falls on both); with
         the launch queue, a third alternated row launches from the calling thread instead.
         --rounds N: N such measurements one after the other, a row each (issue 46: three)
  core   issue 4: a measured device-to-device copy (the bandwidth reference); elementwise add / mul / cast
         f32->bf16 at 64M elements (GB/s, % of copy; target >= 90%); sum and max over 64M f32;
         GEMM 4096^3 f32 and bf16 (TFLOP/s; target >= 0.95x torch). f32 GEMM runs without
         TF32 in both (torch's default, and cuBLAS's CUBLAS_COMPUTE_32F). The linear layers of a
         1.1B Llama's decode step, one bf16 row (GB/s of weight read; target >= torch: the
         backend's GEMV against cuBLAS through torch).
  norms, sdpa, conv, gpt   issue 5, in benchmarks/bench_nn.py (its docstring says what each
         measures and the targets).
The table is printed last, one row per case with its target and whether it was met; a case
that raises is reported as an error row (and the exit status is 1), the others still run.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import sys
import time
import traceback

import numpy as np

GROUPS = ("dispatch", "core", "norms", "sdpa", "conv", "gpt")
NN_GROUPS = ("norms", "sdpa", "conv", "gpt")


# Each timed repetition starts behind ~0.7 ms of queued device work (copies of a scratch
# buffer, on the timed stream), so that the host's latency to its first launch after the
# previous repetition's synchronize is not inside the timed region: once the lead drains,
# the calls are queued back to back and the events measure device time per call. Without
# it that latency was spread over `iters` calls: 1-3 us per call at iters=10 on the H100
# (softmax 64M f32: tensorlite 195.8 -> 192.6 us, torch 229.4 -> 227.5 us).
LEAD_BYTES, LEAD_COPIES = 64 << 20, 16


def _median_ms(record_start, record_end, sync_end, elapsed, fn, iters, reps, warmup, lead=None):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if lead is not None:
            lead()
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
    src = torch.empty(LEAD_BYTES // 4, device="cuda")
    dst = torch.empty_like(src)

    def lead():
        for _ in range(LEAD_COPIES):
            dst.copy_(src)
    return _median_ms(rec, rec, lambda e: e.synchronize(), lambda a, b: a.elapsed_time(b), fn, iters, reps, warmup,
                      lead)


def time_tl(dev, fn, iters, reps, warmup=3):
    src, dst = dev.alloc(LEAD_BYTES), dev.alloc(LEAD_BYTES)

    def lead():
        for _ in range(LEAD_COPIES):
            dev.dtod(dst.ptr, src.ptr, LEAD_BYTES)
    return _median_ms(lambda: dev.event().record(), lambda: dev.event().record(), lambda e: e.synchronize(),
                      lambda a, b: a.elapsed_ms(b), fn, iters, reps, warmup, lead)


def host_us_per_call(*fn_sync, iters, reps, warmup=200):
    """Median us per call of each (fn, sync) pair given, over `reps` repetitions of `iters`
    calls synchronized at both ends; the pairs' repetitions alternate (ABAB...), so that a
    change of the host's speed during the run falls on every pair alike."""
    for fn, sync in fn_sync:
        for _ in range(warmup):
            fn()
        sync()
    times = [[] for _ in fn_sync]
    for _ in range(reps):
        for (fn, sync), t in zip(fn_sync, times):
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            sync()
            t.append((time.perf_counter() - t0) / iters * 1e6)
    return [statistics.median(t) for t in times]


class _Stopped(Exception):
    """SIGTERM (e.g. `timeout`): stop timing, still print what was measured."""


def _on_sigterm(signum, frame):
    raise _Stopped(f"stopped by signal {signum}")


class Bench:
    """What every case needs: both frameworks on one device, timers, data and the result rows.

    `target`: {"ratio": r} (ratio vs torch >= r, the ratio oriented so that >= 1 means
    tensorlite is as fast or faster) and/or {"copy": pct} (tensorlite >= pct % of the measured
    d2d copy bandwidth); a row meets its target when every given bound holds."""

    def __init__(self, args):
        import torch
        import tensorlite as tl
        self.torch, self.tl, self.args = torch, tl, args
        self.device = args.device
        self.gpu = args.device != "cpu"
        self.smoke = args.smoke
        self.dev = tl.backend.get_device(args.device)
        self.tdev = "cuda" if self.gpu else "cpu"  # torch's name for the GPU (ROCm builds of torch use it too)
        self.reps = args.reps
        self.rows = []
        self.rng = np.random.default_rng(0)
        self._copy_gbs = None

    # ---- timers: ms per call --------------------------------------------------------
    def time_tl(self, fn, iters, warmup=3):
        if self.gpu:
            return time_tl(self.dev, fn, iters, self.reps, warmup)
        return host_us_per_call((fn, self.dev.synchronize), iters=iters, reps=self.reps, warmup=warmup)[0] / 1e3

    def time_torch(self, fn, iters, warmup=3):
        if self.gpu:
            return time_torch(self.torch, fn, iters, self.reps, warmup)
        return host_us_per_call((fn, self.sync_torch), iters=iters, reps=self.reps, warmup=warmup)[0] / 1e3

    def host_ms_tl(self, fn, iters, warmup, reps=None):
        return host_us_per_call((fn, self.dev.synchronize), iters=iters, reps=reps or self.reps,
                                warmup=warmup)[0] / 1e3

    def host_ms_torch(self, fn, iters, warmup, reps=None):
        return host_us_per_call((fn, self.sync_torch), iters=iters, reps=reps or self.reps,
                                warmup=warmup)[0] / 1e3

    def sync_torch(self):
        if self.gpu:
            self.torch.cuda.synchronize()

    def free(self):
        """Give cached blocks back between case groups, so one group's peak does not
        crowd the next (both frameworks cache)."""
        import gc
        gc.collect()
        self.dev.empty_cache()
        if self.gpu:
            self.torch.cuda.empty_cache()

    # ---- data -----------------------------------------------------------------------
    def pair(self, shape, dtype="float32"):
        """The same random normal data in both frameworks, on the device, in `dtype`."""
        host = self.rng.standard_normal(shape, dtype=np.float32)
        a, t = self.tl.tensor(host).to(self.device), self.torch.from_numpy(host).to(self.tdev)
        if dtype != "float32":
            a, t = a.to(getattr(self.tl, dtype)), t.to(getattr(self.torch, dtype))
        return a, t

    def check(self, name, tl_out, torch_out, tol):
        """Warn (not fail: a benchmark) when the two results differ beyond `tol`."""
        a = tl_out.float().numpy().astype(np.float64)
        b = torch_out.detach().float().cpu().numpy().astype(np.float64)
        err = float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b))))) if b.size else 0.0
        if not err <= tol:
            print(f"  WARNING {name}: tensorlite and torch differ (rel. max error {err:.2e} > {tol})", flush=True)
        return err

    def copy_gbs(self):
        """The bandwidth reference: the faster of the two frameworks' d2d copies of 64M f32
        (read + write), measured once and recorded as a row."""
        if self._copy_gbs is None:
            n = self.args.elements
            nbytes = 4 * n
            x_t = self.torch.empty(n, device=self.tdev).fill_(1.0)
            out_t = self.torch.empty_like(x_t)
            if self.gpu:
                dev = self.dev
                src, dst = dev.alloc(nbytes), dev.alloc(nbytes)
                dev.memset(src.ptr, 0x3F, nbytes)
                ms_tl = self.time_tl(lambda: dev.dtod(dst.ptr, src.ptr, nbytes), 10)
                note = "tensorlite: cuMemcpyDtoDAsync; torch: copy_"
                del src, dst
            else:  # the cpu backend's storage is numpy
                src, dst = np.ones(n, np.float32), np.empty(n, np.float32)
                ms_tl = self.time_tl(lambda: np.copyto(dst, src), 10)
                note = "tensorlite: numpy copyto (cpu); torch: copy_"
            ms_t = self.time_torch(lambda: out_t.copy_(x_t), 10)
            tl_gbs, t_gbs = 2 * nbytes / ms_tl / 1e6, 2 * nbytes / ms_t / 1e6
            self._copy_gbs = max(tl_gbs, t_gbs)
            self.row(f"d2d copy {size_label(n)} f32 (read+write)", "GB/s", tl_gbs, t_gbs, note=note)
        return self._copy_gbs

    # ---- results --------------------------------------------------------------------
    def row(self, name, unit, tl_value, torch_value, higher_is_better=True, copy=False, note="", target=None):
        ratio = (tl_value / torch_value) if higher_is_better else (torch_value / tl_value)
        r = {"case": name, "unit": unit, "tensorlite": tl_value, "torch": torch_value,
             "ratio_vs_torch": ratio, "note": note, "target": target or {}}
        if copy:
            c = self.copy_gbs()
            r["tl_pct_of_copy"], r["torch_pct_of_copy"] = 100 * tl_value / c, 100 * torch_value / c
        if target:
            r["met"] = (ratio >= target.get("ratio", 0.0)) and \
                ("copy" not in target or r["tl_pct_of_copy"] >= target["copy"])
        self.rows.append(r)
        pct = f", {r['tl_pct_of_copy']:.0f}% of copy" if copy else ""
        print(f"  {name}: tensorlite {tl_value:.3f} {unit}, torch {torch_value:.3f} {unit}, "
              f"ratio {ratio:.2f}{pct}{'  ' + note if note else ''}", flush=True)
        return r

    @contextlib.contextmanager
    def guard(self, label):
        """One case's failure becomes an error row; the group goes on with its next case."""
        try:
            yield
        except _Stopped:
            raise
        except Exception as e:
            traceback.print_exc()
            self.error_row(label, e)

    def error_row(self, group, exc):
        status = "stopped" if isinstance(exc, _Stopped) else "error"
        self.rows.append({"case": f"[{group}]", "unit": "", "status": status, "error": f"{type(exc).__name__}: {exc}"})


def size_label(n):
    """64M for 64 * 2**20 (the label of a size)."""
    for unit, div in (("M", 2 ** 20), ("K", 2 ** 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def _target_text(target):
    parts = []
    if "copy" in target:
        parts.append(f">={target['copy']:.0f}% copy")
    if "ratio" in target:
        parts.append(f">={target['ratio']:g}x torch")
    return ", ".join(parts) or "-"


# ---- issue 4: dispatch, bandwidth, reductions, GEMM ------------------------------------

def dispatch_cases(b):
    tl, torch, dev = b.tl, b.torch, b.dev
    with tl.no_grad(), torch.no_grad():
        a_tl, a_t = b.pair((64, 1024))
        c_tl, c_t = b.pair((64, 1024))
        b.check("tiny add", a_tl + c_tl, a_t + c_t, 1e-6)
        calls = 200 if b.smoke else 5000
        queue = getattr(dev, "_queue", None)  # the launch queue (launch_shim.py), where the device has one

        def without_queue():  # the same op launched by the calling thread, as TENSORLITE_LAUNCH_QUEUE=0 does
            dev._queue = None
            try:
                a_tl + c_tl
            finally:
                dev._queue = queue
        pairs = [(lambda: a_tl + c_tl, dev.synchronize), (lambda: a_t + c_t, b.sync_torch)]
        if queue is not None:
            pairs.append((without_queue, dev.synchronize))
        rounds = b.args.rounds
        for i in range(rounds):  # each round its own medians: the target holds only if it holds in every one
            us = host_us_per_call(*pairs, iters=calls, reps=max(b.reps, 9))
            which = f" (round {i + 1} of {rounds})" if rounds > 1 else ""
            b.row(f"dispatch: add 64x1024 f32{which}", "us/op", us[0], us[1], higher_is_better=False,
                  target={"ratio": 1.0}, note="" if queue is None else "launch queue on")
            if queue is not None:
                b.row(f"dispatch: add 64x1024 f32 (TENSORLITE_LAUNCH_QUEUE=0){which}", "us/op", us[2], us[1],
                      higher_is_better=False, note="the calling thread launches; same process, alternated")


def core_cases(b):
    tl, torch, n = b.tl, b.torch, b.args.elements
    with tl.no_grad(), torch.no_grad():
        b.copy_gbs()
        x_tl, x_t = b.pair((n,))
        y_tl, y_t = b.pair((n,))
        # ---- elementwise -------------------------------------------------------------
        for name, f_tl, f_t, moved in (
                (f"add {size_label(n)} f32", lambda x=x_tl, y=y_tl: x + y, lambda x=x_t, y=y_t: x + y, 12 * n),
                (f"mul {size_label(n)} f32", lambda x=x_tl, y=y_tl: x * y, lambda x=x_t, y=y_t: x * y, 12 * n),
                (f"cast {size_label(n)} f32->bf16", lambda x=x_tl: x.to(tl.bfloat16),
                 lambda x=x_t: x.to(torch.bfloat16), 6 * n)):
            b.check(name, f_tl(), f_t(), 1e-2 if "bf16" in name else 1e-6)
            ms_tl, ms_t = b.time_tl(f_tl, 10), b.time_torch(f_t, 10)
            b.row(name, "GB/s", moved / ms_tl / 1e6, moved / ms_t / 1e6, copy=True, target={"copy": 90})

        # ---- reductions --------------------------------------------------------------
        for name, f_tl, f_t in ((f"sum {size_label(n)} f32", x_tl.sum, x_t.sum),
                                (f"max {size_label(n)} f32", x_tl.max, x_t.max)):
            b.check(name, f_tl(), f_t(), 1e-4)
            ms_tl, ms_t = b.time_tl(f_tl, 10), b.time_torch(f_t, 10)
            b.row(name, "GB/s", 4 * n / ms_tl / 1e6, 4 * n / ms_t / 1e6, copy=True)
        del x_tl, y_tl, x_t, y_t, f_tl, f_t  # the cases' closures hold the inputs too

        # ---- GEMM --------------------------------------------------------------------
        g = b.args.gemm
        flops = 2 * g ** 3
        torch.backends.cuda.matmul.allow_tf32 = False  # torch's default, stated explicitly
        for dt_name in ("float32", "bfloat16"):
            p_tl, p_t = b.pair((g, g), dt_name)
            q_tl, q_t = b.pair((g, g), dt_name)
            b.check(f"gemm {dt_name}", p_tl @ q_tl, p_t @ q_t, 2e-2 if dt_name == "bfloat16" else 1e-4)
            ms_tl = b.time_tl(lambda p=p_tl, q=q_tl: p @ q, 5)
            ms_t = b.time_torch(lambda p=p_t, q=q_t: p @ q, 5)
            b.row(f"gemm {g}^3 {dt_name}", "TFLOP/s", flops / ms_tl / 1e9, flops / ms_t / 1e9, target={"ratio": 0.95})
            del p_tl, q_tl, p_t, q_t

        # ---- GEMV: a decode step's linear layers (one row; the 1.1B Llama's weights) -----
        # GB/s of weight read; 40 calls behind the lead stay ahead of the device (a few us of host each)
        for name, n_out, k in (("qkv", 2560, 2048), ("o_proj", 2048, 2048), ("gate_up", 11264, 2048),
                               ("down", 2048, 5632), ("lm_head", 32000, 2048)):
            x_tl, x_t = b.pair((1, k), "bfloat16")
            w_tl, w_t = b.pair((n_out, k), "bfloat16")
            f_tl = lambda x=x_tl, w=w_tl: tl.nn.functional.linear(x, w)  # noqa: E731
            f_t = lambda x=x_t, w=w_t: torch.nn.functional.linear(x, w)  # noqa: E731
            b.check(f"gemv {name}", f_tl(), f_t(), 2e-2)
            ms_tl, ms_t = b.time_tl(f_tl, 40), b.time_torch(f_t, 40)
            b.row(f"linear 1x{k} . {n_out}x{k}^T bf16 ({name})", "GB/s", 2 * n_out * k / ms_tl / 1e6,
                  2 * n_out * k / ms_t / 1e6, copy=True, target={"ratio": 1.0})
            del x_tl, x_t, w_tl, w_t, f_tl, f_t


def _fmt(v):
    """Three significant figures at most, no exponent for the sizes seen here."""
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.2f}" if abs(v) >= 1 else f"{v:.3g}"


def print_table(rows):
    print("\n| case | unit | tensorlite | torch | ratio (>=1: tensorlite as fast or faster) "
          "| % of d2d copy (tl / torch) | target | met | note |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['case']} | | | | | | | {r['status']} | {r['error'][:200]} |")
            continue
        pct = (f"{r['tl_pct_of_copy']:.0f}% / {r['torch_pct_of_copy']:.0f}%" if "tl_pct_of_copy" in r else "")
        met = ("met" if r["met"] else "missed") if "met" in r else ""
        print(f"| {r['case']} | {r['unit']} | {_fmt(r['tensorlite'])} | {_fmt(r['torch'])} | "
              f"{r['ratio_vs_torch']:.2f} | {pct} | {_target_text(r['target'])} | {met} | {r['note']} |")


def parse_args(argv=None, default_cases="all"):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--reps", type=int, default=None, help="timed repetitions per case (default 7; smoke 3)")
    ap.add_argument("--elements", type=int, default=None, help="elements of the bandwidth cases (default 64M)")
    ap.add_argument("--gemm", type=int, default=None, help="GEMM size (default 4096)")
    ap.add_argument("--cases", default=default_cases,
                    help=f"comma-separated groups of {', '.join(GROUPS)}; 'all'; 'nn' = {','.join(NN_GROUPS)}")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny sizes and few repetitions: checks the script end to end (e.g. --device cpu)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="dispatch: rounds of its alternated repetitions, each reported as its own row "
                         "(issue 46's target: <= 1.0x torch in three)")
    ap.add_argument("--json", default=None, help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error(f"--rounds must be at least 1, got {args.rounds}")
    args.reps = args.reps or (3 if args.smoke else 7)
    args.elements = args.elements or (64 * 2 ** 10 if args.smoke else 64 * 2 ** 20)
    args.gemm = args.gemm or (128 if args.smoke else 4096)
    groups = []
    for g in args.cases.split(","):
        g = g.strip()
        groups += list(GROUPS) if g == "all" else list(NN_GROUPS) if g == "nn" else [g] if g else []
    bad = [g for g in groups if g not in GROUPS]
    if bad:
        ap.error(f"--cases: unknown group(s) {bad}; expected {', '.join(GROUPS)}, all or nn")
    args.groups = list(dict.fromkeys(groups))
    return args


def main(argv=None, default_cases="all"):
    args = parse_args(argv, default_cases)
    b = Bench(args)
    torch, tl, dev = b.torch, b.tl, b.dev
    where = torch.cuda.get_device_name() if b.gpu else "cpu"
    print(f"tensorlite {tl.__version__} on {dev!r}; torch {torch.__version__} on {where}; "
          f"cases {','.join(args.groups)}{' (smoke)' if args.smoke else ''}", flush=True)
    if b.gpu:
        t0 = time.perf_counter()
        dev.warmup()  # every kernel family compiled (disk cache) and loaded before timing
        print(f"kernels ready in {time.perf_counter() - t0:.1f}s", flush=True)
    cases = {"dispatch": dispatch_cases, "core": core_cases}
    if any(g in NN_GROUPS for g in args.groups):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import bench_nn
        cases.update(bench_nn.CASES)
    signal.signal(signal.SIGTERM, _on_sigterm)
    for i, group in enumerate(args.groups):
        t0 = time.perf_counter()
        print(f"[{group}]", flush=True)
        try:
            cases[group](b)
            b.free()
        except _Stopped as e:
            b.error_row(group, e)
            for rest in args.groups[i + 1:]:
                b.error_row(rest, _Stopped("not run"))
            break
        except Exception as e:  # a benchmark reports the failure and goes on with the next group
            traceback.print_exc()
            b.error_row(group, e)
            b.free()
        print(f"[{group}] {time.perf_counter() - t0:.1f}s", flush=True)

    if b.gpu:
        print(f"\nmemory: {dev.memory_stats()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": repr(dev), "torch": torch.__version__, "rows": b.rows}, f, indent=1)
    print_table(b.rows)
    return 1 if any(r.get("status") in ("error", "stopped") for r in b.rows) else 0  # not "unavailable"


if __name__ == "__main__":
    sys.exit(main())
