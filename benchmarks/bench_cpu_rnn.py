"""nn.LSTM, nn.GRU and nn.RNN forward+backward on the `cpu` backend against PyTorch's CPU build, same
machine, same process: a 2-layer recurrent stack the size of PyTorch's word_language_model example
(200 inputs, 200 hidden, 35 steps of a batch of 20: the GEMMs dominate) and a small one (32 inputs,
64 hidden, batch 8: the per-step costs do), median seconds of a step (zero_grad, forward,
backward of a fixed weighting of every output) after warm-up, wall time and this process's CPU
time (the fairer measure at 1 thread on a machine that others share), both frameworks limited to the same
threads (torch.set_num_threads, numpy's BLAS through threadpoolctl, tl.set_num_threads where it exists).

    python benchmarks/bench_cpu_rnn.py [--steps 30] [--threads 1 2] [--sizes wlm small] [--dtype float32]
    python benchmarks/bench_cpu_rnn.py --device cuda --threads 1    # on a GPU: torch's cuDNN layers

On a GPU (`--device cuda` or `rocm`; torch on its `cuda` device) each step ends with both
frameworks' device synchronize, so the wall time is the step's; tensorlite's layer is then a GEMM
and one cell kernel a step each way (kernels/rnn.hip), torch's cuDNN's fused layers.

Both frameworks get the same weights (torch's initialisation copied into tensorlite's parameters)
and inputs, so the steps do the same arithmetic; the first step's outputs are compared.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

SIZES = {"wlm": dict(input=200, hidden=200, layers=2, seq=35, batch=20),  # word_language_model's defaults
         "small": dict(input=32, hidden=64, layers=2, seq=35, batch=8)}   # per-step costs outweigh the GEMMs
CASES = {"LSTM": {}, "GRU": {}, "RNN": {}, "LSTM bidirectional": {"bidirectional": True}}


def limit_threads(n: int, torch, tl) -> None:
    """n threads for torch, numpy's BLAS and tensorlite (where it has a control of its own)."""
    torch.set_num_threads(n)
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(n, user_api="blas")
    except ImportError:
        print("threadpoolctl is not installed: numpy's BLAS uses its default threads", file=sys.stderr)
    if hasattr(tl, "set_num_threads"):
        tl.set_num_threads(n)


def step_times(model, x, weights, steps, warmup, sync):
    """(wall seconds, this process's CPU seconds) of each step, measured on its own, and the first
    step's output. One framework's steps run together (idle BLAS and OpenMP workers spin after a
    parallel section and would slow the other's next step); run_case alternates such rounds."""
    times, first = [], None
    for i in range(warmup + steps):
        start, cpu = time.perf_counter(), time.process_time()
        model.zero_grad()
        xi = x.detach().requires_grad_(True)
        out, h = model(xi)
        h = h if isinstance(h, tuple) else (h,)
        loss = (out * weights[0]).sum() + sum((s * w).sum() for s, w in zip(h, weights[1:]))
        loss.backward()
        sync()
        if i >= warmup:
            times.append((time.perf_counter() - start, time.process_time() - cpu))
        if first is None:
            first = out.detach().cpu().numpy()
    return times, first


