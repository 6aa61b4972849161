"""Run under `mpiexec -n N`: every collective on every dtype with each rank's inputs from
dist_cases.py, on the device named by argv[1] ('cpu', 'cuda', ...); rank r writes what it got
to argv[2]/rank<r>.npz (as float64 / int64 / bool) and its caught errors to argv[2]/rank<r>.json."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tensorlite as tl  # noqa: E402
import tensorlite.distributed as dist  # noqa: E402
from dist_cases import DTYPES, SHAPE, ops_of, rank_values  # noqa: E402

dist.init()
rank, world = dist.get_rank(), dist.get_world_size()
device = dist.device(sys.argv[1])
out_dir = sys.argv[2]
got, errors = {}, {}


def t(values, dtype):
    return tl.tensor(np.asarray(values), dtype=getattr(tl, dtype if dtype != "bool" else "bool_"), device=device)


def keep(key, x):
    a = x.numpy()
    got[key] = a.astype(bool) if a.dtype == bool else a.astype(np.float64 if x.dtype.is_floating_point else np.int64)


for dt in DTYPES:
    mine = rank_values(rank, dt)
    for op in ops_of(dt):
        x = t(mine, dt)
        dist.all_reduce(x, op=op)
        keep(f"all_reduce/{dt}/{op}", x)
    x = t(mine.T.copy(), dt).mT  # a non-contiguous view: reduced through a contiguous copy, written back
    dist.all_reduce(x, op="sum")
    keep(f"all_reduce_noncontig/{dt}", x)
    x = t(mine, dt)
    dist.broadcast(x, src=world - 1)
    keep(f"broadcast/{dt}", x)
    x = t(mine, dt)
    out = tl.zeros((world,) + SHAPE, dtype=x.dtype, device=device)
    dist.all_gather_into_tensor(out, x)
    keep(f"all_gather_into_tensor/{dt}", out)
    outs = [tl.zeros(SHAPE, dtype=x.dtype, device=device) for _ in range(world)]
    dist.all_gather(outs, x)
    keep(f"all_gather/{dt}", tl.stack(outs))
    big = t(rank_values(rank, dt, (world * 2, 5), salt=1), dt)
    for op in ["sum", "avg" if dt in ("float32", "bfloat16") else "max"]:
        out = tl.zeros(2, 5, dtype=big.dtype, device=device)
        dist.reduce_scatter_tensor(out, big, op=op)
        keep(f"reduce_scatter_tensor/{dt}/{op}", out)
    out = tl.zeros(2, 5, dtype=big.dtype, device=device)
    dist.reduce_scatter(out, list(big.split(2)), op="min")
    keep(f"reduce_scatter/{dt}/min", out)

x = t(rank_values(rank, "float32"), "float32")
work = dist.all_reduce(x, op="max", async_op=True)
work.wait()
keep("async/float32/max", x)

# mismatched calls: each raises on every rank, and the group stays usable after it
for name, call in [("shape", lambda: dist.all_reduce(tl.zeros(2 + rank, device=device))),
                   ("dtype", lambda: dist.all_reduce(tl.zeros(2, dtype=tl.float32 if rank else tl.float64,
                                                               device=device))),
                   ("op", lambda: dist.all_reduce(tl.zeros(2, device=device), op="sum" if rank else "max")),
                   ("collective", lambda: dist.broadcast(tl.zeros(2, device=device)) if rank else dist.barrier())]:
    try:
        call()
        errors[name] = "no error"
    except dist.CollectiveMismatchError as e:
        errors[name] = f"{type(e).__name__}: {e}"
dist.barrier()
tl.synchronize()
np.savez(os.path.join(out_dir, f"rank{rank}.npz"), **got)
with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
    json.dump(errors, f)
print(f"rank {rank} of {world}: {len(got)} results", flush=True)
