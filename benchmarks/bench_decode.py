"""Llama decode and prefill: examples/llama.py against transformers on the same random
checkpoint, in one process on one GPU (a benchmark, not a test).

    python benchmarks/bench_decode.py [--device cuda] [--shapes 1.1b,12l] [--batches 1,8]
                                      [--prompt 32] [--new 256] [--prefill 2048] [--json out.json]

For each shape a random checkpoint is made with transformers (LlamaForCausalLM, bf16,
save_pretrained into a temporary folder) and loaded by both frameworks: transformers
(torch eager, `generate` with greedy decoding and its KV cache) and tensorlite
(`llama.load`, `llama.generate`, its decode step captured as a graph and replayed, and the
same eagerly: graph=False). Per shape and batch: decode tokens/s (new tokens of the whole
batch over the wall time of `new` steps after a prompt of `prompt` tokens, prefill
included, as a user sees it), the ratio, the share of the weight-bandwidth limit (every
weight read once per step at the device-to-device copy bandwidth measured in this run), and
whether the greedy tokens are equal; then one prefill of `prefill` tokens (tokens/s).
Timings are medians of `--reps` runs after one warm-up run; the table is printed last. The
warm-up run of the graphed case also captures the step: generate() keeps it with the model,
so the timed runs replay it from their first decode step, as a user's later calls of the same
sizes do; the note gives the warm-up run's rate (a call of new sizes: one eager step and the capture).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

SHAPES = {  # transformers' LlamaConfig fields
    "1.1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                 num_key_value_heads=4, vocab_size=32000),  # TinyLlama-1.1B's shape
    "12l": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                num_key_value_heads=12, vocab_size=32000),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=256),  # a dry run: --device cpu --shapes tiny
}


def make_checkpoint(torch, transformers, shape: dict, folder: str, seed: int = 0) -> int:
    """A random bf16 Llama checkpoint in `folder`; returns its parameter bytes."""
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=False,
                                      torch_dtype="bfloat16", **shape)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    with torch.no_grad():  # the default init's tiny weights make every logit alike: spread them
        for p in model.parameters():
            p.normal_(0.0, 0.02 if p.ndim > 1 else 1.0)
    model.save_pretrained(folder, safe_serialization=True)
    return sum(p.numel() * p.element_size() for p in model.parameters())


def copy_bandwidth(torch, device) -> float:
    """Bytes per second of a 1 GiB device-to-device copy (read + write), median of 5."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    times = []
    for _ in range(6):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * src.numel() / statistics.median(times[1:])


def int8_bytes(model) -> int:
    """The bytes a decode step of the int8 model reads at least: every parameter and buffer once."""
    return sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])


