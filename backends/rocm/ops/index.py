"""Index ops (index.hip): index_select, gather, scatter_add, index_add, scatter (and scatter_reduce's
prod, amax, amin).

The kernels check every id and flag an out-of-range one instead of touching memory; the
host then reads the flag and raises IndexOutOfRange naming the first bad id. That read
waits for the device, so it is skipped where the host already knows the ids are in range
(GpuStorage.value_range: integer data uploaded from the host, and copies of it).
"""
from __future__ import annotations

import math

import numpy as np

from tensorlite import dtype as dtypes
from tensorlite.errors import DTypeError, IndexOutOfRange, storage_error
from tensorlite.layout import Layout

from ..kernel_table import ALL, IDS, kernel_for
from ..launch import BLOCK, grid_for, pack_strided

# the entry points of this family's kernel source (kernel_table.py assembles every family's)
KERNELS = {"index.hip": tuple(f"{op}_{i}_{t}" for op in ("index_select", "gather", "scatter_add", "index_add")
                              for i in IDS for t in ALL) + tuple(f"{op}_{t}" for op in ("scatter", "scatter_set")
                                                                 for t in ALL)}
_REDUCE = {None: 0, "prod": 1, "amax": 2, "amin": 3}  # scatter_<t>'s `reduce` argument


