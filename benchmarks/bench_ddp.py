"""Issue 26's data-parallel scaling benchmark: tokens/s of the bf16 GPT training step on 1 vs N
GPUs, tensorlite's DistributedDataParallel beside PyTorch's (a benchmark, not a test).

    python benchmarks/bench_ddp.py --json one.json                       # 1 GPU: the baseline
    mpiexec -n 2 python benchmarks/bench_ddp.py --baseline one.json      # 2 GPUs (and -n 4, -n 8)
    python benchmarks/bench_ddp.py --device cpu --small --steps 3        # a dry run on any machine

The workload is benchmarks/profile_step.py's step: examples/train_gpt.py's GPT (d_model 512,
6 layers, 8 heads, vocab 8192, seq 256), bf16 compute (f32 master weights), forward,
cross_entropy, backward, AdamW. Weak scaling, as DDP benchmarks usually report: the batch is
32 sequences *per rank* (--batch), so N ranks train N x 32 sequences per step, and the ideal
is N times the one-GPU tokens/s. One rank trains the plain model (what one GPU runs, no DDP);
N ranks wrap it in tensorlite.distributed.DistributedDataParallel, whose bucketed gradient
all-reduces (NCCL on cuda) start while backward still runs, on the device's communication
stream: the compute stream waits for them only when backward has started the last one.
How much of backward they overlap depends on when the gradients arrive: `--dtype f32` shows
it without mixed precision's weight casts.

Two tensorlite rows: `tensorlite` runs the step eagerly (Python issues every launch, so on a
GPU the step is mostly host time, and N ranks take the slowest rank's host time: the eager
row measures the host as much as DDP); `tensorlite-graph` captures the whole step, DDP's
all-reduces included (they fork onto the communication stream inside the graph, overlapping
backward as eagerly), with tl.graphs.graphed and AdamW(capturable=True), and replays it: what
train_gpt.py --graph runs, and the row that measures the scaling of the GPU work.

The PyTorch reference runs in the same job after tensorlite's: the same architecture
(benchmarks/bench_nn.py's torch twin of train_gpt's GPT: pre-LN blocks, separate q/k/v,
F.scaled_dot_product_attention, GELU tanh, untied head), torch.autocast(bfloat16),
torch.optim.AdamW (torch's default implementation), and on N ranks
torch.nn.parallel.DistributedDataParallel over an NCCL process group ("gloo" on cpu) set up
from the MPI world: rank and world size from tensorlite.distributed, MASTER_ADDR 127.0.0.1 (one
host), a free MASTER_PORT chosen on rank 0 and broadcast over MPI, init_method "env://". Where
torch cannot run (not installed, no CUDA build, no such backend) its rows say why.

Timing: --warmup steps (kernels compiled, caches filled), then --steps timed steps, each
started together on every rank (a host barrier), ended by a device synchronize; a step's time
is the slowest rank's, and the median step gives tokens/s (total = N x batch x seq / step time;
per GPU = total / N). --window K times K steps between synchronizes instead (their mean), which
lets a step's host work overlap the previous step's GPU work, as in training. On N > 1 ranks
the step is also timed inside no_sync() (no gradient reduction): the difference is what DDP
adds to a step (bucket copies, and the part of the all-reduce that backward does not hide).

With --baseline (the --json of a one-rank run with the same sizes) the table gives the
speedup tokens/s(N) / tokens/s(1) of each framework and issue 26's target (>= 1.8x on 2
GPUs, >= 3.4x on 4). NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and the like, set below
before NCCL or torch loads), as issue 26 asks.
"""
from __future__ import annotations

import os

# issue 26: NVLink multicast (NVLS) off for every library that could use it; NCCL, torch's
# symmetric memory and NVSHMEM read these when they load, so before any import below
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"

import argparse  # noqa: E402
import contextlib  # noqa: E402
import datetime  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

import numpy as np  # noqa: E402

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(os.path.dirname(_HERE), "examples"))

import tensorlite as tl  # noqa: E402
import tensorlite.distributed as dist  # noqa: E402
from tensorlite.backend import get_device  # noqa: E402

