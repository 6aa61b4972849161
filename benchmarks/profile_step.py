"""Where one GPT training step spends its GPU time: a per-kernel table (a diagnostic, not a test).

    python benchmarks/profile_step.py [--device cuda] [--dtype bf16] [--steps 3] [--top 25]

Runs examples/train_gpt.py's GPT at bench_nn.py's `gpt` size (d_model 512, 6 layers, 8 heads,
vocab 8192, batch 32 x 256): forward, cross_entropy, backward, AdamW step. First the plain
step time (wall clock, synchronised). Then every kernel launch and every BLAS call is
bracketed by two device events, and the table lists GPU milliseconds per step by kernel
name, the launch counts, and the sum against the wall time: when the sum is far below the
wall time, the step is host-bound (Python dispatch), otherwise the top rows are the work to
speed up. Bracketing serialises nothing on the GPU but adds host work, so the wall time of
the profiled steps is not the step time.
The header also counts the step's blocking device reads (device-to-host copies: error
flags, .item()): each one stops the host from queuing work ahead of the GPU.

`--device null` runs the same step on a null GPU: the real GpuDevice and GpuStorage (every
launch packed, every BLAS call checked) over a platform that drops the work, on any machine.
Its wall time is the host's share of a step, the floor a real GPU step cannot go below
(minus the vendor launch calls themselves, ~2 us each), and `--host N` shows where it goes.
"""
from __future__ import annotations

import argparse
import collections
import cProfile
import os
import pstats
import sys
import time

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(_HERE), "examples"))

import tensorlite as tl  # noqa: E402
from tensorlite import dtype as dtypes  # noqa: E402
from tensorlite.backend import get_device  # noqa: E402


def register_null_device():
    import tempfile
    from tensorlite.backends.rocm.device import GpuDevice
    from tensorlite.backend import register
    from tensorlite.backends.rocm.null import NullPlatform
    os.environ["TENSORLITE_CACHE_DIR"] = tempfile.mkdtemp(prefix="tl_null_")  # its "code objects" stay out
    platform = NullPlatform()
    register("null", lambda ordinal: GpuDevice(platform, ordinal))


class KernelTimer:
    """Wraps a GpuDevice's launch and its BLAS's GEMMs (plain and with an epilogue) so each
    call records a pair of events."""

    def __init__(self, dev):
        self.dev, self.pending = dev, []
        self._launch, blas = dev.launch, dev.blas
        self._gemm, self._gemm_epilogue = blas.gemm_strided_batched, blas.gemm_epilogue

        def launch(func, *args, **kwargs):
            self._timed(func.name, self._launch, func, *args, **kwargs)

        def name(dtype, trans_a, trans_b, m, n, k):
            return f"gemm {dtypes.get(dtype).short} {'T' if trans_a else 'N'}{'T' if trans_b else 'N'} {m}x{n}x{k}"

        def gemm(dtype, trans_a, trans_b, m, n, k, *args, **kwargs):
            self._timed(name(dtype, trans_a, trans_b, m, n, k), self._gemm, dtype, trans_a, trans_b, m, n, k,
                        *args, **kwargs)

        def gemm_epilogue(dtype, trans_a, trans_b, m, n, k, *args):  # args[-1]: the epilogue
            return self._timed(f"{name(dtype, trans_a, trans_b, m, n, k)} +{args[-1]}", self._gemm_epilogue, dtype,
                               trans_a, trans_b, m, n, k, *args)
        dev.launch, blas.gemm_strided_batched, blas.gemm_epilogue = launch, gemm, gemm_epilogue
        self._blas = blas

    def _timed(self, name, fn, *args, **kwargs):
        e0 = self.dev.event().record()
        out = fn(*args, **kwargs)
        self.pending.append((name, e0, self.dev.event().record()))
        return out

    def collect(self):
        """{name: (ms, count)} over the calls since the last collect (synchronises)."""
        self.dev.synchronize()
        table = collections.defaultdict(lambda: [0.0, 0])
        for name, e0, e1 in self.pending:
            row = table[name]
            row[0] += e0.elapsed_ms(e1)
            row[1] += 1
        self.pending.clear()
        return table

    def remove(self):
        del self.dev.launch
        self._blas.gemm_strided_batched, self._blas.gemm_epilogue = self._gemm, self._gemm_epilogue


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="f32", choices=("f32", "bf16"))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--small", action="store_true", help="tiny sizes (a dry run on any device)")
    ap.add_argument("--host", type=int, default=0, metavar="N",
                    help="also profile the host side (cProfile) of the steps and print its top N functions")
    args = ap.parse_args(argv)
    from train_gpt import GPT
    if args.device == "null":
        register_null_device()

    vocab, seq, d_model, n_layer, n_head, batch = ((128, 32, 64, 2, 2, 4) if args.small
                                                   else (8192, 256, 512, 6, 8, 32))
    rng = np.random.default_rng(0)
    ids = rng.integers(0, vocab, (batch, seq + 1))
    x = tl.tensor(ids[:, :-1], device=args.device)
    y = tl.tensor(ids[:, 1:].reshape(-1), device=args.device)
    tl.manual_seed(0)
    model = GPT(vocab, seq, d_model, n_layer, n_head).to(args.device)
    model.compute_dtype = tl.bfloat16 if args.dtype == "bf16" else tl.float32
    opt = tl.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    dev = get_device(args.device)

    def step():
        loss = tl.nn.functional.cross_entropy(model(x).reshape(-1, vocab), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    for _ in range(2):
        step().item()
    walls, reads, dtoh = [], [0], dev.dtoh

    def counted_dtoh(*a, **kw):  # a device-to-host read makes the host wait for the GPU
        reads[0] += 1
        return dtoh(*a, **kw)
    dev.dtoh = counted_dtoh
    try:
        for _ in range(args.steps):
            t0 = time.perf_counter()
            step()
            dev.synchronize()
            walls.append((time.perf_counter() - t0) * 1e3)
    finally:
        del dev.dtoh
    wall = float(np.median(walls))

    if args.host:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.steps):
            step()
        dev.synchronize()
        prof.disable()
        print(f"host profile, {args.steps} steps (cumulative includes the GPU waits of synchronising calls):")
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.host)

    timer = KernelTimer(dev)
    totals = collections.defaultdict(lambda: [0.0, 0])
    try:
        for _ in range(args.steps):
            step()
            for name, (ms, n) in timer.collect().items():
                totals[name][0] += ms / args.steps
                totals[name][1] += n / args.steps
    finally:
        timer.remove()
    gpu = sum(ms for ms, _ in totals.values())
    launches = sum(n for _, n in totals.values())
    print(f"GPT step d{d_model} L{n_layer} h{n_head} V{vocab} b{batch}x{seq} {args.dtype} on {dev}: "
          f"wall {wall:.2f} ms/step ({batch * seq / wall * 1e3:.0f} tokens/s), GPU sum {gpu:.2f} ms, "
          f"{launches:.0f} launches, {reads[0] / args.steps:.0f} blocking device reads")
    print("| kernel | ms/step | % of GPU sum | calls/step | us/call |\n|---|---|---|---|---|")
    for name, (ms, n) in sorted(totals.items(), key=lambda kv: (-kv[1][0], -kv[1][1]))[:args.top]:
        print(f"| {name} | {ms:.3f} | {100 * ms / max(gpu, 1e-9):.1f}% | {n:.0f} | {1e3 * ms / n:.1f} |")


if __name__ == "__main__":
    main()
