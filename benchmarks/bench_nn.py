"""Issue-5 benchmarks: fused nn kernels, attention, convolution and a GPT training step,
tensorlite vs PyTorch on the same GPU in one process (a benchmark, not a test).

    python benchmarks/bench_nn.py [--device cuda] [--cases nn] [--json out.json]
    python benchmarks/bench_nn.py --device cpu --smoke      # tiny sizes on the host: a dry run

The runner, timers and table are bench_gpu.py's (same options; `bench_gpu.py` runs these
groups too, after its own). Groups:

  norms  softmax (last dim), layer_norm, rms_norm (weights), rope (half-split, x (b, h, t, d),
         cos/sin (t, d/2)) at 64M elements, f32 and bf16. GB/s counts one read and one write of
         x plus the weights / cos / sin; % of the measured d2d copy. torch: torch.softmax,
         F.layer_norm, F.rms_norm, and rope the Hugging Face way (x*cos + rotate_half(x)*sin with
         (t, d) tables). Target: >= 90% of copy and >= 1.0x torch.
  sdpa   scaled_dot_product_attention b8 h16 s2048 d128 bf16 causal, and the gpt group's
         attention (b32 h8 s256 d64 causal) in f32, forward and forward + backward, vs
         torch.nn.functional.scaled_dot_product_attention (f32: torch's memory-efficient kernel).
         TFLOP/s counting the causal half: 4*b*h*s*s*d/2 forward, 2.5x that backward (3.5x for
         forward + backward). Runs with TENSORLITE_SDPA as set (default auto; the row says which
         kernel auto took), and again with TENSORLITE_SDPA=gemm. Target: >= 0.5x torch.
  conv   ResNet-like 3x3 conv2d, N32 C128 56x56 -> 128, pad 1, no bias, f32 and bf16 forward,
         TFLOP/s; with TENSORLITE_DNN as set (default auto: cuDNN / MIOpen where it loads) and
         with TENSORLITE_DNN=0 (portable kernels). Both without TF32 in f32 (torch's cuDNN
         allow_tf32 turned off for the run, as tensorlite's f32 convolutions use FMA math).
         No target in the issue: reported against torch.
  gpt    one training step (forward, cross_entropy, backward, AdamW step) of examples/
         train_gpt.py's GPT (d_model 512, 6 layers, 8 heads, vocab 8192, seq 256, batch 32, no
         place embeddings) vs a torch module of identical structure in eager mode (nn.Linear,
         nn.LayerNorm, F.scaled_dot_product_attention, GELU tanh, torch.optim.AdamW with its
         default foreach path), same initial weights. f32, and bf16 mixed precision: tensorlite's
         compute_dtype=bf16 (f32 master weights cast to bf16 once per forward, by foreach_to;
         norms / residual / loss in f32) against torch.autocast(bfloat16), which makes the same
         split (its weight casts are one per weight). tokens/s from host
         timers (the host is part of a training step). Target: >= 1.0x torch eager.
         Then the captured step (issue 23): tensorlite's whole step (forward, backward,
         AdamW(capturable=True)) captured as one graph and replayed, each batch copied into a
         static input, against torch eager, torch.compile (default mode) and
         torch.compile(mode="reduce-overhead") (CUDA graphs), both torch compiled steps compiling
         forward + loss + backward, with torch.optim.AdamW stepping eagerly (foreach) outside
         the compiled function. Targets (issue 23), against reduce-overhead: bf16 >= 0.9x,
         f32 >= 1.0x; the default mode's row has none. A torch.compile that is unavailable or
         fails here gives a row that says why (the benchmark goes on).
"""
from __future__ import annotations

import contextlib
import math
import os
import sys

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
from bench_gpu import size_label, main as _bench_main  # noqa: E402