TARGETS = {2: 1.8, 4: 3.4}  # issue 26: speedup over one GPU at N ranks
FULL = dict(vocab=8192, seq=256, d_model=512, n_layer=6, n_head=8, batch=32)
SMALL = dict(vocab=128, seq=32, d_model=64, n_layer=2, n_head=2, batch=4)
OPT_ARGS = dict(lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)  # profile_step.py's
FRAMEWORKS = ("tensorlite", "tensorlite-graph", "torch")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="cuda, rocm or cpu; each rank takes <device>:<local rank>")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "f32"), help="compute dtype (f32 master weights)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--window", type=int, default=1, help="steps between device synchronizes in a timed sample")
    ap.add_argument("--batch", type=int, default=None, help="sequences per rank (default 32; 4 with --small)")
    ap.add_argument("--small", action="store_true", help="tiny sizes (a dry run on any device)")
    ap.add_argument("--frameworks", default=",".join(FRAMEWORKS),
                    help=f"comma-separated, of {', '.join(FRAMEWORKS)} (tensorlite-graph: the step captured)")
    ap.add_argument("--bucket-cap-mb", type=float, default=25, help="DDP's bucket size, both frameworks (25: torch's)")
    ap.add_argument("--baseline", metavar="JSON", help="the --json of a one-rank run: adds the speedup columns")
    ap.add_argument("--json", metavar="OUT", help="write the results (rank 0)")
    args = ap.parse_args(argv)
    unknown = set(args.frameworks.split(",")) - set(FRAMEWORKS)
    if unknown:
        ap.error(f"--frameworks: unknown {sorted(unknown)}; expected some of {', '.join(FRAMEWORKS)}")
    if min(args.steps, args.window) < 1 or args.warmup < 0 or args.steps < args.window:
        ap.error("--steps and --window must be >= 1 with --window <= --steps, --warmup >= 0")
    return args


def config_of(args, world: int) -> dict:
    sizes = dict(SMALL if args.small else FULL)
    if args.batch is not None:
        sizes["batch"] = args.batch
    return dict(sizes, dtype=args.dtype, device=args.device.split(":")[0], window=args.window, world_size=world)


