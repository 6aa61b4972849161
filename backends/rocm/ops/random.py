"""Random numbers (random.hip): Philox-4x32-10, counter-based, so a (seed, offset, numel)
always yields the same values on every GPU."""
from __future__ import annotations

from typing import TYPE_CHECKING
from tensorlite import dtype as dtypes
from tensorlite.errors import ArgumentError
from tensorlite.layout import Layout

from ..kernel_table import FLOATS, kernel_for
from ..launch import BLOCK, grid_for

if TYPE_CHECKING:
    from ..storage import GpuStorage

# the entry points of this family's kernel source (kernel_table.py assembles every family's)
KERNELS = {"random.hip": tuple(f"rand_{kind}_{t}" for kind in ("uniform", "normal") for t in FLOATS)}


def random_fill(storage: GpuStorage, kind: str, a: float, b: float, seed: int, offset: int) -> None:
    """Fill `storage` with uniform [a, b) ('uniform') or normal (mean a, std b) values
    from Philox-4x32-10 keyed by `seed`, counter stream `offset` (see kernels/random.hip:
    a given (seed, offset, numel) always yields the same values). Integer dtypes draw in
    f32 and cast (truncating), like the cpu backend's cast of its draws."""
    if kind not in ("uniform", "normal"):
        raise ArgumentError(f"random_fill: kind must be 'uniform' or 'normal', got {kind!r}")
    n = storage.numel
    if n == 0:
        return
    dev = storage.device
    target = storage
    if not storage.dtype.is_floating_point:
        target = storage._new(n, dtypes.float32)
    per_group = 2 if target.dtype is dtypes.float64 else 4
    kernel = kernel_for(dev, f"rand_{kind}_{target.dtype.short}", "random_fill", self=(storage, Layout((n,))))
    dev.launch(kernel, grid_for(dev, -(-n // per_group)), BLOCK,
               [("int64", n), ("uint64", int(seed) & 0xFFFFFFFFFFFFFFFF), ("uint64", int(offset) & 0xFFFFFFFFFFFFFFFF),
                ("double", float(a)), ("double", float(b)), ("ptr", target.buffer.ptr)])
    if target is not storage:
        target.copy_strided_src(storage, 0, Layout.contiguous((n,)))
