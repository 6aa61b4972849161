"""Sorting, scans and searches (sort.hip): sort of rows, cumsum/cumprod of rows, searchsorted.

sort: a row of up to SORT_CHUNK elements is sorted by one block in shared memory; a longer
row is sorted in chunks that size, then merged by the rest of the bitonic network: its steps
that span more than a chunk as one global-memory launch each (sort_step), the steps within a
chunk in shared memory again (sort_block with `stage`). Scans: one block per row, tiles
chained by a running carry.
"""
from __future__ import annotations

from tensorlite import dtype as dtypes
from tensorlite.errors import ArgumentError, DTypeError, storage_error

from ..kernel_table import ALL, kernel_for
from ..launch import BLOCK, grid_for, pack_strided, rows_of

# the entry points of this family's kernel source (kernel_table.py assembles every family's)
KERNELS = {"sort.hip": tuple(f"{k}_{t}" for k in ("sort_block", "sort_step", "cumsum", "cumprod", "searchsorted")
                             for t in ALL)}
SORT_CAP = 2048      # TL_SORT_CAP in sort.hip: elements a block sorts in shared memory
SORT_CHUNK = SORT_CAP  # the chunk the host uses (a power of two <= SORT_CAP; tests lower it)
_SCAN_THREADS = 1024   # TL_SCAN_THREADS


class SortOps:
    __slots__ = ()  # a mixin of GpuStorage (storage.py), which holds the data: self is a GpuStorage

    def sort(self, layout, descending):
        n_rows, n, outer, stride = rows_of(layout)
        vals, idx = self._new(n_rows * n), self._new(n_rows * n, dtypes.int64)
        vals.value_range, idx.value_range = self.value_range, (0, max(n - 1, 0))
        if n_rows * n == 0:
            return vals, idx
        dev, t = self.device, self.dtype.short
        block = kernel_for(dev, f"sort_block_{t}", "sort", self=(self, layout))
        chunk = min(SORT_CHUNK, 1 << (n - 1).bit_length())
        threads = min(block.max_threads, max(dev.warp_size, chunk // 2))
        tasks = n_rows * -(-n // chunk)

        def merge(stage):  # sort_block: every chunk sorted (stage 0), or the in-chunk steps of a stage
            dev.launch(block, grid_for(dev, tasks, 1), threads,
                       [("int64", n_rows), ("int64", n), ("int64", chunk), ("int64", stage),
                        ("bytes", pack_strided(outer)[0]), ("int64", stride), ("ptr", self.buffer.ptr),
                        ("ptr", vals.buffer.ptr), ("ptr", idx.buffer.ptr), ("int32", int(descending))])
        merge(0)
        size = 1 << (n - 1).bit_length()  # the network's: n padded to a power of two
        k, step = 2 * chunk, size > chunk and kernel_for(dev, f"sort_step_{t}", "sort", self=(self, layout))
        while k <= size:
            j = k // 2
            while j >= chunk:
                dev.launch(step, grid_for(dev, n_rows * size // 2), BLOCK,
                           [("int64", n_rows), ("int64", n), ("int64", size // 2), ("int64", k), ("int64", j),
                            ("ptr", vals.buffer.ptr), ("ptr", idx.buffer.ptr), ("int32", int(descending))])
                j //= 2
            merge(k)
            k *= 2
        return vals, idx

    def cumulative(self, op, layout, reverse=False):
        if op not in ("sum", "prod"):
            raise ArgumentError(f"cumulative: op must be 'sum' or 'prod', got {op!r}")
        n_rows, n, outer, stride = rows_of(layout)
        out = self._new(n_rows * n, None if self.dtype.is_floating_point else dtypes.int64)
        if n_rows * n == 0:
            return out
        dev = self.device
        kernel = kernel_for(dev, f"cum{op}_{self.dtype.short}", f"cum{op}", self=(self, layout))
        threads = min(kernel.max_threads, _SCAN_THREADS, max(dev.warp_size, 1 << (n - 1).bit_length()))
        dev.launch(kernel, grid_for(dev, n_rows, 1), threads,
                   [("int64", n_rows), ("int64", n), ("bytes", pack_strided(outer)[0]), ("int64", stride),
                    ("int32", int(reverse)), ("ptr", self.buffer.ptr), ("ptr", out.buffer.ptr)])
        return out

    def searchsorted(self, layout, values, values_layout, right):
        (n_rows, length), m = layout.shape, values_layout.shape[-1]
        if values.dtype is not self.dtype:
            raise storage_error(DTypeError, "searchsorted", "values must have the dtype of the sequence",
                                sorted_sequence=(self, layout), values=(values, values_layout))
        out = self._new(n_rows * m, dtypes.int64)
        out.value_range = (0, length)
        if n_rows * m == 0:
            return out
        dev = self.device
        kernel = kernel_for(dev, f"searchsorted_{self.dtype.short}", "searchsorted",
                            sorted_sequence=(self, layout), values=(values, values_layout))
        dev.launch(kernel, grid_for(dev, n_rows * m), BLOCK,
                   [("int64", n_rows * m), ("int64", m), ("int64", length), ("int64", layout.offset),
                    ("int64", layout.strides[0]), ("int64", layout.strides[1]),
                    ("bytes", pack_strided(values_layout)[0]), ("int32", int(right)), ("ptr", self.buffer.ptr),
                    ("ptr", values.buffer.ptr), ("ptr", out.buffer.ptr)])
        return out
