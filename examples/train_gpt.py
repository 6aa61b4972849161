"""Train a small GPT from scratch to add numbers, then measure it on held-out problems.

    python examples/train_gpt.py                  # 40 s to 2 min on 2 CPU cores (by seed), ends with the accuracy
    python examples/train_gpt.py --device cuda --dtype bf16 --out adder.safetensors
    python examples/train_gpt.py --load adder.safetensors --ask 123+456 999+1   # use a checkpoint
    python examples/train_gpt.py --checkpoint-every 50 --resume   # rerun after a crash: continues
    mpiexec -n 2 python examples/train_gpt.py     # data parallel: 2 processes, same global batch

The task: `a + b` for two n-digit numbers (n = --digits, default 3), written as one
sequence of tokens '0'..'9', '+', '=':

    prompt  "042+715="       the operands zero-padded to n digits, most significant first
    answer  "7570"           the n+1 digits of the sum (757 -> 0757) LEAST significant first

Why this encoding (it is what makes the run short):
- fixed width: every sequence has the same length, so batches need no padding and the
  answer always starts at the same position;
- reversed answer: the model emits the units digit first, so each digit it writes needs
  only the operand digits at that place and the carry, which follows from the digits it
  has already written. Written most significant first, the first digit would depend on
  every carry at once and training takes many times longer;
- the loss covers only the answer tokens: the operands are random, predicting them
  teaches nothing;
- place embeddings: besides its learned position embedding, every digit gets a learned
  embedding of its place value (units, tens, ...), shared by both operands and the answer
  (the "Abacus" embeddings of McLeish et al., 2024). The answer's tens digit then finds
  the operands' tens digits by matching equal embeddings. With position embeddings alone
  the model must first discover that alignment from random vectors, and in our runs about
  one seed in four stalled on it (or on the carries) past the step budget; with them
  every seed tried reached 95% well within it. `--no-place` trains the plain GPT.

The model is a pre-norm GPT: token + learned position (+ place) embeddings, blocks of
LayerNorm -> causal multi-head attention (F.scaled_dot_product_attention) -> residual,
LayerNorm -> GELU MLP (tanh form, as GPT-2) -> residual, a final LayerNorm and a linear head (optionally tied to
the token embedding). `--dtype bf16` is mixed precision: parameters, optimizer state,
LayerNorms, the residual stream and the loss stay in f32; matmuls and attention run in
bf16 (weights cast on the fly, gradients flow back through the casts into f32).

Training: AdamW (lr 5e-3, 100 warm-up steps, cosine decay over --steps), 256 problems per
step, gradient norm clipped at 1. Every --eval-every steps the model answers 500
validation problems; once it gets --stop-at (99%) of them right, training stops. Most
runs stop after 400-600 steps; --steps bounds the slow ones.

`--graph` (the default on a GPU; with several ranks, where NCCL or RCCL carry the
all-reduces; `--no-graph` to turn it off) captures the
whole training step, forward + backward + clipping + AdamW, as one graph after two eager
steps and replays it (tl.graphs: one launch call per step instead of a few hundred): each
batch is copied into a static input, AdamW runs with capturable=True (step counts on the
device) and its lr is a device tensor that the schedule fills before each replay; the loss
is read from the graph's output outside it. The gradients are cleared to None once before
the capture, so backward makes them in the graph's memory and every replay writes them anew.

Evaluation decodes greedily, one batch for all held-out problems, and counts a problem
right only if every answer digit is. Neither the held-out nor the validation problems
ever appear in training.
The script exits with status 1 when the accuracy is below --target.

Resuming: `--checkpoint-every N` writes the training state every N steps (and when training
ends) to --checkpoint through tl.save, which replaces the file only once the new one is
complete: the model, AdamW's state, the step, the losses so far, the data position (the
problem generator's state) and the generators of `cpu` and the device (tl.get_rng_state; only
the model's initialisation draws from them today, but a step that draws, dropout say, then
resumes on the same numbers). The learning-rate schedule is a function of the step, so it has no
state of its own. `--resume` continues from the
checkpoint (or starts afresh where there is none): on `cpu` the resumed run's losses and weights
equal the uninterrupted run's bit for bit. The checkpoint records the run's settings; resuming
with other settings raises.

Data parallel: started by `mpiexec -n N` (see tensorlite.distributed), each rank trains a
replica on its 1/N of every batch (--batch-size is the global batch, so a run computes what
one process computes, up to rounding), with gradients averaged across ranks
(DistributedDataParallel); each rank evaluates its share of the problems and the counts are
summed. GPU ranks take the GPU of their local rank. Rank 0 alone prints and writes the checkpoint.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for common.py when run as a script
import tensorlite as tl  # noqa: E402
import tensorlite.distributed as dist  # noqa: E402
import tensorlite.nn.functional as F  # noqa: E402
from tensorlite import nn  # noqa: E402
from common import add_device_args, progress, resolve_device, warm_up_kernels  # noqa: E402

PLUS, EQUALS = 10, 11
VOCAB = 12  # '0'..'9', '+', '='


# ---- data --------------------------------------------------------------------------

def _digits(x: np.ndarray, width: int) -> np.ndarray:
    """(n,) integers -> (n, width) digits, most significant first."""
    powers = 10 ** np.arange(width - 1, -1, -1)
    return (x[:, None] // powers) % 10


def encode(a: np.ndarray, b: np.ndarray, digits: int) -> np.ndarray:
    """Token sequences "a+b=" + reversed sum, shape (n, 3 * digits + 3), int64."""
    n = len(a)
    answer = _digits(a + b, digits + 1)[:, ::-1]
    return np.concatenate([_digits(a, digits), np.full((n, 1), PLUS), _digits(b, digits),
                           np.full((n, 1), EQUALS), answer], axis=1).astype(np.int64)


def decode_answer(tokens: np.ndarray) -> np.ndarray:
    """Reversed answer digits (n, digits+1) -> the integers they spell."""
    return (tokens * 10 ** np.arange(tokens.shape[1])).sum(1)


class AdditionProblems:
    """Random n-digit additions. Two fixed, disjoint sets are never drawn for training: the
    held-out test problems (the final accuracy) and the validation problems (early stopping)."""

    def __init__(self, digits: int, heldout: int, seed: int, validation: int = 0):
        self.digits, self.limit = digits, 10 ** digits
        self.rng = np.random.default_rng(seed)
        total = min(heldout + validation, self.limit ** 2 // 2)
        keys = self.rng.choice(self.limit ** 2, size=total, replace=False)  # a problem is a * limit + b
        self.heldout_keys = np.sort(keys[:min(heldout, total)])
        self.validation_keys = np.sort(keys[len(self.heldout_keys):])
        self.excluded_keys = np.sort(keys)
        self.prompt_len = 2 * digits + 2

    def places(self) -> list:
        """Place value of each token of a sequence: operand digit i of n has place n-1-i,
        answer digit j (reversed) has place j; '+' and '=' get their own index n+1."""
        n = self.digits
        operand = list(range(n - 1, -1, -1))
        return operand + [n + 1] + operand + [n + 1] + list(range(n + 1))

    def _encode(self, keys) -> np.ndarray:
        a, b = np.divmod(keys, self.limit)
        return encode(a, b, self.digits)

    def heldout(self) -> np.ndarray:
        return self._encode(self.heldout_keys)

    def validation(self) -> np.ndarray:
        return self._encode(self.validation_keys)

    def batch(self, size: int) -> np.ndarray:
        keys = self.rng.integers(0, self.limit ** 2, size)
        clash = np.isin(keys, self.excluded_keys)
        while clash.any():  # redraw the few that hit the held-out or validation sets
            keys[clash] = self.rng.integers(0, self.limit ** 2, int(clash.sum()))
            clash = np.isin(keys, self.excluded_keys)
        return self._encode(keys)


# ---- model -------------------------------------------------------------------------

def linear(layer: nn.Linear, x: tl.Tensor, cast) -> tl.Tensor:
    """layer(x) with the layer's weights in the compute dtype (`cast`: see GPT.compute_weights)."""
    return F.linear(x, cast(layer.weight), cast(layer.bias))


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.ln1 = nn.LayerNorm(d_model)
        # separate modules (the checkpoint's names), run as one GEMM: see forward
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)

    def forward(self, x: tl.Tensor, delta, compute_dtype, cast):
        """(x', delta'): the block applied to the residual stream x + delta, whose sum is left
        to the next norm as delta' is (see norm_sum): x' + delta' is the block's output."""
        b, t, d = x.shape
        h, x = norm_sum(self.ln1, x, delta, compute_dtype)
        # q, k and v from one GEMM over their weights side by side (one product of 3d columns
        # instead of three of d, in the backward too: split's gradient is one cat)
        qkv = (self.q, self.k, self.v)
        y = F.linear(h, tl.cat([cast(m.weight) for m in qkv]), tl.cat([cast(m.bias) for m in qkv]))
        q, k, v = (p.reshape(b, t, self.n_head, d // self.n_head).transpose(1, 2) for p in y.split(d, -1))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h, x = norm_sum(self.ln2, x, linear(self.proj, att.transpose(1, 2).reshape(b, t, d), cast), compute_dtype)
        h = F.gelu(linear(self.fc, h, cast), approximate="tanh")
        return x, linear(self.out, h, cast)


def norm_sum(ln: nn.LayerNorm, x: tl.Tensor, delta, compute_dtype):
    """(ln(x + delta) in compute_dtype, x + delta): the residual add of a branch's output delta
    (in compute_dtype; None: none) to the stream x (in float32), the norm after it and the
    cast to the products' dtype, as one op (one kernel each way on GPUs)."""
    if delta is None:
        return ln(x).to(compute_dtype), x
    return F.add_layer_norm(x, delta, ln.normalized_shape, ln.weight, ln.bias, ln.eps, dtype=compute_dtype)


class GPT(nn.Module):
    """`places`: optional place index of each position (block_size ints); positions with
    equal places share a learned embedding added to the input (see the module docstring)."""

    def __init__(self, vocab: int, block_size: int, d_model: int = 128, n_layer: int = 2, n_head: int = 4,
                 tied: bool = False, places=None):
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"GPT: d_model={d_model} is not a multiple of n_head={n_head}")
        if places is not None and len(places) != block_size:
            raise ValueError(f"GPT: {len(places)} places for block_size={block_size}")
        places = None if places is None else [int(i) for i in places]
        self.config = dict(vocab=vocab, block_size=block_size, d_model=d_model, n_layer=n_layer,
                           n_head=n_head, tied=tied, places=places)
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(block_size, d_model)
        self.place = None if places is None else nn.Embedding(max(places) + 1, d_model)
        # a constant, moved with the model by .to(); rebuilt from the config, so not saved
        self.register_buffer("place_ids", None if places is None else tl.tensor(places), persistent=False)
        self.blocks = nn.ModuleList([Block(d_model, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = None if tied else nn.Linear(d_model, vocab, bias=False)
        self.compute_dtype = tl.float32

    def forward(self, ids: tl.Tensor, last: int = None) -> tl.Tensor:
        """Logits (b, t, vocab) in f32; `last` keeps only the final `last` positions
        (the head and final norm then run only where a prediction is needed)."""
        t = ids.shape[1]
        if t > self.config["block_size"]:
            raise ValueError(f"GPT: sequence of {t} tokens exceeds block_size={self.config['block_size']}")
        x = self.tok(ids) + self.pos(tl.arange(t, device=ids.device))
        if self.place is not None:
            x = x + self.place(self.place_ids[:t])
        cast = self.compute_weights()
        delta = None  # each block's output, added to the stream by the next norm
        for block in self.blocks:
            x, delta = block(x, delta, self.compute_dtype, cast)
        if last is not None:
            x, delta = x[:, t - last:], None if delta is None else delta[:, t - last:]
        h, _ = norm_sum(self.ln_f, x, delta, self.compute_dtype)
        if self.head is None:
            logits = F.linear(h, cast(self.tok.weight))
        else:
            logits = linear(self.head, h, cast)
        return logits.float()

    def compute_weights(self):
        """For one forward: a function from a matmul weight (or None) to its copy in
        compute_dtype. Under bf16 the f32 master weights are cast a block at a time, one
        multi-tensor op per block whose backward casts the block's gradients back at once too
        (two casts per weight per step otherwise: host time that bounds a small model's step).
        Per block, not all at once: the f32 gradients of a block are then ready when its
        backward is done, so DDP's all-reduce of them overlaps the backward of the blocks below."""
        groups = [[m for m in (block.q, block.k, block.v, block.proj, block.fc, block.out)] for block in self.blocks]
        groups.append([self.head])
        copies = {}
        for group in groups:
            weights = [p for m in group if m is not None for p in (m.weight, m.bias) if p is not None]
            if group[0] is self.head and self.head is None:
                weights.append(self.tok.weight)
            if weights:
                copies.update(zip(map(id, weights), tl.foreach_to(weights, self.compute_dtype)))
        return lambda p: None if p is None else copies[id(p)]


# ---- training and evaluation ---------------------------------------------------------

def answer_loss(model: GPT, seq: tl.Tensor, prompt_len: int) -> tl.Tensor:
    """Cross-entropy of the answer tokens only, each predicted from the tokens before it."""
    answer_len = seq.shape[1] - prompt_len
    logits = model(seq[:, :-1], last=answer_len)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), seq[:, prompt_len:].reshape(-1))


@tl.no_grad()
def greedy_answers(model: GPT, prompts: np.ndarray, answer_len: int, device) -> np.ndarray:
    """The answer tokens (n, answer_len) the model writes after each prompt, greedily."""
    x = tl.tensor(prompts, device=device)
    for _ in range(answer_len):
        next_id = model(x, last=1)[:, -1].argmax(-1, keepdim=True)
        x = tl.cat([x, next_id], dim=1)
    return x[:, prompts.shape[1]:].numpy()


def exact_match(model: GPT, problems: np.ndarray, prompt_len: int, device, batch: int = 1000) -> float:
    """Greedy decoding of every problem's answer; fraction with all answer digits right.
    Under several ranks each decodes its share and the counts are summed (all_reduce)."""
    was_training = model.training
    model.eval()
    world, rank = _world()
    mine = np.array_split(problems, world)[rank]
    correct = 0
    for start in range(0, len(mine), batch):
        chunk = mine[start:start + batch]
        predicted = greedy_answers(model, chunk[:, :prompt_len], chunk.shape[1] - prompt_len, device)
        correct += int((predicted == chunk[:, prompt_len:]).all(1).sum())
    if world > 1:
        total = tl.tensor([correct])
        dist.all_reduce(total)
        correct = int(total.item())
    model.train(was_training)
    return correct / len(problems)


def _world():
    """(world size, rank) of the process group, (1, 0) where none is initialized."""
    return (dist.get_world_size(), dist.get_rank()) if dist.is_initialized() else (1, 0)


def rank_device(name: str) -> str:
    """Under several ranks a GPU named without an ordinal becomes this rank's ('cuda' ->
    'cuda:<local rank>'); otherwise the name as given."""
    world, _ = _world()
    if world > 1 and name.split(":")[0] != "cpu" and ":" not in name:
        return dist.device(name)
    return name


def answer(model: GPT, sums, device) -> list:
    """The model's answers to sums written "a+b" (operands of the model's digit count)."""
    digits = (model.config["block_size"] - 2) // 3
    try:
        a, b = (np.array(v) for v in zip(*(map(int, q.split("+")) for q in sums)))
    except ValueError:
        raise ValueError(f"sums must be written a+b with integers a and b, got {list(sums)}") from None
    if (np.concatenate([a, b]) >= 10 ** digits).any() or (np.concatenate([a, b]) < 0).any():
        raise ValueError(f"this model adds numbers of 0..{10 ** digits - 1}, got {list(sums)}")
    model.eval()
    return decode_answer(greedy_answers(model, encode(a, b, digits)[:, :2 * digits + 2], digits + 1, device)).tolist()


def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to 0."""
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def save_checkpoint(model: GPT, path: str, extra: dict = None) -> None:
    meta = {"config": json.dumps(model.config)}
    meta.update({k: json.dumps(v) for k, v in (extra or {}).items()})
    tl.save_safetensors(model.state_dict(), path, metadata=meta)


def load_checkpoint(path: str, device="cpu") -> GPT:
    """A GPT rebuilt from a checkpoint written by save_checkpoint."""
    from safetensors import safe_open
    try:
        with safe_open(path, framework="numpy") as f:
            config = json.loads(f.metadata()["config"])
    except FileNotFoundError:
        raise
    except Exception as e:  # corrupt or truncated file, no "config" metadata, bad JSON
        raise tl.FormatError(f"load_checkpoint: {path!r} is no checkpoint of save_checkpoint: "
                             f"{type(e).__name__}: {e}") from e
    model = GPT(**config)
    model.load_state_dict(tl.load_safetensors(path))
    return model.to(device)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_device_args(p)
    p.add_argument("--digits", type=int, default=3, help="digits per operand")
    p.add_argument("--steps", type=int, default=1200,
                   help="most training steps (the learning-rate schedule spans them)")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=5e-3, help="peak learning rate (AdamW)")
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--tied", action="store_true", help="tie the output head to the token embedding")
    p.add_argument("--no-place", action="store_true", help="no place-value embeddings (the plain GPT)")
    p.add_argument("--heldout", type=int, default=2000, help="number of held-out test problems")
    p.add_argument("--validation", type=int, default=500, help="number of validation problems")
    p.add_argument("--stop-at", type=float, default=0.99,
                   help="stop training once validation accuracy reaches this (0: never)")
    p.add_argument("--eval-every", type=int, default=50, help="steps between validation checks")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--out", default="gpt_adder.safetensors", help="checkpoint path ('' to skip saving)")
    p.add_argument("--target", type=float, default=0.95, help="exit 1 if held-out accuracy is below this")
    p.add_argument("--graph", action=argparse.BooleanOptionalAction, default=None,
                   help="capture the training step as a graph and replay it (default: on for a GPU)")
    p.add_argument("--load", metavar="PATH", help="skip training: load a checkpoint this script wrote")
    p.add_argument("--ask", nargs="+", metavar="A+B", help="print the model's answers to these sums")
    p.add_argument("--checkpoint", default="gpt_adder.ckpt", metavar="PATH",
                   help="where --checkpoint-every writes the training state and --resume reads it")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="N",
                   help="write the training state every N steps and when training ends (0: never)")
    p.add_argument("--resume", action="store_true",
                   help="continue training from --checkpoint (a fresh start where there is none)")
    return p.parse_args(argv)


# the settings a resumed run must share with the run that wrote its checkpoint
RUN_SETTINGS = ("digits", "steps", "batch_size", "lr", "warmup", "d_model", "layers", "heads", "tied", "no_place",
                "heldout", "validation", "stop_at", "eval_every", "seed", "dtype")


def save_training_state(path: str, model: GPT, opt, data: AdditionProblems, args, step: int, losses: list,
                        stopped: bool) -> None:
    """Everything a run needs to continue after `step` steps (see the module docstring), written atomically."""
    tl.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step, "losses": losses,
             "stopped": stopped, "data_rng": data.rng.bit_generator.state, "rng": rng_states(model),
             "settings": {k: getattr(args, k) for k in RUN_SETTINGS}}, path)


def resume_training_state(path: str, model: GPT, opt, data: AdditionProblems, args) -> dict:
    """Load a save_training_state checkpoint into model, opt and data; returns it (its step, losses, stopped)."""
    state = tl.load(path, map_location=str(next(model.parameters()).device))
    changed = {k: (v, getattr(args, k)) for k, v in state["settings"].items() if getattr(args, k) != v}
    if changed:
        raise ValueError(f"--resume: {path!r} was written by a run with other settings (saved, given): {changed}")
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    data.rng.bit_generator.state = state["data_rng"]
    for device, rng in state["rng"].items():
        tl.set_rng_state(rng, device)
    return state


def rng_states(model: GPT) -> dict:
    """{device: generator state} of `cpu` and of the model's device."""
    devices = dict.fromkeys(["cpu", str(next(model.parameters()).device)])
    return {device: tl.get_rng_state(device) for device in devices}


def problems(args: argparse.Namespace, digits: int) -> AdditionProblems:
    """The problem sets of a run: the same held-out problems for the same --seed and sizes."""
    early_stop = args.stop_at > 0 and args.validation > 0
    return AdditionProblems(digits, args.heldout, args.seed, args.validation if early_stop else 0)


def train(args: argparse.Namespace):
    """Build and train the model as `args` say; returns (model, problems, losses) where
    losses are the (step, loss) pairs read during training (every 10th step, or every
    --log-every steps where that is fewer; a resumed run's include those before it).

    Training stops early once the greedy exact-match accuracy on the validation problems
    reaches --stop-at: most runs get there in a fraction of --steps, and the rest use the
    remaining steps to get past the plateau where the model adds digits but not yet carries."""
    dist.init()  # a world of one without mpiexec
    world, rank = _world()
    if args.batch_size % world:
        raise ValueError(f"--batch-size {args.batch_size} does not split over {world} ranks")
    device = rank_device(resolve_device(args.device))
    tl.manual_seed(args.seed)
    data = problems(args, args.digits)
    early_stop = len(data.validation_keys) > 0
    block_size = 3 * args.digits + 2  # the model never sees the last answer token as input
    places = None if args.no_place else data.places()[:block_size]
    model = GPT(VOCAB, block_size, args.d_model, args.layers, args.heads, args.tied, places).to(device)
    model.compute_dtype = tl.bfloat16 if args.dtype == "bf16" else tl.float32
    n_params = sum(p.numel() for p in model.parameters())
    if rank == 0:
        ranks = f" ranks={world} (batch {args.batch_size // world} per rank)" if world > 1 else ""
        print(f"device={device} dtype={args.dtype} params={n_params} "
              f"task={args.digits}-digit addition, {args.steps} steps x {args.batch_size}{ranks}", flush=True)
    # several ranks: every rank starts from rank 0's weights; backward averages the gradients
    replica = dist.DistributedDataParallel(model) if world > 1 else model
    shard = slice(rank * args.batch_size // world, (rank + 1) * args.batch_size // world)

    graph = use_graph(args.graph, device, world)
    # captured: the step counts and the lr on the device (the schedule fills the lr tensor in place)
    lr = tl.tensor(lr_at(0, args.steps, args.lr, args.warmup), device=device) if graph else args.lr
    opt = tl.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01, capturable=graph)

    def train_step(seq):
        loss = answer_loss(replica, seq, data.prompt_len)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss
    captured = static_seq = static_loss = None
    losses, first, stopped = [], 0, False
    if args.resume and os.path.exists(args.checkpoint):
        state = resume_training_state(args.checkpoint, model, opt, data, args)
        losses, first, stopped = [tuple(x) for x in state["losses"]], state["step"], state["stopped"]
        if rank == 0:
            print(f"resuming from {args.checkpoint} after step {first}", flush=True)
    elif args.resume and rank == 0:
        print(f"--resume: no checkpoint at {args.checkpoint}: starting afresh", flush=True)

    def checkpoint(step, stopped=False):
        if rank == 0:
            save_training_state(args.checkpoint, model, opt, data, args, step, losses, stopped)
    start = time.perf_counter()
    bar = progress(total=args.steps, initial=first, desc="train", unit="step", disable=True if rank else None)
    say = bar.write if rank == 0 else (lambda line: None)
    for step in range(first, first if stopped else args.steps):
        rate = lr_at(step, args.steps, args.lr, args.warmup)
        for group in opt.param_groups:
            if graph:
                group["lr"].fill_(rate)
            else:
                group["lr"] = rate
        # every rank draws the same global batch (one generator, one seed) and trains on its slice
        seq = tl.tensor(data.batch(args.batch_size)[shard], device=device)
        if not graph or step < first + GRAPH_WARMUP:  # eager (graph: also makes the optimizer state, compiles)
            opt.zero_grad()
            loss = train_step(seq)
        else:
            if captured is None:
                static_seq = seq.clone()
                opt.zero_grad(set_to_none=True)  # backward makes the gradients in the graph's memory
                captured = tl.graphs.Graph()
                with tl.graphs.graph(captured, device=device):
                    static_loss = train_step(static_seq)
            else:
                static_seq.copy_(seq)
            captured.replay()  # a capture runs nothing: its first batch is trained here too
            loss = static_loss
        bar.update()
        last = step == args.steps - 1
        if step % min(10, args.log_every) == 0 or last:  # reading the loss waits for the device: not every step
            losses.append((step, _global_mean(loss)))
            bar.set_postfix(loss=f"{losses[-1][1]:.4f}")
        if (step + 1) % args.log_every == 0 or last:
            say(f"step {step + 1:5d}  loss {_global_mean(loss):.4f}  {time.perf_counter() - start:6.1f}s")
        if early_stop and (step + 1) % args.eval_every == 0:
            accuracy = exact_match(model, data.validation(), data.prompt_len, device)
            bar.set_postfix(loss=f"{losses[-1][1]:.4f}", val=f"{accuracy:.3f}")
            if accuracy >= args.stop_at:
                say(f"step {step + 1:5d}  validation exact match {accuracy:.4f} >= {args.stop_at}: stopping")
                bar.stop_early()
                stopped = True
        if args.checkpoint_every and ((step + 1) % args.checkpoint_every == 0 or last or stopped):
            checkpoint(step + 1, stopped)
        if stopped:
            break
    bar.close()
    return model, data, losses


GRAPH_WARMUP = 2  # eager steps before the capture


def use_graph(asked, device: str, world: int) -> bool:
    """Whether to capture the training step: as asked, else on a GPU, with several ranks where
    the collectives run on the device (dist.device_collectives: DDP's all-reduces are captured
    too; the emulated AMD platform stages them through the host, which a capture cannot hold)."""
    gpu = tl.backend.get_device(device).name != "cpu"
    if asked and not gpu:
        raise ValueError(f"--graph needs a GPU device (device {device})")
    if asked is not None:
        return asked
    return gpu and (world == 1 or dist.device_collectives(device))


def _global_mean(loss: tl.Tensor) -> float:
    """The loss of the whole batch: the ranks' shard losses averaged (equal shards), or the loss."""
    if _world()[0] > 1:
        loss = loss.detach().clone()
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)
    return loss.item()


def main(argv=None) -> int:
    args = parse_args(argv)
    dist.init()  # several ranks under mpiexec, else one
    _, rank = _world()
    args.device = rank_device(resolve_device(args.device))
    warm_up_kernels(args.device)  # before the clock: train time is training
    start = time.perf_counter()
    if args.load:  # the held-out set is the one training with the same --seed and --heldout kept out
        model = load_checkpoint(args.load, args.device)
        data = problems(args, (model.config["block_size"] - 2) // 3)
    else:
        model, data, _ = train(args)
    train_seconds = time.perf_counter() - start
    accuracy = exact_match(model, data.heldout(), data.prompt_len, args.device)
    trained = "loaded" if args.load else f"train {train_seconds:.1f}s"
    if rank == 0:
        print(f"held-out exact match: {accuracy:.4f} on {len(data.heldout_keys)} problems "
              f"({trained}, total {time.perf_counter() - start:.1f}s)", flush=True)
        for question, value in zip(args.ask or (), answer(model, args.ask, args.device) if args.ask else ()):
            print(f"{question} = {value}")
        if args.out and not args.load:
            save_checkpoint(model, args.out, {"digits": args.digits, "heldout_accuracy": accuracy})
            print(f"checkpoint: {args.out}")
    if accuracy < args.target:
        if rank == 0:
            print(f"accuracy {accuracy:.4f} is below the target {args.target}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
