"""A 1.1B Llama decode step's one-row products with int8 weights against bf16, one by one, each
captured in a graph over a ring of distinct weights larger than L2 (as a decode step reads them:
once), so one GPU call tells whether the int8 GEMVs stream:

    python benchmarks/probe_int8_products.py [--device cuda]

us per product and the weight's GB/s for: the bf16 product through the BLAS (cuBLAS on NVIDIA;
ops.matmul.GEMV_MAX_ROWS=0), through gemv1 (=1, decoding's setting), and as the decode step runs
it (`fused`: F.rms_norm_linear before q/k/v, gate/up (with SwiGLU) and the LM head, tl.addmm's
residual add after o_proj and down: gemv1_norm(_silu), gemv1); the int8 product through
gemv1_q8 (F.linear_int8) and as the int8 decode step runs it (F.rms_norm_linear(scale=),
F.linear_int8(residual=): gemv1_q8_norm(_silu), gemv1_q8); and the int8 floor, its weight read
once at the copy bandwidth measured here. The last lines sum the fused products over a decode
step (22 layers and the LM head): their ratio bounds what int8 weights can give the step's
tokens/s, the rest of the step (attention, rope, the cache) unchanged. `--device null` runs the
host side on the null GPU platform (no timings: a check that the script runs).
"""
from __future__ import annotations

import argparse
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(os.path.dirname(_HERE), "examples"))

import tensorlite as tl  # noqa: E402
import tensorlite.nn.functional as F  # noqa: E402
from tensorlite.backend import get_device  # noqa: E402
from tensorlite.backends.rocm.ops import matmul  # noqa: E402

from profile_decode import copy_bandwidth  # noqa: E402
from profile_step import KernelTimer, register_null_device  # noqa: E402

# (n, k) of each product of the 1.1B shape (bench_decode.py's), q/k/v and gate/up fused as
# examples/llama.py fuses them, and how often a decode step runs it
SHAPES = {"q/k/v": ((2560, 2048), 22), "o_proj": ((2048, 2048), 22), "gate/up": ((11264, 2048), 22),
          "down": ((2048, 5632), 22), "lm_head": ((32000, 2048), 1)}