@contextlib.contextmanager
def env(name, value):
    """Set an environment switch for the block (tensorlite reads TENSORLITE_SDPA / _DNN per call)."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def _tol(dtype):
    return 3e-2 if dtype == "bfloat16" else 1e-4


def _short(dtype):
    return {"float32": "f32", "bfloat16": "bf16"}[dtype]


# ---- norms, softmax, rope ----------------------------------------------------------------

def norm_cases(b):
    tl, torch = b.tl, b.torch
    F, tF = tl.nn.functional, torch.nn.functional
    n = b.args.elements
    cols = 4096 if n >= 4096 * 64 else 256           # rows of a transformer's hidden size
    rows = n // cols
    d = 128 if n >= 128 * 64 * 64 else 32              # rope: head dim 128, (b, h, t, d) = 64M
    t = 2048 if n >= 2048 * d * 64 else 64
    bh = n // (t * d)
    heads = 32 if bh % 32 == 0 else 1
    target = {"copy": 90, "ratio": 1.0}
    with tl.no_grad(), torch.no_grad():
        for dt in ("float32", "bfloat16"):
            isz = 4 if dt == "float32" else 2
            x_tl, x_t = b.pair((rows, cols), dt)
            w_tl, w_t = b.pair((cols,), dt)
            bias_tl, bias_t = b.pair((cols,), dt)
            sd = _short(dt)
            cases = [
                (f"softmax {size_label(rows * cols)} {sd} (last dim {cols})",
                 lambda x=x_tl: F.softmax(x, -1), lambda x=x_t: torch.softmax(x, -1), 0),
                (f"layer_norm {size_label(rows * cols)} {sd} ({cols})",
                 lambda x=x_tl, w=w_tl, bias=bias_tl, cols=cols: F.layer_norm(x, (cols,), w, bias),
                 lambda x=x_t, w=w_t, bias=bias_t, cols=cols: tF.layer_norm(x, (cols,), w, bias), 2 * cols),
                (f"rms_norm {size_label(rows * cols)} {sd} ({cols})",
                 lambda x=x_tl, w=w_tl, cols=cols: F.rms_norm(x, (cols,), w),
                 lambda x=x_t, w=w_t, cols=cols: tF.rms_norm(x, (cols,), w), cols),
            ]
            for name, f_tl, f_t, extra in cases:
                b.check(name, f_tl(), f_t(), _tol(dt))
                moved = (2 * rows * cols + extra) * isz
                ms_tl, ms_t = b.time_tl(f_tl, 10), b.time_torch(f_t, 10)
                b.row(name, "GB/s", moved / ms_tl / 1e6, moved / ms_t / 1e6, copy=True, target=target)
            del x_tl, x_t, w_tl, w_t, bias_tl, bias_t, cases, f_tl, f_t  # the closures hold the inputs too

            # rope, half-split, x (b, h, t, d); the tables as a model computes them
            q_tl, q_t = b.pair((bh // heads, heads, t, d), dt)
            inv = 1.0 / 10000 ** (np.arange(0, d, 2, dtype=np.float64) / d)
            ang = np.arange(t, dtype=np.float64)[:, None] * inv[None, :]           # (t, d/2)
            cos_np, sin_np = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
            cos_tl = tl.tensor(cos_np).to(b.device).to(getattr(tl, dt))
            sin_tl = tl.tensor(sin_np).to(b.device).to(getattr(tl, dt))
            # Hugging Face: emb = cat(freqs, freqs) -> cos/sin (t, d), then x*cos + rotate_half(x)*sin
            cos_t = torch.from_numpy(np.concatenate([cos_np, cos_np], -1)).to(b.tdev, getattr(torch, dt))
            sin_t = torch.from_numpy(np.concatenate([sin_np, sin_np], -1)).to(b.tdev, getattr(torch, dt))

            def rope_hf(x, cos=cos_t, sin=sin_t):
                x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
                return x * cos + torch.cat((-x2, x1), dim=-1) * sin
            name = f"rope {size_label(q_t.numel())} {sd} ({q_t.shape[0]},{heads},{t},{d})"
            f_tl = lambda q=q_tl, cos=cos_tl, sin=sin_tl: F.rope(q, cos, sin)  # noqa: E731
            f_t = lambda q=q_t: rope_hf(q)  # noqa: E731
            b.check(name, f_tl(), f_t(), _tol(dt))
            moved = (2 * q_t.numel() + t * d) * isz      # x in and out, cos and sin (t, d/2) each
            ms_tl, ms_t = b.time_tl(f_tl, 10), b.time_torch(f_t, 10)
            b.row(name, "GB/s", moved / ms_tl / 1e6, moved / ms_t / 1e6, copy=True, target=target,
                  note="torch: HF rotate_half")
            del q_tl, q_t, f_tl, f_t


# ---- attention ---------------------------------------------------------------------------

def _sdpa_path(b, fn):
    """Which kernel TENSORLITE_SDPA=auto takes here: 'flash' when forcing flash runs the case."""
    if not b.gpu:
        return "cpu reference"
    try:
        from tensorlite.backend import sdpa_mode  # noqa: F401  (the switch exists)
    except ImportError:
        return "default (no TENSORLITE_SDPA)"
    mode = os.environ.get("TENSORLITE_SDPA", "auto") or "auto"
    if mode != "auto":
        return mode
    try:
        with env("TENSORLITE_SDPA", "flash"):
            fn()
        return "auto->flash"
    except Exception:
        return "auto->gemm"


def sdpa_cases(b):
    cases = [((1, 2, 128, 64) if b.smoke else (8, 16, 2048, 128), "bfloat16"),
             ((1, 2, 128, 64) if b.smoke else (32, 8, 256, 64), "float32")]  # the gpt group's attention
    for (bs, h, s, d), dt in cases:
        with b.guard(f"sdpa {_short(dt)}"):
            _sdpa_case(b, bs, h, s, d, dt)


def _sdpa_case(b, bs, h, s, d, dt):
    tl, torch = b.tl, b.torch
    F, tF = tl.nn.functional, torch.nn.functional
    flops_fwd = 4 * bs * h * s * s * d / 2
    shape = f"b{bs} h{h} s{s} d{d} {_short(dt)} causal"
    q_tl, q_t = b.pair((bs, h, s, d), dt)
    k_tl, k_t = b.pair((bs, h, s, d), dt)
    v_tl, v_t = b.pair((bs, h, s, d), dt)
    g_tl, g_t = b.pair((bs, h, s, d), dt)
    iters = (3 if s >= 1024 else 20) if b.gpu else 1

    def fwd_tl():
        with tl.no_grad():
            return F.scaled_dot_product_attention(q_tl, k_tl, v_tl, is_causal=True)

    def fwd_t():
        with torch.no_grad():
            return tF.scaled_dot_product_attention(q_t, k_t, v_t, is_causal=True)

    for t_ in (q_tl, k_tl, v_tl):
        t_.requires_grad_(True)
    for t_ in (q_t, k_t, v_t):
        t_.requires_grad_(True)

    def fwd_bwd_tl():
        for t_ in (q_tl, k_tl, v_tl):
            t_.grad = None
        F.scaled_dot_product_attention(q_tl, k_tl, v_tl, is_causal=True).backward(g_tl)

    def fwd_bwd_t():
        for t_ in (q_t, k_t, v_t):
            t_.grad = None
        tF.scaled_dot_product_attention(q_t, k_t, v_t, is_causal=True).backward(g_t)

    # torch once; tensorlite with the switch as set, then (where the switch exists) forced gemm
    ms_fwd_t, ms_fb_t = b.time_torch(fwd_t, iters), b.time_torch(fwd_bwd_t, iters)
    runs = [None]
    try:
        from tensorlite.backend import SDPA_MODES
        if b.gpu and "gemm" in SDPA_MODES and os.environ.get("TENSORLITE_SDPA", "auto") != "gemm":
            runs.append("gemm")
    except ImportError:
        pass
    for mode in runs:
        tag = f" (TENSORLITE_SDPA={mode})" if mode else ""
        with b.guard(f"sdpa{tag}"), (env("TENSORLITE_SDPA", mode) if mode else contextlib.nullcontext()):
            path = _sdpa_path(b, fwd_tl) if mode is None else mode
            b.check(f"sdpa fwd ({path})", fwd_tl(), fwd_t(), 3e-2)
            fwd_bwd_tl()
            fwd_bwd_t()
            b.check(f"sdpa dq ({path})", q_tl.grad, q_t.grad, 5e-2)
            ms_fwd_tl, ms_fb_tl = b.time_tl(fwd_tl, iters), b.time_tl(fwd_bwd_tl, iters)
            note = f"tensorlite: {path}"
            b.row(f"sdpa fwd {shape}{tag}", "TFLOP/s", flops_fwd / ms_fwd_tl / 1e9, flops_fwd / ms_fwd_t / 1e9,
                  target={"ratio": 0.5}, note=note)
            b.row(f"sdpa fwd+bwd {shape}{tag}", "TFLOP/s", 3.5 * flops_fwd / ms_fb_tl / 1e9,
                  3.5 * flops_fwd / ms_fb_t / 1e9, target={"ratio": 0.5}, note=note)


# ---- convolution -------------------------------------------------------------------------

def _dnn_state(b, fn=None):
    """Which path ran `fn` (a tensorlite conv): the DNN library when its conv2d call count
    went up (auto falls back to the portable kernels where the library declines), else why not."""
    if not b.gpu:
        return "cpu reference"
    try:
        from tensorlite.backends.rocm import dnn
    except ImportError:
        return "no DNN seam"
    try:
        lib = dnn.dnn_for(b.dev)
    except Exception as e:
        return f"DNN unavailable ({e})"
    if lib is None:
        return "portable (TENSORLITE_DNN=0)" if dnn.dnn_mode() == "0" else "portable (library did not load)"
    if fn is None:
        return repr(lib)
    before = lib.calls.get("conv2d", 0)
    fn()
    b.dev.synchronize()
    ran = lib.calls.get("conv2d", 0) > before
    return f"{lib.lib.name} {lib.lib.version()}" if ran else f"portable ({lib.lib.name} declined)"


def conv_cases(b):
    tl, torch = b.tl, b.torch
    n, c, hw, co = (2, 8, 16, 8) if b.smoke else (32, 128, 56, 128)
    flops = 2 * n * co * hw * hw * c * 9
    if b.gpu:  # tensorlite's f32 convolutions use FMA math: compare without TF32 (torch's cuDNN default is on)
        torch.backends.cudnn.allow_tf32 = False
    has_switch = b.gpu and _dnn_state(b) != "no DNN seam"
    with tl.no_grad(), torch.no_grad():
        for dt in ("float32", "bfloat16"):
            x_tl, x_t = b.pair((n, c, hw, hw), dt)
            w_tl, w_t = b.pair((co, c, 3, 3), dt)
            w_tl, w_t = w_tl * (1.0 / math.sqrt(9 * c)), w_t * (1.0 / math.sqrt(9 * c))
            f_tl = lambda x=x_tl, w=w_tl: tl.conv2d(x, w, None, 1, 1)  # noqa: E731
            f_t = lambda x=x_t, w=w_t: torch.nn.functional.conv2d(x, w, None, 1, 1)  # noqa: E731
            ms_t = b.time_torch(f_t, 5)
            name = f"conv2d 3x3 N{n} C{c} {hw}x{hw} -> {co} pad 1 {_short(dt)}"
            for mode in ([None, "0"] if has_switch and os.environ.get("TENSORLITE_DNN") != "0" else [None]):
                tag = f" (TENSORLITE_DNN={mode})" if mode else ""
                with b.guard(name + tag), (env("TENSORLITE_DNN", mode) if mode else contextlib.nullcontext()):
                    state = _dnn_state(b, f_tl)
                    b.check(f"{name} ({state})", f_tl(), f_t(), _tol(dt))
                    ms_tl = b.time_tl(f_tl, 5)
                    b.row(name + tag, "TFLOP/s", flops / ms_tl / 1e9, flops / ms_t / 1e9, note=f"tensorlite: {state}")
            del x_tl, x_t, w_tl, w_t, f_tl, f_t
    if b.gpu:
        torch.backends.cudnn.allow_tf32 = True  # torch's default back


# ---- GPT training step -------------------------------------------------------------------

def torch_gpt(torch, vocab, block_size, d_model, n_layer, n_head):
    """train_gpt.GPT's structure (pre-norm blocks, separate q/k/v modules run as one GEMM as
    train_gpt does, GELU tanh MLP, untied head), module names equal so the state dicts match."""
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.q, self.k, self.v, self.proj = (nn.Linear(d_model, d_model) for _ in range(4))
            self.fc, self.out = nn.Linear(d_model, 4 * d_model), nn.Linear(4 * d_model, d_model)

        def forward(self, x):
            b, t, d = x.shape
            h = self.ln1(x)
            qkv = (self.q, self.k, self.v)
            y = F.linear(h, torch.cat([m.weight for m in qkv]), torch.cat([m.bias for m in qkv]))
            q, k, v = (p.reshape(b, t, n_head, d // n_head).transpose(1, 2) for p in y.split(d, -1))
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(block_size, d_model)
            self.blocks = nn.ModuleList([Block() for _ in range(n_layer)])
            self.ln_f = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, vocab, bias=False)

        def forward(self, ids):
            x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x)).float()
    return GPT()


def gpt_cases(b):
    tl, torch = b.tl, b.torch
    sys.path.insert(0, os.path.join(os.path.dirname(_HERE), "examples"))
    from train_gpt import GPT
    if b.smoke:
        vocab, seq, d_model, n_layer, n_head, batch = 128, 32, 64, 2, 2, 4
    else:
        vocab, seq, d_model, n_layer, n_head, batch = 8192, 256, 512, 6, 8, 32
    tokens = batch * seq
    ids = b.rng.integers(0, vocab, (batch, seq + 1))
    x_tl, y_tl = tl.tensor(ids[:, :-1], device=b.device), tl.tensor(ids[:, 1:].reshape(-1), device=b.device)
    x_t = torch.from_numpy(ids[:, :-1]).to(b.tdev)
    y_t = torch.from_numpy(ids[:, 1:].reshape(-1)).to(b.tdev)
    opt_args = dict(lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    if b.gpu:
        torch.backends.cuda.matmul.allow_tf32 = False  # f32 matmuls in full f32, as cuBLAS's in tensorlite
    def one(dt):
        tl.manual_seed(0)
        model = GPT(vocab, seq, d_model, n_layer, n_head).to(b.device)
        model.compute_dtype = getattr(tl, dt)
        tmodel = torch_gpt(torch, vocab, seq, d_model, n_layer, n_head)
        tmodel.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v.numpy()))
                                for k, v in model.state_dict().items()})
        tmodel.to(b.tdev)
        opt = tl.optim.AdamW(model.parameters(), **opt_args)
        topt = torch.optim.AdamW(tmodel.parameters(), **opt_args)
        autocast = (lambda: torch.autocast(b.tdev, torch.bfloat16)) if dt == "bfloat16" else contextlib.nullcontext

        def step_tl():
            loss = tl.nn.functional.cross_entropy(model(x_tl).reshape(-1, vocab), y_tl)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        def step_t():
            with autocast():
                loss = torch.nn.functional.cross_entropy(tmodel(x_t).reshape(-1, vocab), y_t)
            topt.zero_grad(set_to_none=True)
            loss.backward()
            topt.step()
            return loss

        name = f"gpt train step d{d_model} L{n_layer} h{n_head} V{vocab} b{batch}x{seq} {_short(dt)}"
        # the first step from equal weights: equal losses (a wrong model would be timed otherwise)
        loss_tl, loss_t = float(step_tl().item()), float(step_t().item())
        if not abs(loss_tl - loss_t) <= (2e-2 if dt == "bfloat16" else 1e-3) * abs(loss_t):
            print(f"  WARNING {name}: first-step loss tensorlite {loss_tl:.5f} vs torch {loss_t:.5f}", flush=True)
        # 10 steps per timed run: a step's host work overlaps the previous step's GPU work, as
        # in training (runs of 3 steps gave 290k-410k tokens/s for one build on the H100)
        iters, warmup = (2, 1) if b.smoke else (10, 3)
        reps = min(b.reps, 5)
        ms_tl = b.host_ms_tl(step_tl, iters, warmup, reps)
        ms_t = b.host_ms_torch(step_t, iters, warmup, reps)
        how = "autocast bf16" if dt == "bfloat16" else "f32, no TF32"
        b.row(name, "tokens/s", tokens / ms_tl * 1e3, tokens / ms_t * 1e3, target={"ratio": 1.0},
              note=f"first loss {loss_tl:.4f} / {loss_t:.4f}; torch eager {how}")
        if b.gpu:
            with b.guard(f"{name} graphed"):
                graphed(dt, name, how, ms_t, iters, warmup, reps)

    def graphed(dt, name, how, ms_t, iters, warmup, reps):
        """The captured tensorlite step against torch eager (ms_t) and torch.compile's two modes."""
        tl.manual_seed(0)
        model = GPT(vocab, seq, d_model, n_layer, n_head).to(b.device)
        model.compute_dtype = getattr(tl, dt)
        opt = tl.optim.AdamW(model.parameters(), **{**opt_args, "lr": tl.tensor(opt_args["lr"], device=b.device)},
                             capturable=True)
        static_x = x_tl.clone()

        def eager():
            loss = tl.nn.functional.cross_entropy(model(static_x).reshape(-1, vocab), y_tl)
            loss.backward()
            opt.step()
            return loss
        for _ in range(2):  # eager warm-up: the optimizer state, the kernels
            opt.zero_grad()
            eager()
        opt.zero_grad(set_to_none=True)  # the gradients are made in the graph's memory
        g = tl.graphs.Graph()
        with tl.graphs.graph(g, device=b.device):
            static_loss = eager()

        def step_tl():  # a training loop's step: the next batch into the static input, then the replay
            static_x.copy_(x_tl)
            g.replay()
            return static_loss
        loss_tl = float(step_tl().item())
        ms_tl = b.host_ms_tl(step_tl, iters, warmup, reps)
        note = f"tensorlite: one captured graph; loss after 3 steps {loss_tl:.4f}"
        b.row(f"{name} graphed", "tokens/s", tokens / ms_tl * 1e3, tokens / ms_t * 1e3, target={"ratio": 1.0},
              note=f"{note}; torch eager {how}")
        for mode in ("default", "reduce-overhead"):
            label = f"{name} graphed vs torch.compile({mode})"
            try:
                ms_c, loss_c = _torch_compiled_ms(b, torch, dt, mode, vocab, seq, d_model, n_layer, n_head, x_t, y_t,
                                                  opt_args, iters, warmup, reps)
            except Exception as e:  # no compiler (triton, a C compiler) or a compile failure on this machine
                b.rows.append({"case": label, "unit": "", "status": "unavailable",
                               "error": f"torch.compile failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}"})
                print(f"  {label}: torch.compile failed: {type(e).__name__}: {e}", flush=True)
                continue
            # issue 23's targets, against what a user who wants speed picks (CUDA graphs):
            # bf16 >= 0.9x, f32 >= 1.0x reduce-overhead; the default mode's row is for reference
            target = None if mode == "default" else {"ratio": 0.9 if dt == "bfloat16" else 1.0}
            b.row(label, "tokens/s", tokens / ms_tl * 1e3, tokens / ms_c * 1e3, target=target,
                  note=f"{note}; torch.compile(mode={mode!r}) {how}, loss after 3 steps {loss_c:.4f}")

    for dt in ("float32", "bfloat16"):
        with b.guard(f"gpt {_short(dt)}"):
            one(dt)
        b.free()  # one's models and optimizer state are gone with its frame


