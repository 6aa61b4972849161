"""nn.LSTM, nn.GRU and nn.RNN forward+backward on the `cpu` backend against PyTorch's CPU build, same
machine, same process: a 2-layer recurrent stack the size of PyTorch's word_language_model example
(200 inputs, 200 hidden, 35 steps of a batch of 20), median seconds of a step (zero_grad, forward,
backward of a fixed weighting of every output) after warm-up, both frameworks limited to the same
threads (torch.set_num_threads, numpy's BLAS through threadpoolctl, tl.set_num_threads where it exists).

    python benchmarks/bench_cpu_rnn.py [--steps 30] [--threads 1 2] [--dtype float32]

Both frameworks get the same weights (torch's initialisation copied into tensorlite's parameters)
and inputs, so the steps do the same arithmetic; the first step's outputs are compared.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

SIZE = dict(input=200, hidden=200, layers=2, seq=35, batch=20)
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


def step_times(model, x, weights, steps, warmup):
    """Seconds per step, each measured on its own; one framework's steps run together (idle BLAS
    and OpenMP workers spin after a parallel section and would slow the other's next step)."""
    times, first = [], None
    for i in range(warmup + steps):
        start = time.perf_counter()
        model.zero_grad()
        xi = x.detach().requires_grad_(True)
        out, h = model(xi)
        h = h if isinstance(h, tuple) else (h,)
        loss = (out * weights[0]).sum() + sum((s * w).sum() for s, w in zip(h, weights[1:]))
        loss.backward()
        if i >= warmup:
            times.append(time.perf_counter() - start)
        if first is None:
            first = out.detach().numpy()
    return times, first


def run_case(name, kw, threads, steps, warmup, dtype, torch, tl):
    kind = name.split()[0]
    limit_threads(threads, torch, tl)
    torch.manual_seed(0)
    tdt = getattr(torch, dtype)
    t_model = getattr(torch.nn, kind)(SIZE["input"], SIZE["hidden"], SIZE["layers"], **kw).to(tdt)
    l_model = getattr(tl.nn, kind)(SIZE["input"], SIZE["hidden"], SIZE["layers"], dtype=getattr(tl, dtype), **kw)
    l_model.load_state_dict({k: tl.tensor(v.detach().numpy()) for k, v in t_model.state_dict().items()})
    rng = np.random.default_rng(0)
    npdt = np.dtype(dtype)
    x = rng.standard_normal((SIZE["seq"], SIZE["batch"], SIZE["input"])).astype(npdt)
    d = 2 if kw.get("bidirectional") else 1
    ws = [rng.standard_normal((SIZE["seq"], SIZE["batch"], d * SIZE["hidden"])).astype(npdt)] + \
        [rng.standard_normal((d * SIZE["layers"], SIZE["batch"], SIZE["hidden"])).astype(npdt)
         for _ in range(2 if kind == "LSTM" else 1)]
    t_times, t_out = step_times(t_model, torch.tensor(x), [torch.tensor(w) for w in ws], steps, warmup)
    l_times, l_out = step_times(l_model, tl.tensor(x), [tl.tensor(w) for w in ws], steps, warmup)
    err = float(np.max(np.abs(l_out - t_out)))
    return statistics.median(l_times), statistics.median(t_times), err


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    args = p.parse_args(argv)
    import torch
    import tensorlite as tl
    rows = []
    for threads in args.threads:
        for name in args.cases:
            s, t, err = run_case(name, CASES[name], threads, args.steps, args.warmup, args.dtype, torch, tl)
            rows.append((name, threads, s * 1e3, t * 1e3, err))
            print(f"{name} {threads} thread(s): tensorlite {s * 1e3:.2f} ms, torch {t * 1e3:.2f} ms, "
                  f"{s / t:.2f}x, max |out diff| {err:.1e}", file=sys.stderr)
    print(f"\n{args.dtype}, {SIZE['layers']} layers, {SIZE['input']} inputs, {SIZE['hidden']} hidden, "
          f"{SIZE['seq']} steps x batch {SIZE['batch']}; median of {args.steps} steps after {args.warmup} warm-up")
    print("| layer | threads | tensorlite cpu (ms/step) | torch cpu (ms/step) | ratio (tensorlite / torch) |")
    print("|---|---|---|---|---|")
    for name, threads, s, t, _ in rows:
        print(f"| {name} | {threads} | {s:.2f} | {t:.2f} | {s / t:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
