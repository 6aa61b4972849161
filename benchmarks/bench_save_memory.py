"""Peak host memory of tl.save: how much a save adds on top of the state dict it writes.

    python benchmarks/bench_save_memory.py [--mb 200] [--tensors 50]

Each measurement runs in a fresh child process (ru_maxrss is a process-lifetime peak): it builds
a float32 state dict of --mb megabytes in --tensors equal tensors on cpu, then saves it to a path.
Printed per child: the resident peak before the save and after it (ru_maxrss), their difference,
and tracemalloc's peak of Python-tracked allocations (numpy's included) during the save alone.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, resource, sys, tracemalloc
import numpy as np
import tensorlite as tl
mb, n, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
per = mb * 2**20 // 4 // n
sd = {f"layer{i}.weight": tl.tensor(np.full(per, i, np.float32)) for i in range(n)}
tl.save({"model": {"w": tl.ones(4)}, "step": 1}, path)  # a tiny first save: imports, not counted
kib = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
before = kib()
tracemalloc.start()
tl.save({"model": sd, "step": 2}, path)
_, traced = tracemalloc.get_traced_memory()
tracemalloc.stop()
print(json.dumps({"file_mb": os.path.getsize(path) / 2**20, "rss_before_mb": before / 1024,
                  "rss_after_mb": kib() / 1024, "tracemalloc_peak_mb": traced / 2**20}))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=int, default=200)
    p.add_argument("--tensors", type=int, default=50)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run([sys.executable, "-c", CHILD, str(args.mb), str(args.tensors), os.path.join(d, "c.pt")],
                             check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    print(f"state dict {r['file_mb']:.1f} MB in {args.tensors} tensors: ru_maxrss {r['rss_before_mb']:.1f} MB before "
          f"the save, {r['rss_after_mb']:.1f} MB after (+{r['rss_after_mb'] - r['rss_before_mb']:.1f} MB); "
          f"tracemalloc peak during the save {r['tracemalloc_peak_mb']:.1f} MB")


if __name__ == "__main__":
    main()