def timed(fn, reps: int, sync):
    """(median seconds of `reps` runs after one warm-up run, the last run's result, the warm-up
    run's seconds)."""
    start = time.perf_counter()
    out = fn()
    sync()
    first = time.perf_counter() - start
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out, first


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--shapes", default="1.1b,12l")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--prompt", type=int, default=32)
    p.add_argument("--new", type=int, default=256)
    p.add_argument("--prefill", type=int, default=2048)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--json", default=None)
    p.add_argument("--int8", action="store_true",
                   help="also tensorlite with weight-only int8 projections (llama.load(int8=True)), graphed")
    args = p.parse_args(argv)

    import torch
    import transformers

    import llama
    import tensorlite as tl
    from tensorlite.backend import get_device

    tl_dev = get_device(args.device)
    if hasattr(tl_dev, "warmup"):  # GPU kernels compiled once, up front
        tl_dev.warmup()
    on_gpu = args.device.startswith("cuda")
    torch_dev = torch.device("cuda" if on_gpu else "cpu")
    torch_sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    bandwidth = copy_bandwidth(torch, torch_dev) if on_gpu else None
    rows = []
    for name in args.shapes.split(","):
        with tempfile.TemporaryDirectory() as folder:
            weight_bytes = make_checkpoint(torch, transformers, SHAPES[name], folder)
            ref = transformers.LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.bfloat16).to(torch_dev).eval()
            ours = llama.load(folder, device=args.device)
            ours_int8 = llama.load(folder, device=args.device, int8=True) if args.int8 else None
        # steps per second when every weight is read once per step
        limit = bandwidth / weight_bytes if bandwidth else None
        rng = np.random.default_rng(0)
        for batch in (int(b) for b in args.batches.split(",")):
            prompt = rng.integers(0, SHAPES[name]["vocab_size"], (batch, args.prompt))
            prompt_t = torch.tensor(prompt, device=torch_dev)

            def run_ref(ref=ref, prompt_t=prompt_t):
                with torch.no_grad():
                    out = ref.generate(prompt_t, attention_mask=torch.ones_like(prompt_t), max_new_tokens=args.new,
                                       min_new_tokens=args.new, do_sample=False, pad_token_id=0)
                return out[:, args.prompt:].cpu().numpy()
            t_ref, ref_ids, _ = timed(run_ref, args.reps, torch_sync)
            bf16_ids = t_bf16 = None
            for graph in ((True, False) if tl_dev.name != "cpu" else (False,)):  # graphs: GPUs only
                t_ours, our_ids, t_first = timed(lambda ours=ours, prompt=prompt, graph=graph:
                                                 llama.generate(ours, prompt, args.new, graph=graph),
                                                 args.reps, tl_dev.synchronize)
                if bf16_ids is None:
                    bf16_ids, t_bf16 = our_ids, t_ours
                same = int((ref_ids == our_ids).all(axis=1).sum())
                first_diff = [int(np.argmax(r != o)) if (r != o).any() else None for r, o in zip(ref_ids, our_ids)]
                rows.append(dict(case=f"decode {name} b{batch} prompt {args.prompt} + {args.new}"
                                      + ("" if graph else " (eager)"), unit="tokens/s",
                                 tensorlite=batch * args.new / t_ours, transformers=batch * args.new / t_ref,
                                 limit_share=args.new / t_ours / limit if limit else None,
                                 note=f"greedy tokens equal in {same}/{batch} rows"
                                      + ("" if same == batch else f" (first difference at steps {first_diff})")
                                      + (f"; first call (captures): {batch * args.new / t_first:.1f} tokens/s"
                                         if graph else "")))
            if ours_int8 is not None:
                graph = tl_dev.name != "cpu"
                t_q, q_ids, _ = timed(lambda q=ours_int8, p=prompt, g=graph: llama.generate(q, p, args.new, graph=g),
                                      args.reps, tl_dev.synchronize)
                agree = float((q_ids == bf16_ids).mean())
                same_prefix = [int(np.argmax(r != o)) if (r != o).any() else args.new
                               for r, o in zip(bf16_ids, q_ids)]
                q_limit = bandwidth / int8_bytes(ours_int8) if bandwidth else None
                rows.append(dict(case=f"decode {name} b{batch} prompt {args.prompt} + {args.new} int8 weights",
                                 unit="tokens/s", tensorlite=batch * args.new / t_q,
                                 transformers=batch * args.new / t_ref,
                                 limit_share=args.new / t_q / q_limit if q_limit else None,
                                 note=f"{t_bf16 / t_q:.2f}x tensorlite bf16{' (graphed)' if graph else ''}; greedy "
                                      f"tokens as bf16's: {100 * agree:.1f}%, the same for the first {same_prefix} "
                                      "steps (limit: the int8 model's bytes)"))
        ids = rng.integers(0, SHAPES[name]["vocab_size"], (1, args.prefill))
        ids_t = torch.tensor(ids, device=torch_dev)

        def prefill_ref(ref=ref, ids_t=ids_t):
            with torch.no_grad():
                return ref(ids_t).logits
        with tl.no_grad():
            t_ref, _, _ = timed(prefill_ref, args.reps, torch_sync)
            t_ours, _, _ = timed(lambda ours=ours, ids=ids: ours(ids), args.reps, tl_dev.synchronize)
        rows.append(dict(case=f"prefill {name} {args.prefill} tokens", unit="tokens/s",
                         tensorlite=args.prefill / t_ours, transformers=args.prefill / t_ref, limit_share=None,
                         note=""))
        del ref, ours, ours_int8, run_ref, prefill_ref  # the closures hold the models too
        if on_gpu:
            torch.cuda.empty_cache()

    if bandwidth:
        print(f"\ndevice-to-device copy: {bandwidth / 1e9:.0f} GB/s (read + write); limit = that / weight bytes")
    print("| case | unit | tensorlite | transformers | ratio | % of weight-bandwidth limit | note |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        share = "" if r["limit_share"] is None else f"{100 * r['limit_share']:.1f}%"
        print(f"| {r['case']} | {r['unit']} | {r['tensorlite']:.1f} | {r['transformers']:.1f} | "
              f"{r['tensorlite'] / r['transformers']:.2f} | {share} | {r['note']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(bandwidth=bandwidth, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