def _torch_compiled_ms(b, torch, dt, mode, vocab, seq, d_model, n_layer, n_head, x_t, y_t, opt_args, iters, warmup,
                       reps):
    """ms per training step of the torch GPT with forward + loss + backward under torch.compile(mode)
    and an eager AdamW step; (ms, the loss of the third step). Raises where torch.compile fails."""
    torch.manual_seed(0)
    tmodel = torch_gpt(torch, vocab, seq, d_model, n_layer, n_head).to(b.tdev)
    topt = torch.optim.AdamW(tmodel.parameters(), **opt_args)  # eager, as in the torch eager row
    autocast = (lambda: torch.autocast(b.tdev, torch.bfloat16)) if dt == "bfloat16" else contextlib.nullcontext

    def fwd_bwd(x, y):
        with autocast():
            loss = torch.nn.functional.cross_entropy(tmodel(x).reshape(-1, vocab), y)
        loss.backward()
        return loss.detach()
    compiled = torch.compile(fwd_bwd, mode=None if mode == "default" else mode)

    def step_t():
        topt.zero_grad(set_to_none=True)
        loss = compiled(x_t, y_t)
        topt.step()
        return loss
    for _ in range(3):  # compiles (and, reduce-overhead, records its CUDA graphs) before the clock
        loss = step_t()
    loss = float(loss.item())
    return b.host_ms_torch(step_t, iters, warmup, reps), loss


CASES = {"norms": norm_cases, "sdpa": sdpa_cases, "conv": conv_cases, "gpt": gpt_cases}


if __name__ == "__main__":
    sys.exit(_bench_main(default_cases="nn"))
