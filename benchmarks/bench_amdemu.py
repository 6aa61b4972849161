"""The emulated AMD platform's executor: CPU time per kernel family (a benchmark, not a test).

    TENSORLITE_AMDEMU=gfx90a python benchmarks/bench_amdemu.py [--reps 3] [--cases gemm,softmax]
                                                               [--profile out.prof] [--json out.json]

A fixed set of small programs, each of the kernel families the entry-point tour
(tests/test_amdemu_entry_points.py) executes, runs on the emulated device of the
architecture TENSORLITE_AMDEMU names. One warm-up run per case compiles its code objects
(hiprtc, disk cache) and fills the executor's decode caches; then each case runs `--reps`
times and the table gives the median process CPU time (time.process_time: the machine's
cores are shared, so wall time is noisy; it is given too) and the total. What is timed is
the executor's interpreting, the host-side framework around it and the copies to and from
the device; no compile. With --profile, a cProfile of one more run of every case is
written (read it with `python -m pstats`).

Emulated: the numbers say how fast the interpreter is, nothing about an AMD GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np


def cases(tl, F, dev):
    """name -> a program of one kernel family on `dev` (returns something to sync on)."""
    rng = np.random.default_rng(0)

    def arr(*shape, lo=-1.0, hi=1.0):
        return rng.uniform(lo, hi, shape).astype(np.float32)

    x = tl.tensor(arr(64, 65), device=dev)
    y = tl.tensor(arr(64, 65), device=dev)
    h = x.to(tl.float16)
    r = tl.tensor(arr(3, 40), device=dev, requires_grad=True)
    ln = [tl.tensor(arr(*s), device=dev, requires_grad=True) for s in ((3, 37), (37,), (37,))]
    a, b = tl.tensor(arr(33, 40), device=dev), tl.tensor(arr(40, 24), device=dev)
    ah, bh = a.to(tl.float16), b.to(tl.float16)
    table = tl.tensor(arr(50, 8), device=dev)
    ids = tl.tensor(rng.integers(0, 50, 40), device=dev)
    gidx = tl.tensor(rng.integers(0, 8, (50, 3)), device=dev)
    qkv32 = [tl.tensor(arr(1, 2, 6, 32), device=dev, requires_grad=True) for _ in range(3)]
    qkv64 = [tl.tensor(arr(1, 2, 6, 64), device=dev, requires_grad=True).to(tl.float16).detach().requires_grad_()
             for _ in range(3)]
    s = tl.tensor(arr(4, 300), device=dev)
    img = tl.tensor(arr(1, 2, 8, 8), device=dev)
    ker = tl.tensor(arr(3, 2, 3, 3), device=dev)

    def backward(out, inputs):
        out.sum().backward()
        return [t.grad for t in inputs]

    return {
        "elementwise": lambda: [(x * y + 1.0).exp(), tl.where(x > y, x, y), h * h],
        "casts": lambda: [x.to(t) for t in (tl.float16, tl.bfloat16, tl.int32, tl.uint8, tl.float64)],
        "reductions": lambda: [x.sum(1), x.amax(0), x.argmax(1), s.mean(1), h.sum()],
        "softmax": lambda: backward(F.softmax(r, -1) * r, [r]),
        "layer_norm": lambda: backward(F.layer_norm(ln[0], (37,), ln[1], ln[2]), ln),
        "gemm": lambda: [a @ b, ah @ bh],
        "index": lambda: [tl.index_select(table, 0, ids), tl.gather(table, 1, gidx),
                          tl.scatter_add(table, 1, gidx, table[:, :3])],
        "attention_f32": lambda: backward(F.scaled_dot_product_attention(*qkv32, is_causal=True), qkv32),
        "attention_f16": lambda: backward(F.scaled_dot_product_attention(*qkv64), qkv64),
        "sort_scan": lambda: [tl.sort(s, dim=1), s.cumsum(1)],
        "conv": lambda: [F.conv2d(img, ker, padding=1), F.max_pool2d(img, 2)],
    }


def sync(result):
    """Copy every tensor of a result to the host (launches complete in order; this waits)."""
    if isinstance(result, (list, tuple)):
        for r in result:
            sync(r)
    elif result is not None:
        result.numpy()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--profile", default="", help="write a cProfile of one run of the cases here")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    arch = os.environ.get("TENSORLITE_AMDEMU")
    if not arch:
        sys.exit("set TENSORLITE_AMDEMU to an emulated architecture (gfx90a, gfx940, gfx1100)")
    import tensorlite as tl
    from tensorlite.nn import functional as F
    status = dict(tl.backend.available()).get("amdemu")
    if status is not True:
        sys.exit(f"backend 'amdemu' unavailable: {status}")
    programs = cases(tl, F, "amdemu")
    chosen = [c for c in args.cases.split(",") if c] or list(programs)
    rows = {}
    for name in chosen:
        program = programs[name]
        sync(program())  # warm-up: compile, load, decode
        cpu, wall = [], []
        for _ in range(args.reps):
            c0, w0 = time.process_time(), time.perf_counter()
            sync(program())
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
        rows[name] = (statistics.median(cpu), statistics.median(wall))
        print(f"  {name:<14} cpu {rows[name][0] * 1e3:9.1f} ms   wall {rows[name][1] * 1e3:9.1f} ms", flush=True)
    total_cpu, total_wall = sum(r[0] for r in rows.values()), sum(r[1] for r in rows.values())
    print(f"{arch}: median of {args.reps} after a warm-up")
    print("| case | cpu ms | wall ms |\n|---|---:|---:|")
    for name, (c, w) in rows.items():
        print(f"| {name} | {c * 1e3:.1f} | {w * 1e3:.1f} |")
    print(f"| total | {total_cpu * 1e3:.1f} | {total_wall * 1e3:.1f} |")
    if args.profile:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
        for name in chosen:
            sync(programs[name]())
        prof.disable()
        prof.dump_stats(args.profile)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"arch": arch, "reps": args.reps, "cpu_s": {k: v[0] for k, v in rows.items()},
                       "wall_s": {k: v[1] for k, v in rows.items()}, "total_cpu_s": total_cpu,
                       "total_wall_s": total_wall}, f, indent=1)


if __name__ == "__main__":
    main()
