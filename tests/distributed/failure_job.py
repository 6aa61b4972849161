"""Run under `mpiexec -n 2`: rank 1 fails as argv[1] says while rank 0 enters an all_reduce.
raise: an uncaught exception (the abort hook ends the job); exit: the process exits at once
without MPI's knowledge; hang: it sleeps (rank 0's wait passes TENSORLITE_DIST_TIMEOUT)."""
import os
import sys
import time

import tensorlite as tl
import tensorlite.distributed as dist

dist.init()
if dist.get_rank() == 1:
    if sys.argv[1] == "raise":
        raise ValueError("rank 1 fails on purpose")
    if sys.argv[1] == "exit":
        os._exit(3)
    if sys.argv[1] == "hang":
        time.sleep(120)
dist.all_reduce(tl.ones(3))
print(f"rank {dist.get_rank()} finished the all_reduce", flush=True)
