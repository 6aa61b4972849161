"""Run under `mpiexec -n 2` with TENSORLITE_DIST_TIMEOUT set: a peer lost mid-backward. Both ranks
train a small DistributedDataParallel model one step (so every kernel and communicator is up); in
the second step's backward rank 1 stops (SIGSTOP) once its last layers' buckets are reduced,
before the first layer's. Rank 0 reduces that bucket too (on a GPU: an NCCL all-reduce whose peer
never comes, which only the watchdog ends), then reads the gradient on the host: that must raise
a DistributedError within the timeout. Rank 0 then kills the stopped rank 1 and exits (status 0).

A stopped peer, not a killed one: MPICH's launcher ends the whole job as soon as a rank dies
(even with -disable-auto-cleanup its proxy fails forwarding to the dead rank), so a killed rank
never leaves the others to the watchdog; a rank that hangs (a GPU fault, a deadlock, a lost
node's network) stays alive to the launcher and gone to the collective, which is the watchdog's case.

argv[1]: the device kind ('cpu', 'cuda', ...). Prints "rank 1 stops at <time.time()>", then
"rank 0 raised <type> at <time.time()>: <message>" (or "rank 0 finished the step", a failure),
then "rank 0 exits"."""
import os
import signal
import sys
import time

import tensorlite as tl
import tensorlite.distributed as dist
import tensorlite.nn.functional as F
from tensorlite import nn

dist.init()
rank = dist.get_rank()
device = dist.device(sys.argv[1])
tl.manual_seed(0)
net = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2)).to(device)
model = dist.DistributedDataParallel(net, bucket_cap_mb=0.01)  # ~10 KB buckets: one bucket per layer or less
x, y = tl.randn(16, 8, device=device), tl.randn(16, 2, device=device)


def step():
    model.zero_grad()
    F.mse_loss(model(x), y).backward()
    return net[0].weight.grad.sum().item()  # a host read: waits for every bucket's all-reduce


pids = tl.zeros(2, dtype=tl.int64)
dist.all_gather_into_tensor(pids, tl.tensor([os.getpid()], dtype=tl.int64))  # rank 0 ends the stopped rank 1
step()
print(f"rank {rank} finished step 1", flush=True)
if rank == 1:
    def stop(grad):  # the first layer's weight gradient is the backward's last: later buckets are in flight
        print(f"rank 1 stops at {time.time():.3f}", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
    net[0].weight.register_hook(stop)
    step()
    print("rank 1 went on after SIGSTOP", flush=True)
else:
    try:
        step()
        print("rank 0 finished the step", flush=True)
    except dist.DistributedError as e:
        print(f"rank 0 raised {type(e).__name__} at {time.time():.3f}: {e}", flush=True)
    finally:
        os.kill(int(pids[1].item()), signal.SIGKILL)  # the launcher would wait for it for ever
    print("rank 0 exits", flush=True)
