"""The first-run workloads on the `cpu` backend against PyTorch's CPU build, same machine, same
process: training steps of a small char-level transformer LM and of a small CNN (medians
after warm-up, both frameworks limited to the same threads), and optionally the README's main
job (`examples/train_gpt.py --device cpu`, wall time to its held-out accuracy).

    python benchmarks/bench_cpu.py [--steps 20] [--threads 2] [--train-gpt]

The two frameworks build the same models (sizes below) with PyTorch's initialisation copied
into tensorlite's parameters, so the steps do the same arithmetic.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np

LM = dict(vocab=65, d=128, layers=2, heads=4, seq=64, batch=32)   # char-level LM (tiny-shakespeare sized vocab)
CNN = dict(batch=64, side=28, classes=10)                          # MNIST-sized CNN


def models(nn, F):
    """(char LM, CNN) built with a framework's `nn` and `nn.functional`: torch's and tensorlite's
    share these names, so one definition serves both."""
    class Block(nn.Module):
        def __init__(self, d, h):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.h = h

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, -1)
            q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class LMModel(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.tok, self.pos = nn.Embedding(c["vocab"], c["d"]), nn.Embedding(c["seq"], c["d"])
            self.blocks = nn.ModuleList([Block(c["d"], c["heads"]) for _ in range(c["layers"])])
            self.ln, self.head = nn.LayerNorm(c["d"]), nn.Linear(c["d"], c["vocab"])

        def forward(self, ids):
            x = self.tok(ids) + self.pos.weight[: ids.shape[1]]
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

    cnn = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, CNN["classes"]))
    return LMModel(LM), cnn


def step_times(model, opt, batch, loss_fn, steps, warmup=3):
    """Seconds per training step (forward, backward, AdamW), each measured on its own. One
    framework's steps run together, not alternating with the other's: each one's idle worker
    threads spin for a while after its parallel sections (OpenMP, OpenBLAS) and would take the
    cores from the other's next step (alternating steps measured both 1.3-2.7x slower)."""
    times = []
    for i in range(warmup + steps):
        x, y = batch()
        start = time.perf_counter()
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return times


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--train-gpt", action="store_true", help="also time examples/train_gpt.py --device cpu")
    args = p.parse_args(argv)
    import torch
    import tensorlite as tl
    torch.set_num_threads(args.threads)
    try:  # numpy's BLAS (the cpu backend's matmuls) gets the same number of threads as torch
        from threadpoolctl import threadpool_limits
        threadpool_limits(args.threads, user_api="blas")
    except ImportError:
        print("threadpoolctl is not installed: numpy's BLAS uses its default threads", file=sys.stderr)
    rng = np.random.default_rng(0)
    rows = []
    for name, make_batch, loss in (
            ("char LM step (d128 L2, 32x64 tokens)",
             lambda: (rng.integers(0, LM["vocab"], (LM["batch"], LM["seq"])),) * 2,
             "lm"),
            ("CNN step (2 conv + 2 linear, 64x1x28x28)",
             lambda: (rng.standard_normal((CNN["batch"], 1, CNN["side"], CNN["side"]), dtype=np.float32),
                      rng.integers(0, CNN["classes"], CNN["batch"])), "cnn")):
        torch.manual_seed(0)
        pick = 0 if loss == "lm" else 1
        t_model, l_model = models(torch.nn, torch.nn.functional)[pick], models(tl.nn, tl.nn.functional)[pick]
        l_model.load_state_dict({k: tl.tensor(v.detach().numpy()) for k, v in t_model.state_dict().items()})
        fixed = make_batch()

        def batches(lib, fixed=fixed, loss=loss):
            x, y = fixed
            return lambda: (lib.tensor(x), lib.tensor(y[:, 1:] if loss == "lm" else y))

        def loss_of(lib, loss=loss):
            def fn(out, y):
                out = out[:, :-1].reshape(-1, LM["vocab"]) if loss == "lm" else out
                return lib.nn.functional.cross_entropy(out, y.reshape(-1))
            return fn
        t, s = (statistics.median(step_times(m, lib.optim.AdamW(m.parameters(), 1e-3), batches(lib), loss_of(lib),
                                             args.steps)) for m, lib in ((t_model, torch), (l_model, tl)))
        rows.append((name, s * 1e3, t * 1e3))
    if args.train_gpt:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        start = time.perf_counter()
        r = subprocess.run([sys.executable, os.path.join(root, "examples", "train_gpt.py"), "--device", "cpu",
                            "--out", ""], capture_output=True, text=True)
        wall = time.perf_counter() - start
        acc = next((ln for ln in r.stdout.splitlines() if ln.startswith("held-out")), r.stderr[-200:])
        print(f"train_gpt.py --device cpu: {wall:.1f} s wall, rc {r.returncode}: {acc}")
    print(f"\n{args.threads} threads, median of {args.steps} steps after 3 warm-up steps")
    print("| workload | tensorlite cpu (ms/step) | torch cpu (ms/step) | ratio (tensorlite / torch) |")
    print("|---|---|---|---|")
    for name, s, t in rows:
        print(f"| {name} | {s:.1f} | {t:.1f} | {s / t:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
