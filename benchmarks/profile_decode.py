"""Where a Llama decode step spends its time: the captured graph's replay against its
kernels (a diagnostic, not a test).

    python benchmarks/profile_decode.py [--device cuda] [--shape 1.1b] [--batch 1] [--top 25]
                                        [--set ops.matmul.GEMV_MAX_ROWS=4 ...]

Builds examples/llama.py's model at a shape of bench_decode.py (random bf16 weights, nothing
downloaded), prefills a 32-token prompt and captures the decode step as generate() does
(forward of one token, greedy sampling). Then:
- replay: GPU milliseconds per replayed step (device events around many back-to-back
  replays), the host's milliseconds per replay call, and the weight-bandwidth floor (every
  weight read once at the measured copy bandwidth);
- eager: the same step run op by op with every kernel, BLAS call and copy bracketed by
  device events (profile_step.py's KernelTimer): GPU time by kernel name and the counts.
  The replay's time minus that kernel sum is what the graph's nodes cost beyond their
  kernels (launch gaps between tiny kernels).

`--prefill N` instead times a forward over N tokens without a cache (bench_decode.py's prefill
row): wall and host milliseconds per forward (close together: the host is the bound) and its
kernels between device events. `--device null` runs either on the null GPU platform: the
host's share, measurable without a GPU.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import time

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(os.path.dirname(_HERE), "examples"))

import tensorlite as tl  # noqa: E402
from tensorlite.backend import get_device  # noqa: E402

from bench_decode import SHAPES  # noqa: E402
from profile_step import KernelTimer, register_null_device  # noqa: E402


def copy_bandwidth(dev, nbytes=1 << 30) -> float:
    """Bytes per second (read + write) of a device-to-device copy, median of 5."""
    src, dst = tl.empty(nbytes, dtype=tl.uint8, device=str(dev)), tl.empty(nbytes, dtype=tl.uint8, device=str(dev))
    times = []
    for _ in range(6):
        e0 = dev.event().record()
        dst.copy_(src)
        e1 = dev.event().record()
        e1.synchronize()
        times.append(e0.elapsed_ms(e1) / 1e3)
    return 2 * nbytes / max(float(np.median(times[1:])), 1e-12)  # (platforms without timers: 0 s)


def _replay_kernels(dev, graph, replays: int):
    """[(kernel name, GPU ms per replay, launches per replay)] of `replays` replays, longest
    first, from CUPTI through PyTorch's profiler (it sees every kernel of the process, the
    graph's nodes included); [] where PyTorch with CUDA is not there."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        return []
    if dev.name != "cuda" or not torch.cuda.is_available():
        return []
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        dev.synchronize()
    rows = []
    for e in prof.key_averages():
        us = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if us:
            rows.append((e.key, us / replays / 1e3, e.count / replays))
    return sorted(rows, key=lambda r: -r[1])