class IndexOps:
    __slots__ = ()  # a mixin of GpuStorage (storage.py), which holds the data: self is a GpuStorage

    # ---- indexing -------------------------------------------------------------------
    def _check_ids(self, op, ids, ids_layout, layout):
        if ids.dtype.short not in IDS:
            raise storage_error(DTypeError, op, "ids must be int64, uint32 or uint8",
                                self=(self, layout), ids=(ids, ids_layout))

    def _index_kernel(self, op, ids, layout, ids_layout):
        return kernel_for(self.device, f"{op}_{ids.dtype.short}_{self.dtype.short}", op,
                          self=(self, layout), ids=(ids, ids_layout))

    def _run_checked(self, op, ids, ids_layout, size, layout, launch):
        """Run `launch(err_ptr)` (a kernel that flags out-of-range ids instead of touching
        memory), then wait for the flag and raise IndexOutOfRange naming the first bad id;
        no wait where the host knows the ids are in range (GpuStorage.value_range)."""
        def report():
            idx = ids.to_cpu(ids_layout).astype(np.int64)
            bad = idx[(idx < 0) | (idx >= size)]
            raise storage_error(IndexOutOfRange, op, f"index {int(bad.flat[0])} is out of range for a dim of "
                                f"size {size}", self=(self, layout), ids=(ids, ids_layout))
        self.device.run_checked(op, launch, report, check=not ids_known_in_range(ids, size))

    def _check_ids_on_host(self, op, ids, ids_layout, size, layout):
        """For an empty output (no kernel runs) the ids must still be in range."""
        if ids_layout.numel():
            idx = ids.to_cpu(ids_layout).astype(np.int64)
            bad = idx[(idx < 0) | (idx >= size)]
            if bad.size:
                raise storage_error(IndexOutOfRange, op, f"index {int(bad.flat[0])} is out of range for a dim "
                                    f"of size {size}", self=(self, layout), ids=(ids, ids_layout))

    def index_select(self, ids, layout, ids_layout, dim):
        self._check_ids("index_select", ids, ids_layout, layout)
        kernel = self._index_kernel("index_select", ids, layout, ids_layout)
        n_ids, size = ids_layout.numel(), layout.shape[dim]
        out_shape = layout.shape[:dim] + (n_ids,) + layout.shape[dim + 1:]
        n = math.prod(out_shape)
        out = self._new(n)
        if n == 0:
            self._check_ids_on_host("index_select", ids, ids_layout, size, layout)
            return out
        strides = list(layout.strides)
        dim_stride, strides[dim] = strides[dim], 0
        src_mod = Layout(out_shape, strides, layout.offset)
        ids_flat = Layout((n_ids,), (ids_layout.strides[0] if ids_layout.ndim else 0,), ids_layout.offset)
        (li,), (ls,) = pack_strided(ids_flat), pack_strided(src_mod)
        right = math.prod(out_shape[dim + 1:])
        dev = self.device
        self._run_checked("index_select", ids, ids_layout, size, layout, lambda err: dev.launch(
            kernel, grid_for(dev, n), BLOCK,
            [("int64", n), ("bytes", li), ("bytes", ls), ("int64", right), ("int64", n_ids), ("int64", size),
             ("int64", dim_stride), ("ptr", ids.buffer.ptr), ("ptr", self.buffer.ptr), ("ptr", out.buffer.ptr),
             ("ptr", err)]))
        return out

    def gather(self, layout, ids, ids_layout, dim):
        self._check_ids("gather", ids, ids_layout, layout)
        kernel = self._index_kernel("gather", ids, layout, ids_layout)
        size, n = layout.shape[dim], ids_layout.numel()
        out = self._new(n)
        if n == 0:
            return out
        strides = list(layout.strides)
        dim_stride, strides[dim] = strides[dim], 0
        # torch allows ids smaller than self in the other dims: only that corner is read
        src_mod = Layout(ids_layout.shape, strides, layout.offset)
        li, ls = pack_strided(ids_layout, src_mod)
        dev = self.device
        self._run_checked("gather", ids, ids_layout, size, layout, lambda err: dev.launch(
            kernel, grid_for(dev, n), BLOCK,
            [("int64", n), ("bytes", li), ("bytes", ls), ("int64", size), ("int64", dim_stride),
             ("ptr", ids.buffer.ptr), ("ptr", self.buffer.ptr), ("ptr", out.buffer.ptr), ("ptr", err)]))
        return out

    def _accumulate(self, op, layout, ids, ids_layout, src, src_layout, dim, src_iter: Layout, ids_iter: Layout,
                    by_row: bool, reduce=False, in_place: bool = False):
        """Shared body of scatter_add / index_add / scatter / scatter_set: a contiguous copy of
        self (in f32 for the half types), src added at the ids with atomics (or scatter_<t>'s
        `reduce`, the ids as int64), cast back; in_place (scatter_set): src written into self
        itself at `layout` (scatter_set_<t>, no reduction, no copy)."""
        self._check_ids(op, ids, ids_layout, layout)
        if src.dtype is not self.dtype:
            raise storage_error(DTypeError, op, "src must have self's dtype", self=(self, layout),
                                src=(src, src_layout))
        extra, ids_dev = [], ids
        if reduce is False:
            kernel = self._index_kernel(op, ids, layout, ids_layout)
        else:  # scatter_<t> (the reduction an argument) or scatter_set_<t>; the ids int64
            kernel = kernel_for(self.device, f"{'scatter_set' if in_place else 'scatter'}_{self.dtype.short}", op,
                                self=(self, layout))
            extra = [] if in_place else [("int64", _REDUCE[reduce])]
            if ids.dtype is not dtypes.int64:
                ids_dev, ids_iter = ids.to_dtype(ids_layout, dtypes.int64), Layout.contiguous(ids_layout.shape)
        half = not in_place and self.dtype in (dtypes.float16, dtypes.bfloat16)
        acc = self if in_place else self.to_dtype(layout, dtypes.float32 if half else self.dtype)
        out_base = layout if in_place else Layout.contiguous(layout.shape)
        size, n = layout.shape[dim], src_iter.numel()
        if n == 0:
            self._check_ids_on_host(op, ids, ids_layout, size, layout)
        else:
            out_strides = list(out_base.strides)
            dim_stride, out_strides[dim] = out_strides[dim], 0
            out_mod = Layout(src_iter.shape, out_strides, out_base.offset)
            dev = self.device
            if by_row:   # index_add: ids index dim `dim` of src
                right = math.prod(src_iter.shape[dim + 1:])
                (li,), (ls, lo) = pack_strided(ids_iter), pack_strided(src_iter, out_mod)
                shape_args = [("bytes", li), ("bytes", ls), ("bytes", lo), ("int64", right),
                              ("int64", ids_iter.numel())]
            else:        # scatter_add: ids and src share a shape
                li, ls, lo = pack_strided(ids_iter, src_iter, out_mod)
                shape_args = [("bytes", li), ("bytes", ls), ("bytes", lo)]
            self._run_checked(op, ids, ids_layout, size, layout, lambda err: dev.launch(
                kernel, grid_for(dev, n), BLOCK,
                [("int64", n), *shape_args, ("int64", size), ("int64", dim_stride), *extra,
                 ("ptr", ids_dev.buffer.ptr), ("ptr", src.buffer.ptr), ("ptr", acc.buffer.ptr), ("ptr", err)]))
        return acc.to_dtype(Layout.contiguous(layout.shape), self.dtype) if half else acc

    def scatter_add(self, layout, ids, ids_layout, src, src_layout, dim):
        # like torch, src may be larger than ids: only its leading corner is used
        src_iter = Layout(ids_layout.shape, src_layout.strides, src_layout.offset)
        return self._accumulate("scatter_add", layout, ids, ids_layout, src, src_layout, dim,
                                src_iter, ids_layout, by_row=False)

    def scatter(self, layout, ids, ids_layout, src, src_layout, dim, reduce=None):
        src_iter = Layout(ids_layout.shape, src_layout.strides, src_layout.offset)
        return self._accumulate("scatter", layout, ids, ids_layout, src, src_layout, dim, src_iter, ids_layout,
                                by_row=False, reduce=reduce)

    def scatter_set(self, layout, ids, ids_layout, src, src_layout, dim):
        from ..storage import range_union  # (storage.py imports this module)
        if src.dtype is self.dtype:
            self.value_range = range_union(self.value_range, src.value_range)
        src_iter = Layout(ids_layout.shape, src_layout.strides, src_layout.offset)
        self._accumulate("scatter_set", layout, ids, ids_layout, src, src_layout, dim, src_iter, ids_layout,
                         by_row=False, reduce=None, in_place=True)

    def index_add(self, layout, ids, ids_layout, src, src_layout, dim):
        n_ids = ids_layout.numel()
        ids_flat = Layout((n_ids,), (ids_layout.strides[0] if ids_layout.ndim else 0,), ids_layout.offset)
        return self._accumulate("index_add", layout, ids, ids_layout, src, src_layout, dim,
                                src_layout, ids_flat, by_row=True)


def ids_known_in_range(ids, size: int) -> bool:
    """Whether the host knows every value of `ids` (any view of it) lies in [0, size)."""
    r = ids.value_range
    return r is not None and r[0] >= 0 and r[1] < size

