"""Run under `mpiexec -n N`: DistributedDataParallel against gradients each rank computes
itself for the whole global batch. Rank r writes argv[2]/rank<r>.npz: for each case the DDP
gradients ("<case>/ddp/<param>") and the reference ("<case>/ref/<param>"), the parameters and
buffer after construction, and argv[2]/rank<r>.json with the errors the bad cases raised.
argv[1]: the device kind ('cpu', 'cuda', ...)."""
import copy
import json
import os
import sys

import numpy as np

import tensorlite as tl
import tensorlite.distributed as dist
import tensorlite.nn.functional as F
from tensorlite import nn

dist.init()
rank, world = dist.get_rank(), dist.get_world_size()
device = dist.device(sys.argv[1])
out_dir = sys.argv[2]
got, errors = {}, {}


class Net(nn.Module):
    """Two layers and an optional third (used on some ranks only), plus a buffer."""

    def __init__(self, width=8):
        super().__init__()
        self.a, self.b, self.extra = nn.Linear(4, width), nn.Linear(width, 2), nn.Linear(width, 2)
        self.register_buffer("scale", tl.full((2,), 1.0 + rank))  # rank-dependent: DDP must broadcast rank 0's

    def forward(self, x, use_extra=False):
        h = self.a(x).tanh()
        y = self.b(h)
        return (y + self.extra(h) if use_extra else y) * self.scale


def batch(step, r):
    """Rank r's shard of the global batch of `step` (8 rows per rank)."""
    rng = np.random.default_rng(100 * step + r)
    return (tl.tensor(rng.standard_normal((8, 4)).astype(np.float32), device=device),
            tl.tensor(rng.standard_normal((8, 2)).astype(np.float32), device=device))


def reference(model, steps, use_extra_of):
    """The gradients DDP must produce: every rank's local gradients (of its shard's mean loss,
    summed over `steps`), averaged over the ranks; a parameter a rank does not use counts as 0."""
    total = {}
    for r in range(world):
        m = copy.deepcopy(model)
        m.zero_grad()
        for s in steps:
            x, y = batch(s, r)
            F.mse_loss(m(x, use_extra_of(r)), y).backward()
        for n, p in m.named_parameters():
            g = p.grad.numpy() if p.grad is not None else np.zeros(p.shape, np.float32)
            total[n] = total.get(n, 0) + g / world
    return total


def keep(case, ddp, ref):
    for n, p in ddp.module.named_parameters():
        got[f"{case}/ddp/{n}"] = p.grad.numpy() if p.grad is not None else np.full(p.shape, np.nan)
        got[f"{case}/ref/{n}"] = ref[n]


tl.manual_seed(rank)  # different initial weights on each rank: construction must make them rank 0's
for case, cap in [("buckets_default", 25), ("buckets_tiny", 1e-4)]:  # tiny: a bucket per parameter
    model = Net().to(device)
    ddp = dist.DistributedDataParallel(model, bucket_cap_mb=cap)
    if case == "buckets_default":
        for n, t in list(model.named_parameters()) + list(model.named_buffers()):
            got[f"after_construction/{n}"] = t.numpy()
    x, y = batch(0, rank)
    F.mse_loss(ddp(x, use_extra=True), y).backward()
    keep(case, ddp, reference(model, [0], lambda r: True))

# no_sync: step 1 accumulates locally, step 2 reduces the sum
model = Net().to(device)
ddp = dist.DistributedDataParallel(model)
with ddp.no_sync():
    x, y = batch(1, rank)
    F.mse_loss(ddp(x, use_extra=True), y).backward()
    got["no_sync/local/b.weight"] = model.b.weight.grad.numpy()  # still this rank's own gradient
x, y = batch(2, rank)
F.mse_loss(ddp(x, use_extra=True), y).backward()
keep("no_sync", ddp, reference(model, [1, 2], lambda r: True))

# find_unused_parameters: `extra` is used on rank 0 only
model = Net().to(device)
ddp = dist.DistributedDataParallel(model, find_unused_parameters=True)
x, y = batch(3, rank)
F.mse_loss(ddp(x, use_extra=rank == 0), y).backward()
keep("find_unused", ddp, reference(model, [3], lambda r: r == 0))

# without find_unused_parameters, a parameter that gets no gradient stalls the reduction:
# the next forward says which
model = Net().to(device)
ddp = dist.DistributedDataParallel(model)
x, y = batch(4, rank)
F.mse_loss(ddp(x), y).backward()  # `extra` unused on every rank
try:
    ddp(x)
    errors["unused"] = "no error"
except dist.DistributedError as e:
    errors["unused"] = f"{type(e).__name__}: {e}"

# different models on different ranks
try:
    dist.DistributedDataParallel(Net(width=8 + rank).to(device))
    errors["layout"] = "no error"
except dist.CollectiveMismatchError as e:
    errors["layout"] = f"{type(e).__name__}: {e}"

dist.barrier()
np.savez(os.path.join(out_dir, f"rank{rank}.npz"), **got)
with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
    json.dump(errors, f)
print(f"rank {rank} of {world}: {len(got)} arrays", flush=True)
