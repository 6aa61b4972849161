"""CpuStorage's indexing: index_select, gather, scatter (and its reductions), index_add, the ids
checked against the dim. A mixin (storage.py)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tensorlite import dtype as dtypes
from tensorlite.errors import DTypeError, IndexOutOfRange, ShapeError, storage_error
from tensorlite.layout import Layout

if TYPE_CHECKING:
    from .storage import CpuStorage


def _as_slice(idx: np.ndarray):
    """A 1-D index array as the equal slice where its ids step evenly upward (a narrow's gradient)."""
    if idx.ndim == 1 and idx.size > 1:
        step = int(idx[1] - idx[0])
        if step > 0 and (np.diff(idx) == step).all():
            return slice(int(idx[0]), int(idx[-1]) + 1, step)
    return idx


class IndexOps:
    __slots__ = ()  # a mixin of CpuStorage (storage.py), which holds the data: self is a CpuStorage

    def _ids(self, op, ids: "CpuStorage", ids_layout: Layout, size: int, layout: Layout) -> np.ndarray:
        """Index operand as int64, bounds-checked against `size`."""
        if ids.dtype not in (dtypes.int64, dtypes.uint32, dtypes.uint8):
            raise storage_error(DTypeError, op, "ids must be int64, uint32 or uint8",
                                self=(self, layout), ids=(ids, ids_layout))
        idx = ids._read(ids_layout).astype(np.int64)
        bad = (idx < 0) | (idx >= size)
        if bad.any():
            raise storage_error(IndexOutOfRange, op, f"index {int(idx[bad].flat[0])} is out of range for a dim "
                                f"of size {size}", self=(self, layout), ids=(ids, ids_layout))
        return idx

    def index_select(self, ids, layout, ids_layout, dim):
        idx = self._ids("index_select", ids, ids_layout, layout.shape[dim], layout)
        return self._new(np.take(self._read(layout), idx, axis=dim))

    def gather(self, layout, ids, ids_layout, dim):
        idx = self._ids("gather", ids, ids_layout, layout.shape[dim], layout)
        x = self._read(layout)
        # torch allows ids smaller than self in the other dims: only that corner is read
        x = x[tuple(slice(None) if d == dim else slice(0, n) for d, n in enumerate(idx.shape))]
        return self._new(np.take_along_axis(x, idx, axis=dim))

    def _scatter(self, op, layout, ids, ids_layout, src, src_layout, dim, positions, at=np.add.at):
        """Copy of self (in its compute dtype) with the values that `positions(idx, src)`
        returns combined by `at` at the index tuple it returns (np.add.at sums repeated ids)."""
        idx = self._ids(op, ids, ids_layout, layout.shape[dim], layout)
        out = np.array(self._read(layout, compute=True))
        try:
            where, values = positions(idx, src._read(src_layout, compute=True))
            with np.errstate(all="ignore"):
                at(out, where, values)
        except (IndexError, ValueError) as e:
            raise storage_error(ShapeError, op, str(e), self=(self, layout), ids=(ids, ids_layout),
                                src=(src, src_layout)) from None
        return self._new(out)

    def scatter_add(self, layout, ids, ids_layout, src, src_layout, dim):
        return self.scatter(layout, ids, ids_layout, src, src_layout, dim, "sum")

    _SCATTER_AT = {None: lambda out, where, v: out.__setitem__(where, v), "sum": np.add.at, "prod": np.multiply.at,
                   "amax": np.maximum.at, "amin": np.minimum.at}

    def scatter(self, layout, ids, ids_layout, src, src_layout, dim, reduce=None):
        def positions(idx, values):
            grid = list(np.indices(idx.shape, sparse=True))
            grid[dim] = idx
            # like torch, src may be larger than ids: only its leading corner is used
            return tuple(grid), values[tuple(slice(0, n) for n in idx.shape)]
        return self._scatter("scatter_add" if reduce == "sum" else "scatter", layout, ids, ids_layout, src,
                             src_layout, dim, positions, self._SCATTER_AT[reduce])

    def index_add(self, layout, ids, ids_layout, src, src_layout, dim):
        def positions(idx, values):
            return (slice(None),) * dim + (_as_slice(idx),), values

        def add(out, where, values):  # np.add.at is ~100x slower than a += through a slice or distinct ids
            idx = where[dim]
            if isinstance(idx, slice) or np.unique(idx).size == idx.size:
                out[where] += values
            else:  # repeated ids: sum each id's rows (in their order), then add once
                order = np.argsort(idx, kind="stable")
                sidx = idx[order]
                first = np.flatnonzero(np.concatenate(([True], sidx[1:] != sidx[:-1])))
                # in values' dtype, as np.add.at sums (bool: any; integers wrap)
                sums = np.add.reduceat(np.take(values, order, axis=dim), first, axis=dim, dtype=values.dtype)
                out[where[:dim] + (sidx[first],)] += sums
        return self._scatter("index_add", layout, ids, ids_layout, src, src_layout, dim, positions, add)