def _override(item: str) -> None:
    """--set MODULE.NAME=INT: an integer constant of tensorlite.backends.rocm.MODULE, which must exist."""
    import importlib
    target, _, value = item.partition("=")
    module, _, name = target.rpartition(".")
    mod = importlib.import_module(f"tensorlite.backends.rocm.{module}")
    if not module or not hasattr(mod, name) or not isinstance(getattr(mod, name), int):
        raise SystemExit(f"--set {item}: tensorlite.backends.rocm.{module} has no integer constant {name!r}")
    setattr(mod, name, int(value))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shape", default="1.1b", choices=sorted(SHAPES))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--replays", type=int, default=200)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--int8", action="store_true", help="weight-only int8 projections (Llama.quantize_int8)")
    ap.add_argument("--prefill", type=int, default=0, metavar="N",
                    help="time a forward over N tokens without a cache instead of the decode step")
    ap.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=INT",
                    help="override a tuning constant of the GPU backend for this run, to time a choice against "
                         "its alternative in one job: ops.matmul.GEMV_MAX_ROWS=4 (products of up to 4 rows to the GEMV "
                         "kernels), "
                         "launch.SPREAD_ROWS_BELOW=0 (row kernels keep their bandwidth layout for a few rows), "
                         "ops.fused.ROPE_SPREAD_BELOW=0 (rope threads take up to 4 heads whatever the size)")
    args = ap.parse_args(argv)
    import llama
    for item in args.set:
        _override(item)
    if args.device == "null":
        register_null_device()

    dev = get_device(args.device)
    c = llama.LlamaConfig(dict(SHAPES[args.shape], rms_norm_eps=1e-5, max_position_embeddings=4096))
    tl.manual_seed(0)
    with tl.no_grad():
        model = llama.Llama(c).to(args.device, dtype=tl.bfloat16).requires_grad_(False)
        model = model.quantize_int8() if args.int8 else model.fuse_projections()
    if args.prefill:
        return profile_prefill(dev, model, args)
    weight_bytes = sum(p.numel() * p.dtype.itemsize for p in [*model.parameters(), *model.buffers()])
    prompt = 32
    cache = llama.KVCache(c, args.batch, prompt + args.replays + 64, args.device, tl.bfloat16)
    last = tl.zeros(args.batch, 1, dtype=tl.int64, device=args.device)

    @tl.no_grad()
    def step(inputs):
        last.copy_(llama.sample(model(inputs, cache, logits_to_keep=1)[:, -1])[:, None])

    step(tl.tensor(np.random.default_rng(0).integers(0, c.vocab_size, (args.batch, prompt)), device=args.device))
    step(last)  # compiles the single-token kernels
    graph = tl.graphs.Graph()
    with tl.graphs.graph(graph, device=args.device):
        step(last)
    nodes = args.replays - 4
    for _ in range(3):
        graph.replay()
    dev.synchronize()
    e0 = dev.event().record()
    t0 = time.perf_counter()
    for _ in range(nodes):
        graph.replay()
    host_ms = (time.perf_counter() - t0) * 1e3 / nodes
    e1 = dev.event().record()
    e1.synchronize()
    replay_ms = e0.elapsed_ms(e1) / nodes
    cache.length += 1 + 3 + nodes  # the capture's own step counted once, the replays each
    replay_kernels = _replay_kernels(dev, graph, 20)
    cache.length += 20

    bandwidth = copy_bandwidth(dev, 1 << 30 if dev.name in ("cuda", "rocm") else 1 << 12)
    floor_ms = weight_bytes / bandwidth * 1e3
    timer = KernelTimer(dev)
    copies = collections.Counter()
    dtod, memset = dev.dtod, dev.memset

    def timed_copy(kind, fn):
        def run(*a):
            e_start = dev.event().record()
            fn(*a)
            timer.pending.append((kind, e_start, dev.event().record()))
            copies[kind] += 1
        return run
    dev.dtod, dev.memset = timed_copy("memcpy device-to-device", dtod), timed_copy("memset", memset)
    try:
        step(last)
        table = timer.collect()
    finally:
        timer.remove()
        del dev.dtod, dev.memset
    kernel_ms = sum(ms for ms, _ in table.values())
    calls = sum(n for _, n in table.values())
    print(f"decode step, Llama {args.shape} bf16{' (int8 weights)' if args.int8 else ''}, batch {args.batch}, on {dev} "
          f"({dev.props.get('name')}):")
    tokens = args.batch / max(replay_ms, 1e-9) * 1e3
    print(f"  replayed graph: {replay_ms:.3f} ms GPU per step ({tokens:.0f} tokens/s), "
          f"host {host_ms:.3f} ms per replay call")
    print(f"  weights {weight_bytes / 1e9:.2f} GB at {bandwidth / 1e9:.0f} GB/s copy bandwidth: "
          f"floor {floor_ms:.3f} ms ({100 * floor_ms / max(replay_ms, 1e-9):.0f}% of the replay)")
    print(f"  eager step: {calls} kernels, BLAS calls and copies, {kernel_ms:.3f} ms summed between device "
          "events (each time includes the events' own cost: the table below ranks, it does not time)")
    if replay_kernels:
        total = sum(ms for _, ms, _ in replay_kernels)
        print(f"  inside the replays (CUPTI, through PyTorch's profiler): {total:.3f} ms of kernels and copies "
              f"per step; the replay's {replay_ms - total:+.3f} ms beyond them are gaps between nodes")
        print("| kernel in the replayed graph | ms/step | calls/step | us/call |\n|---|---|---|---|")
        for name, ms, n in replay_kernels[:args.top]:
            print(f"| {name[:90]} | {ms:.3f} | {n:.0f} | {1e3 * ms / max(n, 1e-9):.1f} |")
    print("| eager kernel (event-bracketed) | ms/step | % of kernel sum | calls/step | us/call |\n"
          "|---|---|---|---|---|")
    for name, (ms, n) in sorted(table.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"| {name} | {ms:.3f} | {100 * ms / max(kernel_ms, 1e-9):.1f}% | {n} | {1e3 * ms / n:.1f} |")


@tl.no_grad()
def profile_prefill(dev, model, args) -> None:
    """The forward over args.prefill tokens: wall and host ms (medians of 5 after one), kernels."""
    ids = tl.tensor(np.random.default_rng(0).integers(0, model.config.vocab_size, (1, args.prefill)),
                    device=args.device)
    model(ids)
    dev.synchronize()
    walls, hosts = [], []
    for _ in range(5):
        t0 = time.perf_counter()
        model(ids)
        hosts.append(time.perf_counter() - t0)
        dev.synchronize()
        walls.append(time.perf_counter() - t0)
    timer = KernelTimer(dev)
    try:
        model(ids)
        table = timer.collect()
    finally:
        timer.remove()
    print(f"prefill of {args.prefill} tokens, Llama {args.shape} bf16, on {dev} ({dev.props.get('name')}): "
          f"{1e3 * float(np.median(walls)):.2f} ms a forward, {1e3 * float(np.median(hosts)):.2f} ms of it "
          "on the host before the synchronize")
    kernel_ms = sum(ms for ms, _ in table.values())
    print(f"  {sum(n for _, n in table.values())} kernels and BLAS calls, {kernel_ms:.3f} ms summed between device "
          "events (each time includes the events' own cost)")
    print("| kernel (event-bracketed) | ms | calls |\n|---|---|---|")
    for name, (ms, n) in sorted(table.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"| {name} | {ms:.3f} | {n} |")


if __name__ == "__main__":
    main()
