"""A 1.1B Llama decode step's bf16 products of one row, one by one, each captured in a graph
over a ring of distinct weights larger than L2 (as a decode step reads them: once):

    python benchmarks/probe_decode_products.py [--device cuda]

us per product for torch's F.linear (torch.cuda.CUDAGraph), tensorlite's F.linear through the
BLAS (ops.matmul.GEMV_MAX_ROWS=0) and through its GEMV kernels (=1, decoding's setting), the
product as examples/llama.py's decode step runs it (`fused`: q/k/v, gate/up and the LM head
with the RMSNorm before them, F.rms_norm_linear, gate/up with SwiGLU's gate too; o_proj and
down with the residual add after them, tl.addmm), and the floor: the weight read once at
4.08 TB/s (the H200's measured copy bandwidth).
"""
import argparse

import torch

import tensorlite as tl
import tensorlite.nn.functional as F
from tensorlite.backends.rocm.ops import matmul

SHAPES = {"q/k/v": (2560, 2048), "o_proj": (2048, 2048), "gate/up": (11264, 2048), "down": (2048, 5632),
          "lm_head": (32000, 2048)}
NORM_BEFORE, GATED, RESIDUAL_AFTER = ("q/k/v", "gate/up", "lm_head"), ("gate/up",), ("o_proj", "down")
RING_MB, COPY_GBS = 600, 4.08e3


def _median_us(record, replay, n):
    times = []
    for _ in range(7):
        times.append(record(replay) * 1e3 / n)
    return sorted(times)[3]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    dev = tl.backend.get_device(args.device)

    def torch_ms(replay):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); replay(); e1.record(); e1.synchronize()  # noqa: E702
        return e0.elapsed_time(e1)

    def tl_ms(replay):
        e0, e1 = dev.event(), dev.event()
        e0.record(); replay(); e1.record(); e1.synchronize()  # noqa: E702
        return e0.elapsed_ms(e1)

    print(f"{'product':>8} {'weight':>14} {'MB':>6} {'torch us':>9} {'tl BLAS':>8} {'tl GEMV':>8} {'tl fused':>9} "
          f"{'floor us':>9}")
    for name, (n, k) in SHAPES.items():
        mb = n * k * 2 / 1e6
        ring = max(4, int(RING_MB / mb))
        weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(ring)]
        x = torch.randn(1, 1, k, device="cuda", dtype=torch.bfloat16)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the default stream, as torch's graph capture wants
            for w in weights:
                torch.nn.functional.linear(x, w)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs = [torch.nn.functional.linear(x, w) for w in weights]
        us_torch = _median_us(torch_ms, graph.replay, ring)
        tl_weights, tl_x = [tl.from_dlpack(w) for w in weights], tl.from_dlpack(x)
        norm_w = tl.from_dlpack(torch.randn(k, device="cuda", dtype=torch.bfloat16))
        residual = tl.from_dlpack(torch.randn(1, n, device="cuda", dtype=torch.bfloat16))

        def fused(w, name=name, residual=residual, tl_x=tl_x, k=k, norm_w=norm_w):
            if name in RESIDUAL_AFTER:
                return tl.addmm(residual, tl_x[0], w.mT)
            return F.rms_norm_linear(tl_x, k, norm_w, w, eps=1e-5, gated=name in GATED) if name in NORM_BEFORE \
                else F.linear(tl_x, w)

        def tl_us(product, gemv_rows, tl_weights=tl_weights, ring=ring):
            saved = matmul.GEMV_MAX_ROWS
            matmul.GEMV_MAX_ROWS = gemv_rows
            try:
                for w in tl_weights:
                    product(w)
                g = tl.graphs.Graph()
                with tl.graphs.graph(g, device=args.device):
                    kept = [product(w) for w in tl_weights]  # noqa: F841  (the graph's outputs)
                return _median_us(tl_ms, g.replay, ring)
            finally:
                matmul.GEMV_MAX_ROWS = saved
        plain = lambda w, tl_x=tl_x: F.linear(tl_x, w)  # noqa: E731
        print(f"{name:>8} {n:>6}x{k:<7} {mb:6.1f} {us_torch:9.2f} {tl_us(plain, 0):8.2f} {tl_us(plain, 1):8.2f} "
              f"{tl_us(fused, 1):9.2f} {mb / COPY_GBS * 1e3:9.2f}")
        del weights, outs, graph, tl_weights, fused, tl_us, plain  # the closures hold the weights too
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
