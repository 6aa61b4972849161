"""GpuStorage: the storage contract (tensorlite.backend.BackendStorage) on a GPU.

Platform-agnostic: the same code drives the `rocm`, `cuda` and emulated `amdemu`
platforms through the GpuDevice API (alloc, htod/dtoh/dtod, memset, function, launch,
blas). Every op enqueues work on the device's stream and returns at once; only reading
data back (`to_cpu`) and the index ops' out-of-range check wait for the device.

This file holds what every op shares: the storage itself (buffer, dtype, value_range),
allocation, copies and reading back. The ops are mixins, one module per kernel family in
ops/ (see ops/__init__.py), each declaring the entry points of its kernel sources (this file
those of copy.hip); kernel_table.py assembles them, launch.py holds the launch geometry and
argument packing.

Semantics follow the cpu backend (the reference), including its numerics notes:
f16/bf16 compute in f32 and round once, integers wrap, float->int truncates, matmul of
integers accumulates exactly (mod 2^bits), sdpa gives zeros for fully masked rows.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np

from tensorlite import dtype as dtypes
from tensorlite.backend import BackendStorage
from tensorlite.dtype import cast_array  # the host-side casts of scalars, as the cpu backend's
from tensorlite.layout import Layout

from .kernel_table import ALL, kernel_for
from .launch import BLOCK, grid_for, pack_strided
from .ops.attention import AttentionOps
from .ops.conv import ConvOps
from .ops.elementwise import ElementwiseOps
from .ops.fused import FusedOps
from .ops.index import IndexOps
from .ops.matmul import MatmulOps
from .ops.reduce import ReduceOps
from .ops.rnn import RnnOps
from .ops.sort import SortOps

_new_object = object.__new__

# the entry points of the copies' kernel source (kernel_table.py assembles every family's)
KERNELS = {"copy.hip": tuple(f"{op}_{t}" for op in ("copy2d", "const_set") for t in ALL)}


class GpuStorage(ElementwiseOps, ReduceOps, IndexOps, MatmulOps, ConvOps, FusedOps, AttentionOps,
                 SortOps, RnnOps, BackendStorage):
    """`numel` elements of `dtype` in `buffer` (a device.Buffer) on `device`.

    `value_range`: (min, max) bounding every stored value where the host knows it without
    reading the device (integer data uploaded from the host, and copies of it), else None.
    Every write into the storage keeps it a bound or forgets it. The index ops and
    cross_entropy use it to skip their blocking error-flag read when it proves every id in
    range (their kernels check each id anyway and never touch memory out of range)."""
    __slots__ = ("device", "buffer", "dtype", "numel", "value_range")

    def __init__(self, device, buffer, dtype, numel: int):
        self.device, self.buffer, self.numel = device, buffer, numel
        self.dtype = dtype if isinstance(dtype, dtypes.DType) else dtypes.get(dtype)
        self.value_range = None

    def __repr__(self):
        return f"GpuStorage({self.numel} x {self.dtype.name} on {self.device})"

    @property
    def ptr(self) -> int:
        return self.buffer.ptr

    def addr(self, offset: int) -> int:
        """Device address of element `offset`."""
        return self.buffer.ptr + offset * self.dtype.itemsize

    def _new(self, numel: int, dtype=None) -> "GpuStorage":
        """A storage of `numel` uninitialised elements of `dtype` (a DType; default self's) on
        self's device: every op's output, so __init__'s assignments are made here without its call."""
        st = _new_object(GpuStorage)
        st.device = dev = self.device
        st.dtype = dtype = self.dtype if dtype is None else dtype
        st.buffer, st.numel, st.value_range = dev.alloc(numel * dtype.itemsize), numel, None
        return st

    def _contiguous(self, layout: Layout, dtype=None) -> Tuple["GpuStorage", Layout]:
        """(storage, layout) of `layout`'s elements in row-major order, in `dtype`; self
        without a copy when that is already the case."""
        dtype = self.dtype if dtype is None else dtype
        if dtype is self.dtype and layout.is_contiguous():
            return self, layout
        return self.to_dtype(layout, dtype), Layout.contiguous(layout.shape)

    # ---- copies ---------------------------------------------------------------------
    def copy_strided_src(self, dst, dst_offset, src_layout):
        n = src_layout.numel()
        if n == 0:
            return
        # a whole-storage copy takes over the source's bound; a partial one widens dst's
        same = dst.dtype is self.dtype
        dst.value_range = (self.value_range if same and n == dst.numel
                           else range_union(dst.value_range, self.value_range) if same else None)
        dev = self.device
        if dst.dtype is self.dtype and src_layout.is_contiguous():
            dev.dtod(dst.addr(dst_offset), self.addr(src_layout.offset), n * self.dtype.itemsize)
            return
        kernel = kernel_for(dev, f"cast_{self.dtype.short}_{dst.dtype.short}", "copy_strided_src",
                            self=(self, src_layout))
        dev.launch(kernel, grid_for(dev, n), BLOCK,
                   [("int64", n), ("bytes", pack_strided(src_layout)[0]), ("ptr", self.buffer.ptr),
                    ("ptr", dst.addr(dst_offset))])

    def copy2d(self, dst, d1, d2, src_stride1, dst_stride1, src_offset, dst_offset):
        if d1 * d2 == 0:
            return
        dst.value_range = range_union(dst.value_range, self.value_range) if dst.dtype is self.dtype else None
        src = self
        if dst.dtype is not self.dtype:  # cast the rows first (rare), then copy them
            src = self.to_dtype(Layout((d1, d2), (src_stride1, 1), src_offset), dst.dtype)
            src_stride1, src_offset = d2, 0
        dev = self.device
        isz = dst.dtype.itemsize
        if src_stride1 == d2 and dst_stride1 == d2:  # the rows form one contiguous block
            dev.dtod(dst.addr(dst_offset), src.addr(src_offset), d1 * d2 * isz)
            return
        kernel = kernel_for(dev, f"copy2d_{dst.dtype.short}", "copy2d", self=(self, Layout((d1, d2))))
        dev.launch(kernel, grid_for(dev, d1 * d2), BLOCK,
                   [("int64", d1), ("int64", d2), ("int64", src_stride1), ("int64", dst_stride1),
                    ("ptr", src.addr(src_offset)), ("ptr", dst.addr(dst_offset))])

    def const_set(self, value, layout):
        n = layout.numel()
        if n == 0:
            return
        host = np.ascontiguousarray(cast_array(np.asarray(value), self.dtype)).reshape(())
        if self.value_range is not None:
            v = int(host)
            self.value_range = (min(self.value_range[0], v), max(self.value_range[1], v))
        raw = host.tobytes()
        dev = self.device
        if layout.is_contiguous() and raw.count(raw[:1]) == len(raw):  # all bytes equal (e.g. 0)
            dev.memset(self.addr(layout.offset), raw[0], n * len(raw))
            return
        kernel = kernel_for(dev, f"const_set_{self.dtype.short}", "const_set", self=(self, layout))
        dev.launch(kernel, grid_for(dev, n), BLOCK,
                   [("int64", n), ("bytes", pack_strided(layout)[0]),
                    ("uint64", int.from_bytes(raw.ljust(8, b"\0"), "little")), ("ptr", self.buffer.ptr)])

    def to_cpu(self, layout):
        arr = np.empty(layout.shape, self.dtype.np)
        if arr.size:
            src, lay = self._contiguous(layout)
            self.device.dtoh(arr, src.addr(lay.offset))
        return arr


def range_union(a, b):
    """The bound of two GpuStorage.value_range's (None: unknown)."""
    return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