def run_case(name, kw, size, threads, steps, warmup, rounds, dtype, torch, tl, device="cpu"):
    """Medians (tensorlite wall, torch wall, tensorlite CPU, torch CPU) over `rounds` alternating
    rounds of `steps` steps each (other load on a shared machine then falls on both alike), and
    the largest difference of the first outputs."""
    kind = name.split()[0]
    limit_threads(threads, torch, tl)
    torch.manual_seed(0)
    tdt = getattr(torch, dtype)
    t_model = getattr(torch.nn, kind)(size["input"], size["hidden"], size["layers"], **kw).to(tdt)
    l_model = getattr(tl.nn, kind)(size["input"], size["hidden"], size["layers"], dtype=getattr(tl, dtype), **kw)
    l_model.load_state_dict({k: tl.tensor(v.detach().numpy()) for k, v in t_model.state_dict().items()})
    t_dev = "cpu" if device == "cpu" else "cuda"  # torch names a ROCm GPU `cuda` too
    t_model.to(t_dev)
    l_model.to(device)
    rng = np.random.default_rng(0)
    npdt = np.dtype(dtype)
    x = rng.standard_normal((size["seq"], size["batch"], size["input"])).astype(npdt)
    d = 2 if kw.get("bidirectional") else 1
    ws = [rng.standard_normal((size["seq"], size["batch"], d * size["hidden"])).astype(npdt)] + \
        [rng.standard_normal((d * size["layers"], size["batch"], size["hidden"])).astype(npdt)
         for _ in range(2 if kind == "LSTM" else 1)]
    t_sync = torch.cuda.synchronize if t_dev == "cuda" else (lambda: None)
    t_args = (t_model, torch.tensor(x, device=t_dev), [torch.tensor(w, device=t_dev) for w in ws])
    l_args = (l_model, tl.tensor(x, device=device), [tl.tensor(w, device=device) for w in ws])
    t_times, l_times = [], []
    for _ in range(rounds):
        got, t_out = step_times(*t_args, steps, warmup, t_sync)
        t_times += got
        got, l_out = step_times(*l_args, steps, warmup, lambda: tl.synchronize(device))
        l_times += got
    err = float(np.max(np.abs(l_out - t_out)))
    return tuple(statistics.median(ts[k] for ts in times) for k in (0, 1) for times in (l_times, t_times)) + (err,)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=10, help="steps a round")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds of each framework")
    p.add_argument("--warmup", type=int, default=2, help="steps before each round's")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    p.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    p.add_argument("--device", default="cpu", help="tensorlite's device (torch: cpu, or cuda for a GPU)")
    args = p.parse_args(argv)
    import torch
    import tensorlite as tl
    rows, load_start = [], os.getloadavg()[0]
    for size in args.sizes:
        for threads in args.threads:
            for name in args.cases:
                s, t, s_cpu, t_cpu, err = run_case(name, CASES[name], SIZES[size], threads, args.steps, args.warmup,
                                                   args.rounds, args.dtype, torch, tl, args.device)
                rows.append((size, name, threads, s * 1e3, t * 1e3, s_cpu * 1e3, t_cpu * 1e3))
                print(f"{size} {name} {threads} thread(s): tensorlite {s * 1e3:.2f} ms, torch {t * 1e3:.2f} ms, "
                      f"{s / t:.2f}x (CPU time {s_cpu / t_cpu:.2f}x), max |out diff| {err:.1e}", file=sys.stderr)
    try:
        from threadpoolctl import threadpool_info
        blas = ", ".join(f"{i['internal_api']} {i.get('version')} {i.get('architecture', '')}"
                         for i in threadpool_info() if i["user_api"] == "blas")
    except ImportError:
        blas = "unknown"
    print(f"\nload average {load_start:.2f} at the start, {os.getloadavg()[0]:.2f} at the end; numpy's BLAS: {blas}")
    print(f"{args.device}, {args.dtype}, medians of {args.rounds} alternating rounds of {args.steps} steps (each after "
          f"{args.warmup} warm-up); sizes: " +
          "; ".join(f"{k} {v['layers']} layers, {v['input']} in, {v['hidden']} hidden, {v['seq']} steps x batch "
                    f"{v['batch']}" for k, v in SIZES.items() if k in args.sizes))
    print("| size | layer | threads | tensorlite (ms/step) | torch (ms/step) | ratio | ratio of CPU time |")
    print("|---|---|---|---|---|---|---|")
    for size, name, threads, s, t, s_cpu, t_cpu in rows:
        print(f"| {size} | {name} | {threads} | {s:.2f} | {t:.2f} | {s / t:.2f} | {s_cpu / t_cpu:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