NORM_BEFORE, GATED, RESIDUAL_AFTER = ("q/k/v", "gate/up", "lm_head"), ("gate/up",), ("o_proj", "down")
RING_MB = 600  # each ring's weights together: several times an H200's 60 MB L2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    if args.device == "null":
        register_null_device()
    dev = get_device(args.device)
    copy_gbs = copy_bandwidth(dev) / 1e9

    def median_us(replay, per_replay):
        times = []
        for _ in range(7):
            e0 = dev.event().record()
            replay()
            e1 = dev.event().record()
            e1.synchronize()
            times.append(e0.elapsed_ms(e1) * 1e3 / per_replay)
        return sorted(times)[3]

    def graphed_us(product, weights, gemv_rows=1):
        """(us per product of `product(w)` for each w of `weights`, replayed as one graph, and the
        kernels and BLAS calls one product launches)."""
        saved = matmul.GEMV_MAX_ROWS
        matmul.GEMV_MAX_ROWS = gemv_rows
        try:
            with tl.no_grad():
                timer = KernelTimer(dev)
                try:
                    product(weights[0])
                    launched = "+".join(timer.collect())
                finally:
                    timer.remove()
                for w in weights:  # compiles the kernels outside the capture
                    product(w)
                g = tl.graphs.Graph()
                with tl.graphs.graph(g, device=args.device):
                    kept = [product(w) for w in weights]  # noqa: F841  (the graph's outputs)
            return median_us(g.replay, len(weights)), launched
        finally:
            matmul.GEMV_MAX_ROWS = saved

    def gbs(nbytes, us):
        return nbytes / us / 1e3 if us > 0 else float("nan")

    print(f"copy bandwidth {copy_gbs:.0f} GB/s (read + write of a 1 GiB copy) on {dev}")
    print("| product | weight | bf16 BLAS us (GB/s) | bf16 gemv1 us (GB/s) | bf16 fused us | int8 gemv1_q8 us (GB/s) "
          "| int8 fused us (GB/s) | int8 floor us | bf16 fused / int8 fused |")
    print("|---|---|---|---|---|---|---|---|---|")
    step_bf16 = step_int8 = 0.0
    launched = []  # each product's kernels, column by column
    for name, ((n, k), per_step) in SHAPES.items():
        bf16_bytes, int8_bytes = 2 * n * k, n * k + 2 * n  # the weight (and the int8 scales)
        ring = max(4, int(RING_MB * 1e6 / int8_bytes))
        x = tl.randn(1, k, dtype=tl.bfloat16, device=args.device)
        norm_w = tl.randn(k, dtype=tl.bfloat16, device=args.device)
        residual = tl.randn(1, n, dtype=tl.bfloat16, device=args.device)
        scale = tl.rand(n, dtype=tl.bfloat16, device=args.device) * 0.01
        w = tl.randn(n, k, dtype=tl.bfloat16, device=args.device) * 0.02
        q = tl.randint(-127, 128, (n, k), dtype=tl.int8, device=args.device)
        bf16_ring = [w.clone() for _ in range(max(4, int(RING_MB * 1e6 / bf16_bytes)))]
        int8_ring = [q.clone() for _ in range(ring)]

        def fused(w, name=name, x=x, k=k, norm_w=norm_w, residual=residual):
            if name in RESIDUAL_AFTER:
                return tl.addmm(residual, x, w.mT)
            if name in NORM_BEFORE:
                return F.rms_norm_linear(x, k, norm_w, w, eps=1e-5, gated=name in GATED)
            return F.linear(x, w)

        def fused_int8(q, name=name, x=x, k=k, norm_w=norm_w, residual=residual, scale=scale):
            if name in RESIDUAL_AFTER:
                return F.linear_int8(x, q, scale, residual=residual)
            if name in NORM_BEFORE:
                return F.rms_norm_linear(x, k, norm_w, q, None, 1e-5, name in GATED, scale=scale)
            return F.linear_int8(x, q, scale)

        plain = lambda w, x=x: F.linear(x, w)  # noqa: E731
        plain_int8 = lambda q, x=x, scale=scale: F.linear_int8(x, q, scale)  # noqa: E731
        (us_blas, k_blas), (us_gemv, k_gemv), (us_fused, k_fused) = (
            graphed_us(plain, bf16_ring, 0), graphed_us(plain, bf16_ring), graphed_us(fused, bf16_ring))
        (us_q8, k_q8), (us_q8_fused, k_q8_fused) = graphed_us(plain_int8, int8_ring), graphed_us(fused_int8, int8_ring)
        launched.append(f"{name}: {k_blas}, {k_gemv}, {k_fused}, {k_q8}, {k_q8_fused}")
        floor = int8_bytes / copy_gbs / 1e3 if copy_gbs > 0 else float("nan")
        ratio = us_fused / us_q8_fused if us_q8_fused > 0 else float("nan")
        print(f"| {name} | {n}x{k} | {us_blas:.2f} ({gbs(bf16_bytes, us_blas):.0f}) | {us_gemv:.2f} "
              f"({gbs(bf16_bytes, us_gemv):.0f}) | {us_fused:.2f} | {us_q8:.2f} ({gbs(int8_bytes, us_q8):.0f}) | "
              f"{us_q8_fused:.2f} ({gbs(int8_bytes, us_q8_fused):.0f}) | {floor:.2f} | {ratio:.2f} |")
        step_bf16 += per_step * us_fused
        step_int8 += per_step * us_q8_fused
        del bf16_ring, int8_ring, fused, fused_int8, plain, plain_int8  # the closures hold the weights too
    ratio = step_bf16 / step_int8 if step_int8 > 0 else float("nan")
    print(f"a decode step's products, fused as it runs them: bf16 {step_bf16 / 1e3:.3f} ms, int8 "
          f"{step_int8 / 1e3:.3f} ms ({ratio:.2f}x)")
    print("kernels launched, by column:\n  " + "\n  ".join(launched))


if __name__ == "__main__":
    main()