def median_step_ms(step, sync, args) -> float:
    """The median over timed samples of the slowest rank's time per step (ms)."""
    for _ in range(args.warmup):
        step()
    sync()
    samples = []
    for _ in range(args.steps // args.window):
        dist.barrier()  # every rank starts the sample together, so the slowest rank's time is the step's
        t0 = time.perf_counter()
        for _ in range(args.window):
            step()
        sync()
        samples.append((time.perf_counter() - t0) / args.window * 1e3)
    slowest = tl.tensor(samples, dtype=tl.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return float(np.median(slowest.numpy()))


def measure(args, cfg: dict, step, step_local, sync, world: int) -> dict:
    """A framework's row: the first step's loss, the median step, and on several ranks the
    median of step_local (the same step inside the replica's no_sync(): no gradient reduction)."""
    loss = float(step().item())
    ms = median_step_ms(step, sync, args)
    ms_local = median_step_ms(step_local, sync, args) if world > 1 else None
    tokens = world * cfg["batch"] * cfg["seq"]
    return dict(step_ms=ms, tokens_per_s=tokens / ms * 1e3, tokens_per_s_per_gpu=tokens / ms * 1e3 / world,
                ddp_overhead_ms=None if ms_local is None else ms - ms_local, first_loss=loss)


def local_step(replica, step):
    """step inside replica.no_sync()."""
    def step_local(*args):
        with replica.no_sync():
            return step(*args)
    return step_local


def batch_of(cfg: dict, rank: int) -> np.ndarray:
    """This rank's token ids (batch, seq + 1): its own data, as each rank of a DDP job has."""
    return np.random.default_rng(rank).integers(0, cfg["vocab"], (cfg["batch"], cfg["seq"] + 1))


# ---- tensorlite ------------------------------------------------------------------------------

def _tensorlite_gpt(cfg: dict, device: str):
    from train_gpt import GPT
    tl.manual_seed(0)
    return GPT(cfg["vocab"], cfg["seq"], cfg["d_model"], cfg["n_layer"], cfg["n_head"]).to(device)


def run_tensorlite(args, cfg: dict, device: str, world: int, rank: int, graph: bool = False) -> dict:
    """tensorlite's row; with `graph` the step (and its no_sync twin) is captured by
    tl.graphs.graphed after one eager call and replayed: AdamW(capturable=True) keeps its step
    counts on the device, and DDP's bucket all-reduces go into the graph on the communication
    stream, beside backward."""
    ids = batch_of(cfg, rank)
    x = tl.tensor(ids[:, :-1], device=device)
    y = tl.tensor(ids[:, 1:].reshape(-1), device=device)
    model = _tensorlite_gpt(cfg, device)
    model.compute_dtype = tl.bfloat16 if args.dtype == "bf16" else tl.float32
    replica = dist.DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb) if world > 1 else model
    opt = tl.optim.AdamW(model.parameters(), capturable=graph, **OPT_ARGS)
    dev = get_device(device)

    def step(x, y):
        opt.zero_grad()  # gradients to None: backward writes them anew (in the graph's memory when captured)
        loss = tl.nn.functional.cross_entropy(replica(x).reshape(-1, cfg["vocab"]), y)
        loss.backward()
        opt.step()
        return loss.detach()

    step_local = local_step(replica, step)
    if graph:
        step, step_local = tl.graphs.graphed(step), tl.graphs.graphed(step_local)
    return measure(args, cfg, lambda: step(x, y), lambda: step_local(x, y), dev.synchronize, world)


# ---- PyTorch ---------------------------------------------------------------------------------

def _torch_or_reason(kind: str):
    """(torch, None), or (None, why it cannot run the reference here)."""
    try:
        import torch
        import torch.distributed as tdist
    except ImportError as e:
        return None, f"torch is not installed ({e})"
    if not tdist.is_available():
        return None, "this torch build has no torch.distributed"
    if kind == "cpu":
        return (torch, None) if tdist.is_gloo_available() else (None, "this torch build has no gloo backend")
    if kind == "rocm" and torch.version.hip is None:
        return None, f"torch {torch.__version__} is not a ROCm build"
    if kind == "cuda" and torch.version.cuda is None:
        return None, f"torch {torch.__version__} is not a CUDA build"
    if not torch.cuda.is_available():
        return None, f"torch {torch.__version__} sees no GPU"
    if not tdist.is_nccl_available():
        return None, "this torch build has no NCCL backend"
    return torch, None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _init_torch_group(torch, kind: str, world: int, rank: int) -> None:
    port = tl.tensor([_free_port() if rank == 0 else 0], dtype=tl.int64)
    dist.broadcast(port, src=0)  # over MPI: every rank learns rank 0's port
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")  # one host: the ranks of this benchmark share it
    os.environ["MASTER_PORT"] = str(int(port.item()))
    os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(world)
    torch.distributed.init_process_group("gloo" if kind == "cpu" else "nccl", init_method="env://", rank=rank,
                                         world_size=world, timeout=datetime.timedelta(seconds=300))


def run_torch(torch, args, cfg: dict, device: str, world: int, rank: int) -> dict:
    from bench_nn import torch_gpt
    kind = device.split(":")[0]
    index = int(device.split(":")[1]) if ":" in device else 0
    tdev = torch.device("cpu") if kind == "cpu" else torch.device("cuda", index)  # ROCm torch calls it cuda too
    if kind != "cpu":
        torch.cuda.set_device(index)
    if world > 1:
        _init_torch_group(torch, kind, world, rank)
    try:
        ids = torch.from_numpy(batch_of(cfg, rank)).to(tdev)
        x, y = ids[:, :-1], ids[:, 1:].reshape(-1)
        model = torch_gpt(torch, cfg["vocab"], cfg["seq"], cfg["d_model"], cfg["n_layer"], cfg["n_head"])
        # tensorlite's initial weights (the same seed as its run), as bench_nn.py does: equal first losses
        # show that both frameworks train the same model
        model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v.numpy()))
                               for k, v in _tensorlite_gpt(cfg, "cpu").state_dict().items()})
        model.to(tdev)
        replica = model
        if world > 1:
            replica = torch.nn.parallel.DistributedDataParallel(model, device_ids=None if kind == "cpu" else [index],
                                                                bucket_cap_mb=args.bucket_cap_mb)
        opt = torch.optim.AdamW(model.parameters(), **OPT_ARGS)
        autocast = ((lambda: torch.autocast(tdev.type, dtype=torch.bfloat16)) if args.dtype == "bf16"
                    else contextlib.nullcontext)

        def step():
            with autocast():
                loss = torch.nn.functional.cross_entropy(replica(x).reshape(-1, cfg["vocab"]), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss

        return measure(args, cfg, step, local_step(replica, step), torch.cuda.synchronize if kind != "cpu"
                       else lambda: None, world)
    finally:
        if world > 1:
            torch.distributed.destroy_process_group()


def torch_column(args, cfg: dict, device: str, world: int, rank: int) -> dict:
    """torch's results, or {"skipped": reason}; every rank takes the same branch (a rank that
    lacks torch makes all skip: a collective on one side only would hang)."""
    torch, reason = _torch_or_reason(device.split(":")[0])
    if reason is not None and rank:
        print(f"rank {rank}: torch cannot run: {reason}", flush=True)
    ok = tl.tensor([reason is None], dtype=tl.int32)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    if not ok.item():
        return {"skipped": reason or "another rank cannot run torch (its reason is printed there)"}
    return run_torch(torch, args, cfg, device, world, rank)


# ---- report ----------------------------------------------------------------------------------

def _fmt(v, spec: str, width: int, suffix: str = "") -> str:
    return format("-" if v is None else format(v, spec) + suffix, f">{width}")


def report(cfg: dict, results: dict, baseline) -> list:
    """The table's lines; with a baseline run, each framework's speedup over it."""
    n = cfg["world_size"]
    target = TARGETS.get(n)
    lines = [f"{'ranks':>5}  {'framework':<16}  {'tokens/s':>10}  {'per GPU':>9}  {'step ms':>8}  "
             f"{'DDP ms':>7}  {'first loss':>10}  {'speedup':>7}  target"]
    for name, r in results.items():
        if "skipped" in r or "error" in r:
            lines.append(f"{n:>5}  {name:<16}  {'skipped' if 'skipped' in r else 'error'}: "
                         f"{r.get('skipped') or r.get('error')}")
            continue
        base = (baseline or {}).get("results", {}).get(name, {}).get("tokens_per_s")
        speedup = r["tokens_per_s"] / base if base else None
        met = "-" if target is None or speedup is None else f">= {target}x: {'yes' if speedup >= target else 'NO'}"
        lines.append(f"{n:>5}  {name:<16}  {r['tokens_per_s']:>10.0f}  {r['tokens_per_s_per_gpu']:>9.0f}  "
                     f"{r['step_ms']:>8.2f}  {_fmt(r['ddp_overhead_ms'], '.2f', 7)}  {r['first_loss']:>10.4f}  "
                     f"{_fmt(speedup, '.2f', 7, 'x')}  {met}")
    return lines


def load_baseline(path: str, cfg: dict):
    """The one-rank run's results, or SystemExit where its sizes differ from this run's."""
    with open(path) as f:
        baseline = json.load(f)
    other = baseline.get("config", {})
    differ = {k: (other.get(k), v) for k, v in cfg.items() if k != "world_size" and other.get(k) != v}
    if differ:
        raise SystemExit(f"bench_ddp: --baseline {path} measured other settings (baseline, this run): {differ}")
    if other.get("world_size") != 1:
        raise SystemExit(f"bench_ddp: --baseline {path} is a {other.get('world_size')}-rank run; it must be one rank")
    return baseline


def main(argv=None) -> int:
    args = parse_args(argv)
    dist.init()  # MPI's world under mpiexec, else one rank
    world, rank = dist.get_world_size(), dist.get_rank()
    cfg = config_of(args, world)
    # read before the run, so a wrong baseline fails in seconds, not after the benchmark; by every
    # rank, so that all of them stop (rank 0 alone leaving would leave the others in a collective)
    try:
        baseline = load_baseline(args.baseline, cfg) if args.baseline else None
    except SystemExit as e:
        raise SystemExit(e.code if rank == 0 else 1) from None  # the message once, from rank 0
    device = dist.device(args.device)
    if rank == 0:
        tokens = cfg["batch"] * cfg["seq"]
        print(f"bench_ddp: {world} rank(s) ({dist.get_backend()}), device {args.device} (rank 0 on {device}), "
              f"{args.dtype}, GPT d{cfg['d_model']} L{cfg['n_layer']} h{cfg['n_head']} V{cfg['vocab']}, "
              f"batch {cfg['batch']} x {cfg['seq']} per rank ({tokens} tokens; weak scaling), "
              f"{args.steps} timed steps after {args.warmup}, window {args.window}", flush=True)
    frameworks = args.frameworks.split(",")
    results = {}
    for name in FRAMEWORKS:
        if name not in frameworks:
            continue
        try:
            if name.startswith("tensorlite"):
                if name == "tensorlite-graph" and get_device(device).name == "cpu":
                    results[name] = {"skipped": "graphs need a GPU device"}
                    continue
                results[name] = run_tensorlite(args, cfg, device, world, rank, graph=name == "tensorlite-graph")
                gc.collect()  # its model and optimizer state are gone with its frame: free them for torch's run
                get_device(device).empty_cache()
            else:
                results[name] = torch_column(args, cfg, device, world, rank)
        except Exception as e:  # noqa: BLE001 -- one rank alone: the other column may still run
            if world > 1:
                raise  # the others are inside a collective: the abort hook ends the job
            traceback.print_exc()
            results[name] = {"error": f"{type(e).__name__}: {e}"}
    if rank == 0:
        print("\n".join(report(cfg, results, baseline)), flush=True)
        if args.device.startswith("cpu"):
            print("(cpu: ranks share the host's cores; these numbers only show that the script runs)")
        if world > 1 and baseline is None:
            print("(no --baseline: run `python benchmarks/bench_ddp.py --json one.json` first for the speedups)")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"config": cfg, "results": results}, f, indent=1)
    return 1 if any("error" in r for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
