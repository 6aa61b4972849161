"""Reductions (reduce.hip): sum, min, max, argmin, argmax over any set of dims.

Rows whose elements neighbour each other go to the row kernels (a block of threads per
row, long rows split over blocks); rows whose elements lie farther apart than the rows
themselves (a sum over dim 0) go to reduce_cols, where neighbouring threads read
neighbouring columns. Either way a plan is made once per (op, dtype, shape, strides, dims).
"""
from __future__ import annotations

from tensorlite import dtype as dtypes
from tensorlite.backend import REDUCE_OPS
from tensorlite.errors import ShapeError, storage_error
from tensorlite.layout import Layout

from ..kernel_table import ALL, kernel_for
from ..launch import arrival_counters, coalesce, grid_for, on_device, pack_strided, row_block, sm_count

# the entry points of this family's kernel source (kernel_table.py assembles every family's)
KERNELS = {"reduce.hip": tuple(f"reduce_{op}_{t}" for op in REDUCE_OPS for t in ALL)}

_MAX_REDUCE_STATE = 16                           # bytes of the largest partial state in reduce.hip
_COL_BLOCK = (8, 32)                             # reduce_cols: TL_COL_X units x 32 (TL_COL_THREADS in all)
_COL_UNROLL = 4                                  # TL_COL_UNROLL in reduce.hip: rows in flight per thread
_COL_MAX = (1 << 31) - 4096                      # reduce_cols: u32 counts below this


class ReduceOps:
    __slots__ = ()  # a mixin of GpuStorage (storage.py), which holds the data: self is a GpuStorage

    # ---- reductions -----------------------------------------------------------------
    def reduce_op(self, op, layout, dims):
        dims = tuple(sorted(dims))
        dev = self.device
        # the launch geometry depends on the shape, strides and dims only: planned once per
        # kind of call (a training step repeats the same few), the offset filled in per call
        plans = reduce_plans(dev)
        key = (op, self.dtype, layout.shape, layout.strides, dims)
        plan = plans.get(key)
        if plan is None:
            plan = self._reduce_plan(op, layout, dims)
            if len(plans) > 1024:
                plans.clear()
            plans[key] = plan
        kernel, n_rows, row_len, outer_shape, outer_strides, launch = plan
        out = self._new(n_rows, dtypes.int64 if op in ("argmin", "argmax") else None)
        if launch is None:  # no rows
            return out
        inner_packed, columns, block, n_chunks, n_counters, n_tasks, n_states = launch
        args = [("int64", n_rows), ("int64", row_len),
                ("bytes", pack_strided(Layout(outer_shape, outer_strides, layout.offset))[0]),
                ("bytes", inner_packed), ("ptr", self.buffer.ptr), ("ptr", out.buffer.ptr),
                ("int32", int(columns)), ("int64", n_chunks)]
        if n_chunks > 1:
            partials = dev.alloc(n_states * _MAX_REDUCE_STATE)
            dev.launch(kernel, grid_for(dev, n_tasks, 1), block,
                       args + [("ptr", partials.ptr), ("ptr", arrival_counters(dev, n_counters))])
        else:
            dev.launch(kernel, grid_for(dev, -(-n_tasks // (1 if columns else block[1])), 1), block,
                       args + [("ptr", 0), ("ptr", 0)])
        return out

    def _reduce_plan(self, op, layout, dims):
        """reduce_op's checks and launch geometry for `layout`'s shape and strides: (kernel,
        n_rows, row_len, outer shape, outer strides, None when there are no rows, else
        (packed inner layout, columns, block, n_chunks, n_counters, n_tasks, n_states))."""
        shape = layout.shape
        if op != "sum" and any(shape[d] == 0 for d in dims):
            raise storage_error(ShapeError, op, f"cannot reduce over an empty dim (dims={dims})", self=(self, layout))
        if op in ("argmin", "argmax") and len(dims) != 1:
            raise storage_error(ShapeError, op, f"takes exactly one dim, got {dims}", self=(self, layout))
        dev = self.device
        kernel = kernel_for(dev, f"reduce_{op}_{self.dtype.short}", op, self=(self, layout))
        kept = [d for d in range(len(shape)) if d not in dims]
        outer = Layout([shape[d] for d in kept], [layout.strides[d] for d in kept], 0)
        inner = Layout([shape[d] for d in dims], [layout.strides[d] for d in dims], 0)
        n_rows, row_len = outer.numel(), inner.numel()
        if n_rows == 0:
            return kernel, n_rows, row_len, outer.shape, outer.strides, None
        # Rows whose elements are farther apart than the rows themselves (e.g. a sum over
        # dim 0) go to reduce_cols: a thread takes neighbouring rows (output columns), a warp
        # neighbouring groups of them, so that it reads neighbouring addresses, and blocks
        # split the reduced range.
        inner_step = min((s for n, s in zip(inner.shape, inner.strides) if n > 1), default=1)
        outer_step = min((s for n, s in zip(outer.shape, outer.strides) if n > 1), default=0)
        columns = n_rows >= 64 and inner_step > 1 and outer_step < inner_step
        inner = inner.reshape((row_len,)) or inner  # one dim where the reduced dims merge: no div/mod per element
        if columns and (max(n_rows, row_len) >= _COL_MAX or
                        (inner.ndim > 1 and len(coalesce(inner.shape, [inner.strides])[0]) > 2)):
            columns = False  # reduce_cols takes u32 counts and a reduced range of <= 2 dims
        sms = sm_count(dev)
        if columns:
            # groups of bx units of `vec` neighbouring columns (TlWidth: one 16-byte load),
            # by threads along the reduced range (a multiple of vec), see reduce_cols
            vec = min(8, 16 // self.dtype.itemsize)
            n_units = -(-n_rows // vec)
            bx, by = _COL_BLOCK
            while by > 8 and by * _COL_UNROLL > row_len:  # short columns: fewer y threads ...
                by //= 2
            while bx * by < _COL_BLOCK[0] * _COL_BLOCK[1] and bx < n_units:  # ... and more units per block
                bx *= 2
            block = (bx, by)
            n_groups = -(-n_units // bx)
            # about 4 blocks per multiprocessor, each thread >= 2 x _COL_UNROLL rows
            n_chunks = max(1, min(-(-4 * sms // n_groups), row_len // (by * 2 * _COL_UNROLL)))
            n_counters, n_tasks, n_states = n_groups, n_groups * n_chunks, n_groups * n_chunks * bx * vec
        else:
            block = row_block(dev, n_rows, row_len, kernel.max_threads)
            # Few long rows would leave most of the GPU idle: split each row over blocks.
            n_chunks = max(1, min(-(-2 * sms // n_rows), row_len // (block[0] * 8)))
            n_counters, n_tasks, n_states = n_rows, n_rows * n_chunks, n_rows * n_chunks
            if n_chunks > 1:
                block = (block[0], 1)
        return kernel, n_rows, row_len, outer.shape, outer.strides, (
            pack_strided(inner)[0], columns, block, n_chunks, n_counters, n_tasks, n_states)


def reduce_plans(dev) -> dict:
    """reduce_op's launch plans on `dev` ({(op, dtype, shape, strides, dims): plan}, made on first use)."""
    return on_device(dev, "_tl_reduce_plans", lambda d: {})
