"""A training soak with faults injected (issue 48): a small transformer language model trained for
--steps steps, and every --every steps one fault in the same process, rotating through bad token
ids, a shape error, an absurd allocation, a dtype error and an index out of range. Each fault
must raise a tensorlite error (nothing else, no crash); the loss curve must equal the
fault-free run's (same seed, same data: a fault leaves no state behind; on a real GPU, within
GPU_CURVE_RTOL: see same_curve); and the process's resident memory after warm-up must stay
within --rss-tolerance (default 5%).

    python benchmarks/soak.py [--device cpu] [--steps 1000] [--every 50] [--d-model 64] [--small]

Prints one line per 100 steps and a summary; exits 1 where a check fails. On an emulated AMD
target (`TENSORLITE_AMDEMU=gfx90a python benchmarks/soak.py --device amdemu --small`) every kernel
is interpreted: --small trains the SMALL model (about 1 s of CPU a step on gfx90a).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import tensorlite as tl
from tensorlite import nn

FAULTS = ("bad ids", "shape", "allocation", "dtype", "index")
# A real GPU's float atomics (the embedding's scatter-add backward, attention's dq) add in the order
# its threads arrive, so two fault-free runs there differ in the last bits (an H200: from step 9 of
# tests/test_soak.py's run); cpu and the emulator add in one order, and their curves must be equal.
BITWISE_DEVICES = ("cpu", "amdemu")
GPU_CURVE_RTOL = 1e-4


def same_curve(losses, clean, device) -> bool:
    """Whether a faulted run's loss curve is the fault-free run's: equal where the device repeats
    a run bit for bit, else within GPU_CURVE_RTOL of it at every step."""
    if str(device).split(":")[0] in BITWISE_DEVICES:
        return losses == clean
    return len(losses) == len(clean) and all(abs(a - b) <= GPU_CURVE_RTOL * abs(b) for a, b in zip(losses, clean))


SMALL = dict(d_model=16, layers=1, vocab=32, seq=8, batch=4)  # the model of an emulated target's soak


def rss_bytes() -> int:
    """This process's resident set size (Linux /proc), 0 where unknown."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class TinyLM(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, seq: int):
        super().__init__()
        self.emb, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        layer = nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.body = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.emb(ids) + self.pos(tl.arange(t, device=ids.device))
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=ids.device)
        return self.head(self.body(x, mask=mask, is_causal=True))


def inject(fault: str, model: TinyLM, device, vocab: int) -> None:
    """Provoke one fault; it must raise a tensorlite error (the caller checks which)."""
    if fault == "bad ids":
        model(tl.tensor([[0, vocab + 5]], device=device))
    elif fault == "shape":
        model.head(tl.ones(2, model.head.in_features + 1, device=device))
    elif fault == "allocation":
        tl.zeros(1 << 50, device=device)
    elif fault == "dtype":
        tl.ones(2, device=device) & tl.ones(2, device=device)  # bitwise on floats
    elif fault == "index":
        tl.arange(4, device=device)[tl.tensor([7], device=device)]


def run(device="cpu", steps=1000, every=50, d_model=64, layers=2, vocab=64, seq=16, batch=8, faults=True,
        log=print):
    """(losses, faults raised as {name: error class name}, rss after warm-up, rss at the end)."""
    tl.manual_seed(0)
    rng = np.random.default_rng(0)
    model = TinyLM(vocab, d_model, layers, seq).to(device)
    opt = tl.optim.AdamW(model.parameters(), lr=3e-3)
    losses, raised, warm = [], {}, 0
    for step in range(steps):
        ids = tl.tensor(rng.integers(0, vocab, (batch, seq + 1)), device=device)
        logits = model(ids[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), ids[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
        if faults and step % every == every // 2:
            fault = FAULTS[(step // every) % len(FAULTS)]
            try:
                inject(fault, model, device, vocab)
            except tl.TensorliteError as e:
                raised.setdefault(fault, type(e).__name__)
            else:
                raise AssertionError(f"soak: the {fault!r} fault at step {step} raised nothing")
        if step == min(steps - 1, max(every * len(FAULTS), steps // 5)):
            warm = rss_bytes()  # after every kind of fault has run once
        if log and (step + 1) % 100 == 0:
            log(f"step {step + 1}: loss {losses[-1]:.4f}, rss {rss_bytes() / 2**20:.1f} MiB")
    return losses, raised, warm, rss_bytes()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--every", type=int, default=50)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--small", action="store_true", help=f"the SMALL model, {SMALL} (emulated targets)")
    p.add_argument("--rss-tolerance", type=float, default=0.05)
    args = p.parse_args(argv)
    size = SMALL if args.small else dict(d_model=args.d_model)
    clean, _, _, _ = run(args.device, args.steps, args.every, faults=False, log=None, **size)
    losses, raised, warm, end = run(args.device, args.steps, args.every, **size)
    growth = (end - warm) / warm if warm else 0.0
    same = same_curve(losses, clean, args.device)
    print(f"{args.steps} steps on {args.device} ({size}), a fault every {args.every}: raised {raised}")
    print(f"loss curve the fault-free run's: {same} (final {losses[-1]:.4f})")
    print(f"resident memory after warm-up {warm / 2**20:.1f} MiB, at the end {end / 2**20:.1f} MiB "
          f"({100 * growth:+.2f}%, tolerance {100 * args.rss_tolerance:.0f}%)")
    ok = same and set(raised) == set(FAULTS) and growth <= args.rss_tolerance
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
