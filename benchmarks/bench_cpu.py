"""The cpu backend against PyTorch's CPU build, same machine, same process (issue 47): the
host cost of tiny ops (`dispatch`), and training steps (forward, backward, AdamW) of a small
char-level transformer LM (`lm`), a small CNN (`cnn`), an MNIST-sized MLP (`mlp`) and the issue's
GPT (`gpt`: examples/train_gpt.py's model, d256, 4 layers, seq 128, batch 16); optionally the
README's main job (`examples/train_gpt.py --device cpu`, wall time to its held-out accuracy).

    python benchmarks/bench_cpu.py [--cases dispatch lm cnn mlp gpt] [--steps 10] [--threads 1] [--train-gpt]

Medians after warm-up, of wall time and of this process's CPU time (the fairer measure at one
thread on a machine that others share); both frameworks limited to the same threads (torch's,
numpy's BLAS, tensorlite's: bench_cpu_rnn.limit_threads). Rounds alternate between the two
frameworks, each round one framework's steps together (idle BLAS and OpenMP workers spin after a
parallel section and would slow the other's next step). The models are built with PyTorch's
initialisation copied into tensorlite's parameters, so the steps do the same arithmetic.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
from bench_cpu_rnn import limit_threads  # noqa: E402

LM = dict(vocab=65, d=128, layers=2, heads=4, seq=64, batch=32)   # char-level LM (tiny-shakespeare sized vocab)
CNN = dict(batch=64, side=28, classes=10)                          # MNIST-sized CNN
MLP = dict(batch=64, sizes=(28 * 28, 512, 512, 10))                # PyTorch's quickstart tutorial MLP
GPT = dict(vocab=2048, d=256, layers=4, heads=4, seq=128, batch=16)  # the GPT step


def models(nn, F):
    """{case: model} for the char LM, the CNN and the MLP, built with a framework's `nn` and
    `nn.functional`: torch's and tensorlite's share these names, so one definition serves both."""
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
    n_in, h1, h2, n_out = MLP["sizes"]
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(n_in, h1), nn.ReLU(), nn.Linear(h1, h2), nn.ReLU(),
                        nn.Linear(h2, n_out))
    return {"lm": LMModel(LM), "cnn": cnn, "mlp": mlp}


def step_times(model, opt, batch, loss_fn, steps, warmup=2):
    """(wall, CPU) seconds of each training step (zero_grad, forward, loss, backward, AdamW)."""
    times = []
    for i in range(warmup + steps):
        x, y = batch()
        start, cpu = time.perf_counter(), time.process_time()
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        if i >= warmup:
            times.append((time.perf_counter() - start, time.process_time() - cpu))
    return times


def alternate(runs, rounds):
    """{name: (median wall, median CPU)} of `runs` ({name: () -> [(wall, cpu), ...]}), called in
    turn `rounds` times: both sides see the same load on a shared machine."""
    got = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            got[name] += run()
    return {name: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t)) for name, t in got.items()}


def dispatch_rows(torch, tl, calls, rounds):
    """Microseconds per call of tiny elementwise ops (2x3 float32), with and without an input that
    requires grad: what a Python framework's per-op host work costs."""
    rng = np.random.default_rng(0)
    a_np, b_np = (rng.standard_normal((2, 3), dtype=np.float32) for _ in range(2))
    libs = {}
    for lib in (tl, torch):
        a, b = lib.tensor(a_np), lib.tensor(b_np)
        g = lib.tensor(a_np, requires_grad=True)
        libs[lib] = {"a + b": lambda a=a, b=b: a + b, "x.relu()": lambda a=a: a.relu(), "x * 2": lambda a=a: a * 2,
                     "a + b (a requires grad)": lambda g=g, b=b: g + b,
                     "x.relu() (requires grad)": lambda g=g: g.relu(), "x * 2 (requires grad)": lambda g=g: g * 2}

    def timed(fn):
        def run():
            for _ in range(calls // 10):  # warm-up
                fn()
            start, cpu = time.perf_counter(), time.process_time()
            for _ in range(calls):
                fn()
            return [((time.perf_counter() - start) / calls, (time.process_time() - cpu) / calls)]
        return run
    rows = []
    for case in libs[tl]:
        got = alternate({"tl": timed(libs[tl][case]), "torch": timed(libs[torch][case])}, rounds)
        rows.append((f"{case} (2x3 f32)", "us/call", got["tl"], got["torch"], 1e6))
    return rows


def step_rows(torch, tl, cases, steps, rounds):
    """ms per training step of each case in `cases`, tensorlite and torch from equal weights."""
    rng = np.random.default_rng(0)
    rows = []
    for case in cases:
        torch.manual_seed(0)
        if case == "gpt":
            t_model, l_model = gpt_models(torch, tl)
            vocab = GPT["vocab"]
            ids = rng.integers(0, vocab, (GPT["batch"], GPT["seq"] + 1))
            fixed, name = (ids[:, :-1], ids[:, 1:]), (f"GPT step (d{GPT['d']} L{GPT['layers']} V{vocab}, "
                                                      f"{GPT['batch']}x{GPT['seq']} tokens)")
        else:
            t_model, l_model = models(torch.nn, torch.nn.functional)[case], models(tl.nn, tl.nn.functional)[case]
            l_model.load_state_dict({k: tl.tensor(v.detach().numpy()) for k, v in t_model.state_dict().items()})
            if case == "lm":
                vocab = LM["vocab"]
                ids = rng.integers(0, vocab, (LM["batch"], LM["seq"] + 1))
                fixed, name = (ids[:, :-1], ids[:, 1:]), "char LM step (d128 L2, 32x64 tokens)"
            else:
                c = CNN if case == "cnn" else MLP
                fixed = (rng.standard_normal((c["batch"], 1, 28, 28), dtype=np.float32),
                         rng.integers(0, 10, c["batch"]))
                name = ("CNN step (2 conv + 2 linear, 64x1x28x28)" if case == "cnn" else
                        "MLP step (784-512-512-10, batch 64)")

        def runner(lib, model, fixed=fixed, case=case):
            x, y = lib.tensor(fixed[0]), lib.tensor(fixed[1])
            opt = lib.optim.AdamW(model.parameters(), 1e-3)

            def loss_fn(out, y):
                out = out.reshape(-1, out.shape[-1])
                return lib.nn.functional.cross_entropy(out, y.reshape(-1))
            return lambda: step_times(model, opt, lambda: (x, y), loss_fn, steps)
        got = alternate({"tl": runner(tl, l_model), "torch": runner(torch, t_model)}, rounds)
        rows.append((name, "ms/step", got["tl"], got["torch"], 1e3))
    return rows


def gpt_models(torch, tl):
    """examples/train_gpt.py's GPT at the GPT sizes and bench_nn's torch twin, same weights."""
    sys.path.insert(0, os.path.join(os.path.dirname(_HERE), "examples"))
    from bench_nn import torch_gpt
    from train_gpt import GPT as TlGPT
    c = GPT
    tl.manual_seed(0)
    model = TlGPT(c["vocab"], c["seq"], c["d"], c["layers"], c["heads"])
    tmodel = torch_gpt(torch, c["vocab"], c["seq"], c["d"], c["layers"], c["heads"])
    tmodel.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v.numpy()))
                            for k, v in model.state_dict().items()})
    return tmodel, model


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", default=["dispatch", "lm", "cnn", "mlp", "gpt"],
                   choices=["dispatch", "lm", "cnn", "mlp", "gpt"])
    p.add_argument("--steps", type=int, default=10, help="timed steps per round (after 2 warm-up steps)")
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds of each framework")
    p.add_argument("--calls", type=int, default=20000, help="timed calls per round of a dispatch case")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--train-gpt", action="store_true", help="also time examples/train_gpt.py --device cpu")
    args = p.parse_args(argv)
    import torch
    import tensorlite as tl
    limit_threads(args.threads, torch, tl)
    load = os.getloadavg()[0]
    rows = dispatch_rows(torch, tl, args.calls, args.rounds * 3) if "dispatch" in args.cases else []
    rows += step_rows(torch, tl, [c for c in args.cases if c != "dispatch"], args.steps, args.rounds)
    if args.train_gpt:
        root = os.path.dirname(_HERE)
        start = time.perf_counter()
        r = subprocess.run([sys.executable, os.path.join(root, "examples", "train_gpt.py"), "--device", "cpu",
                            "--out", ""], capture_output=True, text=True)
        wall = time.perf_counter() - start
        acc = next((ln for ln in r.stdout.splitlines() if ln.startswith("held-out")), r.stderr[-200:])
        print(f"train_gpt.py --device cpu: {wall:.1f} s wall, rc {r.returncode}: {acc}")
    print(f"\n{args.threads} thread(s), load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; "
          f"medians of {args.rounds} alternating rounds ({args.steps} steps each after 2 warm-up steps)")
    print("| workload | unit | tensorlite (wall / CPU) | torch (wall / CPU) | ratio wall | ratio CPU |")
    print("|---|---|---|---|---|---|")
    for name, unit, (lw, lc), (tw, tc), scale in rows:
        print(f"| {name} | {unit} | {lw * scale:.2f} / {lc * scale:.2f} | {tw * scale:.2f} / {tc * scale:.2f} "
              f"| {lw / tw:.2f} | {lc / tc:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
